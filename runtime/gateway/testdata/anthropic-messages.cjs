// The official @anthropic-ai/sdk against llmgw's /v1/messages: a plain
// message, a stream (raw events and the SDK's MessageStream), a tool
// round trip, two turns of a thread, and an error. Run by clients_test.go with SDK_DIR,
// BASE_URL, API_KEY and MODEL set; prints one line of JSON.
const { createRequire } = require("node:module");
const path = require("node:path");
const req = createRequire(path.join(process.env.SDK_DIR, "package.json"));
const Anthropic = req("@anthropic-ai/sdk").default ?? req("@anthropic-ai/sdk");

async function main() {
  const client = new Anthropic({ apiKey: process.env.API_KEY, baseURL: process.env.BASE_URL, maxRetries: 0 });
  const model = process.env.MODEL;
  const out = { version: require(path.join(process.env.SDK_DIR, "node_modules/@anthropic-ai/sdk/package.json")).version };

  const msg = await client.messages.create({
    model, max_tokens: 8, system: "be brief",
    messages: [{ role: "user", content: [{ type: "text", text: "hello from node" }] }],
  });
  out.plain = { type: msg.type, role: msg.role, content: msg.content, stop_reason: msg.stop_reason, usage: msg.usage };

  const raw = await client.messages.create({ model, max_tokens: 6, messages: [{ role: "user", content: "stream please" }], stream: true });
  out.events = [];
  for await (const ev of raw) out.events.push(ev.type);

  const stream = client.messages.stream({ model, max_tokens: 6, messages: [{ role: "user", content: "stream again" }] });
  let text = "";
  stream.on("text", (t) => { text += t; });
  const final = await stream.finalMessage();
  out.streamed = { text, content: final.content, stop_reason: final.stop_reason, usage: final.usage };

  const tools = [{ name: "get_weather", description: "weather in a city",
    input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
  const ask = { role: "user", content: "weather in Paris?" };
  const call = await client.messages.stream({ model, max_tokens: 64, tools, messages: [ask] }).finalMessage();
  const use = call.content.find((b) => b.type === "tool_use");
  out.tool_call = { stop_reason: call.stop_reason, tool_use: use };
  const answer = await client.messages.create({
    model, max_tokens: 8, tools,
    messages: [ask, { role: "assistant", content: call.content },
      { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "sunny, 21C" }] }],
  });
  out.tool_answer = { stop_reason: answer.stop_reason, content: answer.content };

  // Two turns of an llmgw thread (x-llmgw-thread as a request option):
  // the second is sent only its own message.
  const onThread = { headers: { "x-llmgw-thread": "sdk-thread" } };
  const t1 = await client.messages.create({ model, max_tokens: 6, messages: [{ role: "user", content: "my name is Ada" }] }, onThread);
  const t2 = await client.messages.stream({ model, max_tokens: 6, messages: [{ role: "user", content: "what is my name?" }] }, onThread).finalMessage();
  out.thread = { first: t1.content[0].text, second: t2.content[0].text };

  try {
    await client.messages.create({ model: "no-such-model", max_tokens: 4, messages: [{ role: "user", content: "hi" }] });
    out.error = "none";
  } catch (err) {
    out.error = { status: err.status, type: err.error?.error?.type, name: err.constructor.name };
  }
  console.log(JSON.stringify(out));
}

main().catch((err) => {
  console.error(String(err && err.stack ? err.stack : err));
  process.exit(1);
});
