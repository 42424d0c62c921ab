// The official openai and @anthropic-ai/sdk npm packages, unmodified,
// streaming a turn of an llmgw thread (x-llmgw-thread as a request
// option) that the gateway cannot store: the stream carries the SSE
// comment line ": llmgw thread_not_stored: ...", which each SDK's SSE
// parser must skip. Each client is given a fetch that keeps a copy of
// the bytes it reads, so the test sees what the SDK parsed. Run by
// clients_test.go with OPENAI_DIR, ANTHROPIC_DIR, BASE_URL, API_KEY and
// MODEL set; prints one line of JSON.
const { createRequire } = require("node:module");
const path = require("node:path");
const { OpenAI } = createRequire(path.join(process.env.OPENAI_DIR, "package.json"))("openai");
const anthropicReq = createRequire(path.join(process.env.ANTHROPIC_DIR, "package.json"));
const Anthropic = anthropicReq("@anthropic-ai/sdk").default ?? anthropicReq("@anthropic-ai/sdk");

// recordingFetch is fetch whose response bodies are also read, whole,
// into raw[]; the client gets the other half of the tee, byte for byte.
function recordingFetch(raw) {
  return async (url, init) => {
    const res = await fetch(url, init);
    if (!res.body) return res;
    const [forClient, forUs] = res.body.tee();
    raw.push((async () => {
      let text = "";
      const dec = new TextDecoder();
      for await (const b of forUs) text += dec.decode(b, { stream: true });
      return text + dec.decode();
    })());
    return new Response(forClient, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

async function main() {
  const model = process.env.MODEL;
  const onThread = { headers: { "x-llmgw-thread": "npm-unsaved" } };
  const out = {};

  // Each SDK runs even when the other threw; a throw is the test's
  // failure, reported as "error".
  try {
    out.chat = await chat(model, onThread);
  } catch (err) {
    out.chat = { error: String(err && err.stack ? err.stack : err) };
  }
  try {
    out.messages = await messages(model, onThread);
  } catch (err) {
    out.messages = { error: String(err && err.stack ? err.stack : err) };
  }
  console.log(JSON.stringify(out));
}

async function chat(model, onThread) {
  const openaiRaw = [];
  const openai = new OpenAI({ apiKey: process.env.API_KEY, baseURL: process.env.BASE_URL + "/v1", maxRetries: 0, fetch: recordingFetch(openaiRaw) });
  const stream = await openai.chat.completions.create(
    { model, max_tokens: 6, stream: true, messages: [{ role: "user", content: "stream please" }] }, onThread);
  const chunks = [];
  let text = "";
  let finish = null;
  for await (const ch of stream) {
    chunks.push({ object: ch.object, choices: Array.isArray(ch.choices) ? ch.choices.length : -1 });
    for (const c of ch.choices ?? []) {
      text += c.delta?.content ?? "";
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { chunks, text, finish_reason: finish, raw: await openaiRaw[0] };
}

async function messages(model, onThread) {
  const anthropicRaw = [];
  const anthropic = new Anthropic({ apiKey: process.env.API_KEY, baseURL: process.env.BASE_URL, maxRetries: 0, fetch: recordingFetch(anthropicRaw) });
  const ms = anthropic.messages.stream({ model, max_tokens: 6, messages: [{ role: "user", content: "stream again" }] }, onThread);
  const events = [];
  let mtext = "";
  ms.on("streamEvent", (ev) => events.push(ev.type));
  ms.on("text", (t) => { mtext += t; });
  const final = await ms.finalMessage();
  return { events, text: mtext, stop_reason: final.stop_reason, content: final.content, raw: await anthropicRaw[0] };
}

main().catch((err) => {
  console.error(String(err && err.stack ? err.stack : err));
  process.exit(1);
});
