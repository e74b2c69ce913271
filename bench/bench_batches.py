"""Batch replies, measured side by side in one run.

1. Per-call cost: one reply with a batch of 10 calls, beside 10 replies of one
   call each (same tools, same engine, sync driver). A batch spends one model
   step for the ten calls, so it should cost less per call, not more.
2. ``max_concurrency=10`` with tools that await ``sleep(0.01)``: a batch of 10
   takes about 10 ms of wall time, not the 100 ms of running them one by one.

Targets (from the batch-replies issue): the batch per call <= 10 single-call
steps per call; concurrent wall time <= 2x one tool's 10 ms.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from agentloop import Loop

Message = dict[str, Any]
N = 10


class Echo:
    """The cheapest dispatcher, so the bench measures the engine and the driver."""

    def dispatch(self, call: Message) -> Message:
        return {"status": "ok", "content": call["arguments"]}


def batched(history: list[Message]) -> Message:
    if len(history) == 1:
        calls = [{"id": f"c{i}", "name": "echo", "arguments": {"n": i}} for i in range(N)]
        return {"kind": "calls", "calls": calls}
    return {"kind": "final", "text": "ok"}


def one_by_one(history: list[Message]) -> Message:
    done = (len(history) - 1) // 2
    if done < N:
        return {"kind": "call", "id": f"c{done}", "name": "echo", "arguments": {"n": done}}
    return {"kind": "final", "text": "ok"}


def per_call(repeats: int) -> tuple[float, float]:
    """Best µs per call, interleaved: (a batch of 10, 10 single-call replies)."""
    batch_loop = Loop(batched, tools=Echo(), max_steps=2, max_calls=N)
    single_loop = Loop(one_by_one, tools=Echo(), max_steps=N + 1, max_calls=N)
    runs = 300
    times: dict[str, list[int]] = {"batch": [], "single": []}
    for _ in range(repeats):
        for name, loop in (("batch", batch_loop), ("single", single_loop)):
            start = time.perf_counter_ns()
            for _ in range(runs):
                result = loop.run("go")
            times[name].append(time.perf_counter_ns() - start)
            assert (result.status, result.calls) == ("finished", N)
    calls = runs * N * 1000
    return min(times["batch"]) / calls, min(times["single"]) / calls


def concurrent_wall(repeats: int) -> tuple[float, float]:
    """Median ms for a batch of 10 sleeping tools: (max_concurrency=10, 1)."""

    async def sleepy(n: int) -> int:
        await asyncio.sleep(0.01)
        return n

    def wall(limit: int) -> float:
        loop = Loop(
            batched, tools={"echo": sleepy}, max_steps=2, max_calls=N, max_concurrency=limit
        )
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            result = asyncio.run(loop.arun("go"))
            times.append(time.perf_counter() - start)
            assert result.status == "finished"
        return sorted(times)[len(times) // 2] * 1000

    return wall(N), wall(1)


def main() -> int:
    """Print both measures; exit 1 when a target is missed."""
    quick = "--quick" in sys.argv
    batch, single = per_call(3 if quick else 7)
    print(f"\nbatch of {N} calls vs {N} single-call replies, µs per call (sync driver)")
    print(
        f"  batch {batch:.2f}   single {single:.2f}   ratio {batch / single:.2f} (target <= 1.00)"
    )
    together, alone = concurrent_wall(3 if quick else 9)
    print(f"\n{N} tools awaiting sleep(0.01) in one batch, wall ms (median)")
    print(
        f"  max_concurrency={N}: {together:.1f}   max_concurrency=1: {alone:.1f}   (target <= 20)"
    )
    missed = batch > single or together > 20
    if missed:
        print("MISSED a batch target")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
