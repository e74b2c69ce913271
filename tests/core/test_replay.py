"""One replay: a run is made again from its events alone; a fork goes on from any of them."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import Loop, RunResult
from agentloop._core.replay import Mismatch, replay
from agentloop.testing import ScriptedModel, batch, call, final
from tests.core.test_properties import REPLIES, World, budgets
from tests.support.helpers import DRIVERS, Driver, add

if TYPE_CHECKING:
    from pathlib import Path


def inputs(result: RunResult) -> list[dict[str, Any]]:
    """The run's input: its transcript without what its events appended."""
    appended = sum(len(event.appended_json) for event in result.events)
    transcript = result.transcript
    return transcript[: len(transcript) - appended]


def replayed(result: RunResult) -> RunResult:
    """The run made again from its input, budget and events alone."""
    return replay(
        inputs(result), result.budget, result.events, rejected=result.rejected_value
    ).result()


@settings(max_examples=200, deadline=None)
@given(data=st.data(), budget=budgets, driver=st.sampled_from(DRIVERS))
def test_every_run_replays_from_its_events_alone(
    data: st.DataObject, budget: tuple[int, int], driver: Driver
) -> None:
    """Random replies, budgets, tool failures and cancellations: the replay is the run."""
    world = World(
        data.draw(st.lists(REPLIES, max_size=10)), data.draw(st.none() | st.integers(1, 8))
    )
    loop = Loop(
        world.model,
        tools=world.tools(),
        max_steps=budget[0],
        max_calls=budget[1],
        max_concurrency=data.draw(st.sampled_from([1, 3])) if driver.name == "async" else None,
    )
    result = driver.run(loop, "go", cancel=world.token)

    again = replayed(result)
    assert again == result
    assert again.transcript_json == result.transcript_json
    assert [e.started for e in again.events] == [e.started for e in result.events]


def test_an_event_that_does_not_replay_is_named() -> None:
    """A changed count, or a reply the record does not hold, is a Mismatch at that event."""
    result = Loop(ScriptedModel([call("c1", "add", a=1, b=2), final("3")]), tools=[add]).run("go")
    events = list(result.events)
    events[2] = events[2]._replace(calls=5)
    with pytest.raises(Mismatch) as found:
        replay(inputs(result), result.budget, events)
    assert found.value.where == "$.events[2].calls"
    events = list(result.events)
    events[0] = events[0]._replace(input_json=orjson.dumps(final("no")))
    with pytest.raises(Mismatch, match=r"validating --validate \[reply_is_final\]--> finished"):
        replay(inputs(result), result.budget, events)


def wrong_add(a: int, b: int) -> int:
    """A tool with a bug: the fork tries the fixed one from the same point."""
    return a - b


def test_a_fork_goes_on_from_any_transition_with_another_model() -> None:
    """The first k events are the old run's; from there the new model and tools run."""
    old = Loop(
        ScriptedModel([call("c1", "add", a=2, b=2), final("2+2 is 0")]),
        tools={"add": wrong_add},
    ).run("What is 2+2?")
    after_tool = next(i for i, e in enumerate(old.events) if e.trigger == "tool_returned") + 1

    # Another model from the same point: it sees the old tool's result.
    seen: list[list[dict[str, Any]]] = []

    def careful(history: list[dict[str, Any]]) -> dict[str, Any]:
        seen.append(history)
        return final("the tool said 0; let me check")

    fork = Loop(careful, tools={"add": wrong_add}).fork(old, at=after_tool)
    result = fork.finish()
    assert result.events[:after_tool] == old.events[:after_tool]
    assert result.output == "the tool said 0; let me check"
    assert seen[0][-1]["content"] == 0
    assert (result.steps, result.calls) == (2, 1)

    # Another tool from before the call ran: the fixed tool runs, the new model answers.
    before_tool = after_tool - 1
    fixed = Loop(ScriptedModel([final("2+2 is 4")]), tools={"add": add}).fork(old, at=before_tool)
    result = fixed.finish()
    assert result.transcript[2]["content"] == 4
    assert result.output == "2+2 is 4"
    assert old.output == "2+2 is 0"  # the old run is untouched


def asks(call: dict[str, Any]) -> agentloop.Decision:
    """A policy that asks a person about every call."""
    return agentloop.ask("a person decides")


def test_a_fork_of_a_paused_run_waits_for_the_same_person() -> None:
    """Forked at its end, a run awaiting approval waits again; a decision lets it go on."""
    tools = agentloop.ToolRegistry([agentloop.Tool(add, policy=asks)])
    paused = Loop(ScriptedModel([call("c1", "add", a=1, b=2)]), tools=tools).run("go")
    assert paused.status == "awaiting_approval"

    fork = Loop(ScriptedModel([final("3")]), tools=tools).fork(paused, at=len(paused.events))
    assert fork.state == "awaiting_approval"
    assert [p.call_id for p in fork.pending] == ["c1"]
    fork.decide({"c1": agentloop.approve()})
    result = fork.finish()
    assert (result.status, result.output, result.transcript[2]["content"]) == ("finished", "3", 3)


def test_a_fork_of_a_durable_run_is_a_durable_run_of_its_own(tmp_path: Path) -> None:
    """With a ledger, the fork is recorded under its own id, and resumes to itself."""
    ledger = agentloop.ledger.SQLiteLedger(tmp_path / "runs.db")
    script = [batch(call("c1", "add", a=1, b=1), call("c2", "add", a=2, b=2)), final("2 and 4")]
    old = Loop(ScriptedModel(script), tools=[add], ledger=ledger).run("go", run_id="old")

    loop = Loop(ScriptedModel([final("forked")]), tools=[add], ledger=ledger)
    at = len(old.events) - 2  # after the batch's results, before the final reply
    run = loop.fork(old, at=at, run_id="fork-1")
    assert run.run_id == "fork-1"
    result = run.finish()
    assert result.output == "forked"
    assert result.events[:at] == old.events[:at]
    assert loop.resume("fork-1") == result  # read back from its own records
    assert loop.resume("old") == old
    assert sorted(ledger.run_ids()) == ["fork-1", "old"]


def test_a_fork_refuses_a_cut_it_cannot_make() -> None:
    """Out of range, a batch's calls running, or a budget the prefix does not fit: ValueError."""
    old = Loop(ScriptedModel([call("c1", "add", a=1, b=1), final("2")]), tools=[add]).run("go")
    loop = Loop(ScriptedModel([final("x")]), tools=[add])
    assert len(old.events) == 5
    with pytest.raises(ValueError, match=r"expected at to be an int from 0 to 5 .*got 6"):
        loop.fork(old, at=6)
    with pytest.raises(ValueError, match=r"do not replay under this Loop's budget \(max_steps=0"):
        Loop(ScriptedModel([]), tools=[add], max_steps=0).fork(old, at=2)
    with pytest.raises(TypeError, match=r"fork\(\) expected a run id \(a str\) or a RunResult"):
        loop.fork(3, at=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^fork\('old'\) names a run in a ledger, and this"):
        loop.fork("old", at=1)  # an id: read from a ledger, and this Loop has none
    with pytest.raises(ValueError, match=r"run_id= names the fork in a ledger"):
        loop.fork(old, at=1, run_id="x")


@pytest.mark.parametrize("method", ["fork", "afork"])
def test_a_refused_durable_fork_leaves_no_trace_in_the_ledger(tmp_path: Path, method: str) -> None:
    """A fork refused (a batch's calls running at the cut, a budget that cannot replay) is
    not recorded: its id stays free, no restart loop finds it, and nothing it held runs."""
    ledger = agentloop.ledger.SQLiteLedger(tmp_path / "runs.db")
    ran: list[int] = []

    def noting(a: int, b: int) -> int:
        """Add, noting each run."""
        ran.append(a)
        return a + b

    script = [batch(call("c1", "add", a=1, b=1), call("c2", "add", a=2, b=2)), final("ok")]
    old = Loop(ScriptedModel(script), tools={"add": noting}, ledger=ledger, max_concurrency=2)
    result = asyncio.run(old.arun("go", run_id="old"))
    first_return = next(i for i, e in enumerate(result.events) if e.trigger == "tool_returned")
    ran.clear()
    loop = Loop(ScriptedModel([final("x")]), tools={"add": noting}, ledger=ledger)
    tight = Loop(ScriptedModel([final("x")]), tools={"add": noting}, ledger=ledger, max_steps=0)
    refusals = [
        (loop, result, first_return + 1, r"where calls \['c2'\] of a batch are running"),
        (loop, "old", first_return + 1, r"where calls \['c2'\] of a batch are running"),
        (tight, result, 2, r"do not replay under this Loop's budget \(max_steps=0"),
    ]
    for forking, run, at, message in refusals:
        with pytest.raises(ValueError, match=message):
            getattr(forking, method)(run, at=at, run_id="fork")
        assert ledger.run_ids() == ["old"]
        assert ledger.run_ids(finished=False) == []  # the restart loop finds nothing
    assert ran == []
    fork = getattr(loop, method)(result, at=first_return, run_id="fork")  # the id is free
    finished = fork.finish() if method == "fork" else asyncio.run(fork.afinish())
    assert finished.output == "x"
    assert ran == [1, 2]
    assert ledger.run_ids() == ["old", "fork"]


async def test_a_fork_cannot_cut_a_batch_whose_calls_run_at_once() -> None:
    """Under asyncio calls run together; a cut between two of their returns is refused."""
    script = [batch(call("c1", "add", a=1, b=1), call("c2", "add", a=2, b=2)), final("ok")]
    old = await Loop(ScriptedModel(script), tools=[add], max_concurrency=2).arun("go")
    first_return = next(i for i, e in enumerate(old.events) if e.trigger == "tool_returned")
    assert old.events[first_return].started == ("c1", "c2")  # both handed out before it
    loop = Loop(ScriptedModel([final("x")]), tools=[add])
    with pytest.raises(ValueError, match=r"where calls \['c2'\] of a batch are running"):
        loop.fork(old, at=first_return + 1)
    fork = loop.fork(old, at=first_return)  # before either returned: both run again
    result = fork.finish()
    assert result.output == "x"
    assert [m["content"] for m in result.transcript if m["kind"] == "tool_result"] == [2, 4]


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_an_interrupted_run_replays_from_its_events(driver: Driver) -> None:
    """Ctrl-C inside a batch's second call: the record says so, and replays to the same end."""

    def interrupts(a: int, b: int) -> int:
        if a == 2:
            raise KeyboardInterrupt
        return a + b

    script = [batch(call("c1", "add", a=1, b=1), call("c2", "add", a=2, b=2)), final("x")]
    run = driver.start(Loop(ScriptedModel(script), tools={"add": interrupts}), "go")
    with pytest.raises(KeyboardInterrupt):
        for _ in run:
            pass
    result = run.result()
    assert result.status == "cancelled"
    assert replayed(result) == result


def test_a_run_with_decisions_replays_from_its_events() -> None:
    """Asked, decided (one approved, one denied), then finished: replayed event for event."""
    tools = agentloop.ToolRegistry([agentloop.Tool(add, policy=asks)])
    script = [batch(call("c1", "add", a=1, b=1), call("c2", "add", a=2, b=2)), final("done")]
    run = Loop(ScriptedModel(script), tools=tools).start("go")
    run.finish()
    run.decide({"c1": agentloop.approve(), "c2": agentloop.deny("not this one")})
    result = run.finish()
    assert result.transcript[-2]["status"] == "denied"
    assert replayed(result) == result
