"""Output validators (``Loop(output_validators=[...])``), step by step on both drivers.

A validator checks a final the output schema accepted, in the driver: the
engine hands out ``CheckOutput`` and records the problems reported
(``output_checked``), so a replay or a resume feeds them back and never calls
a validator again.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import attrs
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import Loop, Retry, RunContext
from agentloop._review.diagram import taken
from agentloop._review.text import describe
from agentloop.engine import CheckOutput, Engine
from agentloop.review import load_run, run_from_json, run_to_json, save_run
from agentloop.testing import ScriptedModel, assert_contract
from tests.conftest import capped
from tests.support.helpers import DRIVERS, Driver, call, final

if TYPE_CHECKING:
    from pathlib import Path

ROME = '{"name": "Rome", "country": "IT"}'
PARIS = '{"name": "Paris", "country": "FR"}'
TOLD = "Your final answer was not accepted:\n- {}\nReply again with a final answer."


@attrs.frozen
class City:
    """A city and its country."""

    name: str
    country: str


@attrs.define
class InFrance:
    """A validator that keeps what it saw, and refuses a city outside France."""

    seen: list[Any] = attrs.field(factory=list)

    def __call__(self, city: City) -> None:
        self.seen.append(city)
        if city.country != "FR":
            raise Retry(f"{city.name} is not in France")


def never(value: object) -> None:
    """A validator that must not be called (a replay feeds the record's answer)."""
    raise AssertionError(f"the validator was called with {value!r}")


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
@pytest.mark.row("validating --validate [output_check_due]--> (stays)")
@pytest.mark.row("validating --output_checked--> validating")
def test_output_validator_retry_counts(driver: Driver) -> None:
    """A Retry sends the final back, as a schema refusal does: a step, an output retry."""
    validator = InFrance()
    loop = Loop(
        ScriptedModel([final(ROME), final(PARIS)]), output=City, output_validators=[validator]
    )
    run = driver.start(loop, "a city")
    path = [(t.source.value, t.trigger.value, t.dest.value, t.steps) for t in run]
    assert path == [
        ("awaiting_model", "model_replied", "validating", 1),
        ("validating", "output_checked", "validating", 1),
        ("validating", "validate", "awaiting_model", 1),
        ("awaiting_model", "model_replied", "validating", 2),
        ("validating", "output_checked", "validating", 2),
        ("validating", "validate", "finished", 2),
    ]
    result = run.result()
    assert (result.status, result.steps, result.calls) == ("finished", 2, 0)
    assert result.output == City("Paris", "FR")
    assert validator.seen == [City("Rome", "IT"), City("Paris", "FR")]  # the value, typed
    checked = [e.input_json for e in result.events if e.trigger == "output_checked"]
    assert checked == [b'["Rome is not in France"]', b"[]"]  # each check's answer, recorded
    assert result.events[2].guard == "output_retry"
    assert result.events[2].error == "invalid output: Rome is not in France"
    assert result.transcript == [
        {"kind": "user", "text": "a city"},
        {"kind": "final", "text": ROME},
        {"kind": "user", "text": TOLD.format("Rome is not in France")},
        {"kind": "final", "text": PARIS},
    ]
    assert_contract(result, "a city")


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
@pytest.mark.row("validating --validate [output_invalid]--> invalid_output")
def test_retry_until_max_output_retries_ends_invalid_output(driver: Driver) -> None:
    """Out of output retries, a refused final ends the run as the schema's refusal does."""
    validator = InFrance()
    loop = Loop(
        ScriptedModel([final(ROME), final(ROME), final(PARIS)]),
        output=City,
        output_validators=[validator],
        max_output_retries=1,
    )
    result = driver.run(loop, "a city")
    assert (result.status, result.steps, result.output) == ("invalid_output", 2, None)
    assert result.error == (
        "the final answer was refused (after 1 output retry): Rome is not in France"
    )
    assert result.rejected == {"kind": "final", "text": ROME}
    assert len(validator.seen) == 2
    assert [e.guard for e in result.events if e.trigger == "validate"] == [
        "output_retry",
        "output_invalid",
    ]


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_a_validator_that_raises_is_a_problem_the_model_is_told(driver: Driver) -> None:
    """Anything but Retry is a problem too, said as what it raised: the run stays in the table."""
    calls: list[str] = []

    def broken(text: str) -> None:
        calls.append(text)
        if len(calls) == 1:
            raise ValueError("no database")

    loop = Loop(ScriptedModel([final("one"), final("two")]), output_validators=[broken])
    result = driver.run(loop, "go")
    said = "the output validator 'test_a_validator_that_raises_is_a_problem_the_model_is_told"
    problem = f"{said}.<locals>.broken' raised ValueError: no database"
    assert (result.status, result.output, result.steps) == ("finished", "two", 2)
    assert calls == ["one", "two"]  # a plain text output: the validator gets the text
    assert result.transcript[2] == {"kind": "user", "text": TOLD.format(problem)}


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_the_first_problem_stops_the_check(driver: Driver) -> None:
    """Validators run in order; a later one sees only what the earlier ones accepted."""
    order: list[str] = []

    def first(text: str) -> None:
        order.append(f"first {text}")
        if text == "bad":
            raise Retry("bad")

    def second(text: str) -> None:
        order.append(f"second {text}")

    loop = Loop(ScriptedModel([final("bad"), final("good")]), output_validators=[first, second])
    assert driver.run(loop, "go").output == "good"
    assert order == ["first bad", "first good", "second good"]


@attrs.frozen
class Deps:
    """What the validator and the policy read."""

    country: str


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_context_in_a_policy_and_in_an_output_validator(driver: Driver, tmp_path: Path) -> None:
    """Both get the run's context: deps (the object given), run id, counters; no call in a check."""
    seen: list[RunContext[Deps]] = []

    def policy(call: dict[str, Any], ctx: RunContext[Deps]) -> agentloop.Decision:
        seen.append(ctx)
        return agentloop.allow()

    def where(n: int) -> str:
        """Where."""
        return "FR"

    def validator(city: City, ctx: RunContext[Deps]) -> None:
        seen.append(ctx)
        assert agentloop.current_context() is ctx
        if city.country != ctx.deps.country:
            raise Retry(f"not in {ctx.deps.country}")

    deps = Deps("FR")
    loop = Loop(
        ScriptedModel([call("c1", "where", n=1), final(PARIS)]),
        tools=[agentloop.Tool(where, policy=policy)],
        output=City,
        output_validators=[validator],
        deps_type=Deps,
        ledger=agentloop.ledger.SQLiteLedger(tmp_path / "runs.db"),
    )
    result = driver.run(loop, "a city", deps=deps, run_id="r1")
    assert result.status == "finished"
    checked_by_policy, checked_output = seen
    assert checked_by_policy.deps is deps
    assert checked_output.deps is deps
    assert (checked_by_policy.call_id, checked_by_policy.tool) == ("c1", "where")
    assert (checked_output.call_id, checked_output.tool) == (None, None)
    assert checked_output.run_id == "r1"
    assert (checked_output.steps, checked_output.calls) == (2, 1)
    assert checked_output.idempotency_key is None
    assert checked_output.cancel is not None


def test_async_validators_under_both_drivers() -> None:
    """An async validator is awaited: on the run's own loop by run(), in the task by arun()."""

    async def slow_check(text: str) -> None:
        await asyncio.sleep(0)
        if text == "no":
            raise Retry("say yes")

    def loop() -> Loop:
        return Loop(ScriptedModel([final("no"), final("yes")]), output_validators=[slow_check])

    for result in (loop().run("go"), asyncio.run(loop().arun("go"))):
        assert (result.status, result.output, result.steps) == ("finished", "yes", 2)
        assert result.transcript[2]["text"] == TOLD.format("say yes")


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_a_cancel_during_the_check_does_not_stop_a_final_it_accepts(driver: Driver) -> None:
    """The check is no cancel checkpoint: the final in hand is taken."""
    token = agentloop.CancelToken()

    def cancelling(text: str) -> None:
        token.cancel()

    loop = Loop(ScriptedModel([final("done")]), output_validators=[cancelling])
    result = driver.run(loop, "go", cancel=token)
    assert (result.status, result.output) == ("finished", "done")


@pytest.mark.row("validating --check_interrupted--> cancelled")
def test_an_interruption_during_the_check_ends_the_run_cancelled() -> None:
    """Ctrl-C (or a cancelled task) while a validator runs: cancelled, the final rejected."""

    def interrupted(text: str) -> None:
        raise KeyboardInterrupt

    run = Loop(ScriptedModel([final("done")]), output_validators=[interrupted]).start("go")
    with pytest.raises(KeyboardInterrupt):
        run.finish()
    result = run.result()
    assert (result.status, result.steps) == ("cancelled", 1)
    assert result.events[-1].trigger == "check_interrupted"
    assert result.rejected == {"kind": "final", "text": "done"}

    async def stuck(text: str) -> None:
        await asyncio.Event().wait()

    async def main() -> agentloop.RunResult:
        arun = Loop(ScriptedModel([final("done")]), output_validators=[stuck]).astart("go")
        task = asyncio.create_task(arun.afinish())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return arun.result()

    result = asyncio.run(main())
    assert (result.status, result.events[-1].trigger) == ("cancelled", "check_interrupted")


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_output_check_replays_without_calling_the_validator(driver: Driver, tmp_path: Path) -> None:
    """A run file replays its checks from the record: load_run, resume and fork call none."""
    loop = Loop(
        ScriptedModel([final(ROME), final(PARIS)]), output=City, output_validators=[InFrance()]
    )
    save_run(driver.run(loop, "a city"), tmp_path / "run.json")
    loaded = load_run(tmp_path / "run.json")  # replayed to check it: no validator there
    assert (loaded.status, loaded.output) == ("finished", {"name": "Paris", "country": "FR"})
    again = Loop(ScriptedModel([]), output=City, output_validators=[never])
    assert again.resume(loaded).output == City("Paris", "FR")
    forked = again.fork(loaded, at=3)
    assert [e.trigger for e in forked.events] == ["model_replied", "output_checked", "validate"]
    assert forked.transcript[-1]["text"] == TOLD.format("Rome is not in France")


def test_the_engine_takes_a_check_only_when_it_handed_one_out() -> None:
    """output_checked answers CheckOutput; else it is refused, as problems not a list of str are."""
    engine = Engine("go")
    engine.output_check = lambda value: []
    with pytest.raises(agentloop.InvalidStateError, match="an output check"):
        engine.output_checked([])
    assert type(engine.next()).__name__ == "AskModel"
    engine.replied(final("done"))
    need = engine.next()
    assert isinstance(need, CheckOutput)
    assert need.value == "done"
    for bad in ("wrong", [1], None):
        with pytest.raises(TypeError, match="list of str"):
            engine.output_checked(bad)  # type: ignore[arg-type]
    assert engine.outstanding == "validate"
    made = engine.output_checked(["too short"])
    assert orjson.loads(made.input_json or b"") == ["too short"]
    assert engine.next().guard == "output_retry"  # type: ignore[union-attr]
    with pytest.raises(TypeError, match="output_check"):
        engine.output_check = "check"  # type: ignore[assignment]


def test_bad_validators_are_refused_when_the_loop_is_made() -> None:
    """A validator is a function, and output_validators a list of them."""
    model = ScriptedModel([])
    with pytest.raises(TypeError, match="output_validators to be a list of functions"):
        Loop(model, output_validators=never)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="each output validator to be a function"):
        Loop(model, output_validators=["never"])  # type: ignore[list-item]


@attrs.frozen
class Other:
    """Dependencies of another kind."""


def test_a_validators_deps_are_checked_as_a_tools_are() -> None:
    """RunContext[X] in a validator: X must accept deps_type, and a run must be given deps."""

    def wants_other(text: str, ctx: RunContext[Other]) -> None:
        return None

    def wants_deps(text: str, ctx: RunContext[Deps]) -> None:
        assert ctx.deps == Deps("FR")

    with pytest.raises(
        TypeError, match=r"output validator .*wants_other.* takes RunContext\[Other\]"
    ):
        Loop(ScriptedModel([]), output_validators=[wants_other], deps_type=Deps)
    loop = Loop(ScriptedModel([final("done")]), output_validators=[wants_deps], deps_type=Deps)
    with pytest.raises(TypeError, match="expected deps="):
        loop.run("go")
    assert loop.run("go", deps=Deps("FR")).output == "done"


def test_review_counts_each_check_and_says_what_it_found() -> None:
    """The diagram counts the check's internal row; show and the report say refused or accepted."""
    loop = Loop(
        ScriptedModel([final(ROME), final(PARIS)]), output=City, output_validators=[InFrance()]
    )
    result = loop.run("a city")
    counts = {row.name: n for row, n in taken(result).items() if n}
    assert counts["validating --validate [output_check_due]--> (stays)"] == 2
    assert counts["validating --output_checked--> validating"] == 2
    assert counts["validating --validate [reply_is_final]--> finished"] == 1
    outcomes = [describe(result, i)[-1] for i, e in enumerate(result.events)]
    assert outcomes[1] == "refused: Rome is not in France"
    assert outcomes[4] == "accepted"
    assert "refused: Rome is not in France" in agentloop.review.report_html(result)


@capped(settings(max_examples=200, deadline=None))
@given(
    verdicts=st.lists(st.sampled_from(["ok", "retry", "raise"]), min_size=1, max_size=5),
    retries=st.integers(0, 3),
)
def test_any_verdicts_end_as_the_rows_say_and_replay_without_the_validators(
    verdicts: list[str], retries: int
) -> None:
    """A final per verdict: the run takes the first accepted, or ends invalid_output past
    max_output_retries; each final checked once, the record replays with no validator."""
    retries = min(retries, len(verdicts) - 1)  # a final for each ask the retries allow
    seen: list[str] = []

    def judge(text: str) -> None:
        seen.append(text)
        verdict = verdicts[int(text)]
        if verdict == "retry":
            raise Retry(f"not {text}")
        if verdict == "raise":
            raise LookupError(text)

    finals = [final(str(i)) for i in range(len(verdicts))]
    loop = Loop(
        ScriptedModel(finals), output_validators=[judge], max_output_retries=retries, max_steps=9
    )
    result = loop.run("go")
    accepted = verdicts.index("ok") if "ok" in verdicts else None
    if accepted is not None and accepted <= retries:
        assert (result.status, result.output) == ("finished", str(accepted))
    else:
        assert (result.status, result.steps) == ("invalid_output", retries + 1)
    checked = [str(i) for i in range(result.steps)]
    assert seen == checked  # each final checked once
    assert_contract(result, "go")
    again = run_from_json(run_to_json(result))  # replayed: no validator is called
    assert (again.status, again.steps, len(again.events)) == (
        result.status,
        result.steps,
        len(result.events),
    )
    assert seen == checked


def test_a_teams_finals_are_checked_by_the_first_agents_validators() -> None:
    """With handoffs, the Loop the run started from checks every agent's final."""
    seen: list[str] = []

    def short_only(text: str) -> None:
        seen.append(text)
        if len(text) > 6:
            raise Retry("shorter")

    def unused(text: str) -> None:
        raise AssertionError("only the first agent's validators check")

    billing = Loop(
        ScriptedModel([final("too long"), final("short")]), name="b", output_validators=[unused]
    )
    triage = Loop(
        ScriptedModel([call("h1", "transfer_to_b")]),
        name="a",
        handoffs=[agentloop.handoff(billing)],
        output_validators=[short_only],
    )
    result = triage.run("go")
    assert (result.status, result.output, result.agent) == ("finished", "short", "b")
    assert seen == ["too long", "short"]


@pytest.mark.parametrize("validator", [lambda: None, lambda a, b, c: None], ids=["none", "three"])
def test_a_validator_that_cannot_take_the_value_is_refused_when_the_loop_is_made(
    validator: Any,
) -> None:
    with pytest.raises(TypeError, match=r"output validator '<lambda>'.*\(value\[, ctx\]\)"):
        Loop(ScriptedModel([final("x")]), output_validators=[validator])
