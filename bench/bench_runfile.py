"""Run file benchmarks: loading a large run, and refusing hostile files fast.

1. Loading a 6,000-event run file (target: at least 5x faster than v0.1's
   ~640 ms on this machine, so at most 128 ms).
2. Refusing hostile files, each linear in its size: 40,000 keys with one
   duplicate (v0.1 took 15.5 s for 0.43 MB), and a file over the size limit
   (refused before it is parsed).

Run with ``make bench``.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import orjson

import agentloop
from agentloop import Loop, RunFileError

#: What v0.1 took to load the same 6,000-event run, as the issue measured it.
V01_LOAD_MS = 640.0


def echo(n: int) -> int:
    """A tool."""
    return n


def big_run(calls: int) -> agentloop.RunResult:
    """A run of ``calls`` tool calls and a final: 3 events per call, 2 at the end."""

    def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        done = (len(history) - 1) // 2
        if done < calls:
            return {"kind": "call", "id": f"c{done}", "name": "echo", "arguments": {"n": done}}
        return {"kind": "final", "text": "ok"}

    return Loop(model, tools={"echo": echo}, max_steps=calls + 1, max_calls=calls).run("go")


def best_ms(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return min(times)


def main() -> int:
    """Print the table; exit 1 if a target is missed."""
    quick = "--quick" in sys.argv
    repeats = 3 if quick else 7
    misses = []
    result = big_run(2000)
    text = agentloop.run_to_json(result)
    events = len(result.events)
    load = best_ms(lambda: agentloop.run_from_json(text), repeats)
    median = statistics.median(
        best_ms(lambda: agentloop.run_from_json(text), 1) for _ in range(repeats)
    )
    speedup = V01_LOAD_MS / load
    print(f"loading a {events:,}-event run file ({len(text) / 1e6:.1f} MB)")
    print(
        f"  best {load:.0f} ms, median {median:.0f} ms: {speedup:.1f}x faster than v0.1's "
        f"{V01_LOAD_MS:.0f} ms (target >= 5x, at most {V01_LOAD_MS / 5:.0f} ms)"
    )
    if speedup < 5:
        misses.append(f"run file load only {speedup:.1f}x")

    keys = {f"k{i}": i for i in range(40_000)}
    hostile = orjson.dumps({"format": "agentloop.run", "version": 2, **keys})
    hostile = hostile[:-1] + b',"k0":0}'  # one duplicate, at the end

    def refuse(data: bytes, **kwargs: Any) -> None:
        try:
            agentloop.run_from_json(data, **kwargs)
        except RunFileError:
            return
        raise AssertionError("a hostile file was accepted")

    duplicates = best_ms(lambda: refuse(hostile), repeats)
    print(
        f"\nrefusing 40,000 keys with one duplicate ({len(hostile) / 1e6:.2f} MB): "
        f"{duplicates:.0f} ms (v0.1: 15,500 ms)"
    )
    big = b" " * (8 * 2**20)
    oversize = best_ms(lambda: refuse(big, max_bytes=2**20), repeats)
    print(f"refusing an 8 MiB file over a 1 MiB limit: {oversize:.3f} ms (before parsing)")
    print("\nall targets met" if not misses else f"\nmissed: {'; '.join(misses)}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
