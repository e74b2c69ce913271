"""A small MCP server to try ``agentloop.mcp`` on: ``python -m agentloop.mcp._demo_server``.

Built with the SDK's own ``MCPServer``, served over stdio (or, with
``--http PORT``, streamable HTTP on localhost). Its tools say what they are:
``add`` and ``notes`` only read; ``note`` writes (and so is destructive, by
MCP's default); ``forget`` deletes and says so; ``tidy`` reports its progress.
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("agentloop-demo", log_level="ERROR")
NOTES: list[str] = []


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def note(text: str) -> str:
    """Keep a note."""
    NOTES.append(text)
    return f"noted ({len(NOTES)} in all)"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def notes() -> list[str]:
    """Every note kept so far."""
    return list(NOTES)


@server.tool(annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True))
def forget() -> str:
    """Delete every note."""
    NOTES.clear()
    return "forgotten"


@server.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
async def tidy(steps: int, ctx: Context) -> str:
    """Tidy the notes in steps, reporting each as progress."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step} of {steps}")
    return "tidied"


def main(argv: list[str]) -> None:
    """Serve over stdio, or over streamable HTTP with ``--http PORT``."""
    if len(argv) == 2 and argv[0] == "--http":
        server.run("streamable-http", port=int(argv[1]))
    else:
        server.run()


if __name__ == "__main__":
    main(sys.argv[1:])
