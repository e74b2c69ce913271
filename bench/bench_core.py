"""Core benchmarks, measured side by side in one run (the machine is shared and noisy).

1. Engine cost per model step beside two hand-written loops that keep the
   same promises. The ``contract`` loop (``contract_loop``) keeps the history
   as one orjson buffer and decodes a fresh copy for every model call; copies
   the reply on intake (an orjson round trip) and checks its shape; checks
   argument types against the handler's annotations; records each transition
   as a tuple (source, dest, trigger, steps, calls); appends a call and its
   result together. Both use the same tool, and the engine's dispatcher does
   the same annotation check; both runs get a fresh ``CancelToken`` (the hand
   loop checks its token, so the engine's runs have one to check too: a run
   without one skips the checks). The ``record`` loop (``record_loop``) is the
   same loop recording what the engine records, its events (every field) with
   their times and the ``RunResult`` (checked equal to the engine's).
   Aim (issue 37): the engine within 4x the ``contract`` loop at K = 1,
   reported, never failing the bench. The engine against the ``record`` loop
   is printed for information: its targets (3x at K = 1, 2x at K = 10, 1.3x
   at K = 100) were withdrawn by issue 37.
   Ceiling (issue 37): the engine's cost per model step at most 1.1x that of
   another checkout's, at K = 1 and K = 10, when ``AGENTLOOP_BASELINE`` names
   one (a ``git worktree add`` of main, say): ``engine_step.py`` times the
   same workload with each checkout's agentloop, each in a fresh interpreter,
   the two alternating, the best of each.
2. The async driver beside the sync one, both without a token (target: within
   1.25x). With a token the async driver also makes each await interruptible,
   work the sync driver has no way to do.
3. The history copier beside ``copy.deepcopy`` on the K = 100 history
   (target: at least 5x faster).
4. Memory over 100,000 short runs in one process (target: no growth after
   warm-up).
5. ``import agentloop`` in a fresh interpreter (target: at most 150 ms), the
   best of several, beside ``python -c pass``.
6. Replaying a 6,000-event run from its run file (``run_from_json``: parse,
   shape check, replay through a fresh engine) beside ``Loop.run`` making it
   (target: at most 1.5x).

Run with ``make bench``. Ratios are what count; absolute times vary.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from engine_step import Typed, echo, scripted
from targets import verdict

from agentloop import CancelToken, Loop, RunResult, State, ToolRegistry, Transition, Usage
from agentloop._core.messages import History, input_messages, reply_problem, tool_result_json
from agentloop.engine import Budget, Guard
from agentloop.engine import Trigger as T
from agentloop.review import run_from_json, run_to_json

if TYPE_CHECKING:
    from collections.abc import Callable

Message = dict[str, Any]


def contract_loop(
    model: Any, tool: Typed, text: str, max_steps: int, max_calls: int, cancel: CancelToken
) -> list[tuple[str, str, str, int, int]]:
    """The same promises as the engine, written as one loop with tuple events."""
    history = History(input_messages(text)[0])
    steps = calls = 0
    reserved: set[str] = set()
    events: list[tuple[str, str, str, int, int]] = []
    while True:
        if cancel.cancelled:
            events.append(("awaiting_model", "cancelled", "ask_model", steps, calls))
            return events
        if steps >= max_steps:
            events.append(("awaiting_model", "exhausted", "ask_model", steps, calls))
            return events
        steps += 1
        try:
            raw = model(history.copy())
        except Exception:  # noqa: BLE001 - a failing model is a state
            events.append(("awaiting_model", "failed", "model_raised", steps, calls))
            return events
        if cancel.cancelled:
            events.append(("awaiting_model", "cancelled", "model_replied", steps, calls))
            return events
        reply_json = orjson.dumps(raw)
        reply = orjson.loads(reply_json)
        if reply != raw:
            events.append(("validating", "malformed", "validate", steps, calls))
            return events
        events.append(("awaiting_model", "validating", "model_replied", steps, calls))
        if reply_problem(reply):
            events.append(("validating", "malformed", "validate", steps, calls))
            return events
        if reply["kind"] == "final":
            events.append(("validating", "finished", "validate", steps, calls))
            history.extend((reply_json,))
            return events
        if reply["id"] in reserved:
            events.append(("validating", "repeated_call", "validate", steps, calls))
            return events
        if calls >= max_calls:
            events.append(("validating", "exhausted", "validate", steps, calls))
            return events
        if cancel.cancelled:
            events.append(("validating", "cancelled", "validate", steps, calls))
            return events
        reserved.add(reply["id"])
        calls += 1
        events.append(("validating", "dispatching", "validate", steps, calls))
        if cancel.cancelled:
            events.append(("dispatching", "cancelled", "start_tool", steps, calls))
            return events
        outcome = tool.dispatch(orjson.loads(reply_json))
        content = orjson.dumps(outcome["content"])
        result_json = tool_result_json(reply["id"], reply["name"], outcome["status"], content)
        events.append(("dispatching", "awaiting_model", "tool_returned", steps, calls))
        history.extend((reply_json, result_json))


# The engine's own record, kept by hand: what the loop above leaves out.
_new = tuple.__new__
# The fields after ``started`` (what came in, and the newer features' fields): none here.
_AFTER_STARTED = (None,) * (len(Transition._fields) - Transition._fields.index("input_json"))
# RunResult's fields after ``usage``: none of them here either.
# The fields after usage, at their defaults (as a RunResult of a plain run holds them).
_RESULT_REST = tuple(
    RunResult._field_defaults[name]
    for name in RunResult._fields[RunResult._fields.index("usage") + 1 :]
)
_NO_USAGE = Usage()
_AM, _VA, _DI, _FI = State.AWAITING_MODEL, State.VALIDATING, State.DISPATCHING, State.FINISHED
_REPLIED, _VALIDATE, _RETURNED = T.MODEL_REPLIED, T.VALIDATE, T.TOOL_RETURNED
_IS_FINAL = Guard.REPLY_IS_FINAL
_NONE_4, _NONE_6 = (None,) * 4, (None,) * 6


def record_loop(
    model: Any, tool: Typed, text: str, budget: Budget, cancel: CancelToken
) -> RunResult:
    """The loop above, recording each transition as the engine does (a ``Transition``
    with its time, its call, what it appended and how long the model or tool took),
    written out inline, and ending with the engine's ``RunResult``. Only the paths the
    bench takes record their events; the others end the run ``failed``."""
    history = History(input_messages(text)[0])
    steps = calls = 0
    reserved: set[str] = set()
    events: list[Transition] = []
    clock, append = time.monotonic, events.append
    while not cancel.cancelled and steps < budget.max_steps:
        steps += 1
        since = clock()
        raw = model(history.copy())
        at = clock()
        reply_json = orjson.dumps(raw)
        reply = orjson.loads(reply_json)
        if cancel.cancelled or reply != raw or reply_problem(reply):
            break
        # source, dest, trigger, guard, steps, calls, call_id, tool, result_status, reason,
        # error, exception, appended, usage, at, took, pending, decisions, started, and the
        # rest (input_json, context, wait, model, partial_text)
        append(
            _new(
                Transition,
                (
                    _AM,
                    _VA,
                    _REPLIED,
                    None,
                    steps,
                    calls,
                    *_NONE_6,
                    (),
                    None,
                    at,
                    at - since,
                    (),
                    (),
                    (),
                    *_AFTER_STARTED,
                ),
            )
        )
        if reply["kind"] == "final":
            appended: tuple[bytes, ...] = (reply_json,)
            append(
                _new(
                    Transition,
                    (
                        _VA,
                        _FI,
                        _VALIDATE,
                        _IS_FINAL,
                        steps,
                        calls,
                        *_NONE_6,
                        appended,
                        None,
                        clock(),
                        None,
                        (),
                        (),
                        (),
                        *_AFTER_STARTED,
                    ),
                )
            )
            history.extend(appended)
            final = (_FI, reply["text"], steps, calls, budget, None, None, tuple(events))
            return _new(RunResult, (*final, history.to_json(), None, _NO_USAGE, *_RESULT_REST))
        call_id, name = reply["id"], reply["name"]
        if call_id in reserved or calls >= budget.max_calls or cancel.cancelled:
            break
        reserved.add(call_id)
        calls += 1
        append(
            _new(
                Transition,
                (
                    _VA,
                    _DI,
                    _VALIDATE,
                    None,
                    steps,
                    calls,
                    call_id,
                    name,
                    *_NONE_4,
                    (),
                    None,
                    clock(),
                    None,
                    (),
                    (),
                    (),
                    *_AFTER_STARTED,
                ),
            )
        )
        if cancel.cancelled:
            break
        since = clock()
        outcome = tool.dispatch(orjson.loads(reply_json))
        at = clock()
        status = outcome["status"]
        result_json = tool_result_json(call_id, name, status, orjson.dumps(outcome["content"]))
        appended = (reply_json, result_json)
        append(
            _new(
                Transition,
                (
                    _DI,
                    _AM,
                    _RETURNED,
                    None,
                    steps,
                    calls,
                    call_id,
                    name,
                    status,
                    None,
                    None,
                    None,
                    appended,
                    None,
                    at,
                    at - since,
                    (),
                    (),
                    (),
                    *_AFTER_STARTED,
                ),
            )
        )
        history.extend(appended)
    failed = (State.FAILED, None, steps, calls, budget, None, None, tuple(events))
    return _new(RunResult, (*failed, history.to_json(), None, _NO_USAGE, *_RESULT_REST))


def time_per_step(k: int, repeats: int, tools: object) -> tuple[float, ...]:
    """Best µs per model step, interleaved: (engine sync with a token, engine async,
    hand-written with a token, engine sync, hand-written keeping the engine's record),
    the async and plain sync runs without a token."""
    loop = Loop(scripted(k), tools=tools, max_steps=k + 1, max_calls=k)
    typed = Typed(echo)
    runs = max(1, 2000 // (k + 1))
    sync_times, async_times, hand_times, plain_times, record_times = [], [], [], [], []
    budget = Budget(max_steps=k + 1, max_calls=k)  # made once, as a Loop makes it
    kept = record_loop(scripted(k), typed, "go", budget, CancelToken())
    if isinstance(tools, Typed):  # the same record, when the engine has the same tool
        assert kept == loop.run("go", cancel=CancelToken()), "the hand loop's record differs"

    async def async_runs() -> None:
        for _ in range(runs):
            await loop.arun("go")

    runner = asyncio.Runner()
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(runs):
            result = loop.run("go", cancel=CancelToken())
        sync_times.append(time.perf_counter_ns() - start)
        assert result.status == "finished", result
        start = time.perf_counter_ns()
        for _ in range(runs):
            loop.run("go")
        plain_times.append(time.perf_counter_ns() - start)
        start = time.perf_counter_ns()
        runner.run(async_runs())
        async_times.append(time.perf_counter_ns() - start)
        start = time.perf_counter_ns()
        for _ in range(runs):
            events = contract_loop(scripted(k), typed, "go", k + 1, k, CancelToken())
        hand_times.append(time.perf_counter_ns() - start)
        assert events[-1][1] == "finished"
        start = time.perf_counter_ns()
        for _ in range(runs):
            kept = record_loop(scripted(k), typed, "go", budget, CancelToken())
        record_times.append(time.perf_counter_ns() - start)
        assert kept.status == "finished"
    runner.close()
    per_step = runs * (k + 1) * 1000
    return (
        # The fastest of the interleaved repeats: what the code costs when the shared
        # machine lets it run (the median moves with the neighbours' load).
        min(sync_times) / per_step,
        min(async_times) / per_step,
        min(hand_times) / per_step,
        min(plain_times) / per_step,
        min(record_times) / per_step,
    )


def python_copier(value: Any) -> Any:
    """The recursive copier the issue measured, for reference."""
    if isinstance(value, dict):
        return {key: python_copier(item) for key, item in value.items()}
    if isinstance(value, list):
        return [python_copier(item) for item in value]
    return value


def copier(repeats: int = 200) -> dict[str, float]:
    """µs per copy of the K = 100 history, for each copier."""
    result = Loop(scripted(100), tools=Typed(echo), max_steps=101, max_calls=100).run("go")
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


#: The engine's cost per step over the contract loop's at K = 1: an aim (issue 37).
AIM = 4.0
#: The engine's cost per step at most this many times the baseline checkout's (issue 37).
CEILING = 1.1
#: A checkout to measure the ceiling against (``git worktree add /tmp/main main``).
BASELINE = os.environ.get("AGENTLOOP_BASELINE")
ROOT = Path(__file__).resolve().parent.parent
IMPORT_MS = 150.0
REPLAY_RATIO = 1.5


def ceiling(checkout: str, rounds: int) -> dict[int, tuple[float, float]]:
    """Best µs per model step at K = 1 and 10: (this checkout's engine, ``checkout``'s)."""
    script = str(Path(__file__).with_name("engine_step.py"))
    best: dict[str, list[float]] = {"this": [], "baseline": []}
    for turn in range(rounds):
        sides = [("this", str(ROOT)), ("baseline", checkout)]
        for side, path in sides[::-1] if turn % 2 else sides:
            out = subprocess.run(
                [sys.executable, script, path, "20", "1,10"],
                capture_output=True,
                text=True,
                check=True,
            )
            times = [float(us) for us in out.stdout.split()]
            best[side] = [min(pair) for pair in zip(best[side] or times, times, strict=True)]
    return {k: (best["this"][i], best["baseline"][i]) for i, k in enumerate((1, 10))}


def replay_ms(repeats: int) -> tuple[float, float]:
    """Best ms of Loop.run making a 6,000-event run, and of run_from_json replaying it."""
    calls = 2000  # three events a call and two at the end: 6,002 events
    loop = Loop(scripted(calls), tools=Typed(echo), max_steps=calls + 1, max_calls=calls)
    text = run_to_json(loop.run("go"))
    made, replayed = float("inf"), float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        result = loop.run("go")
        made = min(made, (time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        loaded = run_from_json(text)
        replayed = min(replayed, (time.perf_counter() - start) * 1000)
        assert loaded == result
        assert len(result.events) == 6002
    return made, replayed


def import_ms(repeats: int) -> tuple[float, float]:
    """Best wall ms of ``import agentloop`` in a fresh interpreter, and of ``pass``.

    The import's own time is ``-X importtime``'s cumulative figure for the package,
    so interpreter start-up is left out; ``pass`` shows that start-up, for scale.
    """
    best, bare = float("inf"), float("inf")
    for _ in range(repeats):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "import agentloop"],
            capture_output=True,
            text=True,
            check=True,
        )
        line = done.stderr.strip().splitlines()[-1]  # "... | <cumulative µs> | agentloop"
        best = min(best, int(line.split("|")[1]) / 1000)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare = min(bare, (time.perf_counter() - start) * 1000)
    return best, bare


def rss_kib() -> int:
    """The process's current resident set size, in KiB (Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4


def memory(total: int = 100_000, warm_up: int = 10_000) -> tuple[int, int, int]:
    """Run ``total`` short runs; tracemalloc and RSS growth after ``warm_up`` of them."""
    loop = Loop(scripted(1), tools=Typed(echo), max_steps=2, max_calls=1)
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
    """Print the tables; exit 1 if a target is missed."""
    quick = "--quick" in sys.argv
    repeats = 3 if quick else 15
    misses = []
    aimed = float("nan")  # the engine over the contract loop at K = 1, its dispatcher the same
    for label, tools in (
        ("a dispatcher that checks annotations, as the hand-written loops do", Typed(echo)),
        ("the ToolRegistry (JSON Schema validation, conversion, results as JSON)", None),
    ):
        targeted = tools is not None
        dispatcher = tools if tools is not None else ToolRegistry([echo])
        print(f"engine vs the hand-written loops, µs per model step; engine with {label}")
        print(
            f"  {'K':>5} {'engine':>8} {'contract':>9} {'engine/contract':>15}   "
            f"{'record':>8} {'engine/record':>13}   {'async':>8} {'async/sync':>10} {'target':>7}"
        )
        for k in (1, 10, 100, 1000):
            engine, engine_async, hand, plain, record = time_per_step(
                k, repeats if k < 1000 else max(3, repeats // 3), dispatcher
            )
            async_ratio = engine_async / plain
            async_target = "<= 1.25" if targeted and k <= 100 else ""
            if async_target and async_ratio > 1.25:
                misses.append(f"K={k} async/sync {async_ratio:.2f}")
            if targeted and k == 1:
                aimed = engine / hand
            print(
                f"  {k:>5} {engine:>8.2f} {hand:>9.2f} {engine / hand:>15.2f}   "
                f"{record:>8.2f} {engine / record:>13.2f}   "
                f"{engine_async:>8.2f} {async_ratio:>10.2f} {async_target:>7}"
            )
        print()
    print(
        "contract: the hand-written loop keeping the same promises, recording each transition\n"
        "as a 5-tuple; record: the same loop keeping the engine's own record (its events, every\n"
        "field with their times, and the RunResult; equal to the engine's), for information\n"
    )
    print(
        f"aim (issue 37): the engine within {AIM:g}x the contract loop at K=1, with the same\n"
        f"dispatcher: {aimed:.2f}x, {aimed / AIM:.2f} times the aim (reported, never failing)\n"
    )
    if BASELINE:
        print(
            f"the engine beside {BASELINE}'s, µs per model step (fresh interpreters, alternating)"
        )
        for k, (ours, theirs) in ceiling(BASELINE, 3 if quick else 7).items():
            ratio = ours / theirs
            shown = f"{ours:.2f} vs {theirs:.2f} µs: {ratio:.2f}x"
            if not verdict(f"K={k}: at most {CEILING}x the baseline's", ratio, CEILING, shown):
                misses.append(f"K={k} engine/baseline {ratio:.2f}")
    else:
        print("(AGENTLOOP_BASELINE=<a checkout of main> measures the engine's ceiling beside it)")
    print()
    medians = copier(50 if quick else 200)
    speedup = medians["copy.deepcopy"] / medians["History.copy (orjson)"]
    print(f"  History.copy is {speedup:.1f}x faster than copy.deepcopy (target >= 5x)")
    if speedup < 5:
        misses.append(f"copier only {speedup:.1f}x")
    runs, traced, rss = memory(20_000 if quick else 100_000, 2_000 if quick else 10_000)
    print(f"\nmemory over {runs:,} short runs, after warm-up (target: no growth)")
    print(f"  tracemalloc growth: {traced:+,} bytes   RSS growth: {rss:+,} KiB")
    if traced > 64 * 1024:
        misses.append(f"memory grew {traced:,} bytes")
    made, replayed = replay_ms(3 if quick else 7)
    print("\nreplaying a 6,000-event run from its run file, beside Loop.run making it")
    print(
        f"  Loop.run {made:.1f} ms, run_from_json {replayed:.1f} ms: "
        f"{replayed / made:.2f}x (target <= {REPLAY_RATIO})"
    )
    if replayed / made > REPLAY_RATIO:
        misses.append(f"replay {replayed / made:.2f}x")
    imported, bare = import_ms(5 if quick else 15)
    print(f"\nimport agentloop in a fresh interpreter, best of runs (target <= {IMPORT_MS} ms)")
    print(f"  {imported:.1f} ms (python -c pass: {bare:.1f} ms)")
    if imported > IMPORT_MS:
        misses.append(f"import {imported:.0f} ms")
    print("\nall targets met" if not misses else f"\nmissed: {'; '.join(misses)}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
