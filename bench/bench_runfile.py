"""Run file benchmarks: loading a large run, and refusing hostile files fast.

1. Loading a 6,000-event run file (target: at least 5x faster than v0.1).
   Side by side when ``AGENTLOOP_V01`` names a checkout of v0.1 (``git
   worktree add /tmp/v01 3fd625a``): the same run, loaded by each, in one
   process. Without it, against the 640 ms the issue measured for v0.1 (on a
   machine whose speed may differ).
2. Refusing hostile files, each linear in its size: 40,000 keys with one
   duplicate (v0.1 took 15.5 s for 0.43 MB), and a file over the size limit
   (refused before it is parsed).
3. Linear reading: loading, ``agentloop show`` (its lines) and the HTML report
   of a run of N events and of 2N events (target: 2N takes at most 2.5x the
   time of N; a reader that walks from the first event for each event takes
   4x).

Run with ``make bench``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import orjson

import agentloop
from agentloop import Loop
from agentloop.review import RunFileError

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


V01_SCRIPT = """
import sys, time
sys.path.insert(0, sys.argv[1])
import agentloop
def echo(n: int) -> int:
    return n
def model(history):
    done = (len(history) - 1) // 2
    if done < 2000:
        return {"kind": "call", "id": f"c{done}", "name": "echo", "arguments": {"n": done}}
    return {"kind": "final", "text": "ok"}
result = agentloop.Loop(model, tools={"echo": echo}, max_steps=2001, max_calls=2000).run("go")
text = result.to_json()
times = []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    agentloop.RunResult.from_json(text)
    times.append((time.perf_counter() - start) * 1000)
print(min(times))
"""


def v01_load_ms(checkout: str, repeats: int) -> float:
    """v0.1's loader on the same 6,002-event run, in a child process (its own modules)."""
    out = subprocess.run(
        [sys.executable, "-c", V01_SCRIPT, checkout, str(repeats)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip())


def best_ms(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return min(times)


def reading(
    small: agentloop.RunResult, large: agentloop.RunResult, repeats: int
) -> dict[str, tuple[float, float]]:
    """Best milliseconds to load, show and report each run."""
    from agentloop._review.report import report_html
    from agentloop._review.text import run_lines

    times: dict[str, tuple[float, float]] = {}
    texts = [agentloop.review.run_to_json(run) for run in (small, large)]
    times["load"] = (
        best_ms(lambda: agentloop.review.run_from_json(texts[0]), repeats),
        best_ms(lambda: agentloop.review.run_from_json(texts[1]), repeats),
    )
    times["show"] = (
        best_ms(lambda: run_lines(small, title="run"), repeats),
        best_ms(lambda: run_lines(large, title="run"), repeats),
    )
    times["report"] = (
        best_ms(lambda: report_html(small, svg=False), repeats),
        best_ms(lambda: report_html(large, svg=False), repeats),
    )
    return times


def main() -> int:
    """Print the table; exit 1 if a target is missed."""
    quick = "--quick" in sys.argv
    repeats = 3 if quick else 7
    misses = []
    result = big_run(2000)
    text = agentloop.review.run_to_json(result)
    events = len(result.events)
    load = best_ms(lambda: agentloop.review.run_from_json(text), repeats)
    baseline, where = V01_LOAD_MS, "the issue's measurement"
    v01 = os.environ.get("AGENTLOOP_V01")
    if v01:
        baseline, where = v01_load_ms(v01, repeats), f"v0.1 at {v01}, side by side"
    speedup = baseline / load
    print(f"loading a {events:,}-event run file ({len(text) / 1e6:.1f} MB)")
    print(
        f"  {load:.0f} ms (best of {repeats}); v0.1: {baseline:.0f} ms ({where}): "
        f"{speedup:.1f}x faster (target >= 5x)"
    )
    if speedup < 5:
        misses.append(f"run file load only {speedup:.1f}x")

    keys = {f"k{i}": i for i in range(40_000)}
    hostile = orjson.dumps({"format": "agentloop.run", "version": 6, **keys})
    hostile = hostile[:-1] + b',"k0":0}'  # one duplicate, at the end

    def refuse(data: bytes, **kwargs: Any) -> None:
        try:
            agentloop.review.run_from_json(data, **kwargs)
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

    print("\nreading N and 2N events (best of each; target: 2N at most 2.5x N)")
    print(f"  {'':8} {'N':>8} {'2N':>8} {'ratio':>6}")
    n = 2500 if quick else 10_000
    small, large = big_run(n), big_run(2 * n)
    print(f"  events   {len(small.events):>8,} {len(large.events):>8,}")
    for name, ms in reading(small, large, repeats).items():
        ratio = ms[1] / ms[0]
        print(f"  {name:8} {ms[0]:>6.0f}ms {ms[1]:>6.0f}ms {ratio:>5.2f}x")
        if ratio > 2.5:
            misses.append(f"{name} of 2N events took {ratio:.2f}x N")
    print("\nall targets met" if not misses else f"\nmissed: {'; '.join(misses)}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
