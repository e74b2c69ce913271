"""Conversations in memory: ``run(message, after=result)`` is the next turn of a conversation.

Step by step on both drivers (status, counters, transcript and the tools' effects
together): each turn is a run of its own (fresh budgets), its input the turn before's
transcript and the new message; earlier call ids stay reserved; a turn that waits for
a person is refused; a turn's run file keeps its conversation and the turn before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from agentloop import InvalidStateError, Loop, State, Tool, ask
from agentloop.ledger import SQLiteLedger
from agentloop.review import load_run, run_from_json, run_to_json, save_run
from agentloop.testing import ScriptedModel, call, final
from tests.support.helpers import Recorder, kinds

if TYPE_CHECKING:
    from pathlib import Path

    from tests.support.helpers import Driver


def test_after_result_starts_the_next_turn(driver: Driver) -> None:
    """Turn 2's input is turn 1's transcript and the new message; its budgets start afresh."""
    add = Recorder()
    model = ScriptedModel(
        [
            call("c1", "add", a=1, b=2),
            final("3"),
            call("c2", "add", a=3, b=4),
            final("7"),
            final("welcome"),
        ]
    )
    loop = Loop(model, tools={"add": add}, system="Be brief.", max_steps=2)
    first = driver.run(loop, "1+2?")
    assert (first.status, first.steps, first.calls, first.turn, first.conversation_id) == (
        State.FINISHED,
        2,
        1,
        None,
        None,
    )
    second = driver.run(loop, "3+4?", after=first)
    # Its own budgets: two steps again (max_steps=2 would have ended both runs together).
    assert (second.status, second.output, second.steps, second.calls) == (State.FINISHED, "7", 2, 1)
    assert (second.turn, second.continues) == (2, None)  # in memory: no run id to name
    assert second.conversation_id is not None
    assert second.transcript[: len(first.transcript)] == first.transcript
    assert second.transcript[len(first.transcript)] == {"kind": "user", "text": "3+4?"}
    assert kinds(second.transcript) == [
        "system", "user", "call", "tool_result:ok", "final",
        "user", "call", "tool_result:ok", "final",
    ]  # fmt: skip
    assert add.calls == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    # The model saw the whole conversation on turn 2's first step.
    assert model.seen[2] == [*first.transcript, {"kind": "user", "text": "3+4?"}]
    third = driver.run(loop, [{"kind": "user", "text": "thanks"}], after=second)
    assert (third.status, third.steps, third.turn, third.conversation_id) == (
        State.FINISHED,
        1,
        3,
        second.conversation_id,
    )
    assert third.transcript == [
        *second.transcript,
        {"kind": "user", "text": "thanks"},
        {"kind": "final", "text": "welcome"},
    ]


def test_reused_call_id_from_an_earlier_turn_ends_repeated_call(driver: Driver) -> None:
    """A call id from turn 1 is reserved in turn 2: reusing it ends the turn, nothing runs twice."""
    add = Recorder()
    model = ScriptedModel([call("c1", "add", a=1, b=2), final("3"), call("c1", "add", a=1, b=2)])
    loop = Loop(model, tools={"add": add})
    first = driver.run(loop, "1+2?")
    second = driver.run(loop, "again", after=first)
    assert (second.status, second.steps, second.calls, second.turn) == (
        State.REPEATED_CALL,
        1,
        0,
        2,
    )
    assert "c1" in (second.error or "")
    assert add.calls == [{"a": 1, "b": 2}]  # once, in turn 1
    assert second.transcript == [*first.transcript, {"kind": "user", "text": "again"}]


def test_turn_refused_while_the_last_awaits_approval(driver: Driver) -> None:
    """A turn that waits for a person is no turn to go on from: refused, nothing asked or run."""
    paid: list[int] = []

    def pay(amount: int) -> str:
        """Pay."""
        paid.append(amount)
        return "paid"

    model = ScriptedModel([call("p1", "pay", amount=50), final("paid")])
    loop = Loop(model, tools=[Tool(pay, policy=lambda _call: ask("money"))])
    paused = driver.run(loop, "pay Bob")
    assert paused.status is State.AWAITING_APPROVAL
    with pytest.raises(InvalidStateError, match="waits for decisions: decide and resume it first"):
        driver.run(loop, "and now?", after=paused)
    assert (len(model.seen), paid) == (1, [])


def test_a_failed_turn_continued_is_the_next_turn() -> None:
    """``continue_run`` of a turn that failed makes the conversation's next turn."""
    model = ScriptedModel([final("hi"), RuntimeError("down"), final("back")])
    loop = Loop(model, max_steps=1)
    first = loop.run("hello")
    failed = loop.run("more", after=first)
    assert (failed.status, failed.turn) == (State.FAILED, 2)
    goes_on = loop.continue_run(failed)
    assert (goes_on.status, goes_on.output, goes_on.turn, goes_on.conversation_id) == (
        State.FINISHED,
        "back",
        3,
        failed.conversation_id,
    )
    assert goes_on.transcript[:-1] == failed.transcript


def test_run_file_names_conversation_and_turn_before(tmp_path: Path) -> None:
    """A durable turn's run file keeps its conversation, turn and the turn before: saved,
    loaded (its events replayed and checked) and gone on from."""
    ledger = SQLiteLedger(tmp_path / "runs.db")
    loop = Loop(ScriptedModel([final("one"), final("two"), final("three")]), ledger=ledger)
    first = loop.run("hi", conversation="c")
    second = loop.run("again", conversation="c")
    assert (second.run_id, second.conversation_id, second.turn, second.continues) == (
        "c::2",
        "c",
        2,
        "c::1",
    )
    save_run(second, tmp_path / "turn2.json")
    loaded = load_run(tmp_path / "turn2.json")
    assert (loaded.run_id, loaded.conversation_id, loaded.turn, loaded.continues) == (
        "c::2",
        "c",
        2,
        "c::1",
    )
    back = run_from_json(run_to_json(first))
    assert (back.run_id, back.conversation_id, back.turn, back.continues) == ("c::1", "c", 1, None)
    assert loaded.transcript == second.transcript
    # Going on from the loaded file, in memory: turn 3 of the same conversation.
    third = Loop(ScriptedModel([final("three")])).run("last", after=loaded)
    assert (third.output, third.turn, third.conversation_id, third.continues) == (
        "three",
        3,
        "c",
        "c::2",
    )


@pytest.mark.parametrize(
    ("how", "error", "says"),
    [
        ({"after": "not a result"}, TypeError, "after= expected a RunResult"),
        ({"conversation": "c"}, ValueError, r"this Loop has none: go on from a result with"),
        ({"conversation": "a:b"}, ValueError, "without ':'"),
        ({"conversation": 7}, TypeError, "got int"),
        ({"after": None, "run_id": "x", "conversation": "c"}, ValueError, "leave run_id= out"),
    ],
)
def test_bad_turns_are_refused_before_anything_runs(
    how: dict[str, Any], error: type[Exception], says: str
) -> None:
    """A turn asked for wrongly is refused with what was expected and what was given."""
    model = ScriptedModel([final("ok")])
    with pytest.raises(error, match=says):
        Loop(model).run("hi", **how)
    assert model.seen == []


def test_a_blank_message_is_refused_for_a_turn(driver: Driver) -> None:
    """The new message of a turn is checked as a new run's input is: a blank one is refused."""
    model = ScriptedModel([final("hi")])
    first = driver.run(Loop(model), "hello")
    with pytest.raises(ValueError, match="a blank str"):
        driver.run(Loop(model), "  ", after=first)
    assert len(model.seen) == 1


def test_a_loop_without_a_ledger_lists_no_conversation() -> None:
    """Loop.conversation(id) reads a ledger: without one it says how to go on instead."""
    with pytest.raises(ValueError, match=r"this Loop has none: go on from a result"):
        Loop(ScriptedModel([])).conversation("u")
