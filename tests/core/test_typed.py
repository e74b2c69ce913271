"""Typed output, the wrap-up step and the loop guard: step by step, on both drivers."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import re
from typing import TYPE_CHECKING, Any, TypedDict

import attrs
import orjson
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import Loop
from agentloop._tools.output_type import output_schema
from agentloop.context import keep_last
from agentloop.engine import Engine
from agentloop.ledger import view_run
from agentloop.review import run_from_json, run_to_json
from agentloop.testing import ScriptedModel, assert_contract, batch, strategies
from tests.core import test_properties as props
from tests.support.helpers import (
    AsyncDriver,
    City,
    Driver,
    Recorder,
    call,
    final,
    kinds,
    pydantic_says,
    validator_says,
)

if TYPE_CHECKING:
    from pathlib import Path

A, V, D = "awaiting_model", "validating", "dispatching"


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


class Pair(TypedDict):
    left: str
    right: int


class Person(pydantic.BaseModel):
    name: str
    age: int


PARIS = '{"name": "Paris", "population": 2100000}'


# -- typed output ---------------------------------------------------------------------


@pytest.mark.row("validating --validate [output_retry]--> awaiting_model")
def test_an_invalid_final_goes_back_to_the_model_then_a_valid_one_finishes(driver: Driver) -> None:
    """The invalid final and what is wrong go back to the model; it costs a step; the next wins."""
    model = ScriptedModel([final('{"name": "Paris"}'), final(PARIS)])
    run = driver.start(Loop(model, output=City, max_steps=5), "Biggest French city?")

    t = run.step()
    assert (t.source, t.dest, t.steps) == (A, V, 1)
    t = run.step()
    assert (t.source, t.dest, t.guard, t.steps) == (V, A, "output_retry", 1)
    assert t.error is not None
    assert validator_says({"required": ["population"]}, {}) in t.error
    assert kinds(run.transcript) == ["user", "final", "user"]
    told = run.transcript[-1]["text"]
    assert "does not match the output schema" in told
    assert "population" in told
    t = run.step()
    assert (t.source, t.dest, t.steps) == (A, V, 2)
    assert model.seen[1][-1]["text"] == told  # the model saw what was wrong
    t = run.step()
    assert (t.source, t.dest, t.guard) == (V, "finished", "reply_is_final")

    result = run.result()
    assert result.status == "finished"
    assert result.output == City("Paris", 2100000)
    assert result.output_text == PARIS
    assert (result.steps, result.calls, result.reason) == (2, 0, None)
    assert_contract(result, "Biggest French city?")


@pytest.mark.row("validating --validate [output_invalid]--> invalid_output")
def test_past_max_output_retries_the_run_ends_invalid_output(driver: Driver) -> None:
    """Each invalid final costs a step; past the bound the run ends invalid_output, rejected."""
    script = [final("not json"), final('{"name": 1, "population": 2}')]
    loop = Loop(ScriptedModel(script), output=City, max_output_retries=1)
    result = driver.run(loop, "go")

    assert result.status == "invalid_output"
    assert (result.steps, result.output) == (2, None)
    assert [t.guard for t in result.events if t.trigger == "validate"] == [
        "output_retry",
        "output_invalid",
    ]
    assert result.error is not None
    assert result.error.startswith("the final answer does not match the output schema")
    assert "after 1 output retry" in result.error
    assert "name" in result.error
    assert result.rejected == final('{"name": 1, "population": 2}')
    assert "not JSON" in result.transcript[2]["text"]
    assert_contract(result, "go")


def test_no_output_retries_ends_at_the_first_invalid_final(driver: Driver) -> None:
    """max_output_retries=0: the first invalid final ends the run, one step spent."""
    loop = Loop(ScriptedModel([final("[]")]), output=City, max_output_retries=0)
    result = driver.run(loop, "go")
    assert (result.status, result.steps, kinds(result.transcript)) == (
        "invalid_output",
        1,
        ["user"],
    )


@pytest.mark.parametrize(
    ("output", "text", "expected"),
    [
        (City, PARIS, City("Paris", 2100000)),
        (Point, '{"x": 3}', Point(3, 0)),
        (Pair, '{"left": "a", "right": 2}', {"left": "a", "right": 2}),
        (Person, '{"name": "Ada", "age": 36}', Person(name="Ada", age=36)),
        (list[int], "[1, 2.0]", [1, 2]),
        ({"type": "object", "properties": {"a": {"type": "integer"}}}, '{"a": 1}', {"a": 1}),
    ],
    ids=["attrs", "dataclass", "TypedDict", "pydantic", "list[int]", "JSON Schema"],
)
def test_the_output_is_converted_as_tool_arguments_are(
    output: Any, text: str, expected: object
) -> None:
    """attrs, dataclass, TypedDict, pydantic, annotations and JSON Schemas give typed values."""
    result = Loop(ScriptedModel([final(text)]), output=output).run("go")
    assert result.status == "finished"
    assert result.output == expected
    assert type(result.output) is type(expected)


def test_an_output_type_that_is_not_json_is_refused_when_the_loop_is_made() -> None:
    """A type with no JSON Schema fails at Loop(), naming what was expected and given."""
    with pytest.raises(TypeError, match=r"expected output to be a type .* got set\[int\]"):
        Loop(ScriptedModel([]), output=set[int])
    with pytest.raises(TypeError) as refused:
        Loop(ScriptedModel([]), output=set)
    message = str(refused.value)
    assert message.endswith("or a JSON Schema as a dict, got set")
    for kind in ("attrs class", "dataclass", "TypedDict", "pydantic model"):
        assert message.count(kind) == 1, kind  # each accepted kind named once
    with pytest.raises(TypeError, match="expected a valid Draft 2020-12 output schema"):
        Loop(ScriptedModel([]), output={"type": 12})


def test_a_model_that_takes_output_is_given_the_schema() -> None:
    """A model with an ``output`` parameter gets {'name', 'schema'}; one without, nothing."""
    given: list[Any] = []

    def model(history: list[dict[str, Any]], output: Any = None) -> dict[str, Any]:
        given.append(output)
        return final(PARIS)

    assert Loop(model, output=City).run("go").output == City("Paris", 2100000)
    assert given[0]["name"] == "City"
    assert given[0]["schema"]["$defs"]["City"]["required"] == ["name", "population"]
    given.clear()
    Loop(model).run("go")
    assert given == [None]


def test_a_run_file_keeps_the_schema_and_the_json_of_a_typed_output() -> None:
    """The file's output is the JSON text; loaded, the output is the decoded JSON, replayed."""
    model = ScriptedModel([final("{}"), final(PARIS)])
    result = Loop(model, output=City, max_output_retries=2).run("go")
    text = run_to_json(result)
    document = json.loads(text)
    assert document["output"] == PARIS
    assert document["output_schema"]["$defs"]["City"]["type"] == "object"
    assert document["budget"]["max_output_retries"] == 2
    loaded = run_from_json(text)
    assert loaded.output == {"name": "Paris", "population": 2100000}
    assert loaded.events == result.events
    assert run_to_json(loaded) == text


def test_without_output_a_final_is_text_as_before() -> None:
    """No output=: any final finishes, its text the output, and the file has no schema."""
    result = Loop(ScriptedModel([final("not json")])).run("go")
    assert (result.status, result.output) == ("finished", "not json")
    assert result.output_schema_json is None
    document = json.loads(run_to_json(result))
    assert "output_schema" not in document
    assert set(document["budget"]) == {"max_steps", "max_calls"}


def test_output_str_is_the_plain_text_answer() -> None:
    """output=str: the final's text as it is (not a JSON string), as without output=."""
    loop = Loop(ScriptedModel([final("hello")]), output=str)
    assert loop.output is None
    result = loop.run("go")
    assert (result.status, result.output, result.output_schema_json) == ("finished", "hello", None)


# -- the wrap-up step -----------------------------------------------------------------


def looking(n: int) -> dict[str, Any]:
    """A call of ``look`` with a fresh id and fresh arguments."""
    return call(f"c{n}", "look", q=str(n))


def look(q: str) -> str:
    """Look something up."""
    return f"found {q}"


@pytest.mark.row(
    "awaiting_model --ask_model [wrap_up_due]--> awaiting_model",
    "awaiting_model --ask_model [wrapping_up]--> (stays)",
    "validating --validate [wrap_up_answered]--> finished",
)
def test_the_wrap_up_step_answers_when_the_steps_run_out(driver: Driver) -> None:
    """on_exhausted='answer': the model is told, asked once more, and the run finishes."""
    model = ScriptedModel([looking(1), looking(2), final("my best answer")])
    loop = Loop(model, tools=[look], max_steps=2, on_exhausted="answer")
    run = driver.start(loop, "go")
    for _ in range(6):
        run.step()
    assert (run.state, run.steps, run.calls) == (A, 2, 2)

    t = run.step()
    assert (t.source, t.dest, t.trigger, t.guard) == (A, A, "ask_model", "wrap_up_due")
    assert (t.reason, t.steps) == ("max_steps", 2)
    assert run.transcript[-1]["kind"] == "user"
    assert "budget ran out (max_steps)" in run.transcript[-1]["text"]
    t = run.step()
    assert (t.source, t.dest, t.steps) == (A, V, 3)
    t = run.step()
    assert (t.dest, t.guard, t.reason) == ("finished", "wrap_up_answered", "max_steps")

    result = run.result()
    assert (result.status, result.output) == ("finished", "my best answer")
    assert result.reason == "max_steps"
    assert (result.steps, result.calls) == (3, 2)
    assert_contract(result, "go")


def test_the_wrap_up_step_asks_with_tools_disabled() -> None:
    """A model that takes tool_choice gets 'none' in the wrap-up step only."""
    choices: list[object] = []

    def model(
        history: list[dict[str, Any]], tools: Any = None, tool_choice: Any = None
    ) -> dict[str, Any]:
        choices.append(tool_choice)
        return final("done") if tool_choice == "none" else looking(len(choices))

    result = Loop(model, tools=[look], max_steps=3, on_exhausted="answer").run("go")
    assert choices == [None, None, None, "none"]
    assert (result.status, result.reason, result.steps) == ("finished", "max_steps", 4)


@pytest.mark.row("validating --validate [calls_exhausted_wrap_up]--> awaiting_model")
def test_the_wrap_up_step_after_max_calls_runs_none_of_the_batch(driver: Driver) -> None:
    """A batch past max_calls is not run: the model is asked for an answer instead."""
    tool = Recorder(lambda q: q)
    model = ScriptedModel([batch(looking(1), looking(2)), final("without tools")])
    loop = Loop(model, tools={"look": tool}, max_calls=1, on_exhausted="answer")
    result = driver.run(loop, "go")
    assert tool.calls == []
    assert (result.status, result.output) == ("finished", "without tools")
    assert result.reason == "max_calls"
    assert [t.guard for t in result.events][:2] == [None, "calls_exhausted_wrap_up"]
    assert kinds(result.transcript) == ["user", "user", "final"]
    assert (result.steps, result.calls) == (2, 0)
    assert_contract(result, "go")


@pytest.mark.row("validating --validate [wrapping_up]--> exhausted")
def test_a_wrap_up_reply_that_is_no_final_ends_exhausted(driver: Driver) -> None:
    """The model calls a tool anyway in the wrap-up step: the run ends exhausted, unrun."""
    model = ScriptedModel([looking(1), looking(2)])
    result = driver.run(Loop(model, tools=[look], max_steps=1, on_exhausted="answer"), "go")
    assert (result.status, result.reason, result.steps, result.calls) == (
        "exhausted",
        "max_steps",
        2,
        1,
    )
    assert result.events[-1].guard == "wrapping_up"
    assert result.rejected == looking(2)
    assert_contract(result, "go")


@pytest.mark.row("validating --validate [output_invalid]--> invalid_output")
def test_a_wrap_up_final_the_schema_refuses_ends_invalid_output_its_reason_the_budget(
    driver: Driver,
) -> None:
    """No retry is left in the wrap-up step: the run ends invalid_output, and says which
    budget ran out, as the step's other ends do."""
    model = ScriptedModel([looking(1), final("not a point")])
    loop = Loop(model, tools=[look], output=Point, max_steps=1, on_exhausted="answer")
    result = driver.run(loop, "go")
    assert (result.status, result.reason, result.steps, result.calls, result.output) == (
        "invalid_output",
        "max_steps",
        2,
        1,
        None,
    )
    assert result.error is not None
    assert "in the wrap-up step, max_steps spent" in result.error
    assert result.rejected == final("not a point")
    assert [m["kind"] for m in result.transcript] == ["user", "call", "tool_result", "user"]
    assert_contract(result, "go")
    assert run_from_json(run_to_json(result)) == result


def test_the_wrap_up_step_answers_when_the_tokens_run_out() -> None:
    """max_total_tokens reached: the wrap-up step is the one model call past it."""
    from agentloop.testing import with_usage

    model = ScriptedModel([with_usage(looking(1), 50, 60), final("short")])
    loop = Loop(model, tools=[look], max_total_tokens=100, on_exhausted="answer")
    result = loop.run("go")
    assert (result.status, result.reason, result.steps) == ("finished", "max_total_tokens", 2)
    assert_contract(result, "go")


@pytest.mark.row("awaiting_model --ask_model [wrap_up_overflows]--> exhausted")
def test_a_wrap_up_request_the_context_cannot_fit_is_not_sent(driver: Driver) -> None:
    """Under keep_last, the budget's note can push the newest turn past the tokens: the
    wrap-up request is not sent, and the run ends exhausted for the context."""
    model = ScriptedModel([looking(1), final("never asked")])
    loop = Loop(
        model, tools=[look], max_steps=1, on_exhausted="answer", context=keep_last(tokens=40)
    )
    run = driver.start(loop, "go")
    for _ in range(3):  # the reply, its validation, the call's result
        run.step()
    assert run.transcript[-1]["kind"] == "tool_result"
    t = run.step()
    assert (t.dest, t.guard, t.reason) == ("awaiting_model", "wrap_up_due", "max_steps")
    t = run.step()
    assert (t.source, t.dest, t.trigger, t.guard) == (
        A,
        "exhausted",
        "ask_model",
        "wrap_up_overflows",
    )
    assert t.reason == "context"
    assert "tokens" in (t.error or "")
    result = run.result()
    assert (result.status, result.steps, result.calls, result.output) == ("exhausted", 1, 1, None)
    assert (len(model.seen), model.remaining) == (1, 1)  # the wrap-up was never sent
    assert kinds(result.transcript) == ["user", "call", "tool_result:ok", "user"]
    assert_contract(result, "go")


def test_by_default_an_exhausted_run_ends_with_no_answer(driver: Driver) -> None:
    """on_exhausted='stop' (the default): exhausted, as before, with no extra step."""
    model = ScriptedModel([looking(1)])
    result = driver.run(Loop(model, tools=[look], max_steps=1), "go")
    assert (result.status, result.reason, result.steps, result.output) == (
        "exhausted",
        "max_steps",
        1,
        None,
    )


def test_on_exhausted_is_checked() -> None:
    """An unknown on_exhausted is refused, saying what is expected."""
    with pytest.raises(ValueError, match="on_exhausted must be 'stop' or 'answer', got str 'x'"):
        Loop(ScriptedModel([]), on_exhausted="x")  # type: ignore[call-overload]  # checked too


# -- the loop guard -------------------------------------------------------------------


@pytest.mark.row(
    "validating --validate [identical_calls_only]--> awaiting_model",
    "validating --validate [identical_call_persists]--> repeated_call",
)
def test_identical_calls_beyond_n_are_refused_then_the_run_ends(driver: Driver) -> None:
    """Past N the call is answered error pointing at the earlier one; again, repeated_call."""
    tool = Recorder(lambda q: f"found {q}")
    same = [call(f"c{n}", "look", q="x") for n in range(1, 5)]
    run = driver.start(Loop(ScriptedModel(same), tools={"look": tool}, max_identical_calls=2), "go")
    for _ in range(6):
        run.step()
    assert (run.steps, run.calls, len(tool.calls)) == (2, 2, 2)

    run.step()
    t = run.step()
    assert (t.source, t.dest, t.guard, t.call_id, t.result_status) == (
        V,
        A,
        "identical_calls_only",
        "c3",
        "error",
    )
    assert len(tool.calls) == 2
    assert run.calls == 3
    refused = run.transcript[-1]
    assert refused["status"] == "error"
    assert refused["content"]["type"] == "IdenticalCall"
    assert "call 'c2'" in refused["content"]["message"]
    run.step()
    t = run.step()
    assert (t.dest, t.guard, t.reason, t.call_id) == (
        "repeated_call",
        "identical_call_persists",
        "max_identical_calls",
        "c4",
    )
    result = run.result()
    assert result.error is not None
    assert "after the loop guard refused it" in result.error
    assert (result.steps, result.calls, len(tool.calls)) == (4, 3, 2)
    assert_contract(result, "go")


@pytest.mark.row("validating --validate [identical_calls_some]--> dispatching")
def test_the_guard_refuses_only_the_calls_beyond_n_in_a_batch(driver: Driver) -> None:
    """In a batch, the identical call past N is answered error; the others run."""
    tool = Recorder(lambda q: q)
    script = [
        call("c1", "look", q="x"),
        batch(call("c2", "look", q="x"), call("c3", "look", q="y")),
        final("ok"),
    ]
    loop = Loop(ScriptedModel(script), tools={"look": tool}, max_identical_calls=1)
    result = driver.run(loop, "go")
    assert tool.calls == [{"q": "x"}, {"q": "y"}]
    assert [m["status"] for m in result.transcript if m["kind"] == "tool_result"] == [
        "ok",
        "error",
        "ok",
    ]
    assert result.status == "finished"
    assert_contract(result, "go")


def test_the_guard_is_off_by_default(driver: Driver) -> None:
    """Without max_identical_calls, the same call runs every time."""
    tool = Recorder(lambda q: q)
    script = [*(call(f"c{n}", "look", q="x") for n in range(5)), final("ok")]
    result = driver.run(Loop(ScriptedModel(script), tools={"look": tool}), "go")
    assert (result.status, len(tool.calls)) == ("finished", 5)


def test_a_guarded_run_file_replays() -> None:
    """The guard's rows and the wrap-up's are recorded and replayed from a run file."""
    same = [call(f"c{n}", "look", q="x") for n in range(1, 4)]
    result = Loop(ScriptedModel(same), tools=[look], max_identical_calls=1).run("go")
    text = run_to_json(result)
    assert json.loads(text)["budget"]["max_identical_calls"] == 1
    assert run_from_json(text).events == result.events
    wrapped = Loop(
        ScriptedModel([looking(1), final("x")]), tools=[look], max_steps=1, on_exhausted="answer"
    ).run("go")
    assert run_from_json(run_to_json(wrapped)).events == wrapped.events


# -- properties -----------------------------------------------------------------------

# Finals the schema refuses, and one that only the check's 64-bit bounds refuse: a run file
# keeps the published schema alone, and its replay must still refuse it.
_FINALS = st.sampled_from(
    [
        "nope",
        "{}",
        '{"name": "P"}',
        '{"name": "P", "population": 1e300}',
        PARIS,
    ]
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(_FINALS, min_size=1, max_size=6), retries=st.integers(0, 4))
def test_output_retries_never_exceed_their_bound_and_count_as_steps(
    texts: list[str], retries: int
) -> None:
    """However the finals come, retries <= max_output_retries, each one a step spent."""
    texts = [*texts, *["nope"] * (retries + 1)]  # never short of a reply
    model = ScriptedModel([final(text) for text in texts])
    result = Loop(model, output=City, max_output_retries=retries, max_steps=10).run("go")
    done = [t for t in result.events if t.guard == "output_retry"]
    assert len(done) <= retries
    replies = [t for t in result.events if t.trigger == "model_replied"]
    assert result.steps == len(replies) == len(done) + 1
    expected = "finished" if PARIS in texts[: retries + 1] else "invalid_output"
    assert result.status == expected
    assert_contract(result, "go")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    queries=st.lists(st.lists(st.sampled_from("abc"), min_size=1, max_size=3), max_size=8),
    limit=st.integers(1, 3),
)
def test_identical_calls_beyond_n_never_run(queries: list[list[str]], limit: int) -> None:
    """No tool runs more than max_identical_calls times with the same arguments."""
    tool = Recorder(lambda q: q)
    script: list[dict[str, Any]] = []
    for step, batch_queries in enumerate(queries):
        calls = [call(f"s{step}c{i}", "look", q=q) for i, q in enumerate(batch_queries)]
        script.append(calls[0] if len(calls) == 1 else batch(*calls))
    script.append(final("ok"))
    loop = Loop(ScriptedModel(script), tools={"look": tool}, max_identical_calls=limit)
    result = loop.run("go")
    ran = [orjson.dumps(arguments) for arguments in tool.calls]
    assert all(ran.count(key) <= limit for key in ran)
    assert result.status in ("finished", "repeated_call")
    assert_contract(result, "go")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_kit_draws_outputs_the_loop_takes_and_ones_it_refuses(data: st.DataObject) -> None:
    """strategies.outputs(T) finishes as a T; strategies.invalid_outputs(T) ends invalid_output."""
    good = data.draw(strategies.outputs(City))
    result = Loop(ScriptedModel([final(good)]), output=City).run("go")
    assert result.status == "finished"
    assert isinstance(result.output, City)
    bad = data.draw(strategies.invalid_outputs(City))
    refused = Loop(ScriptedModel([final(bad)]), output=City, max_output_retries=0).run("go")
    assert refused.status == "invalid_output"


# -- durable runs and forks -----------------------------------------------------------


def test_a_durable_typed_run_resumes_typed_and_refuses_another_schema(tmp_path: Path) -> None:
    """The ledger records the schema: resumed by id the output is a City; another T is refused."""
    ledger = agentloop.ledger.SQLiteLedger(tmp_path / "runs.db")
    model = ScriptedModel([final("{}"), final(PARIS)])
    loop = Loop(model, output=City, ledger=ledger, max_identical_calls=3)
    result = loop.run("go", run_id="r1")
    assert result.output == City("Paris", 2100000)
    again = loop.resume("r1")
    assert (again.status, again.output, again.steps) == ("finished", City("Paris", 2100000), 2)
    other = Loop(ScriptedModel([]), output=Point, ledger=ledger, max_identical_calls=3)
    with pytest.raises(agentloop.ConfigurationMismatchError, match="output"):
        other.resume("r1")
    ledger.close()


def test_a_fork_of_a_typed_run_checks_the_output_again() -> None:
    """fork(at=2) replays the output retry, then the new model's final is checked and typed."""
    first = Loop(ScriptedModel([final("{}"), final(PARIS)]), output=City).run("go")
    loop = Loop(ScriptedModel([final('{"name": "Lyon", "population": 1}')]), output=City)
    forked = loop.fork(first, at=2).finish()
    assert (forked.status, forked.output, forked.steps) == ("finished", City("Lyon", 1), 2)


# -- the new rows beside transitions, recorded and replayed -------------------------------

TYPED_FINALS = st.builds(final, _FINALS)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    budget=props.budgets,
    limit=st.none() | st.integers(1, 2),
    answer=st.booleans(),
    retries=st.integers(0, 2),
    tokens=st.none() | st.integers(1, 400),
)
def test_the_new_rows_match_transitions_keep_the_contract_and_replay(
    data: st.DataObject,
    budget: tuple[int, int],
    limit: int | None,
    answer: bool,
    retries: int,
    tokens: int | None,
) -> None:
    """With every feature on (a context policy too), transitions makes the same run; it
    keeps the contract and replays."""
    replies = data.draw(st.lists(props.REPLIES | TYPED_FINALS, max_size=10))
    cancel_at = data.draw(st.none() | st.integers(1, 8))
    limits = agentloop.engine.Budget(
        max_steps=budget[0],
        max_calls=budget[1],
        max_identical_calls=limit,
        on_exhausted="answer" if answer else "stop",
        max_output_retries=retries,
    )
    output = output_schema(City)
    outcomes, results = [], []
    for engine_class in (Engine, props.ReferenceEngine):
        world = props.World(list(replies), cancel_at)
        context = None if tokens is None else keep_last(tokens=tokens)
        engine = engine_class(
            "go", budget=limits, cancel=world.token, output=output, context=context
        )
        props.drive_engine(engine, world)
        result = engine.result()
        results.append(result)
        outcomes.append((result.events, result.transcript, result.rejected, world.handler_runs))
    assert outcomes[0] == outcomes[1]
    result = results[0]
    assert_contract(result, "go")
    assert len([e for e in result.events if e.guard == "output_retry"]) <= retries
    loaded = run_from_json(run_to_json(result))
    assert (loaded.status, loaded.events) == (result.status, result.events)


def test_an_output_the_converter_refuses_goes_back_to_the_model() -> None:
    """An int past 64 bits, or a pydantic refusal the schema cannot say, is an invalid final."""
    huge = '{"name": "Paris", "population": 1e300}'
    result = Loop(ScriptedModel([final(huge), final(PARIS)]), output=City).run("go")
    assert (result.status, result.output) == ("finished", City("Paris", 2100000))
    assert "64 bits" in result.transcript[2]["text"] or "maximum" in result.transcript[2]["text"]

    refused = Loop(ScriptedModel([final('{"age": 3}')]), output=Adult, max_output_retries=0)
    young = refused.run("go")
    assert young.status == "invalid_output"
    assert young.error is not None
    assert "expected an adult" in young.error


class Adult(pydantic.BaseModel):
    age: int

    @pydantic.field_validator("age")
    @classmethod
    def grown(cls, age: int) -> int:
        if age < 18:
            raise ValueError("expected an adult")
        return age


@dataclasses.dataclass
class Meeting:
    day: datetime.date


class Span(pydantic.BaseModel):
    low: int
    high: int

    @pydantic.field_validator("low", "high")
    @classmethod
    def counted(cls, value: int) -> int:
        if value < 0:
            raise ValueError("negative; give a count")  # a '; ' inside one problem
        return value


class Listed(pydantic.BaseModel):
    first: int
    second: int

    @pydantic.field_validator("first", "second")
    @classmethod
    def small(cls, value: int) -> int:
        if value > 9:
            raise ValueError("too big\n- keep it under 10")  # a told line inside one problem
        return value


# (the output type, a final answer its schema takes but the type or the 64-bit bounds refuse)
_REFUSED_BY_THE_TYPE = [
    (Adult, '{"age": 3}'),
    (Span, '{"low": -1, "high": -2}'),
    (Listed, '{"first": 10, "second": 11}'),
    (Meeting, '{"day": "soon"}'),
    (City, '{"name": "Paris", "population": 1e300}'),
    (list[int], "[1e300, 2, -1e300]"),
]


@pytest.mark.parametrize("retried", [True, False], ids=["retried", "ended"])
@pytest.mark.parametrize(("output", "refused"), _REFUSED_BY_THE_TYPE, ids=lambda x: str(x)[:20])
def test_a_run_file_and_a_ledger_replay_what_only_the_type_refused(
    tmp_path: Path, output: Any, refused: str, retried: bool
) -> None:
    """A record keeps the output's schema, not its type: what only the type (or the bounds)
    refused is replayed as the record says, so the run file loads and the ledger reads it."""
    valid = {
        Adult: '{"age": 30}',
        Span: '{"low": 1, "high": 2}',
        Listed: '{"first": 1, "second": 2}',
        Meeting: '{"day": "2026-12-02"}',
        City: PARIS,
    }.get(output, "[2]")
    texts = [refused, valid] if retried else [refused]
    ledger = agentloop.ledger.SQLiteLedger(tmp_path / "runs.db")
    retries = 1 if retried else 0
    model = ScriptedModel([final(t) for t in texts])
    loop = Loop(model, output=output, ledger=ledger, max_output_retries=retries)
    result = loop.run("go", run_id="typed")
    assert result.status == ("finished" if retried else "invalid_output")
    guards = [e.guard for e in result.events if e.guard is not None]
    assert guards[0] == ("output_retry" if retried else "output_invalid")
    loaded = run_from_json(run_to_json(result))
    assert (loaded.status, loaded.events, loaded.transcript) == (
        result.status,
        result.events,
        result.transcript,
    )
    viewed = view_run(ledger, "typed").result
    assert (viewed.status, viewed.events) == (result.status, result.events)


def test_a_refusal_inside_a_typed_output_is_told_at_its_path() -> None:
    """The model is told what is wrong where, as for tool arguments: a field's converter at the
    field, a pydantic validator at its field, without pydantic's links and input echoes."""
    told = "day: ValueError: expected an ISO 8601 date, got 'soon'"
    model = ScriptedModel([final('{"day": "soon"}'), final('{"day": "2026-12-02"}')])
    result = Loop(model, output=Meeting).run("go")
    assert (result.status, result.output) == ("finished", Meeting(datetime.date(2026, 12, 2)))
    assert f"- {told}\n" in result.transcript[2]["text"]
    adult = Loop(ScriptedModel([final('{"age": 3}'), final('{"age": 30}')]), output=Adult)
    told_adult = f"- age: {pydantic_says(Adult, {'age': 3})}\n"
    assert told_adult in adult.run("go").transcript[2]["text"]
    loaded = run_from_json(run_to_json(result))
    assert (loaded.events, loaded.transcript) == (result.events, result.transcript)


def test_a_final_refused_twice_with_several_problems_replays() -> None:
    """The same final refused by a retry (its problems told one a line) and then by the end
    (its error): the replay keeps the retry's list, so the told message comes out the same."""
    result = Loop(ScriptedModel([final("{}"), final("{}")]), output=City).run("go")
    assert result.status == "invalid_output"
    assert result.transcript[2]["text"].count("\n- ") == 2  # name and population
    loaded = run_from_json(run_to_json(result))
    assert (loaded.status, loaded.events, loaded.transcript) == (
        result.status,
        result.events,
        result.transcript,
    )


def test_json_in_a_markdown_fence_is_taken_and_a_record_that_refused_it_still_replays() -> None:
    """A model's ```json ... ``` around the JSON is taken off; a run recorded when it was not
    (the fenced final refused as not JSON) replays as it was recorded."""
    fenced = '```json\n{"name": "Paris", "population": 2100000}\n```'
    result = Loop(ScriptedModel([final(fenced)]), output=City).run("go")
    assert (result.status, result.output) == ("finished", City("Paris", 2100000))
    assert result.transcript[-1] == {"kind": "final", "text": fenced}
    loaded = run_from_json(run_to_json(result))
    assert (loaded.status, loaded.output, loaded.events) == (
        "finished",
        {"name": "Paris", "population": 2100000},
        result.events,
    )
    then = Loop(ScriptedModel([final("nope"), final(PARIS)]), output=City).run("go")
    document = run_to_json(then).replace('"nope"', json.dumps(fenced))
    older = run_from_json(document)  # as recorded before fences were taken off
    assert older.transcript[1] == {"kind": "final", "text": fenced}
    assert "the final answer is not JSON" in older.transcript[2]["text"]
    again = Loop(ScriptedModel([]), output=City).fork(older, at=len(older.events)).finish()
    assert (again.status, again.events) == (older.status, older.events)


def test_output_text_is_the_json_inside_a_markdown_fence(driver: Driver, tmp_path: Path) -> None:
    """A fenced final: ``output_text``, the run file's ``output``, ``show`` and a durable run's
    result hold its JSON, which ``json.loads`` reads; the transcript keeps what the model wrote."""
    fenced = f"```json\n{PARIS}\n```"
    result = driver.run(Loop(ScriptedModel([final(fenced)]), output=City), "go")
    assert (result.status, result.output) == ("finished", City("Paris", 2100000))
    assert result.output_text == PARIS
    assert json.loads(result.output_text) == {"name": "Paris", "population": 2100000}
    assert result.transcript[-1] == {"kind": "final", "text": fenced}
    document = run_to_json(result)
    assert json.loads(document)["output"] == PARIS
    assert run_from_json(document).output_text == PARIS
    assert_contract(result, "go")
    ledger = agentloop.ledger.SQLiteLedger(tmp_path / "runs.db")
    Loop(ScriptedModel([final(fenced)]), output=City, ledger=ledger).run("go", run_id="r")
    assert view_run(ledger, "r").result.output_text == PARIS


@pytest.mark.parametrize("typed", [False, True], ids=["loaded", "forked by a typed Loop"])
def test_a_record_replays_in_the_words_its_check_had_then(typed: bool) -> None:
    """A run refused in other words (an older agentloop's, pydantic's or jsonschema-rs's)
    replays in its own: a replay takes the record's problems where its check words them
    otherwise, whether it has the type (a fork) or only the schema (a loaded run file)."""
    new, old = "day: ValueError: expected", "(top level): ValueError: expected"
    model = ScriptedModel([final('{"day": "soon"}'), final('{"day": "2026-12-02"}')])
    made = Loop(model, output=Meeting).run("go")
    document = run_to_json(made)
    assert new in document  # in the retry's error and in what the model was told
    then = run_from_json(document.replace(new, old))
    assert old in then.transcript[2]["text"]
    if typed:
        forked = Loop(ScriptedModel([]), output=Meeting).fork(then, at=len(then.events))
        again = forked.finish()
    else:
        again = run_from_json(run_to_json(then))
    assert (again.status, again.events, again.transcript) == (
        then.status,
        then.events,
        then.transcript,
    )


@pytest.mark.parametrize("to_thread", [False, True], ids=["async model", "to_thread"])
def test_the_asyncio_driver_asks_with_tools_disabled(to_thread: bool) -> None:
    """Under arun, an async model (or a plain one in a thread) gets tool_choice='none' too."""
    choices: list[object] = []

    def plain(history: list[dict[str, Any]], tool_choice: Any = None) -> dict[str, Any]:
        choices.append(tool_choice)
        return final("done") if tool_choice == "none" else looking(len(choices))

    async def amodel(history: list[dict[str, Any]], tool_choice: Any = None) -> dict[str, Any]:
        return plain(history, tool_choice)

    model: Any = plain if to_thread else amodel
    loop = Loop(model, tools=[look], max_steps=2, on_exhausted="answer", to_thread=to_thread)
    result = asyncio.run(loop.arun("go"))
    assert choices == [None, None, "none"]
    assert (result.status, result.reason, result.steps) == ("finished", "max_steps", 3)


def test_the_report_and_show_give_a_typed_output_as_its_json() -> None:
    """A typed run reads the same live and loaded: the output's JSON, in the report and show."""
    from agentloop._review.text import run_lines
    from agentloop.review import report_html

    result = Loop(ScriptedModel([final(PARIS)]), output=City).run("go")
    loaded = run_from_json(run_to_json(result))
    assert report_html(result) == report_html(loaded)
    assert "&quot;population&quot;: 2100000" in report_html(result)
    shown = run_lines(result, title="run")
    assert shown == run_lines(loaded, title="run")
    assert f"output   {PARIS}" in shown


def test_a_saved_typed_run_awaiting_approval_resumes_typed_under_its_schema() -> None:
    """resume(saved) goes on with the Loop's T; a Loop with another output= is refused."""

    def pay(amount: int) -> int:
        """Pay."""
        return amount

    def careful(call: dict[str, Any]) -> agentloop.Decision:
        return agentloop.ask("big")

    def loop_of(output: Any, *script: dict[str, Any]) -> Loop:
        tools = agentloop.ToolRegistry([agentloop.Tool(pay, policy=careful)])
        return Loop(ScriptedModel(script), tools=tools, output=output)

    paused = loop_of(City, call("x", "pay", amount=30)).run("go")
    assert paused.status == "awaiting_approval"
    saved = run_from_json(run_to_json(paused))
    with pytest.raises(agentloop.ConfigurationMismatchError, match="another output"):
        loop_of(Point).resume(saved, decisions={"x": agentloop.approve()})
    result = loop_of(City, final(PARIS)).resume(saved, decisions={"x": agentloop.approve()})
    assert (result.status, result.output) == ("finished", City("Paris", 2100000))


def test_a_saved_typed_run_that_ended_resumes_to_its_output_as_the_loops_type(
    driver: Driver,
) -> None:
    """A run file holds the output's JSON; resume(saved) of a run that ended runs nothing
    and hands the output back as the Loop's type (a RunResult[City] holds a City)."""
    saved = run_from_json(run_to_json(Loop(ScriptedModel([final(PARIS)]), output=City).run("go")))
    assert saved.output == {"name": "Paris", "population": 2100000}
    loop = Loop(ScriptedModel([]), output=City)  # a model that would fail if asked
    if isinstance(driver, AsyncDriver):
        resumed = driver.runner.run(loop.aresume(saved))
    else:
        resumed = loop.resume(saved)
    assert (resumed.status, resumed.output) == ("finished", City("Paris", 2100000))
    assert (resumed.steps, resumed.calls, resumed.events) == (
        saved.steps,
        saved.calls,
        saved.events,
    )
    assert resumed.transcript == saved.transcript
    assert resumed.output_text == saved.output_text == PARIS


def test_require_output_is_a_finished_runs_output_and_says_why_another_has_none(
    driver: Driver,
) -> None:
    """The status and its reason, error or pending calls are in the error; the run is
    unchanged, and a finished run's output is returned."""

    def careful(call: dict[str, Any]) -> agentloop.Decision:
        return agentloop.ask("big")

    def pay(amount: int) -> int:
        """Pay."""
        return amount

    def broken(history: list[dict[str, Any]]) -> dict[str, Any]:
        raise ConnectionError("the provider is down")

    tools = agentloop.ToolRegistry([agentloop.Tool(pay, policy=careful)])
    cancelled = agentloop.CancelToken()
    cancelled.cancel()
    ended = {
        "exhausted": (Loop(ScriptedModel([]), output=City, max_steps=0), None, "max_steps"),
        "failed": (Loop(broken, output=City), None, "ConnectionError: the provider is down"),
        "awaiting_approval": (
            Loop(ScriptedModel([call("k1", "pay", amount=3)]), tools=tools, output=City),
            None,
            "calls ['k1'] await a decision",
        ),
        "cancelled": (Loop(ScriptedModel([]), output=City), cancelled, "'cancelled'"),
    }
    for status, (loop, token, why) in ended.items():
        result = driver.run(loop, "go", cancel=token)
        assert (result.status, result.output) == (status, None)
        with pytest.raises(agentloop.InvalidStateError, match=re.escape(why)) as raised:
            result.require_output()
        assert raised.value.state == status
        assert f"a run that is {status!r}" in str(raised.value)
    done = driver.run(Loop(ScriptedModel([final(PARIS)]), output=City), "go")
    assert done.require_output() == City("Paris", 2100000) == done.output
    text = driver.run(Loop(ScriptedModel([final("Paris")])), "go")
    assert text.require_output() == "Paris"


def test_a_saved_run_resumes_under_a_type_whose_words_changed_as_a_ledgers_does() -> None:
    """resume(saved) compares output schemas as a ledger's resume does: a description's
    words (the class's docstring) change no record's meaning; another schema is refused."""

    def pay(amount: int) -> int:
        """Pay."""
        return amount

    def loop_of(output: Any, *script: dict[str, Any]) -> Loop:
        policy = lambda call: agentloop.ask("big")  # noqa: E731 - one line
        tools = agentloop.ToolRegistry([agentloop.Tool(pay, policy=policy)])
        return Loop(ScriptedModel(script), tools=tools, output=output)

    saved = run_from_json(run_to_json(loop_of(City, call("x", "pay", amount=30)).run("go")))
    assert saved.status == "awaiting_approval"

    @attrs.frozen
    class City2:
        """The same city, in other words."""

        name: str
        population: int

    City2.__name__ = "City"  # the same $defs name: only the docstring's words differ
    decisions = {"x": agentloop.approve()}
    result = loop_of(City2, final(PARIS)).resume(saved, decisions=decisions)
    assert (result.status, result.output) == ("finished", City2("Paris", 2100000))
    with pytest.raises(agentloop.ConfigurationMismatchError, match="another output"):
        loop_of(Point).resume(saved, decisions=decisions)


def test_a_durable_run_with_the_guard_and_the_wrap_up_resumes_to_the_same_result(
    tmp_path: Path,
) -> None:
    """The ledger's replay makes the guard's and the wrap-up's rows again, from the records."""
    ledger = agentloop.ledger.SQLiteLedger(tmp_path / "runs.db")
    same = [call(f"c{n}", "look", q="x") for n in range(1, 3)]
    loop = Loop(
        ScriptedModel([*same, final("wrapped")]),
        tools=[look],
        ledger=ledger,
        max_steps=2,
        max_identical_calls=1,
        on_exhausted="answer",
    )
    result = loop.run("go", run_id="r2")
    assert [t.guard for t in result.events if t.guard] == [
        "identical_calls_only",
        "wrap_up_due",
        "wrap_up_answered",
    ]
    again = loop.resume("r2")
    assert (again.status, again.reason, again.output) == ("finished", "max_steps", "wrapped")
    assert again.events == result.events
    ledger.close()


def test_a_durable_batch_the_guard_cut_resumes_mid_batch(tmp_path: Path) -> None:
    """Resumed mid-batch, the calls the guard refused are not looked for among the records."""
    ledger = agentloop.ledger.SQLiteLedger(tmp_path / "runs.db")
    ran: list[str] = []

    def stop_after(q: str) -> str:
        """Look; the second look of a batch is where the process 'dies'."""
        ran.append(q)
        return q

    script = [
        call("c1", "stop_after", q="x"),
        batch(call("c2", "stop_after", q="x"), call("c3", "stop_after", q="y"),
              call("c4", "stop_after", q="z")),
        final("done"),
    ]  # fmt: skip
    loop = Loop(ScriptedModel(script), tools=[stop_after], ledger=ledger, max_identical_calls=1)
    run = loop.start("go", run_id="r3")
    while not (run.state == "dispatching" and len(ran) == 2):
        run.step()  # c1 ran; the batch is accepted, c2 refused, c3 ran: then the process stops
    del run
    resumed = Loop(ScriptedModel([final("done")]), tools=[stop_after], ledger=ledger,
                   max_identical_calls=1).resume("r3")  # fmt: skip
    assert (resumed.status, ran) == ("finished", ["x", "y", "z"])
    assert [m["status"] for m in resumed.transcript if m["kind"] == "tool_result"] == [
        "ok",
        "error",
        "ok",
        "ok",
    ]
    ledger.close()


def test_a_typed_durable_run_is_viewed_under_its_recorded_schema(tmp_path: Path) -> None:
    """view_run (agentloop show LEDGER RUN) replays the output retry the run recorded."""
    from agentloop.ledger import view_run

    ledger = agentloop.ledger.SQLiteLedger(tmp_path / "runs.db")
    Loop(ScriptedModel([final("{}"), final(PARIS)]), output=City, ledger=ledger).run(
        "go", run_id="typed"
    )
    viewed = view_run(ledger, "typed").result
    assert [t.guard for t in viewed.events if t.trigger == "validate"] == [
        "output_retry",
        "reply_is_final",
    ]
    assert viewed.output == {"name": "Paris", "population": 2100000}
    ledger.close()
