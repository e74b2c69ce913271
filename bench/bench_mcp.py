"""agentloop.mcp's cost per call, over calling the MCP session directly, side by side in one run.

The bundled demo server (``agentloop.mcp._demo_server``) is launched over stdio,
and its read-only ``add(a, b)`` is called the same number of times each way,
in interleaved repeats so that machine noise hits them alike:

- session: ``await client.call_tool('add', ...)`` on an ``mcp.Client`` (the SDK alone);
- asyncio: ``await registry.adispatch(call)`` with ``async with server``: the
  session on the running loop, behind validation and result conversion;
- thread: ``registry.adispatch(call)`` with ``with server``: the session on
  its own thread's loop, every call handed across from the awaiting loop (as
  a synchronous run's private loop hands it: what ``loop.run`` does).

The table gives the median per call and the overhead over the session's.
A stdio round trip costs hundreds of microseconds, so the ratios are what
count; the machine may be shared.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from typing import Any

import mcp

from agentloop import ToolRegistry
from agentloop import mcp as amcp

REPEATS = 15
NUMBER = 100
COMMAND = (sys.executable, ["-m", "agentloop.mcp._demo_server"])
CALL: dict[str, Any] = {"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}


async def session_calls(client: mcp.Client) -> float:
    start = time.perf_counter()
    for _ in range(NUMBER):
        await client.call_tool("add", {"a": 2, "b": 3})
    return (time.perf_counter() - start) / NUMBER


async def registry_calls(registry: ToolRegistry) -> float:
    start = time.perf_counter()
    for _ in range(NUMBER):
        outcome = await registry.adispatch(CALL)
    assert outcome == {"status": "ok", "content": 5}, outcome
    return (time.perf_counter() - start) / NUMBER


async def asyncio_side(times: dict[str, list[float]]) -> None:
    parameters = mcp.StdioServerParameters(command=COMMAND[0], args=COMMAND[1])
    with amcp.stdio(*COMMAND) as threaded:  # its own thread's loop
        async with mcp.Client(parameters, cache=None) as client, amcp.stdio(*COMMAND) as native:
            registries = {}
            for key, server in (("asyncio", native), ("thread", threaded)):
                registries[key] = ToolRegistry()
                server.register(registries[key], allow=["add"])
            await session_calls(client)  # warm each up
            for registry in registries.values():
                await registry_calls(registry)
            for _ in range(REPEATS):
                times["session"].append(await session_calls(client))
                for key, registry in registries.items():
                    times[key].append(await registry_calls(registry))


def main() -> None:
    times: dict[str, list[float]] = {"session": [], "asyncio": [], "thread": []}
    asyncio.run(asyncio_side(times))
    base = statistics.median(times["session"])
    heading = f"per call (median of {REPEATS} x {NUMBER})"
    print(f"{heading:<44} {'µs':>8} {'over session':>13}")
    rows = {
        "session: mcp.Client.call_tool": "session",
        "asyncio: registry.adispatch, async with": "asyncio",
        "thread: registry.adispatch, with": "thread",
    }
    for label, key in rows.items():
        median = statistics.median(times[key])
        over = f"{(median - base) * 1e6:+10.0f} µs ({median / base:.2f}x)"
        print(f"{label:<44} {median * 1e6:8.0f} {over}")


if __name__ == "__main__":
    main()
