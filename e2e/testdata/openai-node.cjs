// The official openai npm package (v6) against llmgw's gateway: chat,
// streaming with usage, and /v1/completions. Run by e2e/llamacpp_test.go
// as: node openai-node.cjs, with OPENAI_NODE_DIR (where openai is
// installed), OPENAI_BASE_URL, OPENAI_API_KEY and MODEL set. It prints one
// line of JSON and exits 1 on any failure.
const { createRequire } = require("node:module");
const path = require("node:path");
const { OpenAI } = createRequire(path.join(process.env.OPENAI_NODE_DIR, "package.json"))("openai");

async function main() {
  const client = new OpenAI({ maxRetries: 0 });
  const model = process.env.MODEL;
  const chat = await client.chat.completions.create({
    model,
    messages: [{ role: "user", content: "hello from node" }],
    max_tokens: 6,
  });
  const stream = await client.chat.completions.create({
    model,
    messages: [{ role: "user", content: "stream from node" }],
    max_tokens: 6,
    stream: true,
    stream_options: { include_usage: true },
  });
  let chunks = 0;
  let usage = null;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
  }
  const completion = await client.completions.create({ model, prompt: "the hello", max_tokens: 4 });
  console.log(JSON.stringify({
    version: OpenAI.VERSION ?? require(path.join(process.env.OPENAI_NODE_DIR, "node_modules/openai/package.json")).version,
    chat_usage: chat.usage,
    chat_choices: chat.choices.length,
    stream_chunks: chunks,
    stream_usage: usage,
    completion_usage: completion.usage,
  }));
}

main().catch((err) => {
  console.error(String(err && err.stack ? err.stack : err));
  process.exit(1);
});
