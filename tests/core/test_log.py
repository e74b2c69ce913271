"""The run's record, held once (``_core/log.py``): every transition it gives back is the one made.

A finished run keeps its newest transitions as the engine made them and
the rest as columns over its transcript. ``Transition``s are made again
from the columns on demand. Here every transition the engine handed out is
compared, field by field, times and inputs included, with what the run's
result gives back, over the suite's random-run harnesses, compacting all
but the newest event (and at the default, over long runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from typing import TYPE_CHECKING, Any

import orjson
import pytest

import agentloop
from agentloop import CancelToken, Loop, RunResult, Transition
from agentloop._core import log as log_module
from agentloop._core.engine import Engine
from agentloop._core.state import RunState
from agentloop._core.table import TERMINAL, Trigger
from agentloop.testing import with_usage
from tests.core import test_context, test_properties, test_typed
from tests.drivers import test_features_at_once, test_resilience
from tests.review import test_runfile
from tests.support.helpers import DRIVERS, Driver

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


@contextlib.contextmanager
def every_result_checked(keep: int | None = None) -> Iterator[list[int]]:
    """Check every result made inside against the transitions its engine handed out.

    ``keep``: how many events a compaction takes at a time (default: the log's).
    Yields a list that gets each checked result's number of events.
    """
    handed: dict[RunState, list[Transition]] = {}
    checked: list[int] = []
    commit, result = RunState.commit, RunState.result

    def committing(run: RunState, *args: Any) -> Transition:
        made = commit(run, *args)
        handed.setdefault(run, []).append(made)
        return made

    def resulting(run: RunState) -> RunResult[Any]:
        made = result(run)
        assert_same(handed.get(run, []), made.events)
        checked.append(len(made.events))
        return made

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RunState, "commit", committing)
        patch.setattr(RunState, "result", resulting)
        if keep is not None:
            patch.setattr(log_module, "KEEP", keep)
        yield checked


def assert_same(handed: list[Transition], events: Any) -> None:
    """``events`` gives back each of ``handed``: every field, times, inputs and the exception."""
    assert len(events) == len(handed)
    for index, (made, again) in enumerate(zip(handed, events, strict=True)):
        assert type(again) is Transition
        for name, mine, its in zip(Transition._fields, made, again, strict=True):
            assert its is mine if name == "exception" else its == mine, (index, name, its, mine)
            assert type(its) is type(mine), (index, name, its, mine)
    assert list(events) == handed
    assert events[1:] == tuple(handed[1:])
    assert list(reversed(events)) == handed[::-1]


# The suite's random-run harnesses: scripted replies, batches, garbage, raises, Ctrl-C and
# cancellation; the context policies, typed outputs, the loop guard, retries, fallback
# models, approvals, handoffs, resume and fork; on both drivers.
HARNESSES: dict[str, Callable[..., None]] = {
    "runfile": test_runfile.test_random_runs_round_trip,
    "properties": lambda: test_properties.test_random_runs_keep_the_contract(driver=DRIVERS[0]),
    "context": lambda: (
        test_context.test_every_request_sent_is_paired_fits_and_keeps_the_newest_turn(
            driver=DRIVERS[1]
        )
    ),
    "typed": test_typed.test_the_new_rows_match_transitions_keep_the_contract_and_replay,
    "resilience": test_resilience.test_attempts_never_exceed_the_policy_and_all_are_steps,
    "features": test_features_at_once.test_every_feature_at_once_keeps_the_contract_on_both_drivers,
}


@pytest.mark.parametrize("harness", HARNESSES)
def test_every_transition_handed_out_is_what_the_result_gives_back(harness: str) -> None:
    # Compacting all but the newest event: the harnesses' runs are short.
    with every_result_checked(keep=1) as checked:
        HARNESSES[harness]()
    assert checked  # results were made, and each was checked


def test_paused_resumed_and_forked_runs_give_back_what_was_made(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with every_result_checked(keep=1) as checked:
        test_features_at_once.test_paused_runs_resume_and_any_cut_forks_with_every_feature(
            tmp_path_factory=tmp_path_factory
        )
    assert checked


def long_loop(steps: int, usage: bool = False) -> Loop:
    """``steps`` calls, one a model step, then an answer; each reply reports usage if asked."""

    def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        done = (len(history) - 1) // 2
        made: dict[str, Any] = (
            {"kind": "call", "id": f"c{done}", "name": "read", "arguments": {}}
            if done < steps
            else {"kind": "final", "text": "ok"}
        )
        return with_usage(made, done, 1) if usage else made

    def read() -> str:
        return "r" * 50

    return Loop(model, tools=[read], max_steps=steps + 1, max_calls=steps)


@pytest.mark.parametrize("usage", [False, True])
def test_a_long_run_holds_its_older_events_as_columns_and_gives_them_back(usage: bool) -> None:
    """Past twice ``KEEP`` events the oldest are compacted: inputs become references into
    the transcript, and each transition comes back equal, its run file too."""
    with every_result_checked() as checked:
        result = long_loop(100, usage).run("go")
    assert checked == [len(result.events)] == [302]
    record = result.events._log  # type: ignore[attr-defined]
    assert record.compacted >= 302 - 2 * log_module.KEEP
    assert not record.held  # every reply and every content is in the transcript
    loaded = agentloop.review.run_from_json(agentloop.review.run_to_json(result))
    assert loaded == result
    assert loaded.usage == result.usage


def test_an_input_longer_than_a_column_holds_is_kept_as_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tool's content is a length into its result's message, in a column of C ints; one
    longer than a column holds (here: 20 bytes) is kept as its bytes, and comes back equal."""
    monkeypatch.setattr(log_module, "_LARGEST", 20)
    with every_result_checked() as checked:
        result = long_loop(40).run("go")
    assert checked == [len(result.events)] == [122]
    record = result.events._log  # type: ignore[attr-defined]
    compacted = range(record.compacted)
    returned = [i for i in compacted if result.events[i].trigger is Trigger.TOOL_RETURNED]
    assert returned
    assert sorted(record.held) == returned  # each content (52 bytes); each reply is whole
    assert all(record.held[i] == b'"' + b"r" * 50 + b'"' for i in returned)


def test_calls_run_at_once_come_back_with_the_event_that_started_them() -> None:
    """Under ``arun`` a batch's calls run at once: the event after they are handed out
    records them all as started. Compacted, each event gives back the calls it started:
    none, its own, or those of others."""

    async def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        done = sum(message["kind"] == "tool_result" for message in history)
        if done == 60:
            return {"kind": "final", "text": "ok"}
        calls = [{"id": f"c{done + i}", "name": "read", "arguments": {}} for i in range(3)]
        return {"kind": "calls", "calls": calls}

    async def read() -> str:
        await asyncio.sleep(0)
        return "r" * 50

    with every_result_checked() as checked:
        loop = Loop(model, tools=[read], max_steps=21, max_calls=60)
        result = asyncio.run(loop.arun("go"))
    assert (result.status, result.calls) == ("finished", 60)
    assert checked == [len(result.events)]
    record = result.events._log  # type: ignore[attr-defined]
    assert ("c3", "c4", "c5") in [event.started for event in result.events[: record.compacted]]
    started = [call_id for event in result.events for call_id in event.started]
    assert started == [f"c{n}" for n in range(60)]


def test_a_result_taken_while_waiting_keeps_saying_what_it_said() -> None:
    """A result taken while the run waits for a person is not changed by the run going on."""

    def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        done = (len(history) - 1) // 2
        if done == 10:
            return {"kind": "call", "id": "late", "name": "gated", "arguments": {}}
        if done < 20:
            return {"kind": "call", "id": f"c{done}", "name": "read", "arguments": {}}
        return {"kind": "final", "text": "ok"}

    def read() -> str:
        return "r" * 50

    def gated() -> str:
        return "g" * 50

    def asks(call: Any) -> agentloop.Decision:
        return agentloop.ask("a person decides")

    tools = [agentloop.Tool(read, name="read"), agentloop.Tool(gated, name="gated", policy=asks)]
    loop = Loop(model, tools=tools, max_steps=30, max_calls=30)
    with every_result_checked(keep=8):
        run = loop.start("go")
        while run.state != "awaiting_approval":
            run.step()
        waiting = run.result()
        before = [tuple(event) for event in waiting.events], waiting.transcript_json
        run.decide({"late": agentloop.approve()})
        finished = run.finish()
    # Every field, inputs included (a Transition's == leaves them out).
    assert ([tuple(event) for event in waiting.events], waiting.transcript_json) == before
    assert finished.events[: len(waiting.events)] == tuple(waiting.events)
    assert finished.status in TERMINAL


def test_an_interruption_between_the_history_and_the_record_settles_to_the_record() -> None:
    """An interruption after a transition's messages entered the history and before its
    event was recorded: the run is as its record says, the messages taken back."""
    added: list[Transition] = []

    class Refusing(log_module.Log):
        def add(self, event: Transition) -> None:
            if event.appended_json and not added:
                added.append(event)
                raise KeyboardInterrupt  # the messages are in the history; the event is not
            super().add(event)

    engine = Engine("go")
    engine._run.log = Refusing(1)
    engine.next()
    engine.replied({"kind": "call", "id": "c1", "name": "read", "arguments": {}})
    need = engine.next()
    while not hasattr(need, "call"):
        need = engine.next()
    with pytest.raises(KeyboardInterrupt):
        engine.returned({"status": "ok", "content": "x"})
    assert added  # the interruption landed where it was meant to
    ended = engine.interrupted(KeyboardInterrupt())
    assert ended is not None
    assert ended.trigger == "tool_interrupted"
    events = engine.events()
    appended = [data for event in events for data in event.appended_json]
    assert engine.history() == [{"kind": "user", "text": "go"}] + [
        orjson.loads(data) for data in appended
    ]
    result = engine.result()
    assert [m["kind"] for m in result.transcript] == ["user", "call", "tool_result"]
    assert result.transcript[2]["status"] == "cancelled"  # the result taken back, then cut
    assert (result.steps, result.calls) == (1, 1)


def test_a_refused_commit_leaves_the_run_as_its_record_says() -> None:
    """A commit sink that refuses each transition in turn: the run stays as recorded, and
    goes on to the same end as a run that was never refused."""

    def drive(refuse_at: int | None) -> RunResult[Any]:
        offered = [0]

        def commit(transition: Transition, reply: object) -> None:
            offered[0] += 1
            if offered[0] == refuse_at:
                raise OSError("the ledger is full")

        engine = Engine("go", commit=commit, cancel=CancelToken())
        while not engine.done:
            with contextlib.suppress(OSError):  # refused: the same report is made again
                if engine.outstanding is Trigger.ASK_MODEL:
                    engine.replied(reply(engine.history()))
                elif engine.running:
                    engine.returned({"status": "ok", "content": "x"}, engine.running[0])
                else:
                    engine.next()
            appended = [data for event in engine.events() for data in event.appended_json]
            assert engine.history() == [{"kind": "user", "text": "go"}] + [
                orjson.loads(data) for data in appended
            ]
        return engine.result()

    plain = drive(None)
    for refuse_at in range(1, len(plain.events) + 1):
        again = drive(refuse_at)
        assert again.transcript == plain.transcript
        assert (again.status, again.calls) == (plain.status, plain.calls)


def reply(history: list[dict[str, Any]]) -> dict[str, Any]:
    """Three calls, then an answer: the reply a history of that length gets."""
    done = (len(history) - 1) // 2
    if done < 3:
        return {"kind": "call", "id": f"c{done}", "name": "read", "arguments": {}}
    return {"kind": "final", "text": "ok"}


def test_a_long_run_holds_only_its_newest_transitions_as_made(driver: Driver) -> None:
    """While a long run goes on, at most twice ``KEEP`` of its transitions are objects:
    the rest are columns (a driver that kept every transition of a step kept them all)."""
    alive: list[int] = []

    def transitions() -> int:
        return sum(type(thing) is Transition for thing in gc.get_objects())

    def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        done = (len(history) - 1) // 2
        if done < 150:
            return {"kind": "call", "id": f"c{done}", "name": "read", "arguments": {}}
        alive.append(transitions() - before)  # beside what other tests left alive
        return {"kind": "final", "text": "ok"}

    def read() -> str:
        return "r" * 50

    gc.collect()
    before = transitions()
    result = driver.run(Loop(model, tools=[read], max_steps=151, max_calls=150), "go")
    assert (result.status, len(result.events)) == ("finished", 452)
    assert alive
    assert alive[0] <= 2 * log_module.KEEP + 2, alive
