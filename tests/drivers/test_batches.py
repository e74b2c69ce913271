"""Batch replies: several calls in one reply, step by step, on both drivers.

Each scenario runs with batches of 1, 2 and 5 calls and asserts status,
counters, transcript and handler effects together.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from typing import Any

import pytest

import agentloop
from agentloop import CancelToken, InvalidStateError, Loop
from agentloop.engine import Engine, RunTool
from agentloop.review import RunFileError, run_from_json, run_to_json
from agentloop.testing import ScriptedModel, assert_contract
from tests.conftest import count
from tests.core.test_properties import check_paired
from tests.support.helpers import Driver, Recorder, call, final, kinds

A, V, D = "awaiting_model", "validating", "dispatching"
NOT_STARTED = "never started: the run was cancelled before this call could run"
CUT_OFF = "cancelled while it ran: the run was cancelled, and its outcome was dropped"
SIZES = pytest.mark.parametrize("n", [1, 2, 5])
FUZZ = int(os.environ.get("AGENTLOOP_FUZZ", "1"))


def element(call_id: str, name: str = "add", **arguments: Any) -> dict[str, Any]:
    """One call of a batch."""
    return {"id": call_id, "name": name, "arguments": arguments}


def batch(n: int, prefix: str = "c", text: str | None = None) -> dict[str, Any]:
    """A batch of ``n`` add calls: c1 adds 1+0, c2 adds 2+0, ..."""
    reply: dict[str, Any] = {
        "kind": "calls",
        "calls": [element(f"{prefix}{i}", a=i, b=0) for i in range(1, n + 1)],
    }
    if text is not None:
        reply["text"] = text
    return reply


def results_of(transcript: list[dict[str, Any]]) -> list[tuple[str, str, object]]:
    return [(m["id"], m["status"], m["content"]) for m in transcript if m["kind"] == "tool_result"]


@pytest.mark.row("dispatching --tool_returned [batch_open]--> dispatching")
@SIZES
def test_a_batch_then_a_final(driver: Driver, n: int) -> None:
    """Each step runs one call; the last appends the batch and every result together."""
    add = Recorder()
    model = ScriptedModel([batch(n, text="adding"), final("sum")])
    loop = Loop(model, tools={"add": add}, max_steps=2, max_calls=n, max_concurrency=1)
    run = driver.start(loop, "go")

    t = run.step()
    assert (t.source, t.dest, t.steps, t.calls) == (A, V, 1, 0)
    t = run.step()
    assert (t.source, t.dest, t.trigger, t.guard, t.calls) == (V, D, "validate", None, n)
    assert t.call_id == ("c1" if n == 1 else None)  # a longer batch is named call by call
    assert add.calls == []  # every id reserved and counted; nothing ran yet
    for i in range(1, n + 1):
        t = run.step()
        last = i == n
        assert (t.source, t.dest, t.trigger) == (D, A if last else D, "tool_returned")
        assert (t.call_id, t.tool, t.result_status, t.calls) == (f"c{i}", "add", "ok", n)
        assert t.guard == (None if last else "batch_open")
        assert len(add.calls) == i
        # No call enters the history before every call of its batch has its result.
        assert kinds(run.transcript) == (
            ["user", "calls", *["tool_result:ok"] * n] if last else ["user"]
        )
        assert len(t.appended) == (n + 1 if last else 0)
    assert add.calls == [{"a": i, "b": 0} for i in range(1, n + 1)]  # emission order
    run.step()
    # The model's next step saw the batch, then each result in emission order.
    seen = model.seen[1]
    assert seen[1] == batch(n, text="adding")
    assert results_of(seen) == [(f"c{i}", "ok", i) for i in range(1, n + 1)]
    t = run.step()
    assert t.dest == "finished"
    result = run.result()
    assert (result.status, result.output, result.steps, result.calls) == ("finished", "sum", 2, n)
    assert kinds(result.transcript) == ["user", "calls", *["tool_result:ok"] * n, "final"]
    assert result.transcript[1]["text"] == "adding"  # kept in the record, not the output


def test_a_single_call_is_a_batch_of_one_recorded_as_today(driver: Driver) -> None:
    """A 'call' reply takes the same rows and appends the call message itself."""
    result = driver.run(
        Loop(ScriptedModel([call("c1", a=1, b=2), final()]), tools={"add": Recorder()}), "go"
    )

    assert kinds(result.transcript) == ["user", "call", "tool_result:ok", "final"]
    assert [(e.source, e.dest, e.guard) for e in result.events][1:3] == [(V, D, None), (D, A, None)]


@SIZES
def test_a_batch_that_would_pass_max_calls_runs_nothing(driver: Driver, n: int) -> None:
    """calls + n > max_calls: exhausted, even when part of the batch would fit."""
    add = Recorder()
    model = ScriptedModel([call("first", a=0, b=0), batch(n)])
    result = driver.run(Loop(model, tools={"add": add}, max_steps=5, max_calls=n), "go")

    assert (result.status, result.reason) == ("exhausted", "max_calls")
    assert (result.steps, result.calls) == (2, 1)
    assert add.calls == [{"a": 0, "b": 0}]  # only the first call ran
    assert kinds(result.transcript) == ["user", "call", "tool_result:ok"]
    assert result.rejected == batch(n)
    last = result.events[-1]
    assert (last.source, last.dest, last.guard) == (V, "exhausted", "calls_exhausted")


@pytest.mark.parametrize("n", [2, 5])
def test_a_duplicate_id_inside_a_batch(driver: Driver, n: int) -> None:
    """Two calls of one batch share an id: repeated_call; nothing runs, nothing appended."""
    add = Recorder()
    reply = batch(n)
    reply["calls"][-1]["id"] = "c1"
    result = driver.run(Loop(ScriptedModel([reply]), tools={"add": add}, max_calls=9), "go")

    assert result.status == "repeated_call"
    assert (result.steps, result.calls, add.calls) == (1, 0, [])
    assert kinds(result.transcript) == ["user"]
    assert result.error == "call id 'c1' appears twice in the batch; no call of it was run"
    assert result.rejected == reply
    assert (result.events[-1].call_id, result.events[-1].tool) == ("c1", "add")  # named


@SIZES
def test_a_duplicate_id_against_an_earlier_call(driver: Driver, n: int) -> None:
    """A batch reusing an id of an earlier batch: repeated_call, and nothing runs twice."""
    add = Recorder()
    later = batch(n, prefix="d")
    later["calls"][-1]["id"] = "c1"
    result = driver.run(
        Loop(ScriptedModel([batch(1), later]), tools={"add": add}, max_calls=9), "go"
    )

    assert result.status == "repeated_call"
    assert (result.steps, result.calls) == (2, 1)
    assert add.calls == [{"a": 1, "b": 0}]
    assert kinds(result.transcript) == ["user", "calls", "tool_result:ok"]
    assert result.error == (
        "call id 'c1' was already used in this run, first at step 1 (transcript[1]); "
        "the call was not run again"
    )


def test_an_id_of_an_earlier_turn_says_it_was_the_input_s(driver: Driver) -> None:
    """A follow-up run (the first run's transcript, then a user message) whose model reuses an
    id of the first run: repeated_call, nothing run, and the error names the input message
    that first used it. The rule stands: input ids are reserved for the whole run."""
    add = Recorder()
    first = driver.run(
        Loop(ScriptedModel([call("c1", a=1, b=2), final("3")]), tools={"add": add}), "1+2?"
    )
    messages = [*first.transcript, {"kind": "user", "text": "and 2+2?"}]
    loop = Loop(ScriptedModel([call("c1", a=2, b=2)]), tools={"add": add})
    result = driver.run(loop, messages)
    assert (result.status, result.steps, result.calls) == ("repeated_call", 1, 0)
    assert add.calls == [{"a": 1, "b": 2}]  # the follow-up's call never ran
    assert result.transcript == messages
    assert result.error == (
        "call id 'c1' was already used in this run, first in the input (transcript[1]); "
        "the call was not run again"
    )
    assert_contract(result, messages)


def test_a_record_of_a_repeated_call_in_other_words_is_refused() -> None:
    """A record whose repeated call's error is not in the engine's words is refused."""
    result = Loop(ScriptedModel([batch(1), batch(1)]), tools={"add": Recorder()}).run("go")
    new = result.error
    assert new is not None
    assert "first at step 1" in new
    document = run_to_json(result)
    with pytest.raises(RunFileError, match=r"\$\.error"):
        run_from_json(document.replace(new, "call id 'c1' was used; never mind"))


@SIZES
def test_cancellation_from_a_tool_in_the_middle_of_a_batch(driver: Driver, n: int) -> None:
    """No call starts after cancellation; every call is answered, so the history is sendable."""
    token = CancelToken()
    ran: list[int] = []
    middle = (n + 1) // 2

    def cancel_at_middle(a: int, b: int) -> int:
        ran.append(a)
        if a == middle:
            token.cancel()
        return a + b

    run = driver.start(
        Loop(
            ScriptedModel([batch(n)]),
            tools={"add": cancel_at_middle},
            max_calls=n,
            max_concurrency=1,
        ),
        "go",
        cancel=token,
    )
    events = list(run)

    result = run.result()
    assert result.status == "cancelled"
    assert (result.steps, result.calls) == (1, n)
    assert ran == list(range(1, middle + 1))  # nothing ran after the cancel was seen
    expected: list[tuple[str, str, object]] = [(f"c{i}", "ok", i) for i in range(1, middle + 1)]
    expected += [(f"c{i}", "cancelled", NOT_STARTED) for i in range(middle + 1, n + 1)]
    assert results_of(result.transcript) == expected
    assert kinds(result.transcript)[:2] == ["user", "calls"]
    last = events[-1]
    if middle < n:  # seen at the next call's checkpoint
        assert (last.source, last.trigger, last.guard) == (
            D,
            "start_tool",
            "cancel_requested_mid_batch",
        )
        assert (last.call_id, last.result_status) == (f"c{middle + 1}", "cancelled")
    else:  # the batch was done: seen before asking the model
        assert (last.source, last.trigger, last.guard) == (A, "ask_model", "cancel_requested")


def test_cancellation_before_the_first_call_appends_nothing(driver: Driver) -> None:
    """Seen before any call of the batch started: cancelled, nothing appended (as for one call)."""
    token = CancelToken()
    add = Recorder()
    run = driver.start(Loop(ScriptedModel([batch(3)]), tools={"add": add}), "go", cancel=token)
    run.step()
    run.step()
    token.cancel()
    t = run.step()

    assert (t.source, t.dest, t.guard, t.call_id) == (D, "cancelled", "cancel_requested", "c1")
    result = run.result()
    assert (result.calls, add.calls, kinds(result.transcript)) == (3, [], ["user"])
    assert result.rejected == batch(3)


@pytest.mark.row("dispatching --start_tool [cancel_requested_mid_batch]--> cancelled")
@pytest.mark.parametrize("kind", ["plain", "async def"])
def test_a_tool_that_cancels_mid_batch_stops_the_calls_after_it(driver: Driver, kind: str) -> None:
    """[a, stop, b, d] at the default max_concurrency: stop cancels the token, and neither b nor
    d runs, plain or async def; both are answered as never started, a and stop keep their
    results, step by step."""
    token = CancelToken()
    ran: list[str] = []

    def plain(name: str) -> Any:
        def tool() -> str:
            ran.append(name)
            if name == "stop":
                token.cancel()
            return name

        return tool

    def asynchronous(name: str) -> Any:
        async def tool() -> str:
            return str(plain(name)())

        return tool

    make = plain if kind == "plain" else asynchronous
    names = ("a", "stop", "b", "d")
    tools = agentloop.ToolRegistry([agentloop.Tool(make(name), name=name) for name in names])
    reply = {"kind": "calls", "calls": [element(f"c{i}", name) for i, name in enumerate(names)]}
    run = driver.start(Loop(ScriptedModel([reply, final()]), tools=tools), "go", cancel=token)
    events = list(run)

    result = run.result()
    assert (result.status, result.steps, result.calls) == ("cancelled", 1, 4)
    assert ran == ["a", "stop"]  # b and d never began
    assert [(e.trigger, e.call_id, e.result_status) for e in events[2:]] == [
        ("tool_returned", "c0", "ok"),
        ("tool_returned", "c1", "ok"),
        ("start_tool", "c2", "cancelled"),  # the checkpoint before b saw the token
    ]
    assert events[-1].guard == "cancel_requested_mid_batch"
    assert results_of(result.transcript) == [
        ("c0", "ok", "a"),
        ("c1", "ok", "stop"),
        ("c2", "cancelled", NOT_STARTED),
        ("c3", "cancelled", NOT_STARTED),
    ]


async def test_a_call_handed_out_before_a_cancel_does_not_begin_after_it() -> None:
    """A call whose task was made before the token was cancelled, but whose handler had not
    begun, reads the token as it starts: it never runs, and its result says it never began."""
    token = CancelToken()
    ran: list[str] = []

    async def x() -> str:
        ran.append("x")
        await asyncio.sleep(0)  # y's task is made meanwhile; the cancel comes before y begins
        token.cancel()
        return "x"

    def y() -> str:
        ran.append("y")
        return "y"

    reply = {"kind": "calls", "calls": [element("c1", "x"), element("c2", "y")]}
    loop = Loop(ScriptedModel([reply, final()]), tools=[x, y], max_concurrency=2)
    result = await loop.arun("go", cancel=token)

    assert result.status == "cancelled"
    assert ran == ["x"]
    never_began = {
        "type": "TokenCancelled",
        "message": "cancelled by the run's CancelToken before the call began",
    }
    assert results_of(result.transcript) == [
        ("c1", "ok", "x"),
        ("c2", "cancelled", never_began),
    ]
    assert result.events[-1].trigger == "tool_interrupted"


async def test_a_call_still_running_beside_one_that_never_began_is_not_told_it_never_began() -> (
    None
):
    """x is still running when y, whose task was made before z cancelled, finds the token: the
    run ends, x is cut off, and neither x nor y is told it never began (x had)."""
    token = CancelToken()
    ran: list[str] = []

    async def x() -> str:
        ran.append("x")
        await asyncio.sleep(10)
        return "x"

    async def z() -> str:
        ran.append("z")
        await asyncio.sleep(0)
        token.cancel()
        return "z"

    def y() -> str:
        ran.append("y")
        return "y"

    reply = {"kind": "calls", "calls": [element("c1", "x"), element("c2", "z"), element("c3", "y")]}
    loop = Loop(ScriptedModel([reply, final()]), tools=[x, z, y], max_concurrency=3)
    result = await loop.arun("go", cancel=token)

    assert (result.status, ran) == ("cancelled", ["x", "z"])
    cut = {"type": "TokenCancelled", "message": "cancelled by the run's CancelToken"}
    assert results_of(result.transcript) == [
        ("c1", "cancelled", cut),
        ("c2", "ok", "z"),
        ("c3", "cancelled", cut),
    ]


@SIZES
def test_one_malformed_element(driver: Driver, n: int) -> None:
    """One bad element makes the whole reply malformed; error says which and why."""
    add = Recorder()
    reply = batch(n)
    reply["calls"][-1]["arguments"] = [1, 2]
    result = driver.run(Loop(ScriptedModel([reply]), tools={"add": add}), "go")

    assert result.status == "malformed"
    assert (result.steps, result.calls, add.calls) == (1, 0, [])
    assert kinds(result.transcript) == ["user"]
    assert result.error == (
        f"malformed reply: calls[{n - 1}]: expected 'arguments' to be a dict (or the raw "
        "text of arguments that did not parse, a str), got list"
    )


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (
            {"kind": "calls", "calls": []},
            "expected 'calls' to be a list of one or more calls, got an empty list",
        ),
        ({"kind": "calls"}, "a 'calls' reply needs ['calls', 'kind']; missing ['calls']"),
        (
            {"kind": "calls", "calls": [element("c1")], "note": "x"},
            "a 'calls' reply has exactly ['calls', 'kind', 'text']; unexpected ['note']",
        ),
        (
            {"kind": "calls", "calls": [element("c1")], "text": 3},
            "expected 'text' to be a str, got int",
        ),
        ({"kind": "calls", "calls": ["c1"]}, "calls[0]: expected a dict, got str"),
        (
            {"kind": "calls", "calls": [{**element("c1"), "kind": "call"}]},
            "calls[0]: each element of 'calls' has exactly "
            "['arguments', 'id', 'name', 'signature']; unexpected ['kind']",
        ),
        (
            {"kind": "calls", "calls": [element("c1"), {"id": "c2", "name": "add"}]},
            "calls[1]: each element of 'calls' needs ['arguments', 'id', 'name']; "
            "missing ['arguments']",
        ),
        (
            {"kind": "calls", "calls": [element("")]},
            "calls[0]: expected 'id' to be a non-empty str, got ''",
        ),
    ],
)
def test_malformed_batches_say_what_is_wrong(reply: dict[str, Any], problem: str) -> None:
    """Strict shape: a non-empty list; the reply and each element have exactly their keys."""
    result = Loop(ScriptedModel([reply]), tools={"add": Recorder()}).run("go")

    assert (result.status, result.error) == ("malformed", f"malformed reply: {problem}")


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (
            {**call("c1"), "signature": 7},
            "expected 'signature' to be a non-empty str, got 7",
        ),
        (
            {"kind": "calls", "calls": [{**element("c1"), "signature": ""}]},
            "calls[0]: expected 'signature' to be a non-empty str, got ''",
        ),
        (
            {**call("c1"), "signature": "c2ln", "note": "x"},
            "a 'call' reply has exactly ['arguments', 'id', 'kind', 'name', 'signature']; "
            "unexpected ['note']",
        ),
    ],
)
def test_a_malformed_signature_is_named(reply: dict[str, Any], problem: str) -> None:
    """A call's optional ``signature`` is a non-empty str; anything else is malformed."""
    result = Loop(ScriptedModel([reply]), tools={"add": Recorder()}).run("go")

    assert (result.status, result.error) == ("malformed", f"malformed reply: {problem}")


def test_a_calls_signature_is_kept_and_handed_back(driver: Driver, tmp_path: Any) -> None:
    """A provider's token on a call (Gemini's thought signature) is the record's: the
    transcript and the model's next copy of the history keep it, and so does a saved run."""
    signed = {**call("c1", a=1, b=2), "signature": "c2lnbmVk"}
    batch_of_two = {
        "kind": "calls",
        "calls": [{**element("c2", a=2, b=2), "signature": "b25l"}, element("c3", a=3, b=3)],
    }
    seen: list[list[dict[str, Any]]] = []

    def last(history: list[dict[str, Any]]) -> dict[str, Any]:
        seen.append(history)
        return final("done")

    add = Recorder()
    result = driver.run(Loop(ScriptedModel([signed, batch_of_two, last]), tools={"add": add}), "go")
    assert (result.status, result.calls) == ("finished", 3)
    assert add.calls == [{"a": 1, "b": 2}, {"a": 2, "b": 2}, {"a": 3, "b": 3}]
    assert result.transcript[1] == signed
    assert result.transcript[3] == batch_of_two
    (history,) = seen
    assert history == result.transcript[:-1]
    path = tmp_path / "run.json"
    agentloop.review.save_run(result, path)
    assert agentloop.review.load_run(path) == result


@SIZES
def test_a_model_exception_after_a_batch(driver: Driver, n: int) -> None:
    """The batch is recorded; the model then raises: failed, with the batch kept."""
    add = Recorder()
    result = driver.run(
        Loop(ScriptedModel([batch(n), ValueError("down")]), tools={"add": add}, max_calls=n), "go"
    )

    assert result.status == "failed"
    assert result.error == "the model raised ValueError: down"
    assert (result.steps, result.calls, len(add.calls)) == (2, n, n)
    assert kinds(result.transcript) == ["user", "calls", *["tool_result:ok"] * n]


def test_a_tool_that_raises_gives_its_call_an_error_and_the_rest_still_run(driver: Driver) -> None:
    """One failing call does not stop its siblings."""

    def boom() -> None:
        raise RuntimeError("broken")

    add = Recorder()
    reply = {
        "kind": "calls",
        "calls": [element("c1", a=1, b=1), element("c2", "boom"), element("c3", a=2, b=2)],
    }
    result = driver.run(
        Loop(ScriptedModel([reply, final()]), tools={"add": add, "boom": boom}), "go"
    )

    assert result.status == "finished"
    assert results_of(result.transcript) == [
        ("c1", "ok", 2),
        ("c2", "error", {"type": "RuntimeError", "message": "broken"}),
        ("c3", "ok", 4),
    ]
    assert add.calls == [{"a": 1, "b": 1}, {"a": 2, "b": 2}]
    assert isinstance(result.events[3].exception, RuntimeError)
    assert [e.result_status for e in result.events[2:5]] == ["ok", "error", "ok"]


def test_a_keyboard_interrupt_mid_batch_answers_every_call() -> None:
    """Interrupted in the second call: the first keeps its result, the rest are cancelled."""

    def stop(a: int, b: int) -> int:
        if a == 2:
            raise KeyboardInterrupt
        return a

    run = Loop(ScriptedModel([batch(4)]), tools={"add": stop}).start("go")
    run.step()
    run.step()
    run.step()
    with pytest.raises(KeyboardInterrupt):
        run.step()

    result = run.result()
    assert result.status == "cancelled"
    assert results_of(result.transcript) == [
        ("c1", "ok", 1),
        ("c2", "cancelled", {"type": "KeyboardInterrupt", "message": ""}),
        ("c3", "cancelled", NOT_STARTED),
        ("c4", "cancelled", NOT_STARTED),
    ]
    last = result.events[-1]
    assert (last.trigger, last.call_id, last.result_status) == (
        "tool_interrupted",
        "c2",
        "cancelled",
    )


@pytest.mark.row("dispatching --interrupted [batch_underway]--> cancelled")
def test_an_interrupt_between_calls_answers_every_call() -> None:
    """Interrupted in a listener after the first call: the batch is appended, answered."""

    def listener(transition: agentloop.Transition) -> None:
        if transition.call_id == "c1" and transition.result_status == "ok":
            raise KeyboardInterrupt

    run = Loop(ScriptedModel([batch(3)]), tools={"add": Recorder()}, listeners=[listener]).start(
        "go"
    )
    with pytest.raises(KeyboardInterrupt):
        run.finish()

    result = run.result()
    assert result.status == "cancelled"
    assert results_of(result.transcript) == [
        ("c1", "ok", 1),
        ("c2", "cancelled", NOT_STARTED),
        ("c3", "cancelled", NOT_STARTED),
    ]
    assert (result.events[-1].trigger, result.events[-1].guard) == ("interrupted", "batch_underway")


def test_batches_in_the_input_history() -> None:
    """Input 'calls' messages are checked, answered, and their ids reserved."""
    history: list[dict[str, Any]] = [
        {"kind": "user", "text": "hi"},
        {"kind": "calls", "calls": [element("old1"), element("old2")], "text": "two"},
        {"kind": "tool_result", "id": "old1", "name": "add", "status": "ok", "content": 0},
        {"kind": "tool_result", "id": "old2", "name": "add", "status": "ok", "content": 0},
    ]
    result = Loop(ScriptedModel([batch(1, prefix="old")]), tools={"add": Recorder()}).run(history)
    assert result.status == "repeated_call"
    assert result.transcript == history

    with pytest.raises(
        ValueError, match=r"messages\[1\]\.calls\[1\]: expected every call .* 'old2'"
    ):
        Loop(ScriptedModel([])).start(history[:3])
    with pytest.raises(ValueError, match=r"messages\[0\]\.calls\[1\]: expected each call id once"):
        Loop(ScriptedModel([])).start([{"kind": "calls", "calls": [element("x"), element("x")]}])
    with pytest.raises(ValueError, match=r"messages\[0\]: expected a 'calls' message's 'calls'"):
        Loop(ScriptedModel([])).start([{"kind": "calls", "calls": []}])


def test_str_arguments_are_accepted_and_counted() -> None:
    """Raw argument text that did not parse is a call the model can be told about."""
    reply = {"kind": "calls", "calls": [{"id": "c1", "name": "add", "arguments": '{"a": 1'}]}
    engine = Engine("go", budget=agentloop.engine.Budget(max_steps=2, max_calls=2))
    engine.next()
    engine.replied(reply)
    engine.next()
    assert engine.calls == 1
    need = engine.next()
    assert isinstance(need, RunTool)
    assert need.call == {"kind": "call", "id": "c1", "name": "add", "arguments": '{"a": 1'}


def test_the_engine_protocol_for_batches() -> None:
    """next() hands out each call; returned() names it when several run; bad reports are refused."""
    engine = Engine("go", budget=agentloop.engine.Budget(max_steps=2, max_calls=3))
    engine.next()
    engine.replied(batch(3))
    engine.next()
    assert (engine.state, engine.unstarted, engine.running) == (D, 3, ())
    first = engine.next()
    second = engine.next()  # a driver may run calls of a batch at once
    assert isinstance(first, RunTool)
    assert isinstance(second, RunTool)
    assert (first.call["id"], second.call["id"], engine.running, engine.unstarted) == (
        "c1",
        "c2",
        ("c1", "c2"),
        1,
    )
    with pytest.raises(InvalidStateError, match=r"calls \['c1', 'c2'\] are running: say which"):
        engine.returned({"status": "ok", "content": 1})
    with pytest.raises(
        InvalidStateError, match="cannot take a report for call 'c3': it is not running"
    ):
        engine.returned({"status": "ok", "content": 1}, "c3")
    t = engine.returned({"status": "ok", "content": 2}, "c2")  # completion order
    assert (t.call_id, t.dest, t.appended) == ("c2", D, [])
    engine.next()
    with pytest.raises(InvalidStateError, match="every call of the batch was handed out"):
        engine.next()
    engine.raised(ValueError("x"), "c3")
    t = engine.returned({"status": "ok", "content": 1})  # the only one running
    assert (t.call_id, t.dest) == ("c1", A)
    assert results_of(t.appended) == [
        ("c1", "ok", 1),
        ("c2", "ok", 2),
        ("c3", "error", {"type": "ValueError", "message": "x"}),
    ]  # emission order, whatever the completion order


def test_the_saved_run_of_a_batch_reopens(driver: Driver, tmp_path: Any) -> None:
    """Save and load a run with batches, a failure and a cancellation: replay agrees."""
    token = CancelToken()

    def cancel_at_the_second(a: int, b: int) -> int:
        if a == 2 and b == 1:
            token.cancel()
        return a + b

    model = ScriptedModel(
        [
            batch(2, text="t"),
            {
                "kind": "calls",
                "calls": [element("x1", a=1, b=1), element("x2", a=2, b=1), element("x3")],
            },
        ]
    )
    result = driver.run(
        Loop(model, tools={"add": cancel_at_the_second}, max_calls=9), "go", cancel=token
    )
    assert result.status == "cancelled"
    path = tmp_path / "run.json"
    agentloop.review.save_run(result, path)

    assert agentloop.review.load_run(path) == result


def test_max_concurrency_is_asyncio_only_and_checked() -> None:
    """A synchronous run refuses it; bad values are refused when the loop is built."""
    with pytest.raises(ValueError, match=r"max_concurrency > 1 needs the asyncio driver"):
        Loop(ScriptedModel([]), max_concurrency=2).start("go")
    with pytest.raises(
        TypeError, match="expected max_concurrency to be an int of 1 or more, got float"
    ):
        Loop(ScriptedModel([]), max_concurrency=2.0)  # type: ignore[call-overload]
    with pytest.raises(
        ValueError, match="expected max_concurrency to be an int of 1 or more, got 0"
    ):
        Loop(ScriptedModel([]), max_concurrency=0)


async def test_concurrent_calls_complete_in_any_order_and_record_in_emission_order() -> None:
    """max_concurrency=4: up to 4 at once; one transition per completion; record in order.

    Each call finishes only when the one before it in ``order`` has been reported
    (no timing: the order is the test's, whatever the machine's load).
    """
    order = [4, 2, 6, 3, 1, 5]  # 5 and 6 start only as slots free up
    gates = {a: asyncio.Event() for a in order}
    log: list[tuple[str, int]] = []
    running, most = [0], [0]

    async def add(a: int, b: int) -> int:
        log.append(("start", a))
        running[0] += 1
        most[0] = max(most[0], running[0])
        await gates[a].wait()
        running[0] -= 1
        log.append(("end", a))
        return a + b

    def release_the_next(transition: agentloop.Transition) -> None:
        if transition.trigger == "tool_returned":
            done = int(transition.call_id[1:])  # type: ignore[index]
            if order.index(done) + 1 < len(order):
                gates[order[order.index(done) + 1]].set()

    gates[order[0]].set()
    loop = Loop(
        ScriptedModel([batch(6), final()]),
        tools={"add": add},
        max_calls=6,
        max_concurrency=4,
        listeners=[release_the_next],
    )
    run = loop.astart("go")
    events = [t async for t in run]

    ends = [a for what, a in log if what == "end"]
    dispatched = [e for e in events if e.trigger == "tool_returned"]
    assert ends == order
    assert [e.call_id for e in dispatched] == [f"c{a}" for a in ends]  # completion order
    assert [a for what, a in log if what == "start"] == [1, 2, 3, 4, 5, 6]  # emission order
    assert most[0] == 4
    result = run.result()
    assert result.status == "finished"
    assert results_of(result.transcript) == [(f"c{i}", "ok", i) for i in range(1, 7)]
    assert [e.dest for e in dispatched] == [D] * 5 + [A]


async def test_token_cancel_with_calls_running_cuts_them_and_starts_no_more() -> None:
    """Cancelled while three calls run: each gets cancelled, the unstarted ones too."""
    token = CancelToken()
    started: list[int] = []

    async def slow(a: int, b: int) -> int:
        started.append(a)
        await asyncio.sleep(10)
        return a

    async def cancel_once_three_run() -> None:
        while len(started) < 3:
            await asyncio.sleep(0)
        token.cancel()

    loop = Loop(ScriptedModel([batch(5)]), tools={"add": slow}, max_calls=5, max_concurrency=3)
    canceller = asyncio.ensure_future(cancel_once_three_run())
    result = await loop.arun("go", cancel=token)
    await canceller

    assert result.status == "cancelled"
    cut = {"type": "TokenCancelled", "message": "cancelled by the run's CancelToken"}
    statuses = results_of(result.transcript)
    assert statuses[3:] == [("c4", "cancelled", NOT_STARTED), ("c5", "cancelled", NOT_STARTED)]
    assert statuses[:3] == [
        ("c1", "cancelled", cut),
        ("c2", "cancelled", cut),
        ("c3", "cancelled", cut),
    ]


async def test_a_call_that_finished_before_the_token_woke_the_driver_keeps_its_result() -> None:
    """c1 ends as c2 cancels: c1 is reported ok, and the next checkpoint cuts the rest."""
    token = CancelToken()
    ran: list[int] = []

    async def slow(a: int, b: int) -> int:
        if a == 2:
            token.cancel()
        await asyncio.sleep(10 if a != 1 else 0)
        ran.append(a)
        return a

    loop = Loop(ScriptedModel([batch(5)]), tools={"add": slow}, max_calls=5, max_concurrency=3)
    result = await loop.arun("go", cancel=token)

    assert result.status == "cancelled"
    assert ran == [1]
    statuses = results_of(result.transcript)
    assert statuses[0] == ("c1", "ok", 1)
    assert statuses[1] == ("c2", "cancelled", CUT_OFF)  # running when the cancel was seen
    # c3 was never handed out: its checkpoint came after c2 had cancelled the token.
    assert statuses[2:] == [(f"c{i}", "cancelled", NOT_STARTED) for i in range(3, 6)]
    assert result.events[-1].guard == "cancel_requested_mid_batch"


async def test_a_batch_of_ten_waiting_calls_overlaps() -> None:
    """max_concurrency=10: ten calls all run at once (the bench times it with sleeps).

    Each call waits until all ten have started, so none can end first however
    loaded the machine is; run one at a time, the first would wait forever (cut
    at 10 s, a failure).
    """
    log: list[tuple[str, int]] = []
    all_started = asyncio.Event()

    async def add(a: int, b: int) -> int:
        log.append(("start", a))
        if len(log) == 10:
            all_started.set()
        await asyncio.wait_for(all_started.wait(), 10)
        log.append(("end", a))
        return a + b

    loop = Loop(
        ScriptedModel([batch(10), final()]),
        tools={"add": add},
        max_calls=10,
        max_concurrency=10,
    )
    result = await loop.arun("go")

    assert result.status == "finished"
    assert [what for what, _ in log[:10]] == ["start"] * 10
    assert sorted(a for what, a in log if what == "end") == list(range(1, 11))
    assert [status for _, status, _ in results_of(result.transcript)] == ["ok"] * 10


async def test_cancelling_concurrent_batches_at_random_points_answers_every_call() -> None:
    """Hundreds of runs (2000 in the long tier), the task cancelled at a random await: no
    call is ever unanswered."""
    rng = random.Random(20261130)
    outcomes: set[str] = set()
    for _ in range(count(600, 2000) * FUZZ):
        n = rng.randint(1, 6)
        delays = [rng.randint(0, 4) for _ in range(n)]
        done: list[int] = []

        async def add(a: int, b: int, delays: list[int] = delays, done: list[int] = done) -> int:
            for _ in range(delays[a - 1]):
                await asyncio.sleep(0)
            done.append(a)
            return a

        model = ScriptedModel([batch(n), final()])
        run = Loop(model, tools={"add": add}, max_calls=n, max_concurrency=4).astart("go")

        async def drive(run: agentloop.AsyncRun = run) -> None:
            async for _ in run:
                pass

        task = asyncio.ensure_future(drive())
        for _ in range(rng.randint(0, 14)):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        finished = len(done)
        for _ in range(6):  # a dropped call's task never finishes later
            await asyncio.sleep(0)
        assert len(done) == finished
        if not run.done:  # cancelled before the task ever ran: nothing happened
            assert (run.state, run.steps, run.transcript) == (
                A,
                0,
                [{"kind": "user", "text": "go"}],
            )
            outcomes.add("never started")
            continue
        result = run.result()
        outcomes.add(result.status)
        transcript = result.transcript
        check_paired(transcript)
        answered = results_of(transcript)
        if answered:  # the whole batch, in emission order; each finished call kept its result
            assert [call_id for call_id, _, _ in answered] == [f"c{i}" for i in range(1, n + 1)]
            assert {int(i[1:]) for i, status, _ in answered if status == "ok"} <= set(done)
        assert result.status in {"finished", "cancelled"}
    assert outcomes == {"never started", "finished", "cancelled"}
