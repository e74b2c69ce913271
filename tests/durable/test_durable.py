"""Durable runs, in one process: the ledger's records, resume, crashes simulated at every append.

The kill tests (``test_kill.py``) do the same with real processes and
SIGKILL; here a ``CrashingLedger`` "kills" the run at one append by raising
``Crash`` and refusing every later write, which is fast enough to try every
append of many scripts, on both drivers, with Hypothesis drawing them.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import re
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import agentloop
from agentloop._durable.queries import KINDS
from agentloop.ledger import LedgerError, SQLiteLedger
from agentloop.providers import IncompleteReply
from agentloop.testing import ScriptedModel, batch, call, final
from tests.conftest import count
from tests.support.ledgers import (
    Crash,
    CrashingLedger,
    InterruptingLedger,
    MemoryLedger,
    unknown_ids,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

Message = dict[str, Any]
Driver = Literal["sync", "async"]
DRIVERS: list[Driver] = ["sync", "async"]


# -- a world of tools with effects, and a model that answers by the history alone -----------------


class World:
    """Tools whose effects are kept outside the ledger, as an external system keeps them."""

    def __init__(self) -> None:
        self.effects: list[tuple[str, str | None]] = []  # (tool, idempotency key)
        self.ledger: CrashingLedger | None = None
        self.crash_in: str | None = None  # a call id: "die" right after its effect

    def _effect(self, tool: str) -> None:
        key = agentloop.idempotency_key()
        self.effects.append((tool, key))
        if self.ledger is not None and key is not None and key.endswith(f":{self.crash_in}"):
            self.ledger.die()

    def registry(self, driver: Driver = "sync") -> agentloop.ToolRegistry:
        def effect(n: int) -> int:
            """Has an effect."""
            self._effect("effect")
            return 2 * n

        def idem(n: int) -> int:
            """Idempotent."""
            self._effect("idem")
            return 3 * n

        def fail(n: int) -> int:
            """Raises after its effect."""
            self._effect("fail")
            raise ValueError(f"failed on {n}")

        handlers: dict[str, Any] = {"effect": effect, "idem": idem, "fail": fail}
        if driver == "async":
            handlers = {name: _awaiting(fn) for name, fn in handlers.items()}
        return agentloop.ToolRegistry(
            [
                agentloop.Tool(handlers["effect"], name="effect"),
                agentloop.Tool(handlers["idem"], name="idem", idempotent=True),
                agentloop.Tool(handlers["fail"], name="fail"),
            ]
        )


def _awaiting(fn: Any) -> Any:
    async def handler(n: int) -> int:
        await asyncio.sleep(0)
        return fn(n)  # type: ignore[no-any-return]

    handler.__name__ = fn.__name__
    handler.__doc__ = fn.__doc__
    return handler


def by_history(script: Sequence[object]) -> Any:
    """A model that answers by the history, as a real one does: the entry for the replies so far."""

    def model(history: list[Message]) -> object:
        done = sum(1 for m in history if m["kind"] in ("call", "calls", "final"))
        entry = script[done]
        if isinstance(entry, BaseException):
            raise entry
        return entry

    return model


def make_loop(
    script: list[object],
    world: World,
    ledger: agentloop.ledger.Ledger | None,
    driver: Driver = "sync",
    **options: Any,
) -> agentloop.Loop:
    model = by_history(script)
    if driver == "async":
        plain = model

        async def model(history: list[Message]) -> object:
            await asyncio.sleep(0)
            return plain(history)

    options.setdefault("max_steps", len(script) + 1)
    options.setdefault("max_calls", 32)
    options.setdefault("max_concurrency", 1)  # a batch's calls one by one, unless a test says
    return agentloop.Loop(model, tools=world.registry(driver), ledger=ledger, **options)


def go(loop: agentloop.Loop, driver: Driver, run_id: str | None = None) -> agentloop.RunResult:
    if driver == "sync":
        return loop.run("go", run_id=run_id)
    return asyncio.run(loop.arun("go", run_id=run_id))


def resume(loop: agentloop.Loop, driver: Driver, run_id: str) -> agentloop.RunResult:
    if driver == "sync":
        return loop.resume(run_id)
    return asyncio.run(loop.aresume(run_id))


SCRIPT: list[object] = [
    call("c1", "effect", n=1),
    batch(call("c2", "idem", n=2), call("c3", "effect", n=3), call("c4", "fail", n=4), text="3"),
    final("done"),
]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


# -- a durable run is the same run, recorded ------------------------------------------------------


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_durable_run_is_the_run_without_a_ledger(driver: Driver, db: Path) -> None:
    plain = go(make_loop(SCRIPT, World(), None, driver), driver)
    durable = go(make_loop(SCRIPT, World(), SQLiteLedger(db), driver), driver, "r1")
    assert (durable.run_id, plain.run_id) == ("r1", None)  # all the ledger adds to a result
    assert durable._replace(run_id=None) == plain
    assert durable.status == "finished"
    assert durable.calls == 4


@pytest.mark.parametrize("driver", DRIVERS)
def test_resume_of_a_finished_run_returns_its_result(driver: Driver, db: Path) -> None:
    world = World()
    result = go(make_loop(SCRIPT, world, SQLiteLedger(db), driver), driver, "r1")
    ran = list(world.effects)
    again = resume(make_loop(SCRIPT, world, SQLiteLedger(db), driver), driver, "r1")
    assert again == result
    assert again.events == result.events
    assert world.effects == ran  # nothing ran again


def test_the_records_come_before_what_they_record(db: Path) -> None:
    ledger = SQLiteLedger(db)
    make_loop(SCRIPT, World(), ledger).run("go", run_id="r1")
    _, records = ledger.read("r1")
    assert [(r.kind, r.key) for r in records] == [
        ("tool_started", "c1"),  # with the reply that asked for it
        ("tool_finished", "c1"),
        ("tool_started", "c2"),
        ("tool_finished", "c2"),
        ("tool_started", "c3"),
        ("tool_finished", "c3"),
        ("tool_started", "c4"),
        ("tool_finished", "c4"),
        ("end", ""),  # with the final reply
    ]
    # Each record holds the events since the last one, as a run file encodes them.
    started = orjson.loads(records[0].body)
    assert [event["on"] for event in started] == ["model_replied", "validate"]
    assert started[0]["input"] == call("c1", "effect", n=1)
    assert orjson.loads(records[4].body) == []  # c3: its batch's second, with nothing new
    finished = orjson.loads(records[7].body)[-1]
    assert (finished["on"], finished["status"]) == ("tool_returned", "error")
    assert finished["exception"] == {"type": "ValueError", "message": "failed on 4"}
    end = orjson.loads(records[-1].body)
    assert [event["on"] for event in end] == ["model_replied", "validate"]


def test_each_record_is_committed_before_the_engine_acts_on_it(db: Path) -> None:
    """What the ledger holds when the model, the handler and the listeners are called."""
    ledger = SQLiteLedger(db)
    seen: dict[str, list[tuple[str, str]]] = {}

    def records() -> list[tuple[str, str]]:
        return [(r.kind, r.key) for r in ledger.read("r1")[1]]

    def model(history: list[Message]) -> Message:
        seen.setdefault("model", records())
        return call("c1", "probe") if len(history) == 1 else final("ok")

    def probe() -> str:
        seen["handler"] = records()
        return "x"

    def listener(t: agentloop.Transition) -> None:
        if t.call_id == "c1":
            seen["after the call"] = records()

    loop = agentloop.Loop(model, tools={"probe": probe}, ledger=ledger, listeners=[listener])
    loop.run("go", run_id="r1")
    assert seen["model"] == []
    assert seen["handler"] == [("tool_started", "c1")]  # with the reply that asked for it
    assert seen["after the call"][-1] == ("tool_finished", "c1")


def test_a_run_id_is_made_when_none_is_given(db: Path) -> None:
    loop = make_loop(SCRIPT, World(), SQLiteLedger(db))
    first, second = loop.start("go"), loop.start("go")
    assert first.run_id
    assert re.fullmatch(r"[0-9a-f]{32}", first.run_id)
    assert second.run_id != first.run_id
    assert first.finish() == loop.resume(first.run_id)
    assert make_loop(SCRIPT, World(), None).start("go").run_id is None
    assert SQLiteLedger(db).run_ids() == [first.run_id, second.run_id]
    assert SQLiteLedger(db).run_ids(finished=False) == [second.run_id]
    assert SQLiteLedger(db).run_ids(finished=True) == [first.run_id]


def test_the_id_of_a_run_is_known_before_it_runs(db: Path) -> None:
    """start/astart give the id, recorded before the model is asked; the result has it too."""
    ledger = SQLiteLedger(db)
    seen: list[list[str]] = []

    def model(history: list[Message]) -> Message:
        seen.append(ledger.run_ids(finished=False))
        return final("ok")

    loop = agentloop.Loop(model, ledger=ledger)
    run = loop.start("go")
    assert run.run_id is not None
    assert ledger.run_ids(finished=False) == [run.run_id]
    assert run.finish() == loop.resume(run.run_id)
    assert run.result().run_id == run.run_id
    arun = loop.astart("go")
    assert arun.run_id is not None
    assert asyncio.run(arun.afinish()).run_id == arun.run_id
    assert seen == [[run.run_id], [arun.run_id]]
    assert ledger.run_ids(finished=True) == [run.run_id, arun.run_id]


def test_run_ids_and_ledgers_are_checked(db: Path) -> None:
    loop = make_loop(SCRIPT, World(), SQLiteLedger(db))
    loop.run("go", run_id="taken")
    with pytest.raises(
        agentloop.ledger.RunExistsError, match=r"run 'taken' is already recorded.*resume"
    ):
        loop.run("go", run_id="taken")
    with pytest.raises(agentloop.ledger.RunNotFoundError, match=r"no run 'nope' is recorded"):
        loop.resume("nope")
    # A run id is any non-empty text: the wrong type is a TypeError, the wrong str a ValueError.
    empty = r"^expected run_id to be a non-empty str \(say 'order-42'\), got '': leave run_id out"
    with pytest.raises(ValueError, match=empty):
        loop.start("go", run_id="")
    with pytest.raises(ValueError, match=empty):
        loop.resume("")
    with pytest.raises(ValueError, match=r"run_id to be text .*got '\\ud800'"):
        loop.start("go", run_id="\ud800")
    with pytest.raises(TypeError, match=r"^resume\(\) expected a run id \(a str\) or .*, got int$"):
        loop.resume(3)  # type: ignore[arg-type]
    assert loop.run("go", run_id=" ").status == "finished"  # odd, and still text
    plain = make_loop(SCRIPT, World(), None)
    with pytest.raises(
        ValueError, match=r"run_id= names a run in a ledger, and this Loop has none"
    ):
        plain.start("go", run_id="x")
    with pytest.raises(ValueError, match=r"resume needs a ledger"):
        plain.resume("x")
    with pytest.raises(TypeError, match=r"expected ledger to be a Ledger"):
        agentloop.Loop(by_history(SCRIPT), ledger="runs.db")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match=r"'FULL' or 'NORMAL'"):
        SQLiteLedger(db, synchronous="OFF")  # type: ignore[arg-type]


def test_a_new_run_id_has_no_colon_so_idempotency_keys_never_collide(db: Path) -> None:
    """Run 'a:b' with call 'c' and run 'a' with call 'b:c' would share the key 'a:b:c'."""
    ledger = SQLiteLedger(db)
    loop = make_loop(SCRIPT, World(), ledger)
    with pytest.raises(ValueError, match=r"^expected a new run's id without ':', got 'a:b'"):
        loop.start("go", run_id="a:b")
    with pytest.raises(ValueError, match="without ':'"):
        loop.run("go", run_id="order:42")
    assert ledger.run_ids() == []
    # A recorded run is looked up by any id: one with a ':' is simply not there.
    with pytest.raises(agentloop.ledger.RunNotFoundError, match=r"no run 'a:b' is recorded"):
        loop.resume("a:b")
    assert loop.run("go", run_id="order-42").status == "finished"


def test_bad_input_is_refused_before_anything_is_recorded(db: Path) -> None:
    ledger = SQLiteLedger(db)
    with pytest.raises(TypeError):
        make_loop(SCRIPT, World(), ledger).start([{"no kind": 1}], run_id="bad")
    assert ledger.run_ids() == []


def test_resume_awaits_an_async_loop_and_refuses_an_asyncio_only_one(db: Path) -> None:
    """loop.resume drives a Loop of async model and tools (once refused) on the run's own event
    loop, each tool seeing its call's idempotency key; to_thread still needs aresume."""
    make_loop(SCRIPT, World(), SQLiteLedger(db)).start("go", run_id="r1")
    gc.collect()
    world = World()
    result = make_loop(SCRIPT, world, SQLiteLedger(db), "async").resume("r1")
    assert (result.status, result.output) == ("finished", "done")
    assert world.effects == [
        ("effect", "r1:c1"),
        ("idem", "r1:c2"),
        ("effect", "r1:c3"),
        ("fail", "r1:c4"),
    ]
    gc.collect()
    loop = make_loop(SCRIPT, World(), SQLiteLedger(db), to_thread=True)
    with pytest.raises(ValueError, match=r"^to_thread needs the asyncio driver \(loop.aresume\)"):
        loop.resume("r1")


# -- crashes at every append ----------------------------------------------------------------------


def appends_of(script: list[object], driver: Driver, **options: Any) -> int:
    memory = MemoryLedger()
    go(make_loop(script, World(), memory, driver, **options), driver, "count")
    return memory.appends


def crash_and_resume(
    script: list[object],
    driver: Driver,
    *,
    at: int = 0,
    when: Literal["before", "after"] = "before",
    crash_in: str | None = None,
    **options: Any,
) -> tuple[agentloop.RunResult, World, MemoryLedger]:
    """Run until the crash, then resume in a "new process" (a new Loop, the same ledger)."""
    memory, world = MemoryLedger(), World()
    crashing = CrashingLedger(memory, at, when)
    world.ledger, world.crash_in = crashing, crash_in
    try:
        go(make_loop(script, world, crashing, driver, **options), driver, "r1")
    except (Crash, LedgerError):
        # After its death a real process does nothing; here, concurrent calls may go on
        # for a moment, and every write they try is refused.
        assert crashing.dead
    else:
        assert at == 0, "the crash point was never reached"
        assert crash_in is None, "the crash point was never reached"
    world.ledger = None
    result = resume(make_loop(script, world, memory, driver, **options), driver, "r1")
    return result, world, memory


def check_against_baseline(
    result: agentloop.RunResult,
    world: World,
    script: list[object],
    driver: Driver,
    **options: Any,
) -> set[str]:
    """The resumed run is the uninterrupted one, but for unknown outcomes; effects at most once."""
    baseline = go(make_loop(script, World(), None, driver, **options), driver)
    assert (result.status, result.steps, result.calls, result.output) == (
        baseline.status,
        baseline.steps,
        baseline.calls,
        baseline.output,
    )
    unknown = unknown_ids(result.transcript, baseline.transcript, {"idem"})
    results = {m["id"]: m for m in result.transcript if m["kind"] == "tool_result"}
    counts: dict[tuple[str, str | None], int] = {}
    for effect in world.effects:
        counts[effect] = counts.get(effect, 0) + 1
    for call_id, message in results.items():
        key = f"r1:{call_id}"
        ran = counts.get((message["name"], key), 0)
        if message["name"] == "idem":
            assert ran >= 1, f"idempotent {call_id} never ran"  # deduplicated by its key
            assert message["status"] == "ok"
        else:
            assert ran <= 1, f"{call_id} ran {ran} times"
            if call_id not in unknown:
                assert ran == 1, f"{call_id} has a result but never ran"
    return unknown


@pytest.mark.parametrize(
    ("driver", "concurrency"), [("sync", 1), ("async", 1), ("async", 3)], ids=str
)
def test_a_crash_at_any_append_resumes_to_the_same_run(driver: Driver, concurrency: int) -> None:
    options = {"max_concurrency": concurrency}
    total = appends_of(SCRIPT, driver, **options)
    assert total == 9  # two a call (its start, with the reply, and its outcome), and the end
    seen_unknown = set()
    for at in range(1, total + 1):
        for when in ("before", "after"):
            result, world, memory = crash_and_resume(SCRIPT, driver, at=at, when=when, **options)  # type: ignore[arg-type]
            seen_unknown |= check_against_baseline(result, world, SCRIPT, driver, **options)
            assert resume(make_loop(SCRIPT, world, memory, driver, **options), driver, "r1") == (
                result
            )
    assert seen_unknown == {"c1", "c3", "c4"}  # idem (c2) is run again instead


@pytest.mark.parametrize(
    ("driver", "concurrency"), [("sync", 1), ("async", 1), ("async", 3)], ids=str
)
def test_an_interrupt_as_a_record_is_written_leaves_a_record_that_resumes(
    driver: Driver, concurrency: int
) -> None:
    """A KeyboardInterrupt before or after any append's commit: the run stops with it and
    holds no claim, and its record resumes to the uninterrupted run, each call at most once
    (an interrupt after the commit left records the run in memory had refused)."""
    options = {"max_concurrency": concurrency}
    for at in range(1, appends_of(SCRIPT, driver, **options) + 1):
        for when in ("before", "after"):
            memory, world = MemoryLedger(), World()
            interrupting = InterruptingLedger(memory, at, when)
            with pytest.raises(KeyboardInterrupt):
                go(make_loop(SCRIPT, world, interrupting, driver, **options), driver, "r1")
            assert memory.claimed == set(), (at, when)
            result = resume(make_loop(SCRIPT, world, memory, driver, **options), driver, "r1")
            check_against_baseline(result, world, SCRIPT, driver, **options)


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("call_id", ["c1", "c2", "c3", "c4"])
def test_a_crash_inside_a_tool_after_its_effect(driver: Driver, call_id: str) -> None:
    result, world, _ = crash_and_resume(SCRIPT, driver, crash_in=call_id)
    unknown = check_against_baseline(result, world, SCRIPT, driver)
    if call_id == "c2":  # idempotent: run again, under the same key
        assert unknown == set()
        assert world.effects.count(("idem", "r1:c2")) == 2
    else:
        assert unknown == {call_id}
        message = next(m for m in result.transcript if m.get("id") == call_id and "status" in m)
        assert message["content"]["message"] == (
            "the process stopped while this call ran, so whether it took effect is unknown; "
            "it was not run again"
        )


def test_the_idempotency_key_is_the_same_in_every_process() -> None:
    _, world, _ = crash_and_resume(SCRIPT, "sync", crash_in="c2")
    assert [key for tool, key in world.effects if tool == "idem"] == ["r1:c2", "r1:c2"]


def test_an_unknown_outcome_is_recorded_and_kept_on_the_next_resume() -> None:
    memory, world = MemoryLedger(), World()
    crashing = CrashingLedger(memory, 0)
    world.ledger, world.crash_in = crashing, "c1"
    with pytest.raises(Crash):
        make_loop(SCRIPT, world, crashing).run("go", run_id="r1")
    # The next process crashes too, right after recording the unknown outcome.
    again = CrashingLedger(memory, 1, "after")
    with pytest.raises(Crash):
        make_loop(SCRIPT, World(), again).resume("r1")
    finished = [r for r in memory.records["r1"] if r.kind == "tool_finished"]
    assert orjson.loads(finished[0].body)[-1]["input"]["type"] == "OutcomeUnknown"
    result = make_loop(SCRIPT, World(), memory).resume("r1")
    assert result.transcript[2]["content"]["type"] == "OutcomeUnknown"
    assert [tool for tool, _ in world.effects] == ["effect"]  # c1 ran once, in the first process


def test_decisions_for_a_run_whose_end_is_unrecorded_are_refused_and_record_nothing() -> None:
    """A run that ended before its end was written, resumed with decisions: refused as any
    ended run is, and the ledger is left as it was; resumed without, its end is written."""
    memory = MemoryLedger()
    checked: dict[str, Any] = {"output_validators": [lambda text: None]}  # recorded with it
    with pytest.raises(Crash):  # dies as the end is about to be recorded
        make_loop([final("done")], World(), CrashingLedger(memory, 2), **checked).run(
            "go", run_id="r1"
        )
    before = list(memory.records["r1"])
    assert [record.kind for record in before] == ["output_checked"]
    loop = make_loop([final("done")], World(), memory, **checked)
    with pytest.raises(agentloop.InvalidStateError, match=r"run 'r1' ended 'finished'"):
        loop.resume("r1", decisions={"c1": agentloop.approve()})
    assert memory.records["r1"] == before
    assert loop.resume("r1").output == "done"
    assert [record.kind for record in memory.records["r1"]] == ["output_checked", "end"]


def test_every_refused_operation_leaves_the_ledger_as_it_was() -> None:
    """Starting, continuing, resuming or forking refused for any reason records nothing."""
    memory = MemoryLedger()
    asks = agentloop.ToolRegistry(
        [agentloop.Tool(lambda n: n, name="effect", policy=lambda c: agentloop.ask("a person"))]
    )
    paused = agentloop.Loop(by_history([call("c1", "effect", n=1)]), tools=asks, ledger=memory)
    assert paused.run("go", run_id="paused").status == "awaiting_approval"
    failing = make_loop([ValueError("down")], World(), memory)
    assert failing.run("go", run_id="failed").status == "failed"
    done = make_loop([final("done")], World(), memory)
    finished = done.run("go", run_id="finished")
    other = make_loop([final("done")], World(), memory, max_steps=3)
    tight = make_loop([final("done")], World(), memory, max_steps=0)

    def snapshot() -> dict[str, tuple[bytes, list[Any]]]:
        return {run_id: memory.read(run_id) for run_id in memory.headers}

    before = snapshot()
    refusals: list[tuple[Any, type[Exception]]] = [
        (lambda: done.run("go", run_id="a:b"), ValueError),
        (lambda: done.run("go", run_id="finished"), agentloop.ledger.RunExistsError),
        (lambda: done.start("go", run_id=""), ValueError),
        (lambda: done.continue_run("paused"), agentloop.InvalidStateError),
        (lambda: done.continue_run("finished"), ValueError),
        (lambda: done.continue_run("failed", run_id="x:y"), ValueError),
        (lambda: done.continue_run("failed", continues="p"), ValueError),
        (lambda: paused.resume("paused", decisions={"c9": agentloop.approve()}), ValueError),
        (lambda: paused.resume("paused", decisions={}), ValueError),
        (lambda: done.resume("finished", decisions={}), agentloop.InvalidStateError),
        (lambda: other.resume("failed"), agentloop.ConfigurationMismatchError),
        (lambda: done.fork(finished, at=99, run_id="fork"), ValueError),
        (lambda: tight.fork(finished, at=2, run_id="fork"), ValueError),
    ]
    for refused, kind in refusals:
        with pytest.raises(kind):
            refused()
        assert snapshot() == before
        assert not memory.claimed  # and no claim is left behind


# -- random scripts, random crash points ----------------------------------------------------------

TOOLS = ("effect", "idem", "fail")


@st.composite
def durable_scripts(draw: st.DrawFn) -> list[object]:
    """Batches of one to four calls to the three tools, sometimes text beside them, then a final."""
    script: list[object] = []
    number = 0
    for step in range(draw(st.integers(0, 4))):
        calls = []
        for _ in range(draw(st.integers(1, 4))):
            number += 1
            calls.append(call(f"s{step}c{number}", draw(st.sampled_from(TOOLS)), n=number))
        if len(calls) == 1 and draw(st.booleans()):
            script.append(calls[0])
        else:
            script.append(batch(*calls, text=draw(st.sampled_from([None, "t"]))))
    script.append(final("done"))
    return script


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    script=durable_scripts(),
    driver=st.sampled_from(DRIVERS),
    concurrency=st.sampled_from([1, 2, 4]),
    point=st.floats(0, 1),
    when=st.sampled_from(["before", "after"]),
)
def test_random_crash_points_resume_to_the_same_run(
    script: list[object], driver: Driver, concurrency: int, point: float, when: str
) -> None:
    options = {"max_concurrency": concurrency if driver == "async" else 1}
    total = appends_of(script, driver, **options)
    at = min(total, 1 + int(point * total))
    result, world, memory = crash_and_resume(script, driver, at=at, when=when, **options)  # type: ignore[arg-type]
    check_against_baseline(result, world, script, driver, **options)
    assert resume(make_loop(script, world, memory, driver, **options), driver, "r1") == result


# -- ends that the records alone do not explain: cancellation, interruptions ----------------------


def ended_the_same(loop: agentloop.Loop, result: agentloop.RunResult, driver: Driver) -> None:
    again = resume(loop, driver, "r1")
    assert again == result
    assert again.rejected == result.rejected


def test_resume_of_runs_cancelled_and_interrupted_anywhere(db: Path) -> None:
    from agentloop.testing import ScriptedModel, cancel

    def loop_of(model: Any, **options: Any) -> agentloop.Loop:
        registry = World().registry()
        return agentloop.Loop(model, tools=registry, ledger=SQLiteLedger(db), **options)

    cases: list[tuple[str, Any, agentloop.CancelToken | None, dict[str, Any]]] = []
    working = agentloop.CancelToken()
    cases.append(
        ("while the model worked", [cancel(working), call("c1", "effect", n=1)], working, {})
    )
    before = agentloop.CancelToken()
    before.cancel()
    cases.append(("before the model", [final("x")], before, {}))
    cases.append(("exhausted", [call("c1", "effect", n=1)] * 3, None, {"max_steps": 1}))
    cases.append(("malformed", [object()], None, {}))
    cases.append(("failed", [RuntimeError("down")], None, {}))
    cases.append(("repeated", [call("c1", "effect", n=1), call("c1", "effect", n=1)], None, {}))
    cases.append(("too many calls", [SCRIPT[1]], None, {"max_calls": 2}))
    for name, script, token, options in cases:
        db.unlink(missing_ok=True)
        result = loop_of(ScriptedModel(script), **options).run("go", cancel=token, run_id="r1")
        assert result.status != "finished", name
        ended_the_same(loop_of(ScriptedModel([]), **options), result, "sync")


def test_usage_is_recorded_with_the_reply_and_with_a_failed_call(db: Path) -> None:
    """A reply's usage, and what a failed model call still cost, come back on resume."""
    used = {"input_tokens": 50, "output_tokens": 10, "cached_tokens": 0}
    script: list[object] = [
        call("c1", "effect", n=1) | {"usage": used},
        IncompleteReply("the reply was cut off at max_tokens", usage=used),
    ]
    result = make_loop(script, World(), SQLiteLedger(db)).run("go", run_id="r1")
    assert result.status == "failed"
    assert result.usage.total == 120
    assert make_loop(script, World(), SQLiteLedger(db)).resume("r1") == result
    # Out of tokens: the third step is never asked for, on resume either.
    db.unlink()
    script = [call(f"c{i}", "effect", n=i) | {"usage": used} for i in range(1, 4)]
    result = make_loop(script, World(), SQLiteLedger(db), max_total_tokens=100).run(
        "go", run_id="r2"
    )
    assert result.reason == "max_total_tokens"
    again = make_loop(script, World(), SQLiteLedger(db), max_total_tokens=100).resume("r2")
    assert again == result
    assert again.usage == result.usage


def test_resume_of_a_run_cancelled_mid_batch(db: Path) -> None:
    token = agentloop.CancelToken()
    registry = agentloop.ToolRegistry()

    @registry.tool
    def stop(n: int) -> int:
        """Cancels the run."""
        token.cancel()
        return n

    script = [batch(call("c1", "stop", n=1), call("c2", "stop", n=2)), final("x")]
    loop = agentloop.Loop(by_history(script), tools=registry, ledger=SQLiteLedger(db))
    result = loop.run("go", cancel=token, run_id="r1")
    assert result.events[-1].guard == "cancel_requested_mid_batch"
    assert [m.get("status") for m in result.transcript[2:]] == ["ok", "cancelled"]
    ended_the_same(loop, result, "sync")


@pytest.mark.parametrize("where", ["tool", "listener"])
def test_resume_of_a_run_interrupted(db: Path, where: str) -> None:
    registry = agentloop.ToolRegistry()

    @registry.tool
    def stop() -> int:
        """Interrupts."""
        if where == "tool":
            raise KeyboardInterrupt
        return 1

    def listener(t: agentloop.Transition) -> None:
        if where == "listener" and t.call_id == "c1":
            raise KeyboardInterrupt

    script = [call("c1", "stop"), final("x")]
    loop = agentloop.Loop(
        by_history(script), tools=registry, ledger=SQLiteLedger(db), listeners=[listener]
    )
    run = loop.start("go", run_id="r1")
    with pytest.raises(KeyboardInterrupt):
        run.finish()
    result = run.result()
    assert result.status == "cancelled"
    quiet = agentloop.Loop(by_history(script), tools=registry, ledger=SQLiteLedger(db))
    ended_the_same(quiet, result, "sync")


@pytest.mark.parametrize("how", ["token", "task"])
def test_resume_of_async_runs_cancelled_while_tools_ran(db: Path, how: str) -> None:
    """The token or the task, while concurrent calls are awaited: cut-off calls replay as such."""
    token = agentloop.CancelToken()
    started = asyncio.Event()

    async def slow(n: int) -> int:
        if n == 1:
            return n
        started.set()
        await asyncio.sleep(10)
        return n

    script = [batch(*(call(f"c{i}", "slow", n=i) for i in range(1, 5))), final("x")]

    def loop_of() -> agentloop.Loop:
        return agentloop.Loop(
            by_history(script), tools={"slow": slow}, ledger=SQLiteLedger(db), max_concurrency=2
        )

    async def main() -> agentloop.RunResult:
        run = loop_of().astart("go", cancel=token, run_id="r1")
        task = asyncio.ensure_future(_drive(run))
        await started.wait()
        if how == "token":
            token.cancel()
        else:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return run.result()

    result = asyncio.run(main())
    assert result.status == "cancelled"
    assert "cancelled" in [m.get("status") for m in result.transcript]
    assert asyncio.run(loop_of().aresume("r1")) == result


async def _drive(run: agentloop.AsyncRun) -> None:
    async for _ in run:
        pass


def test_concurrent_calls_replay_in_the_order_they_finished(db: Path) -> None:
    async def slow(n: int) -> int:
        for _ in range(n):
            await asyncio.sleep(0)
        return n

    script = [
        batch(call("a", "slow", n=9), call("b", "slow", n=1), call("c", "slow", n=3)),
        final("x"),
    ]

    def loop_of() -> agentloop.Loop:
        return agentloop.Loop(
            by_history(script), tools={"slow": slow}, ledger=SQLiteLedger(db), max_concurrency=3
        )

    result = asyncio.run(loop_of().arun("go", run_id="r1"))
    assert [t.call_id for t in result.events if t.call_id] == ["b", "c", "a"]
    assert asyncio.run(loop_of().aresume("r1")).events == result.events

    def slow_in_place(n: int) -> int:  # the same tool for the sync driver, which cannot await
        return n

    tools = {"slow": slow_in_place}
    one_by_one = agentloop.Loop(by_history(script), tools=tools, ledger=SQLiteLedger(db))
    assert one_by_one.resume("r1").events == result.events


def _slow_registry(
    idempotent: bool, *, sync: bool = False, turns: dict[int, int] | None = None
) -> agentloop.ToolRegistry:
    """One tool, ``slow(n)``: ``turns[n]`` (default ``n``) turns of the event loop, then ``n``.

    With ``sync``, a plain function that returns at once.
    """

    async def slow(n: int) -> int:
        for _ in range((turns or {}).get(n, n)):
            await asyncio.sleep(0)
        return n

    def quick(n: int) -> int:
        return n

    return agentloop.ToolRegistry(
        [agentloop.Tool(quick if sync else slow, name="slow", idempotent=idempotent)]
    )


# b finishes first, then c, then a; the crash comes right after b's tool_finished, the fourth
# append (three tool_started, the first with the reply, then b's), while a and c still run.
MID_BATCH = [
    batch(call("a", "slow", n=9), call("b", "slow", n=1), call("c", "slow", n=3)),
    final("x"),
]


@pytest.mark.parametrize("resumer", ["async, 3 at once", "async, 1 at once", "sync"])
@pytest.mark.parametrize("idempotent", [False, True], ids=["at most once", "idempotent"])
def test_a_crash_while_an_earlier_call_ran_resumes_as_the_ended_run_reads_back(
    idempotent: bool, resumer: str
) -> None:
    memory = MemoryLedger()
    crashing = CrashingLedger(memory, 4, "after")
    first = agentloop.Loop(
        by_history(MID_BATCH), tools=_slow_registry(idempotent), ledger=crashing, max_concurrency=3
    )
    with pytest.raises((Crash, LedgerError)):
        asyncio.run(first.arun("go", run_id="r1"))
    assert [(r.kind, r.key) for r in memory.records["r1"]][-1] == ("tool_finished", "b")

    def again() -> agentloop.RunResult:
        if resumer == "sync":
            loop = agentloop.Loop(
                by_history(MID_BATCH), tools=_slow_registry(idempotent, sync=True), ledger=memory
            )
            return loop.resume("r1")
        loop = agentloop.Loop(
            by_history(MID_BATCH),
            tools=_slow_registry(idempotent),
            ledger=memory,
            max_concurrency=3 if resumer.startswith("async, 3") else 1,
        )
        return asyncio.run(loop.aresume("r1"))

    live = again()
    assert live.status == "finished"
    read_back = again()
    assert read_back.events == live.events
    assert read_back == live
    # b was reported before the crash, so it comes first, as in the run that was cut short;
    # then a and c as this process reported them, in the order it recorded them.
    reported = [t.call_id for t in live.events if t.call_id]
    recorded = [r.key for r in memory.records["r1"] if r.kind == "tool_finished"]
    assert reported == recorded
    assert reported[0] == "b"
    expected = ["b", "c", "a"] if idempotent and resumer.startswith("async, 3") else ["b", "a", "c"]
    assert reported == expected
    # An uninterrupted run whose calls finish in that order is the same run, but for the
    # outcomes left unknown.
    n = {"a": 9, "b": 1, "c": 3}
    turns = {n[call_id]: 1 + 8 * place for place, call_id in enumerate(expected)}
    baseline = asyncio.run(
        agentloop.Loop(
            by_history(MID_BATCH),
            tools=_slow_registry(idempotent, turns=turns),
            max_concurrency=3,
        ).arun("go")
    )
    assert [t.call_id for t in baseline.events if t.call_id] == expected
    rows = [
        (t.source, t.trigger, t.guard, t.dest, t.call_id, t.steps, t.calls) for t in live.events
    ]
    assert rows == [
        (t.source, t.trigger, t.guard, t.dest, t.call_id, t.steps, t.calls) for t in baseline.events
    ]
    unknown = unknown_ids(live.transcript, baseline.transcript, {"slow"} if idempotent else set())
    assert unknown == (set() if idempotent else {"a", "c"})


def test_a_run_cancelled_while_an_earlier_call_ran_reads_back(db: Path) -> None:
    """b is reported, then the token cancels the run while a and c run: resume reads it."""
    token = agentloop.CancelToken()

    async def slow(n: int) -> int:
        if n != 2:
            await asyncio.sleep(10)
        return n

    script = [batch(*(call(f"c{i}", "slow", n=i) for i in range(1, 4))), final("x")]

    def loop_of() -> agentloop.Loop:
        return agentloop.Loop(
            by_history(script), tools={"slow": slow}, ledger=SQLiteLedger(db), max_concurrency=3
        )

    async def main() -> agentloop.RunResult:
        run = loop_of().astart("go", cancel=token, run_id="r1")
        async for transition in run:
            if transition.call_id == "c2":
                token.cancel()
        return run.result()

    result = asyncio.run(main())
    assert result.status == "cancelled"
    assert [t.call_id for t in result.events if t.call_id] == ["c2", "c1"]
    assert asyncio.run(loop_of().aresume("r1")) == result


# -- the idempotency key --------------------------------------------------------------------------


def test_idempotency_key_inside_and_outside_durable_runs(db: Path) -> None:
    keys: list[str | None] = []

    def note() -> int:
        keys.append(agentloop.idempotency_key())
        return 1

    async def anote() -> int:
        keys.append(agentloop.idempotency_key())
        await asyncio.sleep(0)
        keys.append(agentloop.idempotency_key())
        return 1

    script = [batch(call("c1", "note"), call("c2", "note")), final("x")]
    agentloop.Loop(by_history(script), tools={"note": note}, ledger=SQLiteLedger(db)).run(
        "go", run_id="s"
    )
    assert keys == ["s:c1", "s:c2"]
    assert agentloop.idempotency_key() is None
    keys.clear()
    agentloop.Loop(by_history(script), tools={"note": note}).run("go")
    assert keys == [None, None]
    for concurrency, tools, to_thread in [(1, note, True), (2, anote, False), (1, anote, False)]:
        keys.clear()
        run_id = f"a{concurrency}{to_thread}{tools.__name__}"
        loop = agentloop.Loop(
            by_history(script),
            tools={"note": tools},
            ledger=SQLiteLedger(db),
            max_concurrency=concurrency,
            to_thread=to_thread,
        )
        asyncio.run(loop.arun("go", run_id=run_id))
        assert sorted(k for k in keys if k) == sorted(
            {f"{run_id}:c1", f"{run_id}:c2"}
            if tools is note
            else [f"{run_id}:c1"] * 2 + [f"{run_id}:c2"] * 2
        )
        assert None not in keys


def test_tool_idempotent_is_checked_and_declared() -> None:
    with pytest.raises(TypeError, match=r"tool 'f': expected idempotent to be a bool, got int"):
        agentloop.Tool(lambda: 1, name="f", idempotent=1)  # type: ignore[call-overload]
    registry = agentloop.ToolRegistry()

    @registry.tool(idempotent=True)
    def pay(cents: int) -> int:
        """Pays."""
        return cents

    assert registry["pay"].idempotent is True
    assert agentloop.Tool(pay).idempotent is False


# -- the configuration fingerprint ----------------------------------------------------------------


def test_resume_refuses_another_configuration_saying_what_differs(db: Path) -> None:
    world = World()
    make_loop(SCRIPT, world, SQLiteLedger(db), max_steps=2).start("go", run_id="r1")
    gc.collect()

    def other(**changes: Any) -> agentloop.Loop:
        return agentloop.Loop(
            by_history(SCRIPT),
            ledger=SQLiteLedger(db),
            **{"max_steps": 2, "max_calls": 32} | changes,
        )

    registry = World().registry()
    with pytest.raises(agentloop.ConfigurationMismatchError) as caught:
        other(max_steps=5, tools=registry).resume("r1")
    assert caught.value.differences == ["budget.max_steps: recorded 2, now 5"]
    with pytest.raises(agentloop.ConfigurationMismatchError) as caught:
        other(max_total_tokens=100, tools=registry).resume("r1")
    assert caught.value.differences == ["budget.max_total_tokens: recorded None, now 100"]

    def effect(n: str) -> str:
        return n

    changed = agentloop.ToolRegistry(
        [
            agentloop.Tool(effect, name="effect"),  # n is a str now
            agentloop.Tool(lambda n: n, name="idem"),  # no longer idempotent; no annotation
            agentloop.Tool(lambda: 1, name="new.one"),
        ]
    )
    with pytest.raises(agentloop.ConfigurationMismatchError) as caught:
        other(tools=changed).resume("r1")
    assert caught.value.differences == [
        "tools.effect.parameters.properties.n.type: recorded 'integer', now 'string'",
        "tools.fail: recorded, missing now",
        "tools.idem.idempotent: recorded True, now False",
        "tools.idem.parameters.properties.n.type: recorded 'integer', missing now",
        "tools['new.one']: not recorded, present now",
    ]
    assert (
        "was recorded with another configuration than this Loop's: "
        "tools.effect.parameters.properties.n.type: recorded 'integer', now 'string'; "
        "tools.fail: recorded, missing now; "
    ) in str(caught.value)

    class Custom:
        def dispatch(self, call: Message) -> Message:
            return {"status": "ok", "content": None}

    with pytest.raises(
        agentloop.ConfigurationMismatchError,
        match=r"dispatcher: not recorded, now 'tests.durable.test_durable.[^']*Custom'; "
        r"tools: recorded, missing now$",
    ):
        other(tools=Custom()).resume("r1")
    assert other(tools=World().registry()).resume("r1").status == "exhausted"


def find(place: str) -> str:
    """Find a place."""
    return f"found {place}"


def find_documented(place: str) -> str:
    """Find a place.

    Args:
        place: Where to look.
    """
    return f"found {place}"


def test_a_parameter_description_that_changed_is_no_other_configuration(db: Path) -> None:
    """Descriptions are words for the model: a run recorded without one resumes with one
    (a docstring's, say); a type that changed is still refused."""
    script = [call("c1", "find", place="Lyon"), final("there")]
    run = agentloop.Loop(ScriptedModel(script), tools=[find], ledger=SQLiteLedger(db)).start(
        "go", run_id="r1"
    )
    for _ in range(3):  # the reply, its check and the call: recorded with the call's start
        run.step()
    del run
    gc.collect()

    def typed(place: int) -> str:
        """Find a place.

        Args:
            place: Where to look.
        """
        return str(place)

    with pytest.raises(agentloop.ConfigurationMismatchError) as caught:
        agentloop.Loop(
            ScriptedModel([]), tools=[agentloop.Tool(typed, name="find")], ledger=SQLiteLedger(db)
        ).resume("r1")
    assert caught.value.differences == [
        "tools.find.parameters.properties.place.type: recorded 'string', now 'integer'"
    ]
    documented = agentloop.Tool(find_documented, name="find")
    assert documented.parameters["properties"]["place"]["description"] == "Where to look."
    again = agentloop.Loop(
        ScriptedModel(script[1:]), tools=[documented], ledger=SQLiteLedger(db)
    ).resume("r1")
    assert (again.status, again.output, again.calls) == ("finished", "there", 1)


# -- one writer per run ---------------------------------------------------------------------------


def test_one_writer_per_run_in_one_process(db: Path) -> None:
    loop = make_loop(SCRIPT, World(), SQLiteLedger(db))
    run = loop.start("go", run_id="r1")
    run.step()
    with pytest.raises(
        agentloop.ledger.RunBusyError, match=r"run 'r1' is being driven in this process"
    ):
        loop.resume("r1")
    with pytest.raises(agentloop.ledger.RunBusyError):  # another ledger object on the same file too
        make_loop(SCRIPT, World(), SQLiteLedger(db)).resume("r1")
    del run
    gc.collect()  # an abandoned run frees its claim
    assert loop.resume("r1").status == "finished"
    assert loop.resume("r1").status == "finished"  # an ended run is only read: no claim


def test_a_failed_write_stops_the_run_and_frees_it(db: Path) -> None:
    class Failing:
        def __init__(self, inner: agentloop.ledger.Ledger, at: int) -> None:
            self.inner, self.at, self.count = inner, at, 0

        def create(self, run_id: str, header: bytes) -> Any:
            writer = self.inner.create(run_id, header)
            ledger = self

            class Writer:
                def append(self, record: agentloop.ledger.LedgerRecord) -> None:
                    ledger.count += 1
                    if ledger.count >= ledger.at:
                        raise LedgerError("disk full")
                    writer.append(record)

                def release(self) -> None:
                    writer.release()

            return Writer()

        def claim(self, run_id: str) -> Any:
            return self.inner.claim(run_id)

        def read(self, run_id: str) -> Any:
            return self.inner.read(run_id)

    for at in range(1, 6):
        db.unlink(missing_ok=True)
        world = World()
        run = make_loop(SCRIPT, world, Failing(SQLiteLedger(db), at)).start("go", run_id="r1")
        with pytest.raises(LedgerError, match=r"disk full"):
            run.finish()
        with pytest.raises(
            LedgerError, match=r"the ledger failed earlier \(LedgerError: disk full"
        ):
            run.finish()
        result = make_loop(SCRIPT, world, SQLiteLedger(db)).resume("r1")  # no RunBusyError
        check_against_baseline(result, world, SCRIPT, "sync")


def test_the_memory_ledger_keeps_the_protocol() -> None:
    """A second store, written from the protocol alone, runs and resumes the same."""
    memory = MemoryLedger()
    result = go(make_loop(SCRIPT, World(), memory, "sync"), "sync", "r1")
    assert make_loop(SCRIPT, World(), memory).resume("r1") == result
    assert isinstance(memory, agentloop.ledger.Ledger)
    memory.create("x", b"{}")
    with pytest.raises(agentloop.ledger.RunBusyError):
        memory.claim("x")


# -- bad ledgers fail fast, with clear errors -----------------------------------------------------


def finished_ledger(db: Path) -> None:
    with SQLiteLedger(db) as ledger:
        make_loop(SCRIPT, World(), ledger).run("go", run_id="r1")
    gc.collect()


def test_a_file_of_garbage(db: Path) -> None:
    db.write_bytes(b"this is not a database, not even close" * 100)
    with pytest.raises(LedgerError, match=r"not a ledger: expected an SQLite database that"):
        SQLiteLedger(db)
    assert db.read_bytes() == b"this is not a database, not even close" * 100


def test_a_truncated_file(db: Path) -> None:
    """Shorter than its header says: SQLite finds it, and the ledger says the file is damaged."""
    finished_ledger(db)
    assert not Path(f"{db}-wal").exists()  # closed cleanly: everything in the file itself
    data = db.read_bytes()
    for size in (len(data) // 2, 4096, 50):
        db.write_bytes(data[:size])
        with pytest.raises(LedgerError, match=r"open: the file is damaged: "):
            SQLiteLedger(db)


def test_a_damaged_name_in_the_schema(db: Path) -> None:
    """SQLite's error quotes the damaged name, as bytes Python cannot decode."""
    SQLiteLedger(db).close()
    data = bytearray(db.read_bytes())
    data[data.index(b"tablerunsruns") + 5] = 0xFF  # the runs table's name in sqlite_master
    db.write_bytes(bytes(data))
    with pytest.raises(LedgerError, match=r"open: the file is damaged: SQLite's message"):
        SQLiteLedger(db)


def test_a_write_ahead_log_of_garbage(db: Path) -> None:
    """Records committed in the WAL would silently vanish if SQLite took garbage for no WAL:
    overwritten while the ledger is open in this process, SQLite's reads find it."""
    ledger = SQLiteLedger(db)
    make_loop(SCRIPT, World(), ledger).run("go", run_id="r1")
    wal = Path(f"{db}-wal")
    assert wal.stat().st_size > 0  # still open: the records are in the WAL
    with wal.open("r+b") as file:
        file.write(b"garbage!" * (wal.stat().st_size // 8))
    with pytest.raises(LedgerError, match=r"the file or its write-ahead log \(runs.db-wal\) is"):
        SQLiteLedger(db)


def test_a_future_format_version(db: Path) -> None:
    finished_ledger(db)
    with sqlite3.connect(db) as raw:
        raw.execute("PRAGMA user_version = 3")
    raw.close()
    with pytest.raises(
        LedgerError, match=r"ledger format version 3, but this agentloop reads version 2 \(a newer"
    ):
        SQLiteLedger(db)


def test_another_sqlite_database_and_a_directory(db: Path, tmp_path: Path) -> None:
    with sqlite3.connect(db) as raw:
        raw.execute("CREATE TABLE songs (title TEXT)")
    raw.close()
    with pytest.raises(LedgerError, match=r"not an agentloop ledger: an SQLite database of other"):
        SQLiteLedger(db)
    with pytest.raises(LedgerError, match=r"expected a ledger file, got a directory"):
        SQLiteLedger(tmp_path)


def test_another_sqlite_database_is_refused_unchanged(db: Path) -> None:
    """Read before it is switched to WAL mode: another database keeps its journal mode."""
    for setup in ("PRAGMA application_id = 7", "CREATE TABLE songs (title TEXT)"):
        db.unlink(missing_ok=True)
        with contextlib.closing(sqlite3.connect(db)) as raw:
            raw.execute(setup)
            raw.commit()
        with pytest.raises(LedgerError, match=r"not an agentloop ledger: an SQLite database "):
            SQLiteLedger(db)
        with contextlib.closing(sqlite3.connect(db)) as raw:
            assert raw.execute("PRAGMA journal_mode").fetchone() == ("delete",)


def test_make_false_opens_only_a_ledger_that_exists(db: Path, tmp_path: Path) -> None:
    """``make=False`` refuses a missing file and one that holds no ledger, making nothing."""
    with pytest.raises(LedgerError, match=r"expected a ledger, got no such file \(make=False"):
        SQLiteLedger(db, make=False)
    assert list(tmp_path.iterdir()) == []
    db.touch()
    with pytest.raises(LedgerError, match=r"not a ledger: expected a ledger that agentloop"):
        SQLiteLedger(db, make=False)
    assert db.stat().st_size == 0
    finished_ledger(db)
    with SQLiteLedger(db, make=False) as ledger:
        assert ledger.run_ids() == ["r1"]
    with pytest.raises(TypeError, match=r"expected make to be a bool, got str"):
        SQLiteLedger(db, make="no")  # type: ignore[arg-type]


def test_a_ledger_in_memory_is_refused_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for path in (":memory:", Path(":memory:"), ""):
        with pytest.raises(
            ValueError,
            match=r"^expected the path of a ledger file, got '(:memory:)?': a ledger outside a "
            r"file survives no crash and cannot be shared between processes",
        ):
            SQLiteLedger(path)
    with pytest.raises(TypeError, match=r"expected path to be a str or a Path, got bytes"):
        SQLiteLedger(b"runs.db")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []  # no ':memory:-lock', no ':memory:' file


def test_a_ledger_in_a_missing_directory_names_the_directory(tmp_path: Path) -> None:
    """The caller named a file in a directory that is not there: that is what is said."""
    path = tmp_path / "missing" / "runs.db"
    with pytest.raises(LedgerError, match=r"expected the ledger's directory '.*missing' to exist"):
        SQLiteLedger(path)
    assert list(tmp_path.iterdir()) == []


def test_run_ids_checks_finished(db: Path) -> None:
    ledger = SQLiteLedger(db)
    for wrong in ("no", 0, 1, [True]):
        with pytest.raises(
            TypeError,
            match=rf"^expected finished to be a bool or None, got {type(wrong).__name__}$",
        ):
            ledger.run_ids(finished=wrong)  # type: ignore[arg-type]
    assert ledger.run_ids(finished=True) == ledger.run_ids(finished=None) == []


def test_damaged_records_are_named(db: Path) -> None:
    finished_ledger(db)

    def damage(sql: str, *args: object) -> None:
        with sqlite3.connect(db) as raw:
            raw.execute(sql, args)
        raw.close()

    loop = make_loop(SCRIPT, World(), None)
    loop.ledger = SQLiteLedger(db)
    assert loop.resume("r1").status == "finished"
    step_2 = orjson.loads(SQLiteLedger(db).read("r1")[1][2].body)  # with its first call's start
    where = f"WHERE kind = {KINDS['tool_started']} AND key = 'c2'"  # kinds as their numbers
    damage(f"UPDATE records SET body = ? {where}", b"{not json")
    with pytest.raises(LedgerError, match=r"run 'r1': record 2 \(tool_started 'c2'\) is not JSON"):
        loop.resume("r1")
    damage(f"UPDATE records SET body = ? {where}", b'{"what": 1}')
    with pytest.raises(LedgerError, match=r"record 2 \(tool_started 'c2'\): expected an array of"):
        loop.resume("r1")
    damage(f"UPDATE records SET kind = 99 {where}")
    with pytest.raises(LedgerError, match=r"record 2 is damaged: no kind numbered 99 \(a newer"):
        loop.resume("r1")
    replied, step_2[0]["input"] = step_2[0]["input"], 5  # the reply
    damage(
        f"UPDATE records SET kind = {KINDS['tool_started']}, body = ? WHERE kind = 99",
        orjson.dumps(step_2),
    )
    with pytest.raises(LedgerError, match=r"record 2 .*: expected the start of a call the reply"):
        loop.resume("r1")
    step_2[0]["input"] = replied
    step_2[1]["if"] = "calls_exhausted"  # not the row the engine takes there
    damage(f"UPDATE records SET body = ? {where}", orjson.dumps(step_2))
    with pytest.raises(LedgerError, match=r"its records do not replay through this engine"):
        loop.resume("r1")
    header = orjson.loads(SQLiteLedger(db).read("r1")[0])
    damage("UPDATE runs SET header = ?", orjson.dumps(header | {"version": 7}))
    with pytest.raises(LedgerError, match=r"ledger format version 7.*upgrade agentloop"):
        loop.resume("r1")


def test_check_reads_the_whole_file(db: Path) -> None:
    finished_ledger(db)
    SQLiteLedger(db).check()
    data = bytearray(db.read_bytes())
    data[4096 * 3 : 4096 * 3 + 12] = b"\xff" * 12  # the fourth page's b-tree header
    db.write_bytes(bytes(data))
    with pytest.raises(LedgerError, match=r"damaged"):
        SQLiteLedger(db).check()


def test_resume_names_what_it_takes(db: Path, tmp_path: Path) -> None:
    """A live run or a path where a run id or a RunResult belongs: the error says which
    was given and what to do, with a ledger or without one."""
    for ledger, instead in (
        (None, r"aresume\(agentloop.review.load_run\(path\)\) continues a saved run file"),
        (SQLiteLedger(db), r"aresume\(run_id\) continues a run of this Loop's ledger"),
    ):
        loop = make_loop(SCRIPT, World(), ledger)
        live = agentloop.Loop(by_history([final("x")])).start("go")
        with pytest.raises(
            TypeError,
            match=r"^resume\(\) expected a run id \(a str\) or a saved run's RunResult, got Run: "
            r"a live run goes on with its own step",
        ):
            loop.resume(live)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=rf"got PosixPath: {instead}$"):
            asyncio.run(loop.aresume(tmp_path / "run.json"))  # type: ignore[arg-type]


def _open_at_once(path: str, barrier: Any, answers: Any) -> None:
    barrier.wait()
    try:
        SQLiteLedger(path).close()
        answers.put("ok")
    except Exception as exc:  # noqa: BLE001 - the parent reports what each process met
        answers.put(repr(exc))


def test_processes_opening_a_new_ledger_at_once_all_open_it(tmp_path: Path) -> None:
    """Six processes open one new ledger file at the same moment, ten times (twenty in the
    long tier): each opens it (SQLite refuses a switch to WAL mode at once while another
    makes it; it is retried within the timeout, where it failed about one round in three)."""
    context = multiprocessing.get_context("fork")
    for round_ in range(count(10, 20)):
        path = str(tmp_path / f"runs-{round_}.db")
        barrier, answers = context.Barrier(6), context.Queue()
        workers = [
            context.Process(target=_open_at_once, args=(path, barrier, answers)) for _ in range(6)
        ]
        for worker in workers:
            worker.start()
        got = [answers.get(timeout=60) for _ in workers]
        for worker in workers:
            worker.join(timeout=60)
        assert got == ["ok"] * 6, (round_, got)


def test_a_durable_engine_records_through_the_commit_hook_alone() -> None:
    """DurableEngine overrides no report, nor result(): the ledger hears each transition
    from the engine's one commit hook; only next() is its own (a resume's handed calls)."""
    from agentloop._core.engine import Engine
    from agentloop._durable.recording import DurableEngine

    reports = {"replied", "returned", "raised", "waited", "reviewed", "decided", "interrupted"}
    overridden = {name for name in vars(DurableEngine) if name in dir(Engine)}
    assert overridden & (reports | {"result"}) == set()
    assert overridden - {"__init__", "__repr__", "__slots__", "__doc__", "__module__"} == {
        "next",
        "unstarted",
    }


def add(a: int, b: int) -> int:
    """Add two ints."""
    return a + b


def test_a_durable_call_step_commits_two_records(tmp_path: Path) -> None:
    """Through the hook: a call's start (with the reply that asked for it), its outcome, and
    the end (with the final reply), one record each, in order."""
    ledger = SQLiteLedger(tmp_path / "runs.db")
    loop = agentloop.Loop(
        ScriptedModel([call("c1", "add", a=1, b=2), final("3")]), tools={"add": add}, ledger=ledger
    )
    result = loop.run("go", run_id="r1")
    records = ledger.read("r1")[1]
    assert [(record.kind, record.key) for record in records] == [
        ("tool_started", "c1"),
        ("tool_finished", "c1"),
        ("end", ""),
    ]
    # What the engine made by itself (the checks) goes with the record after it.
    written = [orjson.loads(record.body) for record in records]
    assert [[event["on"] for event in body] for body in written] == [
        ["model_replied", "validate"],
        ["tool_returned"],
        ["model_replied", "validate"],
    ]
    assert len(result.events) == 5


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_plain_runs_call_and_a_turns_call_never_share_a_key(db: Path, driver: Driver) -> None:
    """Plain run 'u' with call ':2:x' and turn 'u::2' with call 'x' were both 'u::2:x'."""
    keys: list[str | None] = []

    def note() -> int:
        keys.append(agentloop.idempotency_key())
        return 1

    ledger = SQLiteLedger(db)
    plain = agentloop.Loop(
        by_history([batch(call(":2:x", "note")), final("a")]), tools={"note": note}, ledger=ledger
    )
    turns = agentloop.Loop(
        by_history([final("hi"), batch(call("x", "note")), final("b")]),
        tools={"note": note},
        ledger=ledger,
    )

    def run(loop: agentloop.Loop, **how: Any) -> agentloop.RunResult[str]:
        if driver == "sync":
            return loop.run("go", **how)
        return asyncio.run(loop.arun("go", **how))

    assert run(plain, run_id="u").status == "finished"
    assert run(turns, conversation="u").run_id == "u::1"
    second = run(turns, conversation="u")
    assert (second.run_id, second.status, second.calls) == ("u::2", "finished", 1)
    assert keys == ["u:%3A2%3Ax", "u::2:x"]
    assert ledger.run_ids() == ["u", "u::1", "u::2"]


def test_an_id_with_percent_is_escaped_so_escapes_cannot_collide() -> None:
    from agentloop._drivers.run_context import key_of

    assert key_of("r", "call_abc123") == "r:call_abc123"
    assert key_of("r", "%3A") == "r:%253A"
    assert key_of("r", ":") == "r:%3A"
    assert key_of(None, "x") is None


_ids = st.text(st.sampled_from("a1:%3A"), min_size=1, max_size=5)


@example(run="u", other="u::2", call_id=":2:x", other_call="x")
@given(
    run=st.one_of(
        _ids.filter(lambda s: ":" not in s),
        st.builds(lambda c, n: f"{c}::{n}", _ids.filter(lambda s: ":" not in s), st.integers(1, 3)),
    ),
    other=st.one_of(
        _ids.filter(lambda s: ":" not in s),
        st.builds(lambda c, n: f"{c}::{n}", _ids.filter(lambda s: ":" not in s), st.integers(1, 3)),
    ),
    call_id=_ids,
    other_call=_ids,
)
def test_distinct_run_and_call_ids_give_distinct_keys(
    run: str, other: str, call_id: str, other_call: str
) -> None:
    """Run ids as the library allows them (a user's, no ':'; a turn's, 'c::n'), any call ids."""
    from agentloop._drivers.run_context import key_of

    if (run, call_id) != (other, other_call):
        assert key_of(run, call_id) != key_of(other, other_call)
