// The official openai npm package against llmgw's /v1/responses: a
// response, a stream, a second turn with previous_response_id, and a
// function call round trip. Run by clients_test.go with SDK_DIR,
// BASE_URL, API_KEY and MODEL set; prints one line of JSON.
const { createRequire } = require("node:module");
const path = require("node:path");
const { OpenAI } = createRequire(path.join(process.env.SDK_DIR, "package.json"))("openai");

async function main() {
  const client = new OpenAI({ apiKey: process.env.API_KEY, baseURL: process.env.BASE_URL, maxRetries: 0 });
  const model = process.env.MODEL;
  const out = { version: require(path.join(process.env.SDK_DIR, "node_modules/openai/package.json")).version };

  const first = await client.responses.create({ model, instructions: "be brief", input: "my name is Ada", max_output_tokens: 8 });
  out.first = { id: first.id, status: first.status, output_text: first.output_text, usage: first.usage, store: first.store };

  const stream = await client.responses.create({ model, input: [{ role: "user", content: "stream please" }], stream: true });
  out.events = [];
  let text = "";
  let completed = null;
  for await (const ev of stream) {
    out.events.push(ev.type);
    if (ev.type === "response.output_text.delta") text += ev.delta;
    if (ev.type === "response.completed") completed = ev.response;
  }
  out.streamed = { text, output_text: completed && completed.output[0].content[0].text, usage: completed && completed.usage };

  const second = await client.responses.create({ model, previous_response_id: first.id, input: "what is my name?" });
  out.second = { previous_response_id: second.previous_response_id, status: second.status, usage: second.usage };

  const tools = [{ type: "function", name: "get_weather", description: "weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
  const call = await client.responses.create({ model, input: "weather in Paris?", tools });
  const fc = call.output.find((it) => it.type === "function_call");
  out.call = { output_types: call.output.map((it) => it.type), name: fc && fc.name, call_id: fc && fc.call_id, arguments: fc && fc.arguments };
  const answer = await client.responses.create({
    model, tools, previous_response_id: call.id,
    input: [{ type: "function_call_output", call_id: fc.call_id, output: "sunny, 21C" }],
  });
  out.answer = { output_types: answer.output.map((it) => it.type), output_text: answer.output_text };

  const got = await client.responses.retrieve(first.id);
  out.retrieved = got.id;
  await client.responses.delete(first.id);
  try {
    await client.responses.retrieve(first.id);
    out.after_delete = "found";
  } catch (err) {
    out.after_delete = err.status;
  }
  try {
    await client.responses.create({ model, previous_response_id: first.id, input: "again" });
    out.deleted_previous = "accepted";
  } catch (err) {
    out.deleted_previous = { status: err.status, code: err.code, param: err.param };
  }
  console.log(JSON.stringify(out));
}

main().catch((err) => {
  console.error(String(err && err.stack ? err.stack : err));
  process.exit(1);
});
