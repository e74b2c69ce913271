"""Bad input raises early, with a message naming what was expected and what was given."""

from __future__ import annotations

import re
from typing import Any

import hypothesis
import orjson
import pytest
from hypothesis import strategies as st

import agentloop
from agentloop import InvalidStateError, Loop
from agentloop.testing import ScriptedModel, assert_contract
from tests.support.helpers import Driver, call, drive, final


@pytest.mark.parametrize(
    ("budgets", "error", "message"),
    [
        ({"max_steps": True}, TypeError, "max_steps must be a non-negative int, got bool True"),
        ({"max_calls": 2.0}, TypeError, "max_calls must be a non-negative int, got float 2.0"),
        ({"max_steps": "3"}, TypeError, "got str '3'"),
        ({"max_steps": None}, TypeError, "got NoneType None"),
        ({"max_calls": -1}, ValueError, "max_calls must be a non-negative int, got -1"),
    ],
)
def test_budgets_are_checked_when_the_loop_is_built(
    budgets: dict[str, Any], error: type[Exception], message: str
) -> None:
    """Budgets that are not non-negative ints fail at Loop(...)."""
    with pytest.raises(error, match=message):
        Loop(ScriptedModel([]), **budgets)


def test_a_budget_defaults_to_the_loops_limits() -> None:
    """Budget(), Loop() and Engine() agree: 25 model steps, 100 tool calls, no token limit."""
    default = agentloop.engine.Budget(max_steps=25, max_calls=100, max_total_tokens=None)
    assert agentloop.engine.Budget() == default
    assert agentloop.engine.Budget(max_steps=3) == agentloop.engine.Budget(
        max_steps=3, max_calls=100
    )
    assert Loop(ScriptedModel([])).budget == default
    assert agentloop.engine.Engine("go").budget == default


DEEP: list[Any] = []
for _ in range(300):
    DEEP = [DEEP]


@pytest.mark.parametrize(
    ("messages", "error", "message"),
    [
        (42, TypeError, "expected the input to be a str or a list of message dicts, got int"),
        ({"kind": "user"}, TypeError, "got dict"),
        (
            ["hello"],
            TypeError,
            r"messages\[0\]: expected a dict with a str 'kind', got str 'hello'",
        ),
        ([{"text": "no kind"}], TypeError, r"messages\[0\]: expected a dict with a str 'kind'"),
        (
            [{"role": "user", "content": "hi"}],
            TypeError,
            r"^messages\[0\]: expected a dict with a str 'kind' \(system, user, call, calls, "
            r"tool_result or final\), got a dict with keys 'role', 'content': a user message is "
            r"\{'kind': 'user', 'text': ...\}$",
        ),
        ([{"kind": 1}], TypeError, "expected a dict with a str 'kind'"),
        (
            [{"kind": "user", "text": "hi", "when": object()}],
            TypeError,
            r"messages\[0\]\.when: expected a JSON",
        ),
        (
            [{"kind": "user", "text": "hi", "score": float("inf")}],
            TypeError,
            "expected a finite number",
        ),
        (
            [{"kind": "user", "text": "hi", "tags": ("a",)}],
            TypeError,
            r"messages\[0\]\.tags: .*got tuple",
        ),
        ([{"kind": "user", "text": "hi", "map": {1: "a"}}], TypeError, "keys to be str, got int 1"),
        ([call("c1")], ValueError, "got call 'c1' without one"),
        (
            [{"kind": "user", "text": "hi", "deep": DEEP}],
            TypeError,
            "nested at most 255 levels deep",
        ),
        ([{"kind": "call", "id": 3}], ValueError, "a call's 'id' to be a non-empty str, got 3"),
    ],
)
def test_bad_input_raises_before_the_model_is_called(
    driver: Driver, messages: object, error: type[Exception], message: str
) -> None:
    """Input that is not a str or a list of JSON dicts with a str kind fails at start()."""
    model = ScriptedModel([final()])
    with pytest.raises(error, match=message):
        driver.start(Loop(model), messages)
    assert model.seen == []


def test_call_result_must_follow_the_call(driver: Driver) -> None:
    """A tool_result before its call does not pair it: it is refused where it stands."""
    messages = [
        {"kind": "tool_result", "id": "c1", "name": "add", "status": "ok", "content": 1},
        call("c1"),
    ]
    with pytest.raises(ValueError, match=r"messages\[0\]: .*got one for 'c1' \(no earlier call"):
        driver.start(Loop(ScriptedModel([])), messages)


def _result(call_id: str = "c1", **fields: object) -> dict[str, object]:
    return {
        "kind": "tool_result",
        "id": call_id,
        "name": "add",
        "status": "ok",
        "content": 1,
    } | fields


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([_result("z")], r"messages\[0\]: .*answer an earlier unanswered call, got one for 'z'"),
        ([call("c1"), _result(), _result()], r"messages\[2\]: .*'c1' \(it was answered already"),
        (
            [call("c1"), _result(name="sub")],
            r"messages\[1\]: expected the tool_result of call 'c1' \(messages\[0\]\) to name "
            r"its tool 'add', got str 'sub'",
        ),
        (
            [call("c1"), _result(status="great")],
            r"messages\[1\]: .*'status' of .*got status str 'great'",
        ),
        (
            [call("c1"), {k: v for k, v in _result().items() if k != "content"}],
            r"messages\[1\]: .*and a 'content', got status str 'ok' and no content",
        ),
        ([{"kind": "call", "id": "c1", "arguments": {}}], r"a call's 'name' to be a non-empty str"),
        ([{"kind": "call", "id": "c1", "name": "add"}], r"a call's 'arguments' to be a dict"),
        (
            [{**call("c1"), "signature": 5}],
            r"messages\[0\]: expected a call's 'signature', if any, to be a non-empty str, got",
        ),
        ([{"kind": "user"}], r"messages\[0\]: expected a 'user' message's 'text' to be a str"),
        (
            [call("c1"), final(), _result()],
            r"messages\[1\]: expected call 'c1' \(messages\[0\]\) to be answered before a final",
        ),
        (
            [{"kind": "calls", "calls": [{"id": "c1", "name": "add", "arguments": {}}], "text": 5}],
            r"messages\[0\]: expected a 'calls' message's 'text', if any, to be a str, got int 5",
        ),
        ([{"kind": "system", "text": 5}], r"'system' message's 'text' to be a str, got int 5"),
        (
            [{"kind": "user", "text": float("nan")}],
            r"^messages\[0\]: expected a 'user' message's 'text' to be a str, got float nan$",
        ),
    ],
)
def test_input_is_refused_where_the_contract_would_call_it_broken(
    driver: Driver, messages: list[dict[str, object]], message: str
) -> None:
    """What ``assert_contract`` would reject in a transcript is refused in the input, by
    start(), naming the message: a result with no unanswered call before it, or naming
    another tool, or with a status no tool gives; a call with no name or arguments; a user
    or system message with no text. Nothing is asked of the model."""
    model = ScriptedModel([final()])
    with pytest.raises(ValueError, match=message):
        driver.start(Loop(model), messages)
    assert model.seen == []


def test_parallel_calls_answered_in_any_order_and_cancelled_results_pass(driver: Driver) -> None:
    """What a real transcript holds is accepted: a batch answered out of order, after a user
    message, and a result a cancellation recorded."""
    batch = {
        "kind": "calls",
        "calls": [{k: v for k, v in call(c).items() if k != "kind"} for c in ("a", "b")],
    }
    messages: list[dict[str, Any]] = [
        {"kind": "user", "text": "hi"},
        batch,
        {"kind": "user", "text": "and?"},
        _result("b"),
        _result("a", status="cancelled", content="never started"),
    ]
    model = ScriptedModel([final()])
    result = driver.run(Loop(model), messages)
    assert (result.status, model.seen) == ("finished", [messages])
    assert_contract(result, messages)


def test_other_kinds_and_extra_keys_in_the_input_pass_as_they_are(driver: Driver) -> None:
    """A kind of the caller's own, or an extra key, is kept for a model that reads it."""
    messages = [
        {"kind": "note", "by": "ops"},
        {"kind": "user", "text": "hi", "lang": "en"},
        call("c1"),
        _result(),
    ]
    model = ScriptedModel([final()])
    result = driver.run(Loop(model), messages)
    assert (result.status, model.seen) == ("finished", [messages])
    assert_contract(result, messages)


NOTHING_TO_ANSWER = [
    ([], "got an empty list"),
    ("", "got an empty str"),
    (" \n\t", r"got a blank str ' \\n\\t'"),
    (
        [{"kind": "system", "text": "s"}, {"kind": "user", "text": ""}],
        r"messages\[1\]: expected a user message's 'text' to hold more than white space "
        r"\(every provider refuses an empty one\), got ''",
    ),
]
EXPECTED_INPUT = r"expected the input to be the user's message \(a str with text\) or a list"


@pytest.mark.parametrize(("messages", "given"), NOTHING_TO_ANSWER)
@pytest.mark.parametrize("entry", ["run", "start", "arun", "astart"])
async def test_input_with_nothing_to_answer_is_refused_by_every_entry_point(
    entry: str, messages: object, given: str
) -> None:
    """An empty list, an empty or blank str, a blank user message: every provider refuses
    them, so every way to begin a run refuses them, before the model is asked; with a
    system prompt too (the input is checked before the prompt leads it)."""
    model = ScriptedModel([final()])
    loop = Loop(model, system="Be brief.")
    match = given if given.startswith("messages") else f"{EXPECTED_INPUT}.*{given}$"
    with pytest.raises(ValueError, match=match):
        await begin(loop, entry, messages)
    assert model.seen == []


async def begin(loop: Loop, entry: str, given: object) -> object:
    """``loop.<entry>(given)``, awaited when it is a coroutine (``arun``, ``acontinue_run``)."""
    begun = getattr(loop, entry)(given)
    return await begun if entry in ("arun", "acontinue_run") else begun


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(text=st.text(st.sampled_from(" \t\n\r\x0b\x0c\u00a0\u2003\u3000a.é")))
def test_any_text_is_refused_exactly_when_it_is_blank(text: str) -> None:
    """For any text, as the input or as a user message in it: refused (naming what was
    expected and given) exactly when it holds nothing but white space; else the model gets it."""
    for given_input in (text, [{"kind": "user", "text": text}]):
        model = ScriptedModel([final()])
        if text.strip():
            assert Loop(model).run(given_input).status == "finished"
            assert model.seen == [[{"kind": "user", "text": text}]]
            continue
        with pytest.raises(ValueError, match=r"expected .* got ") as refused:
            Loop(model).start(given_input)
        assert ("empty" if not text else repr(text)[:40]) in str(refused.value)
        assert model.seen == []


@pytest.mark.parametrize(
    ("messages", "given"), [case for case in NOTHING_TO_ANSWER if type(case[0]) is list]
)
@pytest.mark.parametrize("entry", ["continue_run", "acontinue_run"])
async def test_a_run_with_nothing_to_answer_is_not_continued(
    entry: str, messages: list[dict[str, Any]], given: str
) -> None:
    """A failed run whose transcript holds nothing to answer (one begun before these checks)
    is refused by ``continue_run`` as its input would be, before the model is asked."""
    failed = Loop(ScriptedModel([ValueError("down")])).run("hi")
    old = failed._replace(transcript_json=orjson.dumps(messages), events=())
    model = ScriptedModel([final()])
    match = given if given.startswith("messages") else f"{EXPECTED_INPUT}.*{given}$"
    with pytest.raises(ValueError, match=match):
        await begin(Loop(model), entry, old)
    assert model.seen == []


def test_step_after_the_end_raises_naming_the_state(driver: Driver) -> None:
    """step() on a finished run raises InvalidStateError, a RuntimeError."""
    run = driver.start(Loop(ScriptedModel([final()])), "go")
    drive(run)
    with pytest.raises(InvalidStateError, match="ended in state 'finished'") as caught:
        run.step()
    assert isinstance(caught.value, RuntimeError)
    assert caught.value.state == "finished"
    assert run.state == "finished"


def test_result_before_the_end_raises_naming_the_state(driver: Driver) -> None:
    """result() on an unfinished run raises InvalidStateError naming what it takes (a
    finished run or one awaiting approval) and the state."""
    run = driver.start(Loop(ScriptedModel([final()])), "go")
    with pytest.raises(InvalidStateError) as refused:
        run.result()
    assert str(refused.value) == (
        "result() needs a finished run or one awaiting approval, but the run is still in "
        "state 'awaiting_model'; step it until it ends or pauses"
    )
    run.step()
    with pytest.raises(InvalidStateError, match="still in state 'validating'"):
        run.result()


def test_engine_refuses_out_of_order_reports() -> None:
    """Reporting what nobody asked for is the driver's error, and changes nothing."""
    engine = agentloop.engine.Engine("go")
    with pytest.raises(InvalidStateError, match="cannot take a tool outcome in state 'awaiting"):
        engine.returned({"status": "ok", "content": 1})
    with pytest.raises(
        InvalidStateError,
        match=r"cannot take a model reply in state 'awaiting_model': no request is "
        r"outstanding: call next\(\) first$",
    ):
        engine.replied(final())
    with pytest.raises(InvalidStateError, match="neither the model nor a tool is outstanding"):
        engine.raised(ValueError("x"))
    assert (engine.state, engine.steps, engine.events()) == ("awaiting_model", 0, ())
    assert isinstance(engine.next(), agentloop.engine.AskModel)
    with pytest.raises(InvalidStateError, match=r"cannot take a tool outcome .* is ask_model"):
        engine.returned({"status": "ok", "content": 1})
    with pytest.raises(InvalidStateError, match="the answer to ask_model is outstanding"):
        engine.next()
    with pytest.raises(TypeError, match=r"^interrupted\(\) takes what interrupted the driver"):
        engine.interrupted("stop")  # type: ignore[arg-type]
    assert (engine.state, engine.steps, engine.events()) == ("awaiting_model", 1, ())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tools": ["add"]}, r"^expected tools\[0\] to be a Tool or a callable handler, got str$"),
        ({"tools": 3}, r"^expected tools to be a list of Tools \(or handlers\), a mapping of name"),
        (
            {"tools": {"add": agentloop.Tool(lambda: 1, name="add")}},
            r"^tool 'add': expected a callable handler, got a Tool, which names itself: pass "
            r"Tools as a list, tools=\[Tool\(...\), ...\]$",
        ),
        ({"tools": {"add": 3}}, "tool 'add': expected a callable handler, got int"),
        ({"tools": {"": len}}, "expected tool names to be non-empty str"),
    ],
)
def test_bad_tools_fail_when_the_loop_is_built(kwargs: dict[str, Any], message: str) -> None:
    """Tools that are not handlers or a dispatcher are refused at Loop(...)."""
    with pytest.raises(TypeError, match=message):
        Loop(ScriptedModel([]), **kwargs)


def test_unresolvable_annotation_fails_when_the_loop_is_built() -> None:
    """A handler whose string annotations cannot be resolved is refused up front."""

    def handler(x: NoSuchType) -> int:  # type: ignore[name-defined] # noqa: F821
        return 0

    with pytest.raises(TypeError, match="tool 'h'"):
        Loop(ScriptedModel([]), tools={"h": handler})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"ledger": agentloop.ledger.SQLiteLedger},
            r"^expected ledger to be a Ledger, got the class SQLiteLedger: make one \(say "
            r"agentloop.ledger.SQLiteLedger\('runs.db'\)\)$",
        ),
        (
            {"tools": agentloop.ToolRegistry},
            r"got the class ToolRegistry: make one \(say ToolRegistry\(\[...\]\)\)$",
        ),
        (
            {"listeners": [agentloop.CancelToken]},
            r"^expected listeners\[0\] to be callable with a transition, got the class "
            r"CancelToken: pass an instance of it$",
        ),
        (
            {"model": ScriptedModel},
            r"^expected model to be a callable taking the history, got the class "
            r"ScriptedModel: pass an instance of it$",
        ),
    ],
)
def test_a_class_where_an_instance_is_meant_is_refused(
    kwargs: dict[str, Any], message: str
) -> None:
    """A class passes a callable or protocol check; Loop(...) refuses it, saying to make one."""
    kwargs.setdefault("model", ScriptedModel([]))
    with pytest.raises(TypeError, match=message):
        Loop(**kwargs)


def test_model_must_be_callable() -> None:
    """A model that is not callable is refused."""
    with pytest.raises(TypeError, match=r"expected model to be a callable.*got str"):
        Loop("gpt")  # type: ignore[call-overload]


def test_cancel_must_be_a_token(driver: Driver) -> None:
    """cancel= takes a CancelToken."""
    with pytest.raises(TypeError, match="expected cancel to be a CancelToken or None, got bool"):
        driver.start(Loop(ScriptedModel([])), "go", cancel=True)


def test_cancel_token_is_idempotent_and_visible() -> None:
    """cancel() can be called twice; cancelled reflects it."""
    token = agentloop.CancelToken()
    assert not token.cancelled
    token.cancel()
    token.cancel()
    assert token.cancelled
    assert repr(token) == "CancelToken(cancelled=True)"


def test_a_run_recorded_before_the_input_checks_still_reopens() -> None:
    """Only a new run's input is held to the contract: an engine checks what it needs, so a
    run file (or ledger) whose input an older version accepted replays and loads."""
    older = [{"kind": "tool_result", "id": "z", "name": "add", "status": "ok", "content": 1}]
    with pytest.raises(ValueError, match=r"answer an earlier unanswered call, got one for 'z'"):
        Loop(ScriptedModel([final()])).start(older)
    engine = agentloop.engine.Engine(older)  # as the older version's start() made it
    need = engine.next()
    assert isinstance(need, agentloop.engine.AskModel)
    engine.replied(final("ok"))
    engine.next()
    result = engine.result()
    assert (result.status, result.transcript) == ("finished", [*older, final("ok")])
    assert agentloop.review.run_from_json(agentloop.review.run_to_json(result)) == result


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"output": int}, "expected output to be an OutputSchema (a Loop's: loop.output) or None"),
        ({"retry": 3}, "expected retry to be an agentloop.models.RetryPolicy or None, got 3"),
        ({"models": "gpt"}, "expected models to be a tuple of the fallback models' names"),
        ({"clock": "now"}, "expected clock to be a callable returning seconds, got 'now'"),
    ],
    ids=["output", "retry", "models", "clock"],
)
def test_an_engine_part_of_the_wrong_kind_is_refused_when_the_engine_is_made(
    given: dict[str, Any], said: str
) -> None:
    """An embedding driver's slip is named at Engine(...), not found deep in a later step."""
    from agentloop.engine import Engine

    with pytest.raises(TypeError, match=re.escape(said)):
        Engine("go", **given)
    typed = Loop(ScriptedModel([]), output=list[int]).output
    engine = Engine("go", output=typed, models=("a", "b"), clock=lambda: 0.0)
    assert engine.state == "awaiting_model"


def test_a_budget_a_run_file_cannot_hold_is_refused_at_the_loop() -> None:
    """max_steps past 2**63 - 1 is refused when the Loop is built, not at save time."""
    with pytest.raises(ValueError, match=r"max_steps must be at most 2\*\*63 - 1"):
        Loop(ScriptedModel([]), max_steps=10**30)
    assert Loop(ScriptedModel([]), max_steps=2**63 - 1).budget.max_steps == 2**63 - 1


@pytest.mark.parametrize(
    ("messages", "error", "message"),
    [
        pytest.param([{"kind": "tool_result", "id": ["c"]}], ValueError,
                     r"messages\[0\]: expected a tool_result's 'id' to be a str, got \['c'\]",
                     id="tool_result id is a list"),
        pytest.param([{"kind": "user", "text": "\ud800"}], TypeError,
                     r"messages\[0\]\.text: expected text that is valid Unicode, got a lone surr",
                     id="lone surrogate"),
        pytest.param([call("c"), call("c"), {"kind": "tool_result", "id": "c"}], ValueError,
                     r"messages\[1\]: expected each call id once, got 'c' again",
                     id="one result for two calls"),
    ],
)  # fmt: skip
def test_bad_input_is_named(
    driver: Driver, messages: Any, error: type[Exception], message: str
) -> None:
    """Input the engine refuses says what was expected, at which message."""
    with pytest.raises(error, match=message):
        driver.start(Loop(ScriptedModel([])), messages)
