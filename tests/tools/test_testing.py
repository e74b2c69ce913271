"""agentloop.testing: scripted models, contract assertions, strategies, the docs' example."""

from __future__ import annotations

import asyncio
import datetime
import decimal  # the registry resolves tools' annotations at run time
import inspect
import re
import uuid  # as decimal
from typing import Annotated, Any, Literal

import annotated_types
import attrs
import jsonschema
import jsonschema_rs
import orjson
import pydantic
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import CancelToken, Loop, RunResult, Usage
from agentloop.engine import Budget
from agentloop.testing import (
    AsyncScriptedModel,
    ContractViolation,
    ScriptedModel,
    ScriptExhausted,
    assert_chained,
    assert_contract,
    assert_paired,
    assert_transcript_is_input_plus_appended,
    assert_within_budget,
    batch,
    call,
    cancel,
    final,
    with_usage,
)
from agentloop.testing import strategies as als
from tests.conftest import capped
from tests.support import ROOT
from tests.support.helpers import DRIVERS, Driver, import_error
from tests.support.tool_types import Corner  # as decimal

TESTING_PAGE = (ROOT / "docs" / "testing.md").read_text()
MARKER = "<!-- tests/tools/test_testing.py runs this block -->"

# -- a registry with every kind of schema the registry derives ------------------


@attrs.frozen
class Place:
    """A place."""

    city: str
    country: str | None = None


@attrs.frozen
class Tree:
    """A tree of labels: a class that contains itself."""

    label: str
    kids: list[Tree] = attrs.field(factory=list)


def a_week_at_most(c: dict[str, Any]) -> agentloop.Decision:
    """Deny forecasts beyond a week, so that valid calls can be denied too."""
    if c["arguments"].get("days", 1) > 7:
        return agentloop.deny("a week at most")
    return agentloop.allow()


TOOLS = agentloop.ToolRegistry(policy=a_week_at_most)


@TOOLS.tool
def weather(
    place: Place,
    unit: Literal["celsius", "fahrenheit"] = "celsius",
    days: int = 1,
    pair: tuple[int, str] = (1, "a"),
    where: int | Place | None = None,
) -> dict[str, Any]:
    """A forecast; it raises for a day count below 1, so valid calls can end in error."""
    if days < 1:
        raise ValueError(f"expected days >= 1, got {days}")
    return {"city": place.city, "unit": unit, "days": days}


@TOOLS.tool
def tree(t: Tree, **labels: int) -> int:
    """Count a tree's nodes."""
    return 1 + sum(tree(kid) for kid in t.kids)


@TOOLS.tool
def add(a: int, b: float, tags: list[str] | None = None) -> float:
    """Add two numbers."""
    return a + b


# Capped in the fast tier, as a test's own settings are: these decorate inner functions.
PROPERTY = capped(
    settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
)
# No shrinking, and the same examples every time: for tests that collect what is drawn.
COVERAGE = settings(
    max_examples=300,
    derandomize=True,
    database=None,
    phases=[Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)
by_driver = pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)


def first_result(result: RunResult) -> dict[str, Any]:
    results = [m for m in result.transcript if m["kind"] == "tool_result"]
    assert len(results) == 1, result.transcript
    return results[0]


# -- builders -------------------------------------------------------------------


def test_builders_make_well_formed_replies() -> None:
    """call() takes id and name positionally, so arguments may be called id or name."""
    assert call("c1", "greet", name="Ada", id=3) == {
        "kind": "call",
        "id": "c1",
        "name": "greet",
        "arguments": {"name": "Ada", "id": 3},
    }
    assert final("done") == {"kind": "final", "text": "done"}


# -- the scripted model -----------------------------------------------------------


def test_scripted_model_replays_in_order_and_records_histories() -> None:
    """Each reply in turn; seen holds the history of every call, results included."""
    model = ScriptedModel([call("c1", "add", a=1, b=2), final("3")])
    assert (model.size, model.remaining) == (2, 2)
    result = Loop(model, tools=TOOLS).run("1+2?")
    assert (result.status, result.output) == ("finished", "3")
    assert [len(history) for history in model.seen] == [1, 3]
    assert model.seen[1][-1] == {
        "kind": "tool_result",
        "id": "c1",
        "name": "add",
        "status": "ok",
        "content": 3,
    }
    assert model.remaining == 0


def test_scripted_model_raises_entries_and_calls_callables() -> None:
    """An exception entry is raised (the run fails); a callable gets the history."""
    model = ScriptedModel([lambda history: final(f"{len(history)} messages")])
    assert Loop(model).run("hi").output == "1 messages"
    failing = Loop(ScriptedModel([ValueError("no provider")])).run("hi")
    assert failing.status == "failed"
    assert failing.error == "the model raised ValueError: no provider"


def test_a_scripted_model_takes_a_list_of_replies_not_one_reply() -> None:
    """One reply where a list belongs is refused when the model is made, not replayed
    key by key; the repr counts replies in the singular too."""
    for one in (final("hello"), "hello"):
        for kind in (ScriptedModel, AsyncScriptedModel):
            with pytest.raises(TypeError, match=r"expected replies to be a list of replies"):
                kind(one)  # an Iterable to the type checker: caught at run time
    assert repr(ScriptedModel([final("hello")])) == "ScriptedModel(<1 reply, 1 left>)"
    with pytest.raises(TypeError, match=r"^replies\[1\]: expected an exception to raise as an "):
        ScriptedModel([final("a"), RuntimeError])
    assert repr(ScriptedModel(final(str(n)) for n in range(2))) == (
        "ScriptedModel(<2 replies, 2 left>)"
    )


def test_running_out_of_replies_raises_script_exhausted() -> None:
    """Asked once more than it has replies, the model stops the test, and names the size."""
    model = ScriptedModel([call("c1", "add", a=1, b=1)])
    run = Loop(model, tools=TOOLS).start("hi")
    with pytest.raises(
        ScriptExhausted,
        match=r"expected at most 1 model call \(the script has 1 reply\), got call 2; .*"
        r"\(a script plays once: make a new one for each run\)$",
    ):
        for _ in run:
            pass
    # It is an interruption, not a model failure: the run ends cancelled, consistently.
    assert run.state == "cancelled"
    assert not isinstance(ScriptExhausted("x"), Exception)
    assert_contract(run, "hi")


async def test_async_script_exhaustion_propagates_from_arun() -> None:
    """Under asyncio too, exhaustion escapes arun rather than ending the run failed."""
    with pytest.raises(ScriptExhausted, match="the script has 0 replies"):
        await Loop(AsyncScriptedModel([])).arun("hi")


def test_cancel_marker_cancels_while_the_model_works() -> None:
    """cancel(token) cancels, then the next entry is the reply; the run ends cancelled."""
    token = CancelToken()
    model = ScriptedModel([call("c1", "add", a=1, b=1), cancel(token), final("late")])
    assert model.size == 2
    result = Loop(model, tools=TOOLS).run("hi", cancel=token)
    assert token.cancelled
    assert result.status == "cancelled"
    assert result.rejected == final("late")
    assert (result.steps, result.calls) == (2, 1)
    assert result.events[-1].trigger == "model_replied"


def test_cancel_marker_needs_a_reply_after_it() -> None:
    """A marker at the end (or before another marker) is refused when the script is made."""
    token = CancelToken()
    with pytest.raises(ValueError, match=r"replies\[1\]: expected cancel\(token\) to be followed"):
        ScriptedModel([final("x"), cancel(token)])
    with pytest.raises(ValueError, match="got another cancel"):
        ScriptedModel([cancel(token), cancel(token), final("x")])
    with pytest.raises(TypeError, match="expected a CancelToken, got str"):
        cancel("token")  # type: ignore[arg-type]


async def test_async_scripted_model_is_awaited_and_awaits_async_entries() -> None:
    """An async def model: the async driver awaits it, and it awaits an async entry."""

    async def later(history: list[dict[str, Any]]) -> dict[str, Any]:
        await asyncio.sleep(0)
        return final(f"after {history[-1]['status']}")

    model = AsyncScriptedModel([call("c1", "add", a=1, b=1), later])
    assert inspect.iscoroutinefunction(type(model).__call__)
    result = await Loop(model, tools=TOOLS).arun("hi")
    assert (result.status, result.output) == ("finished", "after ok")
    assert len(model.seen) == 2


SCRIPTS_FOR_BOTH = [
    pytest.param(lambda token: [call("c1", "add", a=1, b=2), final("3")], id="finished"),
    pytest.param(
        lambda token: [call("c1", "add", a=1, b=2), cancel(token), final("x")], id="cancel"
    ),
    pytest.param(lambda token: [cancel(token), RuntimeError("late")], id="cancel-raise"),
    pytest.param(lambda token: [call("c1", "add", a=1), RuntimeError("x")], id="failed"),
]


@pytest.mark.parametrize("script", SCRIPTS_FOR_BOTH)
def test_both_scripted_models_make_the_same_transitions(script: Any) -> None:
    """ScriptedModel under run() and AsyncScriptedModel under arun() agree, event for event."""
    sync_token, async_token = CancelToken(), CancelToken()
    ran = Loop(ScriptedModel(script(sync_token)), tools=TOOLS).run("hi", cancel=sync_token)
    aran = asyncio.run(
        Loop(AsyncScriptedModel(script(async_token)), tools=TOOLS).arun("hi", cancel=async_token)
    )
    assert ran.events == aran.events
    assert ran.transcript == aran.transcript
    assert ran.status == aran.status


# -- the assertions hold on real runs ---------------------------------------------

PARALLEL_INPUT = [
    {"kind": "user", "text": "two at once"},
    call("p1", "add", a=1, b=1),
    call("p2", "add", a=2, b=2),
    {"kind": "tool_result", "id": "p1", "name": "add", "status": "ok", "content": 2},
    {"kind": "tool_result", "id": "p2", "name": "add", "status": "ok", "content": 4},
]


@by_driver
@pytest.mark.parametrize(
    ("replies", "messages", "status"),
    [
        ([call("c1", "add", a=1, b=2), final("3")], "hi", "finished"),
        ([call("c1", "add", a=1, b=2), call("c1", "add", a=1, b=2)], "hi", "repeated_call"),
        ([call("c1", "nope"), call("c2", "add", a="x", b=1), call("c3", "add", a=1, b=1)],
         "hi", "exhausted"),
        ([{"kind": "call"}], "hi", "malformed"),
        ([RuntimeError("down")], "hi", "failed"),
        ([call("c1", "add", a=1, b=2), final("done")], PARALLEL_INPUT, "finished"),
    ],
)  # fmt: skip
def test_the_contract_holds_on_real_runs(
    driver: Driver, replies: list[object], messages: Any, status: str
) -> None:
    """Every ending, on both drivers, with parallel calls in the input too."""
    loop = Loop(ScriptedModel(replies), tools=TOOLS, max_calls=2)
    result = driver.run(loop, messages)
    assert result.status == status
    assert_contract(result, messages)


@by_driver
def test_the_assertions_take_a_run_in_progress(driver: Driver) -> None:
    """A Run or AsyncRun part-way through is checked as far as it went."""
    loop = Loop(ScriptedModel([call("c1", "add", a=1, b=2), final("3")]), tools=TOOLS)
    run = driver.start(loop, "hi")
    for _ in range(2):
        run.step()
        assert_contract(getattr(run, "run", run), "hi")
    assert run.state == "dispatching"


def test_the_assertions_refuse_what_is_not_a_run() -> None:
    """Anything else is a TypeError naming what was given."""
    with pytest.raises(TypeError, match="expected a RunResult, Run or AsyncRun, got dict"):
        assert_paired({})  # type: ignore[arg-type]
    result = Loop(ScriptedModel([final("x")])).run("hi")
    with pytest.raises(TypeError, match=r"expected the run's input .* got int"):
        assert_transcript_is_input_plus_appended(result, 3)  # type: ignore[arg-type]


# -- each assertion fails, with its message, on a broken result ---------------------


@pytest.fixture(scope="module")
def good() -> RunResult:
    """A run with one call and a final: user, call, tool_result, final."""
    loop = Loop(ScriptedModel([call("c1", "add", a=1, b=3), final("4")]), tools=TOOLS)
    result = loop.run("hi")
    assert_contract(result, "hi")
    return result


def test_batch_builds_a_calls_reply_and_the_assertions_take_batches() -> None:
    """batch(call(...), ...) is a 'calls' reply; a run of batches passes every assertion."""
    two = batch(call("c1", "add", a=1, b=2), call("c2", "add", a=3, b=4), text="both")
    assert two == {
        "kind": "calls",
        "calls": [
            {"id": "c1", "name": "add", "arguments": {"a": 1, "b": 2}},
            {"id": "c2", "name": "add", "arguments": {"a": 3, "b": 4}},
        ],
        "text": "both",
    }
    assert "text" not in batch(call("c1", "add"))
    with pytest.raises(TypeError, match="batch\\(\\) takes replies made by call\\(\\); argument 1"):
        batch(call("c1", "add"), final("x"))

    result = Loop(ScriptedModel([two, final("10")]), tools=TOOLS, max_calls=2).run("hi")
    assert (result.status, result.calls) == ("finished", 2)
    assert_contract(result, "hi")
    # Results swapped within the batch's transition: the pairing check sees it.
    closing = next(i for i, e in enumerate(result.events) if len(e.appended_json) == 3)
    event = result.events[closing]
    swapped = (event.appended_json[0], event.appended_json[2], event.appended_json[1])
    broken = with_event(result, closing, appended_json=swapped)
    assert violation(
        assert_paired,
        broken._replace(
            transcript_json=orjson.dumps(
                [
                    {"kind": "user", "text": "hi"},
                    *[orjson.loads(m) for m in swapped],
                    result.transcript[-1],
                ]
            )
        ),
    ) == (
        f"events[{closing}] (dispatching -> awaiting_model on tool_returned).appended[0]: "
        "expected call 'c1' to be appended together with its tool_result, got a tool_result "
        "with id 'c2'"
    )


def with_transcript(result: RunResult, transcript: list[dict[str, Any]]) -> RunResult:
    return result._replace(transcript_json=orjson.dumps(transcript))


def with_event(result: RunResult, index: int, **changes: Any) -> RunResult:
    events = list(result.events)
    events[index] = events[index]._replace(**changes)
    return result._replace(events=tuple(events))


def violation(check: Any, *args: Any) -> str:
    with pytest.raises(ContractViolation) as caught:
        check(*args)
    assert isinstance(caught.value, AssertionError)
    return str(caught.value)


def test_assert_paired_finds_a_call_without_its_result(good: RunResult) -> None:
    """A tool_result taken out of the transcript: the call is unanswered at the final."""
    user, c1, _, end = good.transcript
    message = violation(assert_paired, with_transcript(good, [user, c1, end]))
    assert message == (
        "transcript[1]: expected call 'c1' to be answered before the final at transcript[2], "
        "got no tool_result for it"
    )
    message = violation(assert_paired, with_transcript(good, [user, c1]))
    assert message == (
        "transcript[1]: expected call 'c1' to be answered by a tool_result, "
        "got none before the end of the transcript (2 messages)"
    )


def test_assert_paired_finds_results_that_answer_nothing(good: RunResult) -> None:
    """A result for another id, a second result, a result naming another tool."""
    user, c1, r1, _ = good.transcript
    stray = {**r1, "id": "c9"}
    assert violation(assert_paired, with_transcript(good, [user, c1, stray, r1])) == (
        "transcript[2]: expected a tool_result to answer an earlier unanswered call, "
        "got one for 'c9' (no call has that id)"
    )
    assert violation(assert_paired, with_transcript(good, [user, c1, r1, r1])) == (
        "transcript[3]: expected a tool_result to answer an earlier unanswered call, "
        "got one for 'c1' (already answered)"
    )
    renamed = {**r1, "name": "weather"}
    assert violation(assert_paired, with_transcript(good, [user, c1, renamed])) == (
        "transcript[2]: expected the tool_result of call 'c1' (transcript[1]) to name its "
        "tool 'add', got 'weather'"
    )


def test_assert_paired_finds_a_reused_id(good: RunResult) -> None:
    """The same call id twice in the transcript."""
    user, c1, r1, end = good.transcript
    assert violation(assert_paired, with_transcript(good, [user, c1, r1, c1, r1, end])) == (
        "transcript[3]: expected each call id once, got call id 'c1' again (first at transcript[1])"
    )


def test_assert_paired_finds_a_call_appended_alone(good: RunResult) -> None:
    """An event that appends a call without its result, though the transcript looks paired."""
    returned = good.events[2]
    assert returned.trigger == "tool_returned"
    broken = with_event(good, 2, appended_json=returned.appended_json[:1])
    assert violation(assert_paired, broken) == (
        "events[2] (dispatching -> awaiting_model on tool_returned).appended[0]: expected "
        "call 'c1' to be appended together with its tool_result, got nothing after it"
    )


def test_assert_within_budget_finds_counters_beyond_the_budget(good: RunResult) -> None:
    """The run's counters, then an event's, above the budget."""
    assert (good.steps, good.calls) == (2, 1)
    tight = good._replace(budget=Budget(max_steps=1, max_calls=4))
    assert violation(assert_within_budget, tight) == (
        "the run: expected steps <= max_steps=1, got steps=2"
    )
    no_calls = good._replace(budget=Budget(max_steps=8, max_calls=0), calls=0)
    assert violation(assert_within_budget, no_calls) == (
        "events[1] (validating -> dispatching on validate): expected calls <= max_calls=0, "
        "got calls=1"
    )


def test_assert_within_budget_finds_a_ledger_that_does_not_add_up(good: RunResult) -> None:
    """A counter that jumps, one that goes down, and a result that is not its last event."""
    assert violation(assert_within_budget, with_event(good, 0, steps=2)) == (
        "events[0] (awaiting_model -> validating on model_replied): expected steps to stay "
        "at 0 or grow by one (one model call a transition at most), got steps=2"
    )
    assert violation(assert_within_budget, with_event(good, 2, calls=0)) == (
        "events[2] (dispatching -> awaiting_model on tool_returned): expected calls to stay "
        "at 1 (calls grow only when validate accepts a batch), got calls=0"
    )
    assert violation(assert_within_budget, with_event(good, 2, calls=2)) == (
        "events[2] (dispatching -> awaiting_model on tool_returned): expected calls to stay "
        "at 1 (calls grow only when validate accepts a batch), got calls=2"
    )
    assert violation(assert_within_budget, good._replace(steps=1)) == (
        "the run: expected its counters to be its last event's (steps=2, calls=1), "
        "got steps=1, calls=1"
    )


def test_assert_transcript_finds_the_wrong_input(good: RunResult) -> None:
    """The input given is not the one the run started with."""
    assert violation(assert_transcript_is_input_plus_appended, good, "hello") == (
        "transcript[0]: expected {'kind': 'user', 'text': 'hello'} (from the input's "
        "messages[0]), got {'kind': 'user', 'text': 'hi'}"
    )


def test_assert_transcript_tells_1_from_1_0(good: RunResult) -> None:
    """A result content of 4 where the event appended 4.0 (add's b is a float) differs."""
    user, c1, r1, end = good.transcript
    assert r1["content"] == 4.0
    assert type(r1["content"]) is float
    changed = with_transcript(good, [user, c1, {**r1, "content": 4}, end])
    message = violation(assert_transcript_is_input_plus_appended, changed, "hi")
    assert message.startswith("transcript[2]: expected {'kind': 'tool_result'")
    assert (
        "(from events[2] (dispatching -> awaiting_model on tool_returned).appended[1])" in message
    )
    assert message.endswith("'content': 4}")


def test_assert_transcript_finds_extra_and_missing_messages(good: RunResult) -> None:
    """One message too many, then one too few, named with where it should have come from."""
    extra = with_transcript(good, [*good.transcript, final("again")])
    assert violation(assert_transcript_is_input_plus_appended, extra, "hi") == (
        "the transcript: expected 4 messages (1 input + 3 appended by the events), got 5: "
        "transcript[4] = {'kind': 'final', 'text': 'again'} is extra"
    )
    short = with_transcript(good, good.transcript[:3])
    assert violation(assert_transcript_is_input_plus_appended, short, "hi") == (
        "the transcript: expected 4 messages (1 input + 3 appended by the events), got 3: "
        "{'kind': 'final', 'text': '4'} (from events[4] (validating -> finished on "
        "validate).appended[0]) is missing"
    )


def test_assert_chained_finds_a_broken_path(good: RunResult) -> None:
    """An event that starts elsewhere, one after the end, a status the events do not reach."""
    assert violation(assert_chained, with_event(good, 1, source=agentloop.State.DISPATCHING)) == (
        "events[1] (dispatching -> dispatching on validate): expected to start in validating, "
        "got dispatching"
    )
    after = good._replace(events=(*good.events, good.events[0]))
    assert violation(assert_chained, after) == (
        "events[5] (awaiting_model -> validating on model_replied): expected no transition "
        "after the terminal state finished, got one"
    )
    assert violation(assert_chained, good._replace(status=agentloop.State.FAILED)) == (
        "the run: expected its state to be where the events end (finished), got failed"
    )


def test_contract_violation_carries_its_parts() -> None:
    """where, expected and found, as RunFileError has them."""
    error = ContractViolation("transcript[2]", "a call", "a final")
    assert (error.where, error.expected, error.found) == ("transcript[2]", "a call", "a final")
    assert str(error) == "transcript[2]: expected a call, got a final"


# -- the strategies ----------------------------------------------------------------


def run_one(driver: Driver, reply: object, tools: Any = TOOLS) -> RunResult:
    """One reply, then a final, through a real Loop on ``driver``."""
    loop = Loop(ScriptedModel([reply, final("done")]), tools=tools, max_calls=1)
    result = driver.run(loop, "go")
    assert_contract(result, "go")
    return result


@by_driver
@PROPERTY
@given(reply=als.valid_calls(TOOLS))
def test_valid_calls_are_judged_valid(driver: Driver, reply: dict[str, Any]) -> None:
    """The registry never finds a valid call's arguments invalid: ok, denied or error."""
    assert first_result(run_one(driver, reply))["status"] in ("ok", "denied", "error")


def test_valid_calls_reach_ok_denied_and_error() -> None:
    """The three outcomes a valid call can have are all drawn."""
    seen = set()

    @COVERAGE
    @given(als.valid_calls(TOOLS))
    def collect(reply: dict[str, Any]) -> None:
        seen.add(TOOLS.dispatch(reply)["status"])

    collect()
    assert seen == {"ok", "denied", "error"}


@by_driver
@PROPERTY
@given(reply=als.invalid_calls(TOOLS))
def test_invalid_calls_are_invalid_arguments(driver: Driver, reply: dict[str, Any]) -> None:
    """Every call that breaks the schema is answered invalid_arguments."""
    assert first_result(run_one(driver, reply))["status"] == "invalid_arguments"


# The kinds of jsonschema-rs's errors that each way of breaking a schema may give.
SAYS = {
    "wrong_type": ("Type", "AnyOf", "Enum"),
    "missing_required": ("Required",),
    "extra_property": ("AdditionalProperties", "FalseSchema"),
    "outside_enum": ("Enum",),
    "wrong_length": ("MinLength", "MaxLength", "MinItems", "MaxItems"),
}


@pytest.mark.parametrize("kind", als.BREAKS)
def test_each_kind_of_break_is_the_problem_reported(kind: als.Break) -> None:
    """invalid_calls(kinds=[k]) breaks the schema in that way, as the registry reports it."""

    @PROPERTY
    @given(als.invalid_calls(TOOLS, kinds=[kind]))
    def check(reply: dict[str, Any]) -> None:
        outcome = TOOLS.dispatch(reply)
        assert outcome["status"] == "invalid_arguments"
        messages = [problem["message"] for problem in outcome["content"]]
        schema = TOOLS[reply["name"]].parameters
        found = jsonschema_rs.Draft202012Validator(schema).iter_errors(reply["arguments"])
        # The registry tells the model the validator's own words for a problem of this kind.
        said = [e.message for e in found if type(e.kind).__name__ in SAYS[kind]]
        assert set(said) & set(messages), (kind, messages)

    check()


@by_driver
@PROPERTY
@given(reply=als.unknown_tool_calls(TOOLS))
def test_unknown_tool_calls_are_unknown_tool(driver: Driver, reply: dict[str, Any]) -> None:
    """A name the registry does not have is answered unknown_tool."""
    assert first_result(run_one(driver, reply))["status"] == "unknown_tool"


@by_driver
@PROPERTY
@given(reply=als.malformed_replies())
def test_malformed_replies_end_the_run_malformed(driver: Driver, reply: object) -> None:
    """What malformed_replies draws, the engine refuses."""
    loop = Loop(ScriptedModel([reply]), tools=TOOLS)
    result = driver.run(loop, "go")
    assert result.status == "malformed"
    assert_contract(result, "go")


@by_driver
@PROPERTY
@given(reply=als.finals())
def test_finals_finish(driver: Driver, reply: dict[str, Any]) -> None:
    """A drawn final ends the run finished with its text."""
    result = driver.run(Loop(ScriptedModel([reply])), "go")
    assert (result.status, result.output) == ("finished", reply["text"])


@by_driver
@PROPERTY
@given(script=als.scripts(TOOLS, max_size=6, malformed=True, exceptions=True))
def test_scripts_keep_the_contract_and_never_run_out(driver: Driver, script: list[object]) -> None:
    """Whatever the script, the run ends within it, and the contract holds."""
    model = ScriptedModel(script)
    result = driver.run(Loop(model, tools=TOOLS), "go")
    assert_contract(result, "go")
    assert len(model.seen) <= len(script) <= 6
    assert script[-1] == final(script[-1]["text"])  # type: ignore[index]


@attrs.frozen
class Refund:
    """What a typed run answers."""

    refunded: bool
    cents: int


@PROPERTY
@given(script=als.scripts(TOOLS, max_size=6, output=Refund))
def test_scripts_for_a_typed_output_end_in_a_final_it_takes(script: list[object]) -> None:
    """scripts(output=T) closes with JSON T's schema takes: a typed run never runs out."""
    model = ScriptedModel(script)
    result = Loop(model, tools=TOOLS, output=Refund).run("go")
    assert_contract(result, "go")
    assert len(model.seen) <= len(script)
    assert result.status != "invalid_output"
    if result.status == "finished":
        assert isinstance(result.output, Refund)


def test_scripts_reach_every_ending() -> None:
    """Each terminal state a model can cause is reached by drawn scripts."""
    seen = set()

    @COVERAGE
    @given(als.scripts(TOOLS, malformed=True, exceptions=True))
    def collect(script: list[object]) -> None:
        seen.add(Loop(ScriptedModel(script), tools=TOOLS, max_calls=1).run("go").status.value)

    collect()
    assert seen == {"finished", "repeated_call", "exhausted", "malformed", "failed"}


def test_scripts_number_call_ids_and_repeat_only_when_asked() -> None:
    """call-1, call-2, ... in order, alone or in batches; with repeats=False no id comes twice."""

    @PROPERTY
    @given(als.scripts(TOOLS, repeats=False))
    def check(script: list[object]) -> None:
        ids = [
            made["id"]
            for r in script
            if isinstance(r, dict)
            for made in ([r] if r.get("kind") == "call" else r.get("calls", []))
        ]
        assert ids == [f"call-{n}" for n in range(1, len(ids) + 1)]

    check()


HAND_WRITTEN = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "minimum": 3, "exclusiveMaximum": 10},
        "x": {"type": "number", "exclusiveMinimum": 0, "maximum": 1.5},
        "s": {"type": "string", "minLength": 2, "maxLength": 4, "description": "ignored"},
        "k": {"const": "fixed"},
        "mode": {"enum": ["a", "b", None]},
        "any": True,
        "untyped": {"properties": {"q": {"type": "boolean"}}, "required": ["q"]},
        "pair": {"type": "array", "prefixItems": [{"type": "integer"}], "items": False},
        "list": {"type": ["array", "null"], "items": {"type": "string"}, "minItems": 1},
    },
    "required": ["n", "x", "s", "k", "list"],
    "additionalProperties": {"type": "integer"},
}


@PROPERTY
@given(als.arguments(HAND_WRITTEN))
def test_arguments_of_a_hand_written_schema_are_valid(args: dict[str, Any]) -> None:
    """The bounds, const, untyped and closed-array keywords are honoured."""
    jsonschema.Draft202012Validator(HAND_WRITTEN).validate(args)


def booking(at: datetime.datetime, day: datetime.date, hour: datetime.time, ref: uuid.UUID) -> str:
    """Book at a time (the kit draws each in its format)."""
    return f"{at} {day} {hour} {ref}"


def named(corner: Corner) -> str:
    """A pydantic model's parameter (one with no validators: the kit draws from the schema)."""
    return corner.name


def priced(
    cents: Annotated[int, annotated_types.MultipleOf(5), annotated_types.Interval(ge=0, le=500)],
    code: Annotated[str, pydantic.Field(pattern=r"^[A-Z]{3}$")],
    amount: decimal.Decimal,
) -> str:
    """Annotated constraints (a multiple within bounds, text a pattern matches); a decimal."""
    return f"{cents} {code} {amount}"


BOOKING = agentloop.ToolRegistry([booking, named, priced])


@PROPERTY
@given(als.valid_calls(BOOKING))
def test_calls_drawn_for_dates_uuids_and_pydantic_models_are_accepted(call: dict[str, Any]) -> None:
    """A date-time, date, time or uuid string is drawn in its format; a model's fields, and
    values that keep a parameter's Annotated constraints (multipleOf, pattern), too."""
    assert BOOKING.dispatch(call)["status"] == "ok"


@PROPERTY
@given(als.invalid_arguments(HAND_WRITTEN))
def test_invalid_arguments_of_a_hand_written_schema_are_invalid(args: dict[str, Any]) -> None:
    """Every break is a real violation of the schema."""
    assert not jsonschema.Draft202012Validator(HAND_WRITTEN).is_valid(args)


def test_unsupported_keywords_are_named_with_their_place() -> None:
    """A keyword outside the subset fails when the strategy is built, saying where."""
    schema = {"type": "object", "properties": {"name": {"type": "string", "contentEncoding": "x"}}}
    with pytest.raises(
        als.UnsupportedSchema, match=r"got the keyword 'contentEncoding' at properties/name$"
    ):
        als.arguments(schema)
    with pytest.raises(als.UnsupportedSchema, match=r"got the reference '#/definitions/X'"):
        als.arguments({"type": "object", "properties": {"a": {"$ref": "#/definitions/X"}}})


DRAFT_7 = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"n": {"type": "integer", "exclusiveMinimum": 3}, "s": {"type": "string"}},
    "required": ["n"],
}


@PROPERTY
@given(als.arguments(DRAFT_7), als.invalid_arguments(DRAFT_7))
def test_a_schema_of_another_draft_is_drawn_from_where_it_reads_alike(
    valid: dict[str, Any], invalid: dict[str, Any]
) -> None:
    """A Draft 7 schema (as TypeScript servers write every one) is drawn from by its rules."""
    assert jsonschema.Draft7Validator(DRAFT_7).is_valid(valid)
    assert not jsonschema.Draft7Validator(DRAFT_7).is_valid(invalid)


def test_keywords_another_draft_reads_otherwise_are_refused() -> None:
    """prefixItems is no Draft 7 keyword, and a bool exclusiveMinimum is Draft 4's: refused."""
    with pytest.raises(
        als.UnsupportedSchema, match=r"prefixItems: .*Draft 7 reads otherwise at properties/p$"
    ):
        als.arguments(
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "object",
                "properties": {"p": {"type": "array", "prefixItems": [{"type": "integer"}]}},
            }
        )
    with pytest.raises(als.UnsupportedSchema, match=r"exclusiveMinimum: True, which Draft 4"):
        als.arguments(
            {
                "$schema": "http://json-schema.org/draft-04/schema#",
                "type": "object",
                "properties": {"n": {"type": "number", "minimum": 0, "exclusiveMinimum": True}},
            }
        )


def test_a_registry_that_cannot_be_broken_is_refused() -> None:
    """invalid_calls needs a tool whose schema forbids something."""
    loose = agentloop.ToolRegistry()

    @loose.tool
    def anything(**kwargs: Any) -> int:
        return len(kwargs)

    with pytest.raises(ValueError, match=r"got none in \['anything'\]"):
        als.invalid_calls(loose)
    with pytest.raises(ValueError, match="expected a ToolRegistry with at least one tool"):
        als.valid_calls(agentloop.ToolRegistry())
    with pytest.raises(ValueError, match="expected kinds among"):
        als.invalid_calls(TOOLS, kinds=["sideways"])  # type: ignore[list-item]


@PROPERTY
@given(st.data())
def test_replies_without_tools_that_break_leave_invalid_calls_out(data: st.DataObject) -> None:
    """replies() still works for a registry no call can break; it never draws an invalid one."""
    loose = agentloop.ToolRegistry()

    @loose.tool
    def anything(**kwargs: Any) -> int:
        return len(kwargs)

    reply = data.draw(als.replies(loose))
    assert isinstance(reply, dict)
    if reply["kind"] == "call" and reply["name"] == "anything":
        assert loose.dispatch(reply)["status"] == "ok"


def test_hypothesis_is_needed_only_by_the_strategies() -> None:
    """agentloop.testing imports without Hypothesis; the strategies module says what it needs."""
    out = import_error("hypothesis", "agentloop.testing.strategies", first="agentloop.testing")
    assert out == (
        "agentloop.testing.strategies needs Hypothesis: pip install hypothesis "
        "(or the testing extra, pip install 'agentloop-fsm[testing]')"
    )


# -- the example in docs/testing.md ---------------------------------------------


def readme_block() -> str:
    """The python block right after the marker in 'Testing with agentloop'."""
    found = re.search(re.escape(MARKER) + r"\n```python\n(.*?)```", TESTING_PAGE, re.S)
    assert found, f"expected a ```python block after {MARKER!r} in docs/testing.md"
    return found.group(1)


def test_the_docs_property_test_runs_and_passes() -> None:
    """The block, exactly as printed, defines a property test that holds."""
    namespace: dict[str, Any] = {}
    exec(readme_block(), namespace)
    tests = [name for name in namespace if name.startswith("test_")]
    assert tests == ["test_no_model_can_send_more_than_100"]
    namespace[tests[0]]()


def test_the_docs_property_test_catches_a_missing_policy() -> None:
    """Without the policy, the same test finds a transfer over the limit: it has teeth."""
    namespace: dict[str, Any] = {}
    exec(readme_block(), namespace)
    namespace["tools"] = agentloop.ToolRegistry([namespace["transfer"]])
    test = settings(COVERAGE)(namespace["test_no_model_can_send_more_than_100"])
    with pytest.raises(AssertionError):
        test()


def test_assert_paired_finds_bad_messages(good: RunResult) -> None:
    """A status no tool gives, an entry that is not a message, and an id that is not a str
    are violations named where they are (not a TypeError from inside the check)."""
    user, c1, r1, end = good.transcript
    bogus = with_transcript(good, [user, c1, {**r1, "status": "bogus"}, end])
    assert violation(assert_paired, bogus).startswith(
        "transcript[2]: expected a tool_result status of ['cancelled', 'denied', "
    )
    junk = with_transcript(good, [user, c1, r1, end, "junk"])  # type: ignore[list-item]
    assert violation(assert_paired, junk) == (
        "transcript[4]: expected a message: a dict with a str 'kind', got 'junk'"
    )
    listed = with_transcript(good, [user, {**c1, "id": ["x"]}, r1, end])
    assert violation(assert_paired, listed) == "transcript[1]: expected a str call id, got ['x']"


def test_assert_contract_checks_the_output_and_the_token_ledger(good: RunResult) -> None:
    """The result's output is its final's text; its usage is what its events report; no
    model call is made once max_total_tokens are spent."""
    assert violation(assert_contract, good._replace(output="else"), "hi") == (
        "the result's output: expected the final's text '4', got 'else'"
    )
    assert violation(assert_contract, good._replace(usage=Usage(10, 0, 0)), "hi") == (
        "the result's usage: expected the sum its events report, Usage(input_tokens=0, "
        "output_tokens=0, cached_tokens=0), got Usage(input_tokens=10, output_tokens=0, "
        "cached_tokens=0)"
    )
    model = ScriptedModel([with_usage(call("c1", "add", a=1, b=3), 50, 10), final("4")])
    spent = Loop(model, tools=TOOLS, max_total_tokens=100).run("hi")
    assert_contract(spent, "hi")  # 60 spent, under 100: the second call was allowed
    over = with_event(spent, 0, usage=Usage(90, 10, 0))._replace(usage=Usage(90, 10, 0))
    assert violation(assert_contract, over, "hi").endswith(
        "expected no model call once max_total_tokens=100 were spent, got a model call after 100"
    )


def test_final_takes_a_typed_outputs_value_and_call_takes_str_ids() -> None:
    """final(value) of a typed output is its JSON text; a slip of type is named at once."""

    @attrs.frozen
    class Refund:
        refunded: bool
        at: datetime.date

    assert final({"refunded": True}) == {"kind": "final", "text": '{"refunded":true}'}
    refund = Refund(True, datetime.date(2026, 12, 2))
    assert final(refund)["text"] == '{"refunded":true,"at":"2026-12-02"}'
    result = Loop(ScriptedModel([final(refund)]), output=Refund).run("go")
    assert (result.status, result.output) == ("finished", refund)
    with pytest.raises(TypeError, match=re.escape("final() takes the answer's text (a str), or")):
        final(3)
    with pytest.raises(TypeError, match=re.escape("call() takes call_id as a str, got 1")):
        call(1, "add")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=re.escape("call() takes name as a str, got None")):
        call("c1", None)  # type: ignore[arg-type]
