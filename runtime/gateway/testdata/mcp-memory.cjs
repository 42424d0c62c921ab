// The official MCP TypeScript SDK (@modelcontextprotocol/sdk) against
// llmgw's MCP server at /mcp over the streamable HTTP transport: list the
// tools, remember, recall, forget. Run by memory_test.go with SDK_DIR,
// MCP_URL, API_KEY and AGENT set; prints one line of JSON.
const { createRequire } = require("node:module");
const path = require("node:path");
const req = createRequire(path.join(process.env.SDK_DIR, "package.json"));
const { Client } = req("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = req("@modelcontextprotocol/sdk/client/streamableHttp.js");

async function main() {
  const transport = new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), {
    requestInit: { headers: { Authorization: "Bearer " + process.env.API_KEY, "x-llmgw-agent": process.env.AGENT } },
  });
  const client = new Client({ name: "llmgw-test", version: "1.0.0" });
  await client.connect(transport);
  const out = {};
  out.tools = (await client.listTools()).tools.map((t) => t.name).sort();
  const saved = await client.callTool({ name: "remember", arguments: { text: "the release train leaves on Thursdays" } });
  out.saved = saved.structuredContent;
  const found = await client.callTool({ name: "recall", arguments: { query: "release thursdays" } });
  out.found = found.structuredContent;
  const gone = await client.callTool({ name: "forget", arguments: { id: saved.structuredContent.id } });
  out.forgot = gone.structuredContent;
  const again = await client.callTool({ name: "forget", arguments: { id: saved.structuredContent.id } });
  out.again = { isError: again.isError, text: again.content.map((c) => c.text).join(" ") };
  await client.close();
  console.log(JSON.stringify(out));
}

main().catch((err) => {
  console.error(String(err && err.stack ? err.stack : err));
  process.exit(1);
});
