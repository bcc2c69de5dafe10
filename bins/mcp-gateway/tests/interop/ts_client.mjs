// Drives the gateway with the official TypeScript MCP SDK (npm @modelcontextprotocol/sdk), as a
// legacy Streamable HTTP client with an elicitation handler.
//
// usage: node ts_client.mjs URL TOKEN accept|decline PATH
// Prints one JSON line with what happened.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, token, scenario, path] = process.argv.slice(2);
const asked = [];
const client = new Client({ name: "interop-ts", version: "1.0.0" }, { capabilities: { elicitation: { form: {} } } });
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push({ message: request.params.message, schema: request.params.requestedSchema });
  return scenario === "accept" ? { action: "accept", content: { confirmed: true } } : { action: "decline" };
});
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);
const result = await client.callTool({ name: "fs__write_file", arguments: { path, content: "written by the typescript sdk" } });
console.log(JSON.stringify({ protocol_version: transport.protocolVersion, asked, is_error: Boolean(result.isError), structured: result.structuredContent ?? null }));
await client.close();
