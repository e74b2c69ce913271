"""``serve(registry)``: a registry's tools offered to other MCP clients, its checks in front.

Each ``tools/call`` is dispatched by the registry, as a run would: the
arguments are validated against the tool's schema, the policies are asked
(an ``ask`` has no person to wait for here, so the call is ``denied``, saying
so), and the handler runs (a plain one in a worker thread). The outcome goes
back as the call's result: ``ok`` as text (and as ``structuredContent`` when it
is an object), any other status as ``isError`` with the status and its content.
A tool the registry does not have is a JSON-RPC error, ``-32602``, as MCP says.

Inside the handler, ``agentloop.idempotency_key()`` is the key an agentloop
client sent in ``_meta``, and ``agentloop.report_progress`` reaches a client
that asked for progress. Each tool is listed with what the registry knows of
it (``annotations``): whether it only reads, may destroy, is idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Mapping
from typing import Any

import mcp.types
import orjson
from mcp.server import Server as SDKServer
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from agentloop._drivers.progress import Reporter, ToolProgress
from agentloop._drivers.run_context import RUN_CONTEXT, Handed, RunContext
from agentloop._tools.registry import ToolRegistry
from agentloop._tools.tool import Tool
from agentloop.mcp._calls import KEY_META
from agentloop.mcp._registration import HINTS, checked_annotations
from agentloop.mcp._server import MCPTool
from agentloop.mcp._session import AGENTLOOP

__all__ = ["serve"]


def serve(
    registry: ToolRegistry,
    *,
    name: str = "agentloop",
    version: str | None = None,
    annotations: Mapping[str, Mapping[str, bool]] | None = None,
) -> SDKServer[Any]:
    """An MCP server (the SDK's low-level ``Server``) offering ``registry``'s tools.

    Run it as any SDK server: over stdio, ``anyio.run(serve_stdio, server)``
    with ``agentloop.mcp.serve_stdio``; in-process, ``mcp.Client(server)``.
    The tools listed are the registry's at the time of each ``tools/list``.
    ``name`` and ``version`` are the ``serverInfo`` it gives (the version:
    agentloop's, unless given). Each tool carries the hints the registry knows
    (an ``MCPTool`` its three, any other tool ``idempotentHint``);
    ``annotations`` declares ``readOnlyHint``, ``destructiveHint`` or
    ``idempotentHint`` by tool name, over those.
    """
    if not isinstance(registry, ToolRegistry):
        raise TypeError(f"expected a ToolRegistry, got {type(registry).__name__}")
    if not isinstance(name, str) or not name:
        raise TypeError(f"expected name to be a non-empty str, got {name!r}")
    if version is not None and (not isinstance(version, str) or not version):
        raise TypeError(f"expected version to be a non-empty str or None, got {version!r}")
    declared = checked_annotations(annotations)
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
                    annotations=mcp.types.ToolAnnotations.model_validate(
                        {**_hints(tool), **declared.get(tool.name, {})}
                    ),
                )
                for tool in registry
            ]
        )

    async def call_tool(
        ctx: ServerRequestContext[Any], params: mcp.types.CallToolRequestParams
    ) -> mcp.types.CallToolResult:
        if params.name not in registry:
            raise MCPError(code=mcp.types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        call: dict[str, Any] = {
            "id": f"mcp-{next(numbers)}",
            "name": params.name,
            "arguments": dict(params.arguments or {}),
        }
        meta = params.meta or {}
        key = meta.get(KEY_META)
        if key is not None and not (isinstance(key, str) and key):
            raise MCPError(
                code=mcp.types.INVALID_PARAMS,
                message=f"expected _meta[{KEY_META!r}] to be a non-empty string, got {key!r:.80}",
            )
        sending = _Progress(ctx)
        reporter = Reporter(call["id"], sending, asyncio.get_running_loop())
        context: RunContext[None] = RunContext(
            call_id=call["id"], tool=params.name, idempotency_key=key, reporter=reporter
        )
        set_context = RUN_CONTEXT.set(Handed.given(context))
        try:
            outcome = await registry.adispatch(call, to_thread=True)
        finally:
            RUN_CONTEXT.reset(set_context)
            await sending.sent()  # before the result: a report after it would name no request
        return _result(outcome)

    return SDKServer(
        name, version=version or AGENTLOOP.version, on_list_tools=list_tools, on_call_tool=call_tool
    )


class _Progress:
    """A served call's progress, sent to the client in order by one task (made at the first).

    Called on the loop (``Reporter`` hands a worker thread's reports over);
    the SDK sends nothing when the client asked for no progress.
    """

    def __init__(self, ctx: ServerRequestContext[Any]) -> None:
        self._ctx = ctx
        self._reports: asyncio.Queue[ToolProgress | None] = asyncio.Queue()
        self._sender: asyncio.Task[None] | None = None

    def __call__(self, item: ToolProgress) -> None:
        if self._sender is None:
            self._sender = asyncio.create_task(self._send())
        self._reports.put_nowait(item)

    async def _send(self) -> None:
        session = self._ctx.session
        while (item := await self._reports.get()) is not None:
            with contextlib.suppress(Exception):  # a client gone: its result will not arrive either
                await session.report_progress(item.progress, item.total, item.message)

    async def sent(self) -> None:
        """Wait until every report so far is sent."""
        if self._sender is not None:
            self._reports.put_nowait(None)
            await self._sender


def _hints(tool: Tool) -> dict[str, bool]:
    """What the registry knows of ``tool``, as MCP's hints (MCP's defaults fill the rest)."""
    if isinstance(tool, MCPTool):
        return dict(zip(HINTS, (tool.read_only, tool.destructive, tool.idempotent), strict=True))
    return {"idempotentHint": tool.idempotent}


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
