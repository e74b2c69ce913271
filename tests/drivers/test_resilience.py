"""Retries with backoff, fallback models and continuing a failed run (issue 26, items 2-4)."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import CancelToken, InvalidStateError, Loop, State
from agentloop.engine import Engine, Trigger, Wait
from agentloop.ledger import SQLiteLedger, view_run
from agentloop.models import RetryPolicy, Transient, fallback, mark, transient
from agentloop.review import run_from_json, run_to_json
from agentloop.testing import AsyncScriptedModel, ScriptedModel, assert_contract
from tests.support import ROOT
from tests.support.helpers import Driver, add, call, final

if TYPE_CHECKING:
    from pathlib import Path

    from agentloop import RunResult


class Sleeps:
    """A sleeper that waits no time and keeps every wait it was asked for."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float, token: CancelToken | None) -> None:
        self.waits.append(seconds)


def policy(sleeps: Sleeps | None = None, **kwargs: Any) -> RetryPolicy:
    """A retry policy with seeded jitter that sleeps through ``sleeps`` (no time passes)."""
    kwargs.setdefault("sleep", sleeps or Sleeps())
    return RetryPolicy(random=random.Random(7).random, **kwargs)


def rows(result: RunResult) -> list[tuple[str, str, str]]:
    """Each event as (trigger, guard, dest)."""
    return [
        (e.trigger.value, e.guard.value if e.guard else "", e.dest.value) for e in result.events
    ]


# -- retries ------------------------------------------------------------------------


@pytest.mark.row(
    "awaiting_model --model_raised [retry_planned]--> backing_off",
    "backing_off --back_off--> (stays)",
    "backing_off --waited--> awaiting_model",
)
def test_a_failed_step_waits_then_asks_again_step_by_step() -> None:
    """Each attempt is a step; backing_off hands out the wait; the transcript gains nothing."""
    sleeps = Sleeps()
    model = ScriptedModel([TimeoutError("slow"), final("ok")])
    run = Loop(model, retry=policy(sleeps)).start("hi")
    first = run.step()
    assert (first.dest, first.guard, run.steps) == (State.BACKING_OFF, "retry_planned", 1)
    assert first.error == "the model raised TimeoutError: slow"
    assert first.wait is not None
    assert 0 < first.wait <= 0.5
    assert run.transcript == [{"kind": "user", "text": "hi"}]
    assert sleeps.waits == []  # not yet: the wait is the next transition's
    waited = run.step()
    assert (waited.trigger, waited.dest, run.steps) == (Trigger.WAITED, State.AWAITING_MODEL, 1)
    assert sleeps.waits == [first.wait]  # exactly the recorded wait, not drawn again
    replied = run.step()
    assert (replied.trigger, run.steps) == (Trigger.MODEL_REPLIED, 2)
    result = run.finish()
    assert (result.status, result.output, result.steps) == ("finished", "ok", 2)
    assert len(model.seen) == 2
    assert_contract(result, "hi")


def test_the_engine_hands_out_the_recorded_wait_and_refuses_out_of_order_reports() -> None:
    """``next()`` in backing_off is ``Wait(seconds)``; a second ``next()`` or a reply is refused."""
    engine = Engine("hi", retry=policy())
    engine.next()
    raised = engine.raised(ConnectionError("reset"))
    need = engine.next()
    assert type(need) is Wait
    assert need.seconds == raised.wait
    with pytest.raises(agentloop.InvalidStateError, match="back_off is outstanding"):
        engine.next()
    with pytest.raises(agentloop.InvalidStateError, match="cannot take a model reply"):
        engine.replied(final())
    assert engine.waited().dest is State.AWAITING_MODEL


def test_retries_run_out_then_the_run_fails(driver: Driver) -> None:
    """With attempts=3, three failed asks end the run failed; the last error is its error."""
    model = ScriptedModel([TimeoutError("a"), ConnectionError("b"), TimeoutError("c")])
    result = driver.run(Loop(model, retry=policy(attempts=3)), "hi")
    assert rows(result) == [
        ("model_raised", "retry_planned", "backing_off"),
        ("waited", "", "awaiting_model"),
        ("model_raised", "retry_planned", "backing_off"),
        ("waited", "", "awaiting_model"),
        ("model_raised", "", "failed"),
    ]
    assert (result.steps, result.error) == (3, "the model raised TimeoutError: c")
    assert_contract(result, "hi")


def test_an_error_the_policy_does_not_retry_fails_at_once(driver: Driver) -> None:
    """A ValueError is no passing error: no wait, no second ask."""
    sleeps = Sleeps()
    result = driver.run(Loop(ScriptedModel([ValueError("bad")]), retry=policy(sleeps)), "hi")
    assert (rows(result), result.steps, sleeps.waits) == (
        [("model_raised", "", "failed")],
        1,
        [],
    )


def test_plain_callbacks_are_not_retried_by_default(driver: Driver) -> None:
    """The seed's contract: a plain model that raises a TimeoutError fails the run at step 1."""
    loop = Loop(ScriptedModel([TimeoutError("slow")]))
    assert loop.retry is None
    result = driver.run(loop, "hi")
    assert (result.status, result.steps, len(result.events)) == ("failed", 1, 1)


def test_max_steps_bounds_the_attempts(driver: Driver) -> None:
    """Retries are steps: a budget of 2 ends the run exhausted before a third ask."""
    model = ScriptedModel([TimeoutError("a"), TimeoutError("b"), final()])
    result = driver.run(Loop(model, retry=policy(attempts=5), max_steps=2), "hi")
    assert (result.status, result.reason, result.steps) == ("exhausted", "max_steps", 2)
    assert len(model.seen) == 2


def test_the_wait_grows_and_honours_retry_after_up_to_the_cap() -> None:
    """Exponential backoff within jitter, at least Retry-After, and past the cap no retry."""
    none = policy(jitter=0.0, attempts=10, base=1.0, factor=2.0, cap=5.0)
    waits = [none.wait_for(TimeoutError(), n) for n in range(5)]
    assert waits == [1.0, 2.0, 4.0, 5.0, 5.0]
    limited = ValueError("429")
    mark(limited, "rate_limit", retry_after=3.0)
    assert none.wait_for(limited, 0) == 3.0  # more than the backoff of 1 s
    mark(limited, "rate_limit", retry_after=60.0)
    assert none.wait_for(limited, 0) is None  # past the cap: not retried
    assert none.wait_for(TimeoutError(), 9) is None  # the tenth attempt was the last
    jittered = policy(jitter=0.5, base=1.0)
    assert all(0.5 <= (jittered.wait_for(TimeoutError(), 0) or 0) <= 1.0 for _ in range(50))


def test_which_errors_count_is_the_policys() -> None:
    """retry_on picks kinds; classify replaces the classification; bad settings are named."""
    only_limits = policy(retry_on={"rate_limit"})
    assert only_limits.wait_for(TimeoutError(), 0) is None
    assert transient(ConnectionError()) == Transient(kind="connection")
    assert transient(ValueError()) is None
    mine = policy(classify=lambda exc: Transient(kind="server"))
    assert mine.wait_for(ValueError(), 0) is not None
    with pytest.raises(ValueError, match=r"retry_on must hold kinds from .*got \['teapot'\]"):
        RetryPolicy(retry_on={"teapot"})
    with pytest.raises(ValueError, match=r"retry_after to be a finite number .*got inf"):
        mark(ValueError(), "rate_limit", retry_after=float("inf"))
    with pytest.raises(ValueError, match=r"expected kind to be one of .*got 'teapot'"):
        Transient(kind="teapot")
    with pytest.raises(ValueError, match="attempts must be an int of 1 or more, got 0"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match=r"factor must be a finite number, 1 or more .*got 0\.5"):
        RetryPolicy(factor=0.5)  # waits that shrink
    assert RetryPolicy(factor=1).factor == 1  # the same wait each time
    with pytest.raises(TypeError, match=r"expected retry to be an agentloop\.models\.RetryPolicy"):
        Loop(ScriptedModel([]), retry=3)  # type: ignore[call-overload]


@pytest.mark.row("backing_off --back_off [cancel_requested]--> cancelled")
def test_a_cancel_before_the_wait_ends_the_run_without_waiting(driver: Driver) -> None:
    """Cancelled as the run enters backing_off: back_off [cancel_requested], nothing waited."""
    token, sleeps = CancelToken(), Sleeps()

    def cancel_on_backoff(transition: agentloop.Transition) -> None:
        if transition.dest is State.BACKING_OFF:
            token.cancel()

    loop = Loop(
        ScriptedModel([TimeoutError("a")]), retry=policy(sleeps), listeners=[cancel_on_backoff]
    )
    result = driver.run(loop, "hi", cancel=token)
    assert rows(result)[-1] == ("back_off", "cancel_requested", "cancelled")
    assert sleeps.waits == []


@pytest.mark.row("backing_off --waited [cancel_requested]--> cancelled")
def test_a_cancel_during_the_wait_wins_at_once(driver: Driver) -> None:
    """A wait of a minute, cancelled as it starts, ends at once: waited [cancel_requested]."""
    token = CancelToken()

    def cancel_then_wait(seconds: float, given: CancelToken | None) -> None:
        assert given is token
        token.cancel()
        agentloop.models.sleep(60.0, given)  # the drivers' own wait: woken by the cancel

    slow = RetryPolicy(base=60.0, jitter=0.0, sleep=cancel_then_wait)
    model = ScriptedModel([TimeoutError("a"), final()])
    result = driver.run(Loop(model, retry=slow), "hi", cancel=token)
    assert rows(result) == [
        ("model_raised", "retry_planned", "backing_off"),
        ("waited", "cancel_requested", "cancelled"),
    ]
    assert (result.status, result.steps, len(model.seen)) == ("cancelled", 1, 1)


async def test_a_cancel_from_another_thread_wakes_the_asyncio_wait() -> None:
    """The asyncio driver's own wait (``asleep``) ends as soon as another thread cancels."""
    token = CancelToken()

    async def cancel_then_wait(seconds: float, given: CancelToken | None) -> None:
        threading.Thread(target=token.cancel).start()
        await agentloop.models.asleep(60.0, given)

    slow = RetryPolicy(base=60.0, jitter=0.0, sleep=cancel_then_wait)
    loop = Loop(AsyncScriptedModel([TimeoutError("a"), final()]), retry=slow)
    result = await asyncio.wait_for(loop.arun("hi", cancel=token), timeout=30)
    assert rows(result)[-1] == ("waited", "cancel_requested", "cancelled")


@pytest.mark.row("backing_off --wait_interrupted--> cancelled")
def test_an_interrupt_during_the_wait_ends_the_run_cancelled() -> None:
    """A KeyboardInterrupt in the wait is wait_interrupted; the run ends, then it propagates."""

    def interrupted(seconds: float, token: CancelToken | None) -> None:
        raise KeyboardInterrupt

    run = Loop(ScriptedModel([TimeoutError("a")]), retry=policy(sleep=interrupted)).start("hi")
    with pytest.raises(KeyboardInterrupt):
        run.finish()
    assert rows(run.result())[-1] == ("wait_interrupted", "", "cancelled")


def test_a_retried_run_round_trips_and_replays_its_recorded_waits() -> None:
    """A run file keeps each wait; loading replays it without asking any policy."""
    model = ScriptedModel([TimeoutError("a"), final("ok")])
    result = Loop(model, retry=policy()).run("hi")
    loaded = run_from_json(run_to_json(result))
    assert loaded == result
    assert [e.wait for e in loaded.events] == [e.wait for e in result.events]
    assert '"wait":' in run_to_json(result)
    assert '"wait"' not in run_to_json(Loop(ScriptedModel([final()])).run("hi"))  # optional


# -- a property: attempts never exceed the policy, and each is a step --------------------

_ENTRIES = st.sampled_from(["timeout", "value", "final"])


@settings(max_examples=60, deadline=None)
@given(
    script=st.lists(_ENTRIES, min_size=1, max_size=12),
    attempts=st.integers(1, 4),
    models=st.integers(1, 3),
    max_steps=st.integers(1, 10),
)
def test_attempts_never_exceed_the_policy_and_all_are_steps(
    script: list[str], attempts: int, models: int, max_steps: int
) -> None:
    """Consecutive failed asks of one model never pass ``attempts``; every ask is a step."""
    made: dict[str, type[Exception]] = {"timeout": TimeoutError, "value": ValueError}
    asked: list[str] = []

    def model_named(name: str) -> Any:
        def model(history: list[dict[str, Any]]) -> object:
            asked.append(name)
            entry = script[len(asked) - 1] if len(asked) <= len(script) else "final"
            if entry == "final":
                return final("done")
            raise made[entry](entry)

        model.__name__ = name
        return model

    chain = [model_named(f"m{i}") for i in range(models)]
    loop = Loop(
        chain[0] if models == 1 else fallback(*chain),
        retry=policy(attempts=attempts),
        max_steps=max_steps,
    )
    result = loop.run("hi")
    assert_contract(result, "hi")
    asks = [e for e in result.events if e.trigger in ("model_replied", "model_raised")]
    assert result.steps == len(asked) == len(asks) <= max_steps
    run_length = 0
    for event in result.events:
        if event.trigger == "model_raised":
            run_length += 1
            assert run_length <= attempts
            assert (event.wait is not None) == (event.guard == "retry_planned")
        if event.trigger == "model_replied" or event.guard == "fallback_left":
            run_length = 0
    assert sum(e.guard == "fallback_left" for e in result.events) <= models - 1
    assert run_from_json(run_to_json(result)) == result


# -- fallback models --------------------------------------------------------------------


@pytest.mark.row("awaiting_model --model_raised [fallback_left]--> awaiting_model")
def test_the_fallback_answers_when_the_primary_fails_for_good(driver: Driver) -> None:
    """A non-retryable error moves on at once; the event names each model; usage per model."""
    primary = ScriptedModel([ValueError("down")])
    secondary = ScriptedModel(
        [{**final("from b"), "usage": {"input_tokens": 5, "output_tokens": 2, "cached_tokens": 0}}]
    )
    loop = Loop(fallback(primary, secondary, names=["a", "b"]), retry=policy())
    result = driver.run(loop, "hi")
    assert rows(result) == [
        ("model_raised", "fallback_left", "awaiting_model"),
        ("model_replied", "", "validating"),
        ("validate", "reply_is_final", "finished"),
    ]
    assert [e.model for e in result.events] == ["a", "b", None]
    assert (result.output, result.steps) == ("from b", 2)
    assert result.usage_by_model == {"b": agentloop.Usage(5, 2, 0)}
    assert result.usage == agentloop.Usage(5, 2, 0)
    assert_contract(result, "hi")


def test_the_fallback_takes_over_once_retries_run_out_and_budgets_count_across(
    driver: Driver,
) -> None:
    """Two retried failures of the primary, then the secondary; max_steps counts them all."""
    primary = ScriptedModel([TimeoutError("a"), TimeoutError("b")])
    secondary = ScriptedModel([call("c1"), final("done")])
    loop = Loop(fallback(primary, secondary), tools=[add], retry=policy(attempts=2), max_steps=4)
    result = driver.run(loop, "hi")
    assert [e.guard.value for e in result.events if e.guard and e.trigger == "model_raised"] == [
        "retry_planned",
        "fallback_left",
    ]
    assert (result.status, result.steps) == ("finished", 4)
    short = Loop(
        fallback(ScriptedModel([TimeoutError("a")] * 2), ScriptedModel([call("c1"), final()])),
        tools=[add],
        retry=policy(attempts=2),
        max_steps=3,
    )
    assert driver.run(short, "hi").reason == "max_steps"


@pytest.mark.parametrize("asynchronous", [False, True], ids=["run", "arun"])
def test_fallback_models_are_asked_with_tools_disabled_in_the_wrap_up_step(
    asynchronous: bool,
) -> None:
    """The wrap-up step's tool_choice reaches the fallback chain's model that takes it."""
    choices: list[object] = []

    def primary(history: list[dict[str, Any]], tool_choice: object = None) -> dict[str, Any]:
        choices.append(tool_choice)
        return final("from a") if tool_choice == "none" else call(f"c{len(choices)}")

    loop = Loop(
        fallback(primary, ScriptedModel([])), tools=[add], max_steps=1, on_exhausted="answer"
    )
    result = asyncio.run(loop.arun("hi")) if asynchronous else loop.run("hi")
    assert choices == [None, "none"]
    assert (result.status, result.reason, result.output, result.steps) == (
        "finished",
        "max_steps",
        "from a",
        2,
    )
    assert_contract(result, "hi")


def test_the_wrap_up_step_is_one_step_with_no_retry_and_no_fallback(driver: Driver) -> None:
    """A model that raises in the wrap-up step ends the run failed: steps stay max_steps + 1."""
    primary = ScriptedModel([call("c1"), TimeoutError("slow")])
    secondary = ScriptedModel([final("never asked")])
    sleeps = Sleeps()
    loop = Loop(
        fallback(primary, secondary),
        tools=[add],
        retry=policy(sleeps, attempts=3),
        max_steps=1,
        on_exhausted="answer",
    )
    result = driver.run(loop, "hi")
    assert rows(result)[-2:] == [
        ("ask_model", "wrap_up_due", "awaiting_model"),
        ("model_raised", "", "failed"),
    ]
    assert (result.status, result.steps, result.error) == (
        "failed",
        2,
        "the model raised TimeoutError: slow",
    )
    assert (sleeps.waits, secondary.remaining) == ([], 1)
    assert_contract(result, "hi")


def test_the_last_model_failing_fails_the_run() -> None:
    """With no model left, the run fails with the last model's error."""
    result = Loop(fallback(ScriptedModel([ValueError("a")]), ScriptedModel([ValueError("b")]))).run(
        "x"
    )
    assert (result.status, result.error) == ("failed", "the model raised ValueError: b")


def test_fallback_refuses_what_it_cannot_ask() -> None:
    """One model, a mix of plain and async, or names that clash are refused, saying why."""
    with pytest.raises(ValueError, match="at least two models"):
        fallback(ScriptedModel([]))
    with pytest.raises(TypeError) as mixed:
        fallback(ScriptedModel([]), AsyncScriptedModel([]))
    assert str(mixed.value) == (
        "expected every model to be plain or every one async def (one driver asks them all), "
        "got a mix: models[0] (ScriptedModel) is plain, models[1] (AsyncScriptedModel) is "
        "async def"
    )
    with pytest.raises(ValueError, match="names to differ"):
        fallback(ScriptedModel([]), ScriptedModel([]), names=["a", "a"])
    named = fallback(ScriptedModel([]), ScriptedModel([]))
    assert named.names == ("ScriptedModel", "ScriptedModel#2")


# -- continuing a failed run ----------------------------------------------------------------


def test_continue_run_goes_on_from_the_transcript_with_fresh_budgets(driver: Driver) -> None:
    """The new run's input is the old transcript; the link is kept; budgets start again."""
    old = Loop(ScriptedModel([call("c1"), ValueError("down")]), tools=[add], max_steps=5).run("hi")
    assert old.status == "failed"
    loop = Loop(ScriptedModel([final("done")]), tools=[add], max_steps=1)
    new = loop.continue_run(old, continues="old-1")
    assert (new.status, new.output, new.steps, new.continues) == (
        "finished",
        "done",
        1,
        "old-1",
    )
    assert new.transcript[: len(old.transcript)] == old.transcript
    assert run_from_json(run_to_json(new)).continues == "old-1"
    assert_contract(new, old.transcript)


def test_continue_run_takes_an_exhausted_run_and_refuses_a_finished_one() -> None:
    """Exhausted goes on; finished or cancelled is refused, naming the status."""
    exhausted = Loop(ScriptedModel([call("c1")]), tools=[add], max_steps=1).run("hi")
    assert exhausted.status == "exhausted"
    assert Loop(ScriptedModel([final()]), tools=[add]).continue_run(exhausted).continues is None
    finished = Loop(ScriptedModel([final()])).run("hi")
    with pytest.raises(
        ValueError,
        match="expected a failed or exhausted run to continue, got one that is 'finished'",
    ):
        Loop(ScriptedModel([])).continue_run(finished)
    with pytest.raises(ValueError, match=r"^continue_run\('r-1'\) names a run in a ledger, and"):
        Loop(ScriptedModel([])).continue_run("r-1")


def test_continue_run_of_another_end_names_the_ways_that_go_on() -> None:
    """A cancelled, malformed or repeated_call run is refused naming its status and the ways
    on (a fork at an event before its end, a new run after it), and both of those work;
    resume() would only hand the ended run back."""
    token = CancelToken()
    token.cancel()
    ended = [
        Loop(ScriptedModel([final()])).run("hi", cancel=token),
        Loop(ScriptedModel([{"kind": "bogus"}])).run("hi"),
        Loop(ScriptedModel([call("c1"), call("c1")]), tools=[add]).run("hi"),
    ]
    assert [run.status for run in ended] == ["cancelled", "malformed", "repeated_call"]
    for run in ended:
        loop = Loop(ScriptedModel([final("on"), final("on")]), tools=[add])
        with pytest.raises(ValueError, match=r"^expected a failed or exhausted run") as refused:
            loop.continue_run(run)
        assert str(refused.value) == (
            f"expected a failed or exhausted run to continue, got one that is "
            f"{run.status.value!r}: fork it at an event before its end instead "
            "(loop.fork(run, at=...)), or begin a new run from its transcript "
            "(loop.run(text, after=run), or loop.run([*run.transcript, message]) on a Loop "
            "with a ledger)"
        )
        assert loop.resume(run) == run
        assert loop.fork(run, at=0).finish().output == "on"
        after = loop.run("again", after=run)
        assert (after.status, after.transcript[: len(run.transcript)]) == (
            "finished",
            run.transcript,
        )


def test_continue_run_by_id_in_a_ledger_is_linked_in_the_record(tmp_path: Path) -> None:
    """A durable failed run is continued by id: the new run's header keeps the run it continues."""
    ledger = SQLiteLedger(tmp_path / "runs.db")
    Loop(ScriptedModel([ValueError("down")]), ledger=ledger).run("hi", run_id="first")
    new = Loop(ScriptedModel([final("ok")]), ledger=ledger).continue_run("first", run_id="second")
    assert (new.status, new.continues) == ("finished", "first")
    again = Loop(ScriptedModel([]), ledger=ledger).resume("second")
    assert again == new
    assert again.continues == "first"
    with pytest.raises(ValueError, match="a run given by id is the one it goes on from"):
        Loop(ScriptedModel([]), ledger=ledger).continue_run("first", continues="x")


def test_continue_run_by_id_takes_this_loops_budget_and_tools(tmp_path: Path) -> None:
    """An exhausted durable run, continued by id by a Loop with a bigger budget and one more
    tool: the old run is read as recorded, the new one has this Loop's configuration."""
    ledger = SQLiteLedger(tmp_path / "runs.db")
    looping = ScriptedModel([call("c1", a=1, b=2), call("c2", a=2, b=3)])
    old = Loop(looping, tools=[add], max_steps=1, ledger=ledger).run("hi", run_id="first")
    assert (old.status, old.reason) == ("exhausted", "max_steps")

    def mul(a: int, b: int) -> int:
        return a * b

    model = ScriptedModel([call("c3", name="mul", a=2, b=3), final("6")])
    loop = Loop(model, tools=[add, mul], max_steps=5, ledger=ledger)
    new = loop.continue_run("first", run_id="second")
    assert (new.status, new.output, new.steps, new.continues) == ("finished", "6", 2, "first")
    assert new.transcript[: len(old.transcript)] == old.transcript
    assert new.transcript[len(old.transcript) + 1]["content"] == 6
    running = Loop(ScriptedModel([call("c9", a=1, b=1)]), tools=[add], ledger=ledger)
    running.start("hi", run_id="third").step()  # asked the model: not ended
    with pytest.raises(InvalidStateError, match="run 'third' has not ended"):
        loop.continue_run("third")


def test_a_fork_names_the_run_it_forks_and_takes_a_run_id(tmp_path: Path) -> None:
    """fork("first", at=...) reads a ledger's run by id; a fork of a durable run is linked to
    it as continue_run's new run is (continues, kept by its header and its run file)."""
    ledger = SQLiteLedger(tmp_path / "runs.db")
    script = [call("c1", a=1, b=2), final("3")]
    first = Loop(ScriptedModel(script), tools=[add], ledger=ledger).run("hi", run_id="first")
    loop = Loop(ScriptedModel([final("three")]), tools=[add], ledger=ledger)
    fork = loop.fork("first", at=2, run_id="fork").finish()
    assert (fork.status, fork.output, fork.continues, fork.run_id) == (
        "finished",
        "three",
        "first",
        "fork",
    )
    assert fork.events[:2] == tuple(e._replace(at=None, took=None) for e in first.events[:2])
    assert Loop(ScriptedModel([]), tools=[add], ledger=ledger).resume("fork").continues == ("first")
    assert run_from_json(run_to_json(fork)).continues == "first"
    assert view_run(ledger, "first").result.run_id == "first"  # a view names its run
    in_memory = Loop(ScriptedModel([final("3!")]), tools=[add]).fork(first, at=2).finish()
    assert in_memory.continues == "first"
    plain = Loop(ScriptedModel(script), tools=[add]).run("hi")
    again = Loop(ScriptedModel([final("3!")]), tools=[add]).fork(plain, at=2).finish()
    assert again.continues is None  # a run that was not durable has no id to name


def test_a_durable_runs_result_names_it_and_continuing_the_result_links_to_it(
    tmp_path: Path,
) -> None:
    """result.run_id is the ledger's id, kept by its run file; continue_run(result) links to
    it without continues=, which still wins when given; a plain run's id is None."""
    ledger = SQLiteLedger(tmp_path / "runs.db")
    failed = Loop(ScriptedModel([ValueError("down")]), ledger=ledger).run("hi", run_id="first")
    assert failed.run_id == "first"
    assert run_from_json(run_to_json(failed)).run_id == "first"
    new = Loop(ScriptedModel([final("ok")]), ledger=ledger).continue_run(failed, run_id="second")
    assert (new.run_id, new.continues) == ("second", "first")
    named = Loop(ScriptedModel([final("ok")])).continue_run(failed, continues="mine")
    assert (named.run_id, named.continues) == (None, "mine")
    assert Loop(ScriptedModel([final()])).run("hi").run_id is None


def test_agentloop_show_names_the_run_a_ledger_run_continues(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``agentloop show runs.db <id>`` prints which run a continued run goes on from."""
    from agentloop.__main__ import main

    path = tmp_path / "runs.db"
    Loop(ScriptedModel([ValueError("down")]), ledger=SQLiteLedger(path)).run("hi", run_id="one")
    Loop(ScriptedModel([final()]), ledger=SQLiteLedger(path)).continue_run("one", run_id="two")
    capsys.readouterr()
    assert main(["show", str(path), "two"]) == 0
    assert "continues run one" in capsys.readouterr().out


def test_show_and_the_report_name_the_run_continued() -> None:
    """The text view and the HTML report say which run this one continues."""
    from agentloop._review.report import report_html
    from agentloop._review.text import run_lines

    old = Loop(ScriptedModel([ValueError("down")])).run("hi")
    new = Loop(ScriptedModel([final()])).continue_run(old, continues="old-7")
    assert "continues run old-7" in run_lines(new, title="t", limit=None)
    assert 'id="summary-continues">old-7<' in report_html(new)


# -- durable: the retries already made still count after a resume -----------------------------

_KILLED_IN_THE_WAIT = """
import os, signal, sys
import agentloop
from agentloop.models import RetryPolicy
from agentloop.testing import ScriptedModel

def die(seconds, token):
    os.kill(os.getpid(), signal.SIGKILL)  # killed during the wait, nothing more recorded

loop = agentloop.Loop(
    ScriptedModel([TimeoutError("slow")]),
    retry=RetryPolicy(attempts=2, sleep=die),
    ledger=agentloop.ledger.SQLiteLedger(sys.argv[1]),
)
loop.run("hi", run_id="r")
"""


def test_a_durable_run_killed_during_a_wait_resumes_with_its_retries_counted(
    tmp_path: Path,
) -> None:
    """SIGKILLed in the wait: the resume waits the recorded wait, and the retry already made
    still counts (of two attempts, the next failure is the last)."""
    path = tmp_path / "runs.db"
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_IN_THE_WAIT, str(path)],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    sleeps = Sleeps()
    model = ScriptedModel([TimeoutError("again")])
    loop = Loop(model, retry=policy(sleeps, attempts=2), ledger=SQLiteLedger(path))
    resumed = loop.resume("r")
    assert rows(resumed) == [
        ("model_raised", "retry_planned", "backing_off"),
        ("waited", "", "awaiting_model"),
        ("model_raised", "", "failed"),
    ]
    assert sleeps.waits == [resumed.events[0].wait]  # the dead process's wait, not a new one
    assert (resumed.steps, len(model.seen)) == (2, 1)


def test_a_run_file_with_a_wait_the_replay_does_not_make_is_refused() -> None:
    """A wait added to an event that did not retry is fed back, and the row it makes differs."""
    text = run_to_json(Loop(ScriptedModel([ValueError("x")])).run("hi"))
    forged = text.replace('"exception":', '"wait":1.5,"exception":', 1)
    assert forged != text
    with pytest.raises(
        agentloop.review.RunFileError, match=r"\$\.events\[0\]: expected .*retry_planned"
    ):
        run_from_json(forged)


def test_a_durable_run_with_fallback_models_resumes_and_forks(tmp_path: Path) -> None:
    """The ledger header names the fallback models, so a resume and a fork replay them."""
    ledger = SQLiteLedger(tmp_path / "runs.db")

    def interrupted(seconds: float, token: CancelToken | None) -> None:
        raise KeyboardInterrupt

    chain = fallback(ScriptedModel([ValueError("a")]), ScriptedModel([TimeoutError("b")]))
    loop = Loop(chain, retry=policy(sleep=interrupted), ledger=ledger)
    with pytest.raises(KeyboardInterrupt):
        loop.run("hi", run_id="f")
    resumed = Loop(chain, ledger=ledger, retry=policy()).resume("f")
    assert rows(resumed) == [
        ("model_raised", "fallback_left", "awaiting_model"),
        ("model_raised", "retry_planned", "backing_off"),
        ("wait_interrupted", "", "cancelled"),
    ]
    assert [e.model for e in resumed.events] == ["ScriptedModel", "ScriptedModel#2", None]
    forked = Loop(fallback(ScriptedModel([]), ScriptedModel([final("fork")])), ledger=ledger).fork(
        resumed, at=1, run_id="f2"
    )
    assert forked.finish().output == "fork"


@pytest.mark.parametrize("cancel", [None, CancelToken()], ids=["no token", "a token"])
def test_the_drivers_own_tiny_wait_then_the_retry(
    driver: Driver, cancel: CancelToken | None
) -> None:
    """With no sleeper of the policy's, each driver waits itself (a millisecond), then asks."""
    tiny = RetryPolicy(base=0.001, jitter=0.0)
    model = ScriptedModel([TimeoutError("a"), final("ok")])
    result = driver.run(Loop(model, retry=tiny), "hi", cancel)
    assert (result.status, result.steps, result.events[0].wait) == ("finished", 2, 0.001)
    assert result.events[1].took is not None


async def test_acontinue_run_goes_on_under_asyncio() -> None:
    """The asyncio form takes a failed run and an async model the same way."""
    failed = await Loop(AsyncScriptedModel([ValueError("down")])).arun("hi")
    new = await Loop(AsyncScriptedModel([final("ok")])).acontinue_run(failed, continues="p")
    assert (new.status, new.output, new.continues) == ("finished", "ok", "p")


def test_a_run_resumed_under_other_fallback_models_is_refused(tmp_path: Path) -> None:
    """A run's answers each name their model, or none does: under other fallback models (or
    none) its record could not be read back, so a resume is refused, naming the models."""
    ledger = SQLiteLedger(tmp_path / "runs.db")

    def chain(*script: list[object], names: list[str]) -> Any:
        return fallback(*(ScriptedModel(replies) for replies in script), names=names)

    recorded = chain([ValueError("down")], [final("b")], names=["one", "two"])
    assert Loop(recorded, ledger=ledger).run("hi", run_id="f").output == "b"
    for other, now in (
        (ScriptedModel([]), []),
        (chain([], [], names=["two", "one"]), ["two", "one"]),
    ):
        with pytest.raises(agentloop.ConfigurationMismatchError) as refused:
            Loop(other, ledger=ledger).resume("f")
        assert refused.value.differences == [f"models: recorded ['one', 'two'], now {now}"]
    assert Loop(chain([], [], names=["one", "two"]), ledger=ledger).resume("f").output == "b"
    saved = Loop(chain([ValueError("down")], [final("b")], names=["one", "two"])).run("hi")
    with pytest.raises(agentloop.ConfigurationMismatchError, match=r"models: the run's \['one'"):
        Loop(ScriptedModel([])).resume(saved)
    assert Loop(chain([], [], names=["one", "two"])).resume(saved) == saved
