"""agentloop.mcp's cost per call, over calling the MCP session directly, side by side in one run.

The bundled demo server (``agentloop.mcp._demo_server``) answers ``add(2, 3)``
the same number of times each way, in interleaved repeats so that machine
noise hits them alike:

- session: ``await client.call_tool('add', ...)`` on an ``mcp.Client`` (the SDK alone);
- asyncio: ``await registry.adispatch(call)`` with ``async with server``: the
  session on the running loop, behind validation and result conversion;
- thread: ``registry.adispatch(call)`` with ``with server``: the session on
  its own thread's loop, every call handed across from the awaiting loop (as
  a synchronous run's private loop hands it: what ``loop.run`` does).

Twice: over stdio (the server a process of its own, as in use), and with the
server in this process (the SDK's in-memory transport), where no process
switch hides agentloop's own cost. The table gives the median per call and the
overhead over the session's; the machine may be shared, so the ratios are
what count.
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
from agentloop.mcp import _demo_server

REPEATS = 15
NUMBER = 100
COMMAND = (sys.executable, ["-m", "agentloop.mcp._demo_server"])
CALL: dict[str, Any] = {"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}
WAYS = ("session", "asyncio", "thread")


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


def connection(target: Any) -> amcp.Server:
    if target == "stdio":
        return amcp.stdio(*COMMAND)
    # The SDK's client takes a server object too (in-process): so does the connection.
    return amcp.Server(
        target, name="in-process", timeout=None, max_concurrency=None, connect_timeout=30
    )


async def measure(target: Any, times: dict[str, list[float]]) -> None:
    sdk_target = (
        mcp.StdioServerParameters(command=COMMAND[0], args=COMMAND[1])
        if target == "stdio"
        else target
    )
    with connection(target) as threaded:  # its own thread's loop
        async with mcp.Client(sdk_target, cache=None) as client, connection(target) as native:
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


def report(title: str, times: dict[str, list[float]]) -> None:
    base = statistics.median(times["session"])
    heading = f"{title}: per call (median of {REPEATS} x {NUMBER})"
    print(f"{heading:<52} {'µs':>8} {'over session':>13}")
    labels = {
        "session": "  session: mcp.Client.call_tool",
        "asyncio": "  asyncio: registry.adispatch, async with",
        "thread": "  thread: registry.adispatch, with",
    }
    for key in WAYS:
        median = statistics.median(times[key])
        over = f"{(median - base) * 1e6:+10.0f} µs ({median / base:.2f}x)"
        print(f"{labels[key]:<52} {median * 1e6:8.0f} {over}")


def main() -> None:
    for title, target in (("stdio", "stdio"), ("in-process", _demo_server.server)):
        times: dict[str, list[float]] = {way: [] for way in WAYS}
        asyncio.run(measure(target, times))
        report(title, times)


if __name__ == "__main__":
    main()
