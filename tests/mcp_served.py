"""A registry served over stdio with ``agentloop.mcp.serve``: ``python tests/mcp_served.py``."""

from __future__ import annotations

import anyio

from agentloop import ToolRegistry, allow, deny
from agentloop.mcp import serve, serve_stdio

registry = ToolRegistry(
    policy=lambda call: deny("not that one") if call["name"] == "pay" else allow()
)


@registry.tool(idempotent=True)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@registry.tool
def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


if __name__ == "__main__":
    anyio.run(serve_stdio, serve(registry, name="served"))
