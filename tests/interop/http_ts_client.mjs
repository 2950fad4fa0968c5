// The TypeScript SDK's Streamable HTTP client against an MCP endpoint:
// connect, list the tools, call one, print what it saw as one JSON object.
//
//   node http_ts_client.mjs URL TOOL [ARGUMENTS_JSON]
//
// The SDK is the one tests/interop/setup.sh installs under
// .cache/interop/npm (or under $INTEROP_NPM_PREFIX).
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const prefix = process.env.INTEROP_NPM_PREFIX || path.join(here, "..", "..", ".cache", "interop", "npm");
const require = createRequire(path.join(prefix, "package.json"));
const load = (name) => import(pathToFileURL(require.resolve(name)).href);

const { Client } = await load("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = await load("@modelcontextprotocol/sdk/client/streamableHttp.js");

const [url, tool, rawArgs] = process.argv.slice(2);
if (!url || !tool) {
  console.error("usage: node http_ts_client.mjs URL TOOL [ARGUMENTS_JSON]");
  process.exit(2);
}

const transport = new StreamableHTTPClientTransport(new URL(url));
const client = new Client({ name: "interop-ts-http-client", version: "1.0.0" });
await client.connect(transport);
const out = {
  protocolVersion: transport.protocolVersion ?? null,
  sessionId: transport.sessionId ?? null,
  serverInfo: client.getServerVersion() ?? null,
};
const tools = [];
let cursor;
do {
  const page = await client.listTools(cursor ? { cursor } : {});
  tools.push(...page.tools.map((t) => t.name));
  cursor = page.nextCursor;
} while (cursor);
out.tools = tools;
out.result = await client.callTool({ name: tool, arguments: rawArgs ? JSON.parse(rawArgs) : {} });
// Ends the session (DELETE) before closing.
await transport.terminateSession();
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
