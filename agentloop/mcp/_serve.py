"""``serve(registry)``: a registry's tools offered to other MCP clients, its checks in front.

Each ``tools/call`` is dispatched by the registry, as a run would: the
arguments are validated against the tool's schema, the policies are asked
(an ``ask`` has no person to wait for here, so the call is ``denied``, saying
so), and the handler runs (a plain one in a worker thread). The outcome goes
back as the call's result: ``ok`` as text (and as ``structuredContent`` when it
is an object), any other status as ``isError`` with the status and its content.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import mcp.types
import orjson
from mcp.server import Server as SDKServer

from agentloop._tools._registry import ToolRegistry

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

__all__ = ["serve"]


def serve(registry: ToolRegistry, *, name: str = "agentloop") -> SDKServer[Any]:
    """An MCP server (the SDK's low-level ``Server``) offering ``registry``'s tools.

    Run it as any SDK server: over stdio, ``anyio.run(serve_stdio, server)``
    with ``agentloop.mcp.serve_stdio``; in-process, ``mcp.Client(server)``.
    The tools listed are the registry's at the time of each ``tools/list``.
    """
    if not isinstance(registry, ToolRegistry):
        raise TypeError(f"expected a ToolRegistry, got {type(registry).__name__}")
    numbers = itertools.count(1)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mcp.types.PaginatedRequestParams | None
    ) -> mcp.types.ListToolsResult:
        return mcp.types.ListToolsResult(
            tools=[
                mcp.types.Tool(
                    name=tool.name,
                    description=tool.description or None,
                    input_schema=tool.parameters,
                    annotations=mcp.types.ToolAnnotations(idempotent_hint=tool.idempotent),
                )
                for tool in registry
            ]
        )

    async def call_tool(
        ctx: ServerRequestContext[Any], params: mcp.types.CallToolRequestParams
    ) -> mcp.types.CallToolResult:
        call = {
            "id": f"mcp-{next(numbers)}",
            "name": params.name,
            "arguments": dict(params.arguments or {}),
        }
        outcome = await registry.adispatch(call, to_thread=True)
        return _result(outcome)

    return SDKServer(name, on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(server: SDKServer[Any]) -> None:
    """Serve ``server`` on this process's stdin and stdout until the client closes them."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def _result(outcome: dict[str, Any]) -> mcp.types.CallToolResult:
    """A registry outcome as a ``tools/call`` result (see the module)."""
    status, content = outcome["status"], outcome["content"]
    text = content if type(content) is str else orjson.dumps(content).decode()
    if status == "ok":
        return mcp.types.CallToolResult(
            content=[mcp.types.TextContent(type="text", text=text)],
            structured_content=content if type(content) is dict else None,
        )
    return mcp.types.CallToolResult(
        content=[mcp.types.TextContent(type="text", text=f"{status}: {text}")], is_error=True
    )
