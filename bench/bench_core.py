"""Core benchmarks, measured side by side in one run (the machine is shared and noisy).

1. Engine cost per model step beside a hand-written loop that keeps the same
   contract with the same copier and the same event values (target: ratio
   <= 1.5 at K = 10 and K = 100).
2. The history copier beside ``copy.deepcopy`` on the K = 100 history
   (target: at least 5x faster).
3. Memory over 100,000 short runs in one process (target: no growth after
   warm-up).

Run with ``make bench``. Ratios are what count; absolute times vary.
"""

from __future__ import annotations

import copy
import gc
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from agentloop._messages import (
    History,
    input_messages,
    reply_problem,
    to_json,
    tool_result_json,
)

from agentloop import Budget, CancelToken, Guard, Loop, State, Transition, Trigger

if TYPE_CHECKING:
    from collections.abc import Callable

Message = dict[str, Any]


class Echo:
    """The cheapest dispatcher, so the bench measures the loop, not a tool."""

    def dispatch(self, call: Message) -> Message:
        return {"status": "ok", "content": call["arguments"]}


def scripted(k: int) -> Any:
    """A model that makes ``k`` calls, then answers; it looks at the history like a real one."""

    def model(history: list[Message]) -> Message:
        done = (len(history) - 1) // 2
        if done < k:
            return {"kind": "call", "id": f"c{done}", "name": "echo", "arguments": {"n": done}}
        return {"kind": "final", "text": "ok"}

    return model


def hand_written(
    model: Any, dispatcher: Echo, text: str, budget: Budget, cancel: CancelToken
) -> Any:
    """The same contract as the engine, written as one if/elif loop."""
    history = History(input_messages(text))
    steps = calls = 0
    reserved: set[str] = set()
    events: list[Transition] = []
    while True:
        if cancel.cancelled:
            dest = State.CANCELLED
            events.append(
                Transition(
                    source=State.AWAITING_MODEL,
                    dest=dest,
                    trigger=Trigger.ASK_MODEL,
                    guard=Guard.CANCEL_REQUESTED,
                    steps=steps,
                    calls=calls,
                )
            )
            return events
        if steps >= budget.max_steps:
            events.append(
                Transition(
                    source=State.AWAITING_MODEL,
                    dest=State.EXHAUSTED,
                    trigger=Trigger.ASK_MODEL,
                    guard=Guard.STEPS_EXHAUSTED,
                    steps=steps,
                    calls=calls,
                    reason="max_steps",
                )
            )
            return events
        steps += 1
        try:
            raw = model(history.copy())
        except Exception as exc:  # noqa: BLE001 - a failing model is a state
            events.append(
                Transition(
                    source=State.AWAITING_MODEL,
                    dest=State.FAILED,
                    trigger=Trigger.MODEL_RAISED,
                    steps=steps,
                    calls=calls,
                    error=str(exc),
                )
            )
            return events
        if cancel.cancelled:
            events.append(
                Transition(
                    source=State.AWAITING_MODEL,
                    dest=State.CANCELLED,
                    trigger=Trigger.MODEL_REPLIED,
                    guard=Guard.CANCEL_REQUESTED,
                    steps=steps,
                    calls=calls,
                )
            )
            return events
        reply_json = to_json(raw, "reply")
        reply = orjson.loads(reply_json)
        problem = reply_problem(reply)
        events.append(
            Transition(
                source=State.AWAITING_MODEL,
                dest=State.VALIDATING,
                trigger=Trigger.MODEL_REPLIED,
                steps=steps,
                calls=calls,
            )
        )
        if problem:
            events.append(
                Transition(
                    source=State.VALIDATING,
                    dest=State.MALFORMED,
                    trigger=Trigger.VALIDATE,
                    steps=steps,
                    calls=calls,
                    error=problem,
                )
            )
            return events
        if reply["kind"] == "final":
            events.append(
                Transition(
                    source=State.VALIDATING,
                    dest=State.FINISHED,
                    trigger=Trigger.VALIDATE,
                    guard=Guard.REPLY_IS_FINAL,
                    steps=steps,
                    calls=calls,
                    appended_json=(reply_json,),
                )
            )
            history.append(reply_json)
            return events
        call_fields = {"call_id": reply["id"], "tool": reply["name"]}
        if reply["id"] in reserved:
            events.append(
                Transition(
                    source=State.VALIDATING,
                    dest=State.REPEATED_CALL,
                    trigger=Trigger.VALIDATE,
                    steps=steps,
                    calls=calls,
                    **call_fields,
                )
            )
            return events
        if calls >= budget.max_calls:
            events.append(
                Transition(
                    source=State.VALIDATING,
                    dest=State.EXHAUSTED,
                    trigger=Trigger.VALIDATE,
                    steps=steps,
                    calls=calls,
                    reason="max_calls",
                    **call_fields,
                )
            )
            return events
        if cancel.cancelled:
            events.append(
                Transition(
                    source=State.VALIDATING,
                    dest=State.CANCELLED,
                    trigger=Trigger.VALIDATE,
                    steps=steps,
                    calls=calls,
                    **call_fields,
                )
            )
            return events
        reserved.add(reply["id"])
        calls += 1
        events.append(
            Transition(
                source=State.VALIDATING,
                dest=State.DISPATCHING,
                trigger=Trigger.VALIDATE,
                steps=steps,
                calls=calls,
                **call_fields,
            )
        )
        if cancel.cancelled:
            events.append(
                Transition(
                    source=State.DISPATCHING,
                    dest=State.CANCELLED,
                    trigger=Trigger.START_TOOL,
                    steps=steps,
                    calls=calls,
                    **call_fields,
                )
            )
            return events
        outcome = dispatcher.dispatch(orjson.loads(reply_json))
        content = to_json(outcome["content"], "content")
        result_json = tool_result_json(reply["id"], reply["name"], outcome["status"], content)
        events.append(
            Transition(
                source=State.DISPATCHING,
                dest=State.AWAITING_MODEL,
                trigger=Trigger.TOOL_RETURNED,
                steps=steps,
                calls=calls,
                status=outcome["status"],
                appended_json=(reply_json, result_json),
                **call_fields,
            )
        )
        history.append(reply_json)
        history.append(result_json)


def time_per_step(k: int, repeats: int) -> tuple[float, float]:
    """Median µs per model step: (engine, hand-written), interleaved run by run."""
    budget = Budget(max_steps=k + 1, max_calls=k)
    loop = Loop(scripted(k), tools=Echo(), max_steps=k + 1, max_calls=k)
    runs = max(1, 2000 // (k + 1))
    engine_times, hand_times = [], []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(runs):
            result = loop.run("go")
        engine_times.append(time.perf_counter_ns() - start)
        assert result.status == "finished"
        start = time.perf_counter_ns()
        for _ in range(runs):
            events = hand_written(scripted(k), Echo(), "go", budget, CancelToken())
        hand_times.append(time.perf_counter_ns() - start)
        assert events[-1].dest == "finished"
    per_step = runs * (k + 1) * 1000
    return statistics.median(engine_times) / per_step, statistics.median(hand_times) / per_step


def python_copier(value: Any) -> Any:
    """The recursive copier the issue measured, for reference."""
    if isinstance(value, dict):
        return {key: python_copier(item) for key, item in value.items()}
    if isinstance(value, list):
        return [python_copier(item) for item in value]
    return value


def copier(repeats: int = 200) -> dict[str, float]:
    """µs per copy of the K = 100 history, for each copier."""
    result = Loop(scripted(100), tools=Echo(), max_steps=101, max_calls=100).run("go")
    messages = result.transcript
    history = History([orjson.dumps(m) for m in messages])
    assert history.copy() == messages
    candidates: dict[str, Callable[[], object]] = {
        "History.copy (orjson)": history.copy,
        "recursive Python copier": lambda: python_copier(messages),
        "copy.deepcopy": lambda: copy.deepcopy(messages),
    }
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, fn in candidates.items():
            start = time.perf_counter_ns()
            fn()
            times[name].append((time.perf_counter_ns() - start) / 1000)
    print(f"\ncopying the K=100 history ({len(messages)} messages), median µs per copy")
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, value in medians.items():
        print(f"  {name:<26} {value:8.1f} µs")
    return medians


def rss_kib() -> int:
    """The process's current resident set size, in KiB (Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4


def memory(total: int = 100_000, warm_up: int = 10_000) -> tuple[int, int, int]:
    """Run ``total`` short runs; tracemalloc and RSS growth after ``warm_up`` of them."""
    loop = Loop(scripted(1), tools=Echo(), max_steps=2, max_calls=1)
    for _ in range(warm_up):
        loop.run("go")
    gc.collect()
    tracemalloc.start()
    before_traced = tracemalloc.get_traced_memory()[0]
    before_rss = rss_kib()
    for _ in range(total - warm_up):
        loop.run("go")
    gc.collect()
    after_traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return total, after_traced - before_traced, rss_kib() - before_rss


def main() -> int:
    """Print the three tables; exit 1 if a target is missed."""
    quick = "--quick" in sys.argv
    repeats = 3 if quick else 9
    print("engine vs a hand-written loop (same contract, copier and events), µs per model step")
    print(f"  {'K':>5} {'engine':>10} {'hand':>10} {'ratio':>7}  target")
    misses = []
    for k in (1, 10, 100, 1000):
        engine, hand = time_per_step(k, repeats if k < 1000 else max(3, repeats // 3))
        target = "<= 1.5" if k in (10, 100) else ""
        if target and engine / hand > 1.5:
            misses.append(f"K={k} ratio {engine / hand:.2f}")
        print(f"  {k:>5} {engine:>10.2f} {hand:>10.2f} {engine / hand:>7.2f}  {target}")
    medians = copier(50 if quick else 200)
    speedup = medians["copy.deepcopy"] / medians["History.copy (orjson)"]
    print(f"  History.copy is {speedup:.1f}x faster than copy.deepcopy (target >= 5x)")
    if speedup < 5:
        misses.append(f"copier only {speedup:.1f}x")
    runs, traced, rss = memory(20_000 if quick else 100_000, 2_000 if quick else 10_000)
    print(f"\nmemory over {runs:,} short runs, after warm-up")
    print(f"  tracemalloc growth: {traced:+,} bytes   RSS growth: {rss:+,} KiB")
    if traced > 64 * 1024:
        misses.append(f"memory grew {traced:,} bytes")
    print("\nall targets met" if not misses else f"\nmissed: {'; '.join(misses)}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
