// The TypeScript SDK's client, as tests/test_mcp_peers.py drives it:
//   node client.mjs PLAN COMMAND [ARGS...]
// It launches COMMAND over stdio, lists the tools, makes each call of PLAN (a JSON list of
// {name, arguments, meta, progress}) and prints one JSON object: the server's info, its tools,
// and each call's result or JSON-RPC error, with the progress it heard.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ProgressNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const [plan, command, ...args] = process.argv.slice(2);
const client = new Client({ name: "typescript-sdk-peer", version: "1.0.0" });
await client.connect(new StdioClientTransport({ command, args, stderr: "ignore" }));
// Each report is heard here as it comes off the wire: the SDK's own handler (onprogress) drops
// one that arrives together with the response (typescript-sdk issue 2580).
let heard = [];
client.setNotificationHandler(ProgressNotificationSchema, (notification) => {
  heard.push(notification.params);
});
const out = {
  server: client.getServerVersion(),
  tools: (await client.listTools()).tools,
  calls: [],
};
for (const step of JSON.parse(plan)) {
  heard = [];
  // onprogress makes the SDK send a progressToken; the reports reach the handler above.
  const options = step.progress ? { onprogress: () => {} } : {};
  const params = { name: step.name, arguments: step.arguments ?? {} };
  if (step.meta) params._meta = step.meta;
  try {
    const result = await client.callTool(params, undefined, options);
    await new Promise((resolve) => setImmediate(resolve)); // the reports queued before it
    out.calls.push({ result, progress: heard });
  } catch (error) {
    out.calls.push({ error: { code: error.code, message: error.message }, progress: heard });
  }
}
await client.close();
process.stdout.write(JSON.stringify(out));
