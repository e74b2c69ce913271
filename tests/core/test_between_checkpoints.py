"""Between checkpoints: an interruption, or a cancellation, where nothing is outstanding.

Each working state has an ``interrupted`` row (a ``KeyboardInterrupt`` in a
listener, say, while no request is out) and its engine-fired trigger checks
cancellation first. These pin the rows no run of the other tests takes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from agentloop import CancelToken, Loop, State
from agentloop.context import summarise
from agentloop.engine import Budget, Engine, Guard, Trigger
from agentloop.models import RetryPolicy
from agentloop.testing import ScriptedModel, call, final
from tests.support.helpers import add

if TYPE_CHECKING:
    from agentloop import Transition
    from tests.support.helpers import Driver

Message = dict[str, Any]
BIG = "y" * 120  # about 30 tokens by the default counter


def writer(history: list[Message]) -> Message:
    """A summariser that writes one line."""
    return {"kind": "final", "text": "the story so far"}


def summarising(token: CancelToken, budget: Budget | None = None) -> Engine:
    """An engine in ``summarising``: four turns given, one fits the policy, a summary is due."""
    history: list[Message] = [{"kind": "user", "text": "go"}]
    for n in range(1, 5):
        history.append({"kind": "call", "id": f"c{n}", "name": "echo", "arguments": {"x": BIG}})
        history.append(
            {"kind": "tool_result", "id": f"c{n}", "name": "echo", "status": "ok", "content": BIG}
        )
    engine = Engine(
        history, budget=budget or Budget(), cancel=token, context=summarise(writer, tokens=200)
    )
    made = engine.next()
    assert engine.state is State.SUMMARISING
    assert made.guard is Guard.SUMMARY_DUE  # type: ignore[union-attr]
    return engine


@pytest.mark.row("summarising --summarise [cancel_requested]--> cancelled")
def test_a_cancel_before_the_summariser_is_asked_ends_the_run_there() -> None:
    """Cancelled once a summary is due: the summariser is not called, no step is spent."""
    token = CancelToken()
    engine = summarising(token)
    token.cancel()
    made = engine.next()
    assert (made.trigger, made.guard, made.dest) == (  # type: ignore[union-attr]
        Trigger.SUMMARISE,
        Guard.CANCEL_REQUESTED,
        State.CANCELLED,
    )
    assert (engine.steps, engine.calls, len(engine.result().transcript)) == (0, 0, 9)


@pytest.mark.row(
    "summarising --summarise [steps_exhausted]--> exhausted",
    "summarising --summarise [tokens_exhausted]--> exhausted",
)
@pytest.mark.parametrize(
    ("spent", "reason"), [("steps", "max_steps"), ("tokens", "max_total_tokens")]
)
def test_a_summary_is_a_step_under_the_budgets(spent: str, reason: str) -> None:
    """A summary spends a step: with the budget spent, the run ends exhausted, unasked.

    The ask that leads to ``summarising`` checked the same budgets, so no run
    of the protocol arrives spent; the rows hold the summary to its budget
    anyway, and this sets the run's counter to show it.
    """
    engine = summarising(CancelToken(), Budget(max_steps=3, max_total_tokens=10))
    if spent == "steps":
        engine._run.steps = 3
    else:
        engine._run.tokens = 10
    made = engine.next()
    assert (made.dest, made.reason) == (State.EXHAUSTED, reason)  # type: ignore[union-attr]


@pytest.mark.row("summarising --summary_raised [cancel_requested]--> cancelled")
def test_a_summariser_that_raises_after_a_cancel_ends_the_run_cancelled() -> None:
    """Cancelled while the summariser worked, then it raised: cancelled, not failed."""
    token = CancelToken()
    engine = summarising(token)
    engine.next()  # the Summarise request: the step is spent
    token.cancel()
    made = engine.raised(RuntimeError("gone"))
    assert (made.trigger, made.guard, made.dest) == (
        Trigger.SUMMARY_RAISED,
        Guard.CANCEL_REQUESTED,
        State.CANCELLED,
    )
    assert (engine.steps, made.error) == (1, None)


def interrupted_in(state: State) -> Engine:
    """An engine in ``state`` with nothing outstanding (an interruption lands there)."""
    if state is State.SUMMARISING:
        return summarising(CancelToken())
    retry = RetryPolicy(base=0.0, jitter=0.0, sleep=lambda seconds, token: None)
    engine = Engine("go", budget=Budget(max_steps=3, max_calls=2), retry=retry)
    if state is State.AWAITING_MODEL:
        return engine
    engine.next()
    if state is State.BACKING_OFF:
        engine.raised(TimeoutError("slow"))
    else:
        engine.replied(call("c1", "add", a=1, b=2))
    assert engine.state is state
    return engine


@pytest.mark.row(
    "awaiting_model --interrupted--> cancelled",
    "validating --interrupted--> cancelled",
    "summarising --interrupted--> cancelled",
    "backing_off --interrupted--> cancelled",
)
@pytest.mark.parametrize(
    "state",
    [State.AWAITING_MODEL, State.VALIDATING, State.SUMMARISING, State.BACKING_OFF],
    ids=lambda state: state.value,
)
def test_an_interruption_between_checkpoints_ends_the_run_cancelled(state: State) -> None:
    """Nothing outstanding: the interruption ends the run cancelled there, nothing appended."""
    engine = interrupted_in(state)
    before = (engine.steps, engine.calls, engine.history())
    made = engine.interrupted(KeyboardInterrupt())
    assert made is not None
    assert (made.source, made.trigger, made.dest) == (state, Trigger.INTERRUPTED, State.CANCELLED)
    assert (made.appended_json, type(made.exception)) == ((), KeyboardInterrupt)
    assert (engine.steps, engine.calls, engine.history()) == before
    # A reply in hand is kept for review, never appended.
    rejected = engine.result().rejected
    assert rejected == (call("c1", "add", a=1, b=2) if state is State.VALIDATING else None)


@pytest.mark.row("awaiting_model --interrupted--> cancelled")
def test_an_interrupt_in_a_listener_after_a_batch_ends_the_run_there(driver: Driver) -> None:
    """A listener that raises KeyboardInterrupt once the batch is appended: cancelled there."""

    def listener(transition: Transition) -> None:
        if transition.trigger is Trigger.TOOL_RETURNED:
            raise KeyboardInterrupt

    loop = Loop(
        ScriptedModel([call("c1", "add", a=1, b=2), final("3")]),
        tools={"add": add},
        listeners=[listener],
    )
    run = driver.start(loop, "go")
    with pytest.raises(KeyboardInterrupt):
        for _ in run:
            pass
    result = run.result()
    assert (result.status, result.steps, result.calls) == ("cancelled", 1, 1)
    last = result.events[-1]
    assert (last.source, last.trigger) == (State.AWAITING_MODEL, Trigger.INTERRUPTED)
    assert [m["kind"] for m in result.transcript] == ["user", "call", "tool_result"]
