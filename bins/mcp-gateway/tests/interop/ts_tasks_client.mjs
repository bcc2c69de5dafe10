// Drives the gateway's task pass-through with the official TypeScript MCP SDK (npm
// @modelcontextprotocol/sdk), a task-capable 2025-11-25 client: it runs a tool that runs
// only as a task (the everything server's simulate-research-query) with
// client.experimental.tasks.callToolStream, which creates the task and polls it to its
// result, answering the module's question on the way when `ambiguous`. Then another caller
// (OTHER_TOKEN) tries to read, wait on and cancel that task.
//
// usage: node ts_tasks_client.mjs URL TOKEN OTHER_TOKEN TOOL AMBIGUOUS(true|false)
// Prints one JSON line with what happened.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, token, otherToken, tool, ambiguous] = process.argv.slice(2);

async function connect(bearer, asked) {
  const client = new Client(
    { name: "interop-ts-tasks", version: "1.0.0" },
    { capabilities: { elicitation: { form: {} }, tasks: { list: {}, cancel: {} } } },
  );
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    asked.push({ message: request.params.message, related: request.params._meta?.["io.modelcontextprotocol/related-task"] ?? null });
    return { action: "accept", content: { interpretation: "the history of it" } };
  });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${bearer}` } },
  });
  await client.connect(transport);
  return client;
}

const failure = (error) => ({ error: String(error?.message ?? error), code: error?.code ?? null });

const asked = [];
const client = await connect(token, asked);
const capabilities = client.getServerCapabilities();
const listed = await client.listTools();
const listing = listed.tools.find((t) => t.name === tool) ?? null;
const kinds = [];
let task_id = null;
let result = null;
let error = null;
for await (const message of client.experimental.tasks.callToolStream({
  name: tool,
  arguments: { topic: "tide mills", ambiguous: ambiguous === "true" },
})) {
  kinds.push(message.type === "taskStatus" ? `status:${message.task.status}` : message.type);
  if (message.type === "taskCreated") task_id = message.task.taskId;
  if (message.type === "result") result = message.result;
  if (message.type === "error") error = failure(message.error);
}
const mine = await client.experimental.tasks.listTasks().then((r) => r.tasks.map((t) => t.taskId), failure);
const forged = await client.experimental.tasks.getTask("task-0123456789abcdef0123456789abcdef").then(() => "answered", failure);

const other = await connect(otherToken, []);
const stranger = {
  get: await other.experimental.tasks.getTask(task_id).then(() => "answered", failure),
  result: await other.experimental.tasks.getTaskResult(task_id).then(() => "answered", failure),
  cancel: await other.experimental.tasks.cancelTask(task_id).then(() => "answered", failure),
  list: await other.experimental.tasks.listTasks().then((r) => r.tasks.map((t) => t.taskId), failure),
};
console.log(
  JSON.stringify({
    tasks_capability: capabilities?.tasks ?? null,
    listed: listing ? { name: listing.name, execution: listing.execution ?? null } : null,
    kinds,
    task_id,
    text: result?.content?.[0]?.text ?? null,
    related: result?._meta?.["io.modelcontextprotocol/related-task"] ?? null,
    error,
    asked,
    mine,
    forged,
    stranger,
  }),
);
await other.close();
await client.close();
