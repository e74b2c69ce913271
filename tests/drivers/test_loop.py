"""Step-by-step scenarios: status, counters, transcript and handler effects together."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import pytest

import agentloop
from agentloop import CancelToken, Loop, State
from agentloop.testing import ScriptedModel, assert_contract
from tests.support.helpers import AsyncDriver, Driver, Recorder, add, call, drive, final, kinds

if TYPE_CHECKING:
    from pathlib import Path

A, V, D = "awaiting_model", "validating", "dispatching"


@pytest.mark.row(
    "awaiting_model --ask_model--> (stays)",
    "awaiting_model --model_replied--> validating",
    "validating --validate--> dispatching",
    "dispatching --start_tool--> (stays)",
    "dispatching --tool_returned--> awaiting_model",
)
def test_tool_then_final(driver: Driver) -> None:
    """A call is dispatched, its result fed back, and the final answer ends the run."""
    add = Recorder()
    model = ScriptedModel([call("c1", a=2, b=2), final("4")])
    run = driver.start(Loop(model, tools={"add": add}, max_steps=3, max_calls=1), "What is 2+2?")

    assert run.state == "awaiting_model"
    assert (run.steps, run.calls, run.done) == (0, 0, False)

    t = run.step()
    assert (t.source, t.dest, t.trigger, t.steps, t.calls) == (A, V, "model_replied", 1, 0)
    t = run.step()
    assert (t.source, t.dest, t.call_id, t.tool, t.steps, t.calls) == (V, D, "c1", "add", 1, 1)
    assert add.calls == []  # reserved and counted, not yet run
    assert kinds(run.transcript) == ["user"]
    t = run.step()
    assert (t.source, t.dest, t.result_status, t.call_id) == (D, A, "ok", "c1")
    assert add.calls == [{"a": 2, "b": 2}]
    assert kinds(run.transcript) == ["user", "call", "tool_result:ok"]
    assert run.transcript[2] == {
        "kind": "tool_result",
        "id": "c1",
        "name": "add",
        "status": "ok",
        "content": 4,
    }
    # The model saw the result of its call on its next step.
    run.step()
    assert model.seen[1][-1]["content"] == 4
    t = run.step()
    assert (t.source, t.dest, t.guard) == (V, "finished", "reply_is_final")
    assert run.done

    result = run.result()
    assert result.status == "finished"
    assert result.status is State.FINISHED
    assert (result.output, result.steps, result.calls) == ("4", 2, 1)
    assert (result.reason, result.error, result.rejected) == (None, None, None)
    assert kinds(result.transcript) == ["user", "call", "tool_result:ok", "final"]
    assert [e.dest for e in result.events] == [V, D, A, V, "finished"]


def test_tools_may_be_a_list_of_tools_and_handlers(driver: Driver) -> None:
    """tools=[Tool(...), handler] becomes a registry, as ToolRegistry([...]) does."""

    def sub(a: int, b: int) -> int:
        return a - b

    loop = Loop(
        ScriptedModel(
            [
                call("c1", a=2, b=2),
                call("c2", "minus", a=5, b=3),
                call("c3", "sub", a=5, b=3),
                final("ok"),
            ]
        ),
        tools=[sub, agentloop.Tool(add, idempotent=True)],
        max_calls=3,
    )
    assert isinstance(loop.dispatcher, agentloop.ToolRegistry)
    assert [tool.name for tool in loop.dispatcher] == ["sub", "add"]
    assert loop.dispatcher["add"].idempotent is True
    result = driver.run(loop, "go")
    results = [m for m in result.transcript if m["kind"] == "tool_result"]
    assert [(m["status"], m["content"]) for m in results[:1]] == [("ok", 4)]
    assert results[1]["status"] == "unknown_tool"  # the function's name is the tool's: "sub"
    assert (results[2]["status"], results[2]["content"]) == ("ok", 2)


@pytest.mark.row("validating --validate [calls_exhausted]--> exhausted")
def test_call_beyond_budget_is_exhausted(driver: Driver) -> None:
    """A new call after the last permitted one stops the run; nothing runs."""
    add = Recorder()
    model = ScriptedModel([call("c1", a=1, b=1), call("c2", a=2, b=2)])
    result = driver.run(Loop(model, tools={"add": add}, max_steps=5, max_calls=1), "go")

    assert result.status == "exhausted"
    assert result.reason == "max_calls"
    assert (result.steps, result.calls) == (2, 1)
    assert add.calls == [{"a": 1, "b": 1}]
    assert kinds(result.transcript) == ["user", "call", "tool_result:ok"]
    assert result.rejected == call("c2", a=2, b=2)
    assert result.events[-1].guard == "calls_exhausted"
    assert result.events[-1].call_id == "c2"


@pytest.mark.row("validating --validate [reply_is_final]--> finished")
def test_final_after_last_call_is_accepted(driver: Driver) -> None:
    """Final is checked before the call budget: a conclusion at the cap is kept."""
    model = ScriptedModel([call("c1", a=1, b=2), final("3")])
    result = driver.run(Loop(model, tools={"add": Recorder()}, max_steps=2, max_calls=1), "go")

    assert result.status == "finished"
    assert (result.output, result.steps, result.calls) == ("3", 2, 1)


@pytest.mark.row("awaiting_model --ask_model [steps_exhausted]--> exhausted")
def test_final_needs_a_step_left(driver: Driver) -> None:
    """With no model step left the run is exhausted before the model is asked."""
    model = ScriptedModel([call("c1", a=1, b=2), final("3")])
    run = driver.start(Loop(model, tools={"add": Recorder()}, max_steps=1, max_calls=1), "go")

    assert drive(run) == [(A, V), (V, D), (D, A), (A, "exhausted")]
    result = run.result()
    assert (result.reason, result.steps, result.calls) == ("max_steps", 1, 1)
    assert len(model.seen) == 1  # the model was not asked a second time


@pytest.mark.row("validating --validate [call_id_reserved]--> repeated_call")
def test_repeated_id_stops_and_nothing_runs_twice(driver: Driver) -> None:
    """Reusing a call id ends the run with repeated_call; the tool ran once."""
    add = Recorder()
    model = ScriptedModel([call("c1", a=1, b=1), call("c1", a=1, b=1)])
    result = driver.run(Loop(model, tools={"add": add}, max_steps=5, max_calls=5), "go")

    assert result.status == "repeated_call"
    assert (result.steps, result.calls) == (2, 1)
    assert add.calls == [{"a": 1, "b": 1}]
    assert kinds(result.transcript) == ["user", "call", "tool_result:ok"]
    assert result.error is not None
    assert "'c1'" in result.error
    assert result.rejected == call("c1", a=1, b=1)


def test_repeated_id_from_the_input_history(driver: Driver) -> None:
    """An id already present in the input history is reserved too."""
    history = [
        {"kind": "user", "text": "hi"},
        call("old", a=1, b=1),
        {"kind": "tool_result", "id": "old", "name": "add", "status": "ok", "content": 2},
    ]
    add = Recorder()
    result = driver.run(Loop(ScriptedModel([call("old", a=5, b=5)]), tools={"add": add}), history)

    assert result.status == "repeated_call"
    assert (result.steps, result.calls, add.calls) == (1, 0, [])
    assert result.transcript == history


def test_repeated_id_is_checked_before_the_call_budget(driver: Driver) -> None:
    """Table order: repeated_call wins over exhausted when both hold."""
    model = ScriptedModel([call("c1", a=1, b=1), call("c1", a=1, b=1)])
    result = driver.run(Loop(model, tools={"add": Recorder()}, max_steps=5, max_calls=1), "go")

    assert result.status == "repeated_call"


@pytest.mark.row("awaiting_model --model_replied [cancel_requested]--> cancelled")
def test_cancel_from_inside_the_model(driver: Driver) -> None:
    """The model cancels while working: its reply is dropped and no tool runs."""
    token = CancelToken()
    add = Recorder()

    def cancelling(history: list[dict[str, Any]]) -> dict[str, Any]:
        token.cancel()
        return call("c1", a=1, b=1)

    model = ScriptedModel([cancelling])
    run = driver.start(Loop(model, tools={"add": add}), "go", cancel=token)
    t = run.step()

    assert (t.source, t.dest, t.trigger, t.guard) == (
        A,
        "cancelled",
        "model_replied",
        "cancel_requested",
    )
    assert run.done
    result = run.result()
    assert result.status == "cancelled"
    assert (result.steps, result.calls, add.calls) == (1, 0, [])
    assert kinds(result.transcript) == ["user"]
    assert result.rejected == call("c1", a=1, b=1)


@pytest.mark.row("awaiting_model --model_raised [cancel_requested]--> cancelled")
def test_cancel_while_the_model_raises(driver: Driver) -> None:
    """A cancellation seen after the model raised wins over failed."""
    token = CancelToken()

    def cancel_then_raise(history: list[dict[str, Any]]) -> object:
        token.cancel()
        raise ValueError("boom")

    result = driver.run(Loop(ScriptedModel([cancel_then_raise])), "go", cancel=token)
    assert result.status == "cancelled"
    assert (result.steps, result.error) == (1, None)


@pytest.mark.row("awaiting_model --ask_model [cancel_requested]--> cancelled")
def test_cancel_before_asking_the_model(driver: Driver) -> None:
    """A token cancelled up front stops the run without calling the model."""
    token = CancelToken()
    token.cancel()
    model = ScriptedModel([final()])
    run = driver.start(Loop(model), "go", cancel=token)

    assert drive(run) == [(A, "cancelled")]
    assert (run.steps, model.seen) == (0, [])


@pytest.mark.row("dispatching --start_tool [cancel_requested]--> cancelled")
def test_cancel_between_validating_and_the_tool(driver: Driver) -> None:
    """Cancelled after validation accepted the call: the tool still does not run."""
    token = CancelToken()
    add = Recorder()
    run = driver.start(
        Loop(ScriptedModel([call("c1", a=1, b=1)]), tools={"add": add}), "go", cancel=token
    )
    run.step()
    run.step()
    assert run.state == "dispatching"
    token.cancel()
    t = run.step()

    assert (t.source, t.dest, t.trigger, t.call_id) == (D, "cancelled", "start_tool", "c1")
    assert add.calls == []
    result = run.result()
    assert kinds(result.transcript) == ["user"]  # no call without its result
    assert result.calls == 1  # it was accepted and counted before the cancellation


@pytest.mark.row("validating --validate [cancel_requested]--> cancelled")
def test_cancel_seen_at_validation(driver: Driver) -> None:
    """Cancelled after the reply was accepted but before validation: nothing counted."""
    token = CancelToken()
    add = Recorder()
    run = driver.start(
        Loop(ScriptedModel([call("c1", a=1, b=1)]), tools={"add": add}), "go", cancel=token
    )
    run.step()
    token.cancel()
    t = run.step()

    assert (t.source, t.dest, t.guard) == (V, "cancelled", "cancel_requested")
    assert (run.calls, add.calls) == (0, [])


def test_final_wins_over_cancel_at_validation(driver: Driver) -> None:
    """Table order: a final answer is accepted even when cancel arrives during validation."""
    token = CancelToken()
    run = driver.start(Loop(ScriptedModel([final("ok")])), "go", cancel=token)
    run.step()
    token.cancel()
    assert run.step().dest == "finished"


@pytest.mark.row("validating --validate [reply_malformed]--> malformed")
@pytest.mark.parametrize(
    ("reply", "fragment"),
    [
        ("just text", "expected the reply to be a dict, got str"),
        (
            {"kind": "answer", "text": "x"},
            "expected 'kind' to be 'call', 'calls' or 'final', got 'answer'",
        ),
        ({"kind": "final"}, "missing ['text']"),
        ({"kind": "final", "text": 3}, "expected 'text' to be a str, got int"),
        ({"kind": "final", "text": "x", "extra": 1}, "unexpected ['extra']"),
        ({"kind": "call", "id": "", "name": "add", "arguments": {}}, "'id' to be a non-empty str"),
        ({"kind": "call", "id": "c", "name": 7, "arguments": {}}, "'name' to be a non-empty str"),
        ({"kind": "call", "id": "c", "name": "add", "arguments": []}, "'arguments' to be a dict"),
        (
            {"kind": "call", "id": "c", "name": "add", "arguments": {"a": {1, 2}}},
            "reply.arguments.a",
        ),
        ({"kind": "final", "text": float("nan")}, "expected a finite number"),
        (None, "got NoneType"),
    ],
)
def test_malformed_output(driver: Driver, reply: object, fragment: str) -> None:
    """A reply that is neither a call nor a final ends the run; the step counts."""
    add = Recorder()
    result = driver.run(Loop(ScriptedModel([reply]), tools={"add": add}), "go")

    assert result.status == "malformed"
    assert (result.steps, result.calls, add.calls) == (1, 0, [])
    assert kinds(result.transcript) == ["user"]
    assert result.error is not None
    assert fragment in result.error
    assert result.events[-1].guard == "reply_malformed"


def test_malformed_reply_is_kept_for_review(driver: Driver) -> None:
    """A reply that is not JSON is kept as its repr, taken on intake: later changes miss it."""
    reply: dict[str, Any] = {"kind": "call", "id": "c", "name": "add", "arguments": {"a": {1}}}
    result = driver.run(Loop(ScriptedModel([reply])), "go")
    reply["arguments"]["a"].add(2)
    assert result.rejected == agentloop.review.NotJSON(
        "{'kind': 'call', 'id': 'c', 'name': 'add', 'arguments': {'a': {1}}}",
        "reply.arguments.a: expected a JSON value (dict, list, str, int, float, bool or None), "
        "got set",
    )


@pytest.mark.row("awaiting_model --model_raised--> failed")
def test_model_exception(driver: Driver) -> None:
    """A model that raises ends the run failed; the step counts and the error says what."""
    error = RuntimeError("provider down")
    run = driver.start(Loop(ScriptedModel([error])), "go")
    t = run.step()

    assert (t.source, t.dest, t.trigger) == (A, "failed", "model_raised")
    assert t.exception is error
    result = run.result()
    assert result.status == "failed"
    assert (result.steps, result.calls) == (1, 0)
    assert result.error == "the model raised RuntimeError: provider down"
    assert kinds(result.transcript) == ["user"]


@pytest.mark.row("awaiting_model --model_interrupted--> cancelled")
def test_keyboard_interrupt_in_the_model_propagates(driver: Driver) -> None:
    """A non-Exception propagates unchanged; the run ends cancelled, the step counted."""
    interrupt = KeyboardInterrupt()
    run = driver.start(Loop(ScriptedModel([interrupt, final("after")])), "go")
    with pytest.raises(KeyboardInterrupt) as caught:
        run.step()

    assert caught.value is interrupt
    assert (run.state, run.steps, run.calls, run.done) == ("cancelled", 1, 0, True)
    assert kinds(run.transcript) == ["user"]
    event = run.events[-1]
    assert (event.source, event.trigger, event.guard) == (A, "model_interrupted", None)
    assert event.exception is interrupt
    assert run.result().status == "cancelled"


@pytest.mark.row("dispatching --tool_interrupted--> cancelled")
def test_keyboard_interrupt_in_a_tool_pairs_the_call(driver: Driver) -> None:
    """A tool interrupted by a non-Exception: the call gets a cancelled result, never re-runs."""
    runs = []

    def slow(**kwargs: Any) -> int:
        runs.append(kwargs)
        raise KeyboardInterrupt

    model = ScriptedModel([call("c1", name="slow"), final()])
    run = driver.start(Loop(model, tools={"slow": slow}, max_concurrency=1), "go")
    run.step()
    run.step()
    with pytest.raises(KeyboardInterrupt):
        run.step()

    assert (run.state, run.steps, run.calls, len(runs)) == ("cancelled", 1, 1, 1)
    assert kinds(run.transcript) == ["user", "call", "tool_result:cancelled"]
    assert run.transcript[-1]["content"] == {"type": "KeyboardInterrupt", "message": ""}
    event = run.events[-1]
    assert (event.trigger, event.result_status, event.call_id) == (
        "tool_interrupted",
        "cancelled",
        "c1",
    )
    assert isinstance(event.exception, KeyboardInterrupt)
    assert run.result().rejected is None  # the call is in the transcript, not rejected
    with pytest.raises(agentloop.InvalidStateError):
        run.step()
    assert len(runs) == 1


@pytest.mark.parametrize("status", [["ok"], {"s": 1}, None, 3])
def test_dispatcher_with_a_status_that_is_not_a_string(driver: Driver, status: object) -> None:
    """An unhashable or non-str status is an error result, not a crash."""

    class Odd:
        def dispatch(self, call: dict[str, Any]) -> dict[str, Any]:
            return {"status": status, "content": None}

    result = driver.run(Loop(ScriptedModel([call("c1"), final()]), tools=Odd()), "go")
    assert kinds(result.transcript) == ["user", "call", "tool_result:error", "final"]
    assert "the dispatcher's outcome was not valid" in result.transcript[2]["content"]


def test_dispatcher_may_not_claim_cancelled(driver: Driver) -> None:
    """Only a driver records 'cancelled'; a dispatcher answering it gets an error result."""

    class Liar:
        def dispatch(self, call: dict[str, Any]) -> dict[str, Any]:
            return {"status": "cancelled", "content": None}

    result = driver.run(Loop(ScriptedModel([call("c1"), final()]), tools=Liar()), "go")
    assert kinds(result.transcript) == ["user", "call", "tool_result:error", "final"]
    assert "the dispatcher's outcome was not valid" in result.transcript[2]["content"]


def test_steps_budget_counts_every_invocation(driver: Driver) -> None:
    """Failed outcomes still spend model steps; the run stops at max_steps."""
    model = ScriptedModel([call(f"c{i}", name="nope") for i in range(5)])
    result = driver.run(Loop(model, max_steps=3, max_calls=10), "go")

    assert result.status == "exhausted"
    assert result.reason == "max_steps"
    assert (result.steps, result.calls) == (3, 3)
    assert kinds(result.transcript) == ["user"] + ["call", "tool_result:unknown_tool"] * 3


def test_zero_budgets(driver: Driver) -> None:
    """max_steps=0 never calls the model; max_calls=0 still allows a final."""
    model = ScriptedModel([final()])
    assert driver.run(Loop(model, max_steps=0), "go").status == "exhausted"
    assert model.seen == []
    assert driver.run(Loop(ScriptedModel([final("x")]), max_calls=0), "go").output == "x"


def test_loop_is_reusable_and_runs_are_independent(driver: Driver) -> None:
    """Each run has its own counters, reserved ids and history."""
    add = Recorder()

    def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        if history[-1]["kind"] == "user":
            return call("same-id", a=1, b=1)
        return final(history[0]["text"])

    loop = Loop(model, tools={"add": add}, max_calls=1)
    first, second = driver.run(loop, "one"), driver.run(loop, "two")

    assert (first.status, first.output, first.calls) == ("finished", "one", 1)
    assert (second.status, second.output, second.calls) == ("finished", "two", 1)
    assert len(add.calls) == 2


def test_listeners_see_every_transition_in_order(driver: Driver) -> None:
    """Subscribed listeners receive each transition as it happens; the transcript follows them."""
    seen: list[agentloop.Transition] = []
    loop = Loop(ScriptedModel([call("c1", a=1, b=1), final()]), tools={"add": Recorder()})
    run = driver.start(loop, "go")
    run.subscribe(seen.append)
    drive(run)
    result = run.result()

    assert tuple(seen) == result.events
    rebuilt = [{"kind": "user", "text": "go"}]
    for event in seen:
        rebuilt.extend(event.appended)
    assert rebuilt == result.transcript


def test_loop_level_listeners(driver: Driver) -> None:
    """Listeners given to Loop are subscribed to every run it starts."""
    seen: list[str] = []
    loop = Loop(ScriptedModel([final(), final()]), listeners=(lambda t: seen.append(t.dest),))
    driver.run(loop, "a")
    driver.run(loop, "b")
    assert seen == ["validating", "finished"] * 2


class FailsOnce:
    """A listener that raises the first time it hears of ``trigger``, and hears everything."""

    def __init__(self, trigger: str) -> None:
        self.trigger, self.raised, self.heard = trigger, False, list[str]()

    def __call__(self, transition: agentloop.Transition) -> None:
        self.heard.append(transition.trigger.value)
        if transition.trigger == self.trigger and not self.raised:
            self.raised = True
            raise RuntimeError("a listener's bug")


def _run_as(driver: Driver, loop: Loop, run_id: str) -> agentloop.RunResult:
    """``loop.run`` or ``loop.arun`` under the driver, as the durable run ``run_id``."""
    if isinstance(driver, AsyncDriver):
        return driver.runner.run(loop.arun("1+2?", run_id=run_id))
    return loop.run("1+2?", run_id=run_id)


def _finish(driver: Driver, run: Any) -> agentloop.RunResult:
    if isinstance(driver, AsyncDriver):
        return driver.runner.run(run.run.afinish())  # type: ignore[no-any-return]
    return run.finish()  # type: ignore[no-any-return]


def test_a_listener_that_raises_leaves_the_run_where_its_transition_left_it(
    driver: Driver,
) -> None:
    """The exception propagates from ``finish()`` after the transition was made; the listeners
    after the one that raised miss that transition; the run is consistent, and finishing it
    again goes on to the same end as a run whose listener never raised."""
    failing, later = FailsOnce("tool_returned"), list[str]()
    script = [call("c1", a=1, b=2), final("3")]
    model = ScriptedModel(list(script))
    loop = Loop(model, tools={"add": add}, listeners=[failing, lambda t: later.append(t.trigger)])
    run = driver.start(loop, "1+2?")
    with pytest.raises(RuntimeError, match="a listener's bug"):
        _finish(driver, run)
    assert (run.state, run.steps, run.calls) == ("awaiting_model", 1, 1)
    assert kinds(run.transcript) == ["user", "call", "tool_result:ok"]
    assert len(model.seen) == 1
    result = _finish(driver, run)
    clean = driver.run(Loop(ScriptedModel(script), tools={"add": add}), "1+2?")
    assert (result.status, result.output, result.transcript) == (
        clean.status,
        clean.output,
        clean.transcript,
    )
    assert [e[:11] for e in result.events] == [e[:11] for e in clean.events]
    assert failing.heard == [e.trigger.value for e in result.events]
    assert later == [e.trigger.value for e in result.events if e.trigger != "tool_returned"]
    assert_contract(result, "1+2?")


async def test_an_async_listener_that_raises_leaves_the_run_consistent() -> None:
    """Under asyncio an ``async def`` listener that raises does the same: ``afinish()`` again
    goes on from where the run is."""
    raised = False

    async def failing(transition: agentloop.Transition) -> None:
        nonlocal raised
        await asyncio.sleep(0)
        if transition.dest == "validating" and not raised:
            raised = True
            raise RuntimeError("an async listener's bug")

    run = Loop(ScriptedModel([final("done")]), listeners=[failing]).astart("go")
    with pytest.raises(RuntimeError, match="an async listener's bug"):
        await run.afinish()
    assert (run.state, run.steps) == ("validating", 1)
    result = await run.afinish()
    assert (result.status, result.output, result.steps) == ("finished", "done", 1)


def test_a_durable_run_whose_listener_raised_in_run_is_resumed_by_id(
    driver: Driver, tmp_path: Path
) -> None:
    """``loop.run`` hands back no run when a listener raises: with a ledger, the run resumes
    by its id, from the transition the listener heard, and nothing runs twice."""
    add_ = Recorder()
    ledger = agentloop.ledger.SQLiteLedger(tmp_path / "runs.db")
    model = ScriptedModel([call("c1", a=1, b=2), final("3")])
    loop = Loop(model, tools={"add": add_}, ledger=ledger, listeners=[FailsOnce("tool_returned")])
    with pytest.raises(RuntimeError, match="a listener's bug"):
        _run_as(driver, loop, "r1")
    again = Loop(ScriptedModel([final("3")]), tools={"add": add_}, ledger=ledger)
    if isinstance(driver, AsyncDriver):
        result = driver.runner.run(again.aresume("r1"))
    else:
        result = again.resume("r1")
    assert (result.status, result.output, add_.calls) == ("finished", "3", [{"a": 1, "b": 2}])


def test_events_are_a_budget_ledger(driver: Driver) -> None:
    """Counters on events never decrease and end at the result's counters."""
    model = ScriptedModel([call("c1", name="nope"), call("c2", a=1, b=2), final()])
    result = driver.run(Loop(model, tools={"add": Recorder()}), "go")
    steps = [e.steps for e in result.events]
    calls = [e.calls for e in result.events]

    assert steps == sorted(steps)
    assert calls == sorted(calls)
    assert (steps[-1], calls[-1]) == (result.steps, result.calls) == (3, 2)
    statuses = [(e.call_id, e.result_status) for e in result.events if e.trigger == "tool_returned"]
    assert statuses == [("c1", "unknown_tool"), ("c2", "ok")]


CANCEL_INSIDE = "<the model cancels the run, then answers>"


@pytest.mark.parametrize(
    ("replies", "budgets", "path"),
    [
        pytest.param(
            [call("c1", a=1, b=1), final()],
            (3, 3),
            [(A, V), (V, D), (D, A), (A, V), (V, "finished")],
            id="finished",
        ),
        pytest.param([CANCEL_INSIDE], (3, 3), [(A, "cancelled")], id="cancelled"),
        pytest.param(
            [call("c1", a=1, b=1)],
            (1, 3),
            [(A, V), (V, D), (D, A), (A, "exhausted")],
            id="exhausted-steps",
        ),
        pytest.param(
            [call("c1", a=1, b=1), call("c2", a=1, b=1)],
            (3, 1),
            [(A, V), (V, D), (D, A), (A, V), (V, "exhausted")],
            id="exhausted-calls",
        ),
        pytest.param(
            [call("c1", a=1, b=1), call("c1", a=1, b=1)],
            (3, 3),
            [(A, V), (V, D), (D, A), (A, V), (V, "repeated_call")],
            id="repeated_call",
        ),
        pytest.param(["garbage"], (3, 3), [(A, V), (V, "malformed")], id="malformed"),
        pytest.param([ValueError("x")], (3, 3), [(A, "failed")], id="failed"),
    ],
)
def test_path_to_each_terminal_state(
    driver: Driver, replies: list[object], budgets: tuple[int, int], path: list[tuple[str, str]]
) -> None:
    """Each terminal state is reached by exactly the expected sequence of transitions."""
    token = CancelToken()

    def cancel_inside(history: list[dict[str, Any]]) -> dict[str, Any]:
        token.cancel()
        return final()

    script = ScriptedModel([cancel_inside if r == CANCEL_INSIDE else r for r in replies])
    loop = Loop(script, tools={"add": Recorder()}, max_steps=budgets[0], max_calls=budgets[1])
    run = driver.start(loop, "go", cancel=token)
    assert drive(run) == path
    assert run.result().status == path[-1][1]


def test_a_model_that_steps_its_own_run_is_refused() -> None:
    """Re-entrant step() from inside the model cannot ask the model a second time."""
    holder: list[Any] = []
    errors: list[Exception] = []

    def reentrant(history: list[dict[str, Any]]) -> dict[str, Any]:
        try:
            holder[0].step()
        except agentloop.InvalidStateError as exc:
            errors.append(exc)
        return final("once")

    model = ScriptedModel([reentrant])
    run = Loop(model).start("go")
    holder.append(run)
    drive(run)
    assert (run.result().output, run.steps, len(model.seen)) == ("once", 1, 1)
    assert "ask_model is outstanding" in str(errors[0])


class Unprintable(Exception):
    """An exception whose message cannot be read."""

    def __str__(self) -> str:
        raise RuntimeError("no message for you")


def test_a_model_error_with_a_broken_message(driver: Driver) -> None:
    """An exception whose __str__ raises still fails the run cleanly, with its type named."""
    result = driver.run(Loop(ScriptedModel([Unprintable()])), "go")
    assert (result.status, result.steps) == ("failed", 1)
    assert result.error == "the model raised Unprintable: <unprintable: RuntimeError>"


def test_a_tool_error_with_a_broken_message(driver: Driver) -> None:
    """A handler raising such an exception gives an error result; the loop goes on."""

    def broken() -> None:
        raise Unprintable

    model = ScriptedModel([call("c1", name="broken"), final()])
    result = driver.run(Loop(model, tools={"broken": broken}), "go")
    assert result.status == "finished"
    assert result.transcript[2]["content"] == {
        "type": "Unprintable",
        "message": "<unprintable: RuntimeError>",
    }


def test_each_transition_is_logged_at_debug(
    driver: Driver, caplog: pytest.LogCaptureFixture
) -> None:
    """The 'agentloop' logger gets one DEBUG record per transition, and nothing by default."""
    loop = Loop(ScriptedModel([call("c1", a=1, b=2), final()]), tools={"add": Recorder()})
    with caplog.at_level(logging.WARNING, logger="agentloop"):
        driver.run(loop, "go")
    assert caplog.records == []
    loop = Loop(ScriptedModel([call("c1", a=1, b=2), final()]), tools={"add": Recorder()})
    with caplog.at_level(logging.DEBUG, logger="agentloop"):
        result = driver.run(loop, "go")
    records = [r for r in caplog.records if r.name == "agentloop"]
    assert [r.levelno for r in records] == [logging.DEBUG] * len(result.events)
    assert [r.agentloop_transition for r in records] == list(result.events)  # type: ignore[attr-defined]
    assert records[2].getMessage() == (
        "dispatching --tool_returned--> awaiting_model steps=1 calls=1 call=c1 result=ok"
    )


def test_the_sync_driver_refuses_to_thread_and_takes_timeouts() -> None:
    """to_thread needs asyncio: start() says so, never ignores it; model_timeout and tool_timeout
    are taken, for what the run awaits (tests/drivers/test_async_under_sync.py)."""
    loop = Loop(ScriptedModel([final()]), to_thread=True)
    with pytest.raises(
        ValueError,
        match=r"^to_thread needs the asyncio driver \(loop.arun or loop.astart\): a synchronous "
        "run runs tools in place$",
    ):
        loop.run("go")
    assert asyncio.run(loop.arun("go")).status == "finished"
    assert Loop(ScriptedModel([final()]), model_timeout=0.2).run("go").status == "finished"
    assert Loop(ScriptedModel([final()]), tool_timeout=0.2).run("go").status == "finished"


TIMEOUT_REFUSED = (
    r"^tool_timeout=0\.1 cannot interrupt the plain tool 'slow': a plain function runs to its "
    r"end in the thread that calls it; make it async def, or pass to_thread=True and run the "
    r"loop with loop\.arun \(or astart\), which runs it in a worker thread$"
)


def test_a_tool_timeout_a_plain_tool_would_run_past_is_refused(tmp_path: Path) -> None:
    """tool_timeout over a plain tool cannot bite (it runs to its end in place): Loop(...)
    refuses it, naming the tool and the ways out, rather than let the tool run past it; a
    plain tool added to the registry later is refused when a run begins, on either driver,
    before the model is asked or anything is recorded."""
    released = Recorder()

    def slow() -> str:
        released.calls.append({})
        return "done"

    with pytest.raises(ValueError, match=TIMEOUT_REFUSED):
        Loop(ScriptedModel([call("c1", "slow"), final()]), tools=[slow], tool_timeout=0.1)

    async def quick() -> str:
        return "quick"

    registry = agentloop.ToolRegistry([quick])
    asked: list[int] = []

    def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        asked.append(len(history))
        return final()

    ledger = agentloop.ledger.SQLiteLedger(tmp_path / "runs.db")
    loop = Loop(model, tools=registry, tool_timeout=0.1, ledger=ledger)
    registry.add(slow)
    with pytest.raises(ValueError, match=TIMEOUT_REFUSED):
        loop.run("go", run_id="r1")
    with pytest.raises(ValueError, match=TIMEOUT_REFUSED):
        asyncio.run(loop.arun("go", run_id="r2"))
    assert (asked, released.calls, list(ledger.run_ids())) == ([], [], [])


@pytest.mark.parametrize("how", ["async def, loop.run", "async def, loop.arun", "to_thread"])
def test_a_tool_timeout_bites_where_it_can(how: str) -> None:
    """An async def tool (under either driver), or a plain one in a worker thread (to_thread
    under arun): past tool_timeout the call is an error result, and the run goes on."""
    import threading

    gate = threading.Event()

    def held() -> str:
        gate.wait(5)
        return "late"

    async def awaited() -> str:
        await asyncio.sleep(5)
        return "late"

    def release(transition: agentloop.Transition) -> None:
        if transition.trigger == "tool_returned":
            gate.set()  # the worker thread, past its timeout, ends now

    slow = held if how == "to_thread" else awaited
    slow.__name__ = "slow"
    loop = Loop(
        ScriptedModel([call("c1", "slow"), final()]),
        tools=[slow],
        tool_timeout=0.05,
        to_thread=how == "to_thread",
        listeners=[release],
    )
    result = loop.run("go") if how == "async def, loop.run" else asyncio.run(loop.arun("go"))
    assert result.status == "finished"
    assert result.transcript[2]["status"] == "error"
    assert result.transcript[2]["content"] == {
        "type": "TimeoutError",
        "message": "the tool did not finish within tool_timeout=0.05 s",
    }


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_plain_models_reply_past_the_model_timeout_is_a_timeout(driver: str) -> None:
    """A plain model answering in place cannot be interrupted: its reply is read against
    model_timeout when it comes, and a late one is a TimeoutError (its usage still recorded),
    which the retry policy retries like any timeout; one in time is taken."""
    import time

    from agentloop.models import RetryPolicy
    from agentloop.testing import with_usage

    asked: list[int] = []

    def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        asked.append(len(history))
        if len(asked) == 1:
            time.sleep(0.06)
        return with_usage(final("4"), 10, 2)

    def run(retry: RetryPolicy | None) -> agentloop.RunResult:
        loop = Loop(model, model_timeout=0.03, retry=retry)
        return loop.run("go") if driver == "sync" else asyncio.run(loop.arun("go"))

    failed = run(None)
    assert (failed.status, failed.steps) == ("failed", 1)
    assert failed.error == "the model raised TimeoutError: no reply within model_timeout=0.03 s"
    assert failed.usage == agentloop.Usage(10, 2, 0)  # the late reply was paid for
    asked.clear()
    retried = run(RetryPolicy(sleep=lambda seconds, token: None))
    assert (retried.status, retried.output, retried.steps) == ("finished", "4", 2)
    assert [e.trigger for e in retried.events][:2] == ["model_raised", "waited"]


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_an_async_models_late_reply_that_never_waited_is_a_timeout(driver: str) -> None:
    """An ``async def`` model that answers without ever suspending gives the deadline's timer
    no turn: its reply is read against model_timeout when it comes, as a plain model's is."""
    import time

    from agentloop.testing import with_usage

    async def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        time.sleep(0.04)  # work that never awaits
        return with_usage(final("4"), 10, 2)

    loop = Loop(model, model_timeout=0.01)
    result = loop.run("go") if driver == "sync" else asyncio.run(loop.arun("go"))
    assert (result.status, result.steps) == ("failed", 1)
    assert result.error == "the model raised TimeoutError: no reply within model_timeout=0.01 s"
    assert result.usage == agentloop.Usage(10, 2, 0)  # the late reply was paid for
    assert result.transcript == [{"kind": "user", "text": "go"}]


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_the_model_timeout_of_a_stream_runs_from_the_ask(driver: str) -> None:
    """A plain model that takes the whole model_timeout to hand back its stream (waiting for
    the response's headers, say) has no time left to read it: the step fails, and the stream
    is closed unread."""
    import time

    from agentloop.streaming import chunked

    read: list[object] = []

    def model(history: list[dict[str, Any]]) -> Any:
        time.sleep(0.06)

        def stream() -> Any:
            for item in chunked(final("4")):
                read.append(item)
                yield item

        return stream()

    loop = Loop(model, model_timeout=0.03)
    result = loop.run("go") if driver == "sync" else asyncio.run(loop.arun("go"))
    assert (result.status, read) == ("failed", [])
    assert result.error is not None
    assert "model_timeout=0.03 s" in result.error
    assert result.transcript == [{"kind": "user", "text": "go"}]


def test_listeners_are_checked_when_the_loop_is_built() -> None:
    """A listener that is not callable is refused by Loop(...), naming its position."""
    with pytest.raises(TypeError, match=r"expected listeners\[1\] to be callable, got int"):
        Loop(ScriptedModel([]), listeners=[print, 3])  # type: ignore[list-item]


def test_a_single_listener_not_in_a_list_is_refused() -> None:
    """listeners=fn (not [fn]) says what was expected, rather than 'not iterable'."""
    with pytest.raises(TypeError, match=r"expected listeners to be an iterable of callables"):
        Loop(ScriptedModel([]), listeners=print)  # type: ignore[call-overload]


def test_review_functions_refuse_a_run_in_place_of_its_result() -> None:
    """save_run, to_mermaid and report_html take a RunResult, and say how to get one."""
    run = Loop(ScriptedModel([final()])).start("go")
    run.finish()
    for review in (
        agentloop.review.run_to_json,
        agentloop.review.to_mermaid,
        agentloop.review.report_html,
    ):
        with pytest.raises(TypeError, match=r"expected a RunResult .*got Run; call run.result"):
            review(run)  # type: ignore[arg-type]
    # Each names itself, not the function it calls.
    for name in ("to_dot", "to_svg", "save_run"):
        with pytest.raises(TypeError, match=rf"^{name}\(\) expected a RunResult .*got Run"):
            getattr(agentloop.review, name)(run, *(["run.json"] if name == "save_run" else []))


def test_run_file_functions_name_what_they_expect(tmp_path: Path) -> None:
    """Arguments swapped or of the wrong kind: each says which function, what, and what came."""
    result = Loop(ScriptedModel([final()])).run("go")
    path = tmp_path / "run.json"
    with pytest.raises(TypeError, match=r"^save_run\(\) expected a RunResult .*got PosixPath"):
        agentloop.review.save_run(path, result)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^save_run\(\) expected a path .*got int"):
        agentloop.review.save_run(result, 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^load_run\(\) expected a path .*got RunResult"):
        agentloop.review.load_run(result)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^run_from_json\(\) expected .*text .*got dict"):
        agentloop.review.run_from_json({"format": "agentloop-run"})  # type: ignore[arg-type]
    assert not path.exists()  # nothing was written by the refused call
    agentloop.review.save_run(result, path)
    assert agentloop.review.load_run(path) == result
    assert agentloop.review.load_run(bytes(path)) == result  # what open() takes, load_run takes
    text = agentloop.review.run_to_json(result).encode()
    assert agentloop.review.run_from_json(bytearray(text)) == result
    assert agentloop.review.run_from_json(memoryview(text)) == result  # type: ignore[arg-type]


def test_fork_and_continue_run_name_both_forms_they_take() -> None:
    """fork and continue_run take a run id or a RunResult, and say so when given neither."""
    loop = Loop(ScriptedModel([final(), final()]))
    run = loop.start("go")
    either = r"expected a run id \(a str\) or a RunResult .*got "
    with pytest.raises(TypeError, match=rf"^fork\(\) {either}int"):
        loop.fork(3, at=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=rf"^fork\(\) {either}Run; call run.result"):
        loop.fork(run, at=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=rf"^continue_run\(\) {either}NoneType"):
        loop.continue_run(None)  # type: ignore[arg-type]
