"""An MCP server for the tests of ``agentloop.mcp``, built with the SDK's own ``MCPServer``.

``python tests/support/mcp_server.py`` serves it over stdio; ``--http PORT`` over
streamable HTTP on localhost. ``die`` ends the process mid-call, ``hang``
sleeps, ``grow`` adds a tool and says the list changed, ``charge`` takes
effect and then answers a JSON-RPC error, ``count`` reports its progress.
Its listing is amended as other servers write theirs: ``pair``'s schema is
Draft 7, as the TypeScript SDK stamps every schema (a tuple is then
``items: [...]``), and ``research`` runs only as a task (a handshake-era
listing carries ``execution``; a 2026-07-28 one has no such field).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, ImageContent, Tool, ToolAnnotations, ToolExecution

server = MCPServer("tests", log_level="CRITICAL")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool(structured_output=False)
def shout(text: str) -> str:
    """Say the text back in capitals, as text only."""
    return text.upper()


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete(path: str) -> str:
    """Delete a file (pretend)."""
    return f"deleted {path}"


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
def fail(message: str) -> str:
    """Fail with a message."""
    from mcp.server.mcpserver.exceptions import ToolError

    raise ToolError(message)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def hang(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return "awake"


RUNNING = [0, 0]  # calls of overlap running now, and the most seen at once


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def overlap(seconds: float) -> int:
    """Sleep; answer the most calls of this tool seen running at once."""
    RUNNING[0] += 1
    RUNNING[1] = max(RUNNING)
    await asyncio.sleep(seconds)
    RUNNING[0] -= 1
    return RUNNING[1]


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
async def die(after: float = 0.0) -> str:
    """End the server process, after a while."""
    await asyncio.sleep(after)
    os._exit(3)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def picture() -> ImageContent:
    """A tiny image."""
    return ImageContent(type="image", data="aGVsbG8=", mime_type="image/png")


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
async def grow(ctx: Context) -> str:
    """Add the tool `double`, and say the list changed."""

    def double(x: int) -> int:
        """Double an integer."""
        return 2 * x

    server.add_tool(double, annotations=ToolAnnotations(read_only_hint=True))
    await ctx.notify_tools_changed()  # 2026-07-28 clients listen for it
    with contextlib.suppress(Exception):  # handshake-era clients get the notification
        await ctx.session.send_tool_list_changed()
    return "grown"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def key(ctx: Context) -> str:
    """The idempotency key the client sent with this call ('' if none)."""
    meta = ctx.request_context.meta or {}
    return str(meta.get("io.github.agentloop/idempotency-key", ""))


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def header(name: str, ctx: Context) -> str:
    """A header of the HTTP request that carried this call ('' if none, or not over HTTP)."""
    request = ctx.request_context.request
    return "" if request is None else str(request.headers.get(name, ""))


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def environment(name: str) -> str:
    """An environment variable of the server process ('' if unset)."""
    return os.environ.get(name, "")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def client(ctx: Context) -> str:
    """The name and version the client gave of itself."""
    params = ctx.request_context.session.client_params
    info = None if params is None else params.client_info
    return "" if info is None else f"{info.name} {info.version}"


CHARGES: list[int] = []


@server.tool()
def charge(amount: int) -> str:
    """Charge an amount, then fail: the effect stays, and the answer is a JSON-RPC error."""
    CHARGES.append(amount)
    raise MCPError(code=INTERNAL_ERROR, message="the receipt printer jammed")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def charged() -> int:
    """How many charges took effect so far."""
    return len(CHARGES)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def count(steps: int, ctx: Context) -> int:
    """Count to steps, reporting each as progress."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
    return steps


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def pair(point: tuple[int, str]) -> str:
    """Say a pair back."""
    return f"{point[0]} {point[1]}"


@server.tool()
def research(topic: str) -> str:
    """Research a topic (listed as runnable only as a task)."""
    return f"researched {topic}"


#: Draft 7's tuple, as the TypeScript SDK writes ``z.tuple([z.number(), z.string()])``.
PAIR_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "point": {
            "type": "array",
            "items": [{"type": "integer"}, {"type": "string"}],
            "minItems": 2,
            "maxItems": 2,
        }
    },
    "required": ["point"],
    "additionalProperties": False,
}
_listed = server.list_tools


async def list_tools() -> list[Tool]:
    """The SDK's listing, amended: see the module."""
    tools = await _listed()
    for tool in tools:
        if tool.name == "pair":
            tool.input_schema = PAIR_SCHEMA
        elif tool.name == "research":
            tool.execution = ToolExecution(task_support="required")
    return tools


server.list_tools = list_tools  # type: ignore[method-assign]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", port=int(sys.argv[2]))
    else:
        server.run()
