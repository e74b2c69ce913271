"""The asyncio driver beside the synchronous one, measured side by side in one run.

1. µs per model step of ``arun`` beside ``run`` (same engine, same script; the
   async model is ``async def`` and does not await anything).
2. Throughput of 1,000 concurrent runs on one event loop, each model step
   awaiting ``asyncio.sleep(0)``: model steps per second.
3. An ``async def`` tool under ``run`` (awaited on the run's own event loop)
   beside ``arun``, and a plain tool beside each: µs per step of a model step
   and a registry tool call, and what the async tool adds.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from typing import Any

from agentloop import Loop, ToolRegistry

Message = dict[str, Any]


class Echo:
    """The cheapest dispatcher, so the bench measures the drivers."""

    def dispatch(self, call: Message) -> Message:
        return {"status": "ok", "content": call["arguments"]}


def reply(history: list[Message], k: int) -> Message:
    done = (len(history) - 1) // 2
    if done < k:
        return {"kind": "call", "id": f"c{done}", "name": "echo", "arguments": {"n": done}}
    return {"kind": "final", "text": "ok"}


def per_step(k: int, repeats: int) -> tuple[float, float]:
    """Median µs per model step: (sync driver, async driver), interleaved."""

    def model(history: list[Message]) -> Message:
        return reply(history, k)

    async def amodel(history: list[Message]) -> Message:
        return reply(history, k)

    sync_loop = Loop(model, tools=Echo(), max_steps=k + 1, max_calls=k)
    async_loop = Loop(amodel, tools=Echo(), max_steps=k + 1, max_calls=k)
    runs = max(1, 2000 // (k + 1))

    async def many() -> None:
        for _ in range(runs):
            await async_loop.arun("go")

    sync_times, async_times = [], []
    with asyncio.Runner() as runner:
        for _ in range(repeats):
            start = time.perf_counter_ns()
            for _ in range(runs):
                sync_loop.run("go")
            sync_times.append(time.perf_counter_ns() - start)
            start = time.perf_counter_ns()
            runner.run(many())
            async_times.append(time.perf_counter_ns() - start)
    steps = runs * (k + 1) * 1000
    return min(sync_times) / steps, min(async_times) / steps  # the best of interleaved repeats


def concurrent(n: int = 1000, k: int = 3, repeats: int = 5) -> tuple[float, float]:
    """Median seconds and model steps per second for ``n`` concurrent runs of ``k`` calls."""

    async def model(history: list[Message]) -> Message:
        await asyncio.sleep(0)
        return reply(history, k)

    loop = Loop(model, tools=Echo(), max_steps=k + 1, max_calls=k)

    async def gather() -> None:
        results = await asyncio.gather(*(loop.arun("go") for _ in range(n)))
        assert all(r.status == "finished" for r in results)

    times = []
    with asyncio.Runner() as runner:
        for _ in range(repeats):
            start = time.perf_counter()
            runner.run(gather())
            times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    return seconds, n * (k + 1) / seconds


def tool_calls(k: int, repeats: int) -> dict[tuple[str, str], float]:
    """Median µs per step (a model step and a tool call) by (driver, tool kind), interleaved."""

    def model(history: list[Message]) -> Message:
        return reply(history, k)

    def echo(n: int) -> int:
        return n

    async def aecho(n: int) -> int:
        return n

    loops = {
        kind: Loop(model, tools=ToolRegistry({"echo": tool}), max_steps=k + 1, max_calls=k)
        for kind, tool in (("plain", echo), ("async", aecho))
    }
    runs = max(1, 1000 // (k + 1))

    async def many(loop: Loop) -> None:
        for _ in range(runs):
            await loop.arun("go")

    times: dict[tuple[str, str], list[int]] = {}
    with asyncio.Runner() as runner:
        for _ in range(repeats):
            for kind, loop in loops.items():
                start = time.perf_counter_ns()
                for _ in range(runs):
                    loop.run("go")
                times.setdefault(("run", kind), []).append(time.perf_counter_ns() - start)
                start = time.perf_counter_ns()
                runner.run(many(loop))
                times.setdefault(("arun", kind), []).append(time.perf_counter_ns() - start)
    steps = runs * k * 1000  # one tool call per step, the final step left out
    return {key: min(values) / steps for key, values in times.items()}


def main() -> int:
    """Print both tables."""
    quick = "--quick" in sys.argv
    print("\nasync driver vs sync driver, µs per model step (same engine and script)")
    print(f"  {'K':>5} {'sync':>10} {'async':>10} {'ratio':>7}")
    for k in (1, 10, 100):
        sync, asynchronous = per_step(k, 3 if quick else 7)
        print(f"  {k:>5} {sync:>10.2f} {asynchronous:>10.2f} {asynchronous / sync:>7.2f}")
    seconds, rate = concurrent(repeats=2 if quick else 5)
    print("\n1,000 concurrent runs on one event loop (3 calls + final each, model awaits sleep(0))")
    print(f"  {seconds * 1000:.0f} ms for 4,000 model steps: {rate:,.0f} model steps per second")
    k = 10
    cost = tool_calls(k, 3 if quick else 7)
    print(f"\nan async def tool under run and arun, µs per step (a model step and a call, K={k})")
    print(f"  {'driver':>6} {'plain tool':>11} {'async tool':>11} {'async adds':>11}")
    for driver in ("run", "arun"):
        plain, awaited = cost[driver, "plain"], cost[driver, "async"]
        print(f"  {driver:>6} {plain:>11.2f} {awaited:>11.2f} {awaited - plain:>11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
