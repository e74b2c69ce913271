"""What a run holds in memory: a finished run weighs about what its transcript does.

tracemalloc's growth over a run, the ``RunResult`` kept (after a collection),
against the run's transcript as compact JSON. A run made once before warms
every first-use cache, so only the run's own memory is counted.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from typing import TYPE_CHECKING, Any

import orjson

from agentloop import Loop
from agentloop._core.messages import History
from agentloop._core.requests import AskModel

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop import RunResult

RESULT = "r" * 200


def read(n: int) -> str:
    """Read item ``n``: 200 characters."""
    return RESULT


def long_run(steps: int) -> Loop:
    """``steps`` calls, one a model step, then an answer (issue 38's long run)."""

    async def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        done = (len(history) - 1) // 2
        if done < steps:
            return {"kind": "call", "id": f"c{done}", "name": "read", "arguments": {"n": done}}
        return {"kind": "final", "text": "ok"}

    return Loop(model, tools=[read], max_steps=steps + 1, max_calls=steps)


def held(run: Callable[[], RunResult], times: int = 1) -> tuple[int, list[RunResult]]:
    """The memory ``times`` finished runs hold, their results kept, and the results."""
    run()  # warms the caches
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [run() for _ in range(times)]
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before, kept
    finally:
        tracemalloc.stop()


def test_a_finished_long_run_holds_at_most_4_times_its_transcript() -> None:
    loop = long_run(200)
    with asyncio.Runner() as runner:
        size, (result,) = held(lambda: runner.run(loop.arun("go")))
    assert (result.status, result.calls, result.steps) == ("finished", 200, 201)
    transcript = len(orjson.dumps(result.transcript))
    # The transcript once, and each event as a few numbers over it: about 2.3 times (1.9 at
    # S = 1,000). Each event a Transition, with the messages and inputs again: 6.1 times.
    assert size <= 4 * transcript, f"{size:,} B held for a {transcript:,} B transcript"


def test_an_event_of_a_finished_long_run_costs_at_most_140_bytes_beyond_its_messages() -> None:
    loop = long_run(300)
    with asyncio.Runner() as runner:
        size, (result,) = held(lambda: runner.run(loop.arun("go")))
    assert (result.status, len(result.events)) == ("finished", 902)
    beyond = (size - len(orjson.dumps(result.transcript))) / len(result.events)
    # About 118 B: an older event is 52 bytes of columns (nine C ints, two floats) and its
    # call's id, and the history's ends and reserved ids; the newest 32 to 64 are as made.
    # 178 B with nine floats, and a list of tools and a dict of the calls each started.
    assert beyond <= 140, f"{beyond:,.0f} B an event beyond the transcript"


def test_a_finished_short_run_holds_at_most_6_kib() -> None:
    loop = long_run(2)
    with asyncio.Runner() as runner:
        size, results = held(lambda: runner.run(loop.arun("go")), times=20)
    assert all((r.status, r.calls) == ("finished", 2) for r in results)
    # About 5.4 KB: its few events are kept as made. About 24 KB in orjson's buffers.
    assert size / len(results) <= 6 * 1024, f"{size / len(results):,.0f} B a run"


def test_a_fresh_copy_of_a_long_history_peaks_at_about_its_own_size() -> None:
    history = History([orjson.dumps({"kind": "user", "text": "go"})])
    for n in range(1000):
        call = {"kind": "call", "id": f"c{n}", "name": "read", "arguments": {"n": n}}
        result = {"kind": "tool_result", "id": f"c{n}", "name": "read", "status": "ok"}
        history.extend((orjson.dumps(call), orjson.dumps({**result, "content": RESULT})))
    need = AskModel(*history.request())
    need.history  # noqa: B018 - warms the caches
    tracemalloc.start()
    try:
        copy = need.history
        size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(copy) == 2001
    # One orjson.loads of the whole array peaks at about 4.7 times the copy (its scratch);
    # in chunks, at the copy and one chunk's scratch (about 1.15 times here).
    assert peak <= 1.5 * size, f"a copy of {size:,} B peaked at {peak:,} B"
