// Drives the gateway with the official TypeScript MCP SDK (npm @modelcontextprotocol/sdk), as a
// legacy Streamable HTTP client with an elicitation handler.
//
// usage: node ts_client.mjs URL TOKEN accept|decline|cancel PATH
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
const errors = [];
client.onerror = (error) => errors.push(String(error?.message ?? error));
await client.connect(transport);
if (scenario === "cancel") {
  // The client cancels a call that waits (after its first progress), then at once calls a
  // tool whose module asks the client a question on the same stdio connection.
  const controller = new AbortController();
  const waited = await client
    .callTool({ name: "chatty__wait", arguments: {} }, undefined, {
      signal: controller.signal,
      onprogress: () => controller.abort("the person changed their mind"),
    })
    .then(() => "answered", (error) => `rejected: ${error?.message ?? error}`);
  // The SDK rejects the call at once and sends its notifications/cancelled without waiting:
  // a call made at once may reach the gateway before it. A second later it has arrived.
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const started = Date.now();
  const asked_back = await client.callTool({ name: "chatty__ask", arguments: {} });
  const ask_ms = Date.now() - started;
  // Time for a late answer to the cancelled request to arrive and be reported.
  await new Promise((resolve) => setTimeout(resolve, 1000));
  console.log(JSON.stringify({ waited, asked, asked_back: asked_back.content?.[0]?.text ?? null, ask_ms, errors }));
  await client.close();
  process.exit(0);
}
const result = await client.callTool({ name: "fs__write_file", arguments: { path, content: "written by the typescript sdk" } });
console.log(JSON.stringify({ protocol_version: transport.protocolVersion, asked, is_error: Boolean(result.isError), structured: result.structuredContent ?? null }));
await client.close();
