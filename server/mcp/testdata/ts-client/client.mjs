// The TypeScript MCP SDK against agentsandbox's MCP server over streamable
// HTTP: node client.mjs URL, with the bearer token in AGENTSANDBOX_TOKEN.
// It prints one JSON line per tool call, {"tool", "isError", "structured",
// "text"}, and exits non-zero on a protocol failure. The Go test
// (TestMCPTypeScriptClient) checks the lines.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = process.argv[2];
if (!url) {
  console.error("usage: node client.mjs URL (the MCP endpoint, such as http://127.0.0.1:8723/mcp)");
  process.exit(2);
}
const headers = {};
if (process.env.AGENTSANDBOX_TOKEN) {
  headers.Authorization = `Bearer ${process.env.AGENTSANDBOX_TOKEN}`;
}
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
const client = new Client({ name: "agentsandbox-ts-test", version: "0" });
await client.connect(transport);

const tools = await client.listTools();
console.log(JSON.stringify({ tools: tools.tools.map((t) => t.name).sort() }));

async function call(name, args) {
  const res = await client.callTool({ name, arguments: args });
  const text = (res.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("");
  console.log(JSON.stringify({ tool: name, isError: !!res.isError, structured: res.structuredContent ?? null, text }));
  return res.structuredContent;
}

const sb = await call("sandbox_create", { labels: { client: "typescript" }, ttl: "10m" });
await call("write_file", { sandbox_id: sb.id, path: "notes/hello.txt", content: "hello from typescript\n" });
await call("exec", { sandbox_id: sb.id, shell: "tr a-z A-Z < notes/hello.txt; exit 4" });
await call("read_file", { sandbox_id: sb.id, path: "notes/hello.txt" });
await call("read_file", { sandbox_id: sb.id, path: "../outside" });
await call("kill", { sandbox_id: sb.id });
await call("exec", { sandbox_id: "no-such-sandbox", argv: ["true"] });
await client.close();
