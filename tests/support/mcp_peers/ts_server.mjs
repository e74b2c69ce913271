// A server of the TypeScript SDK's own making, as tests/test_mcp_peers.py runs it:
//   node ts_server.mjs
// The SDK writes each tool's schema as Draft 7 ("$schema": ".../draft-07/schema#"), so a
// tuple is `items: [...]` there: `pair` takes one.
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "typescript-sdk-peer", version: "1.0.0" });
server.registerTool(
  "pair",
  {
    description: "Say a pair back.",
    inputSchema: { point: z.tuple([z.number().int(), z.string()]) },
    annotations: { readOnlyHint: true },
  },
  async ({ point }) => ({ content: [{ type: "text", text: `${point[0]} ${point[1]}` }] }),
);
await server.connect(new StdioServerTransport());
