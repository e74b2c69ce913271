"""A registry served over stdio with ``agentloop.mcp.serve``.

Run as ``python tests/support/mcp_served.py``.

``count`` reports its progress; ``charge`` is idempotent by the key an agentloop
client sends (``agentloop.idempotency_key()``): a key seen before charges nothing
again; ``charges`` says what was charged, by key.
"""

from __future__ import annotations

import anyio

from agentloop import ToolRegistry, allow, deny, idempotency_key, report_progress
from agentloop.mcp import serve, serve_stdio

registry = ToolRegistry(
    policy=lambda call: deny("not that one") if call["name"] == "pay" else allow()
)
CHARGES: dict[str, int] = {}  # amount by idempotency key ("" when none came)


@registry.tool(idempotent=True)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@registry.tool
def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


@registry.tool(idempotent=True)
def count(steps: int) -> int:
    """Count to steps, reporting each as progress."""
    for step in range(1, steps + 1):
        report_progress(step, steps, f"step {step}")
    return steps


@registry.tool(idempotent=True)
def charge(amount: int) -> str:
    """Charge an amount, once per idempotency key."""
    key = idempotency_key() or ""
    if key in CHARGES and key:
        return f"already charged under {key}"
    CHARGES[key] = CHARGES.get(key, 0) + amount
    return f"charged {amount} under {key or 'no key'}"


@registry.tool(idempotent=True)
def charges() -> dict[str, int]:
    """What was charged so far, by idempotency key."""
    return dict(CHARGES)


if __name__ == "__main__":
    read_only = {"readOnlyHint": True}
    hints = {"add": read_only, "count": read_only, "charges": read_only}
    anyio.run(serve_stdio, serve(registry, name="served", annotations=hints))
