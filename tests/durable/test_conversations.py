"""Durable conversations: ``conversation='id'`` on a Loop with a ledger.

Turn ``n`` is the run ``id::n``; the next turn goes on from the stored transcript in
any process (real processes here); two processes racing for one turn leave one turn
and a ``ConversationBusyError``; ``Loop.conversation`` lists the turns' results.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import orjson
import pytest

from agentloop import InvalidStateError, Loop, State, Tool, ask
from agentloop.__main__ import main
from agentloop._cli import ledger_commands
from agentloop.context import summarise
from agentloop.engine import Engine
from agentloop.ledger import ConversationBusyError, SQLiteLedger, view_run
from agentloop.review import load_run, report_html, save_run
from agentloop.testing import ScriptedModel, call, final
from tests.core.test_context import Chatty, echo, summary_writer, tokens_of
from tests.support.helpers import AsyncDriver, Recorder, kinds
from tests.support.ledgers import MemoryLedger

if TYPE_CHECKING:
    from pathlib import Path

    from tests.support.helpers import Driver


def turn_in_a_process(
    ledger: Path, conversation: str, message: str, *race: str
) -> subprocess.Popen[str]:
    """A process that runs the conversation's next turn (``tests.support.conversation_turn``)."""
    command = [sys.executable, "-m", "tests.support.conversation_turn", str(ledger)]
    return subprocess.Popen(
        [*command, conversation, message, *race],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def outcome(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    return orjson.loads(out)  # type: ignore[no-any-return]


def test_durable_turns_are_runs_of_the_ledger(driver: Driver, tmp_path: Path) -> None:
    """Each turn is the run ``id::n``, its input the stored transcript; the Loop lists them."""
    ledger = SQLiteLedger(tmp_path / "runs.db")
    add = Recorder()
    model = ScriptedModel([call("c1", "add", a=1, b=2), final("3"), final("you are welcome")])
    loop = Loop(model, tools={"add": add}, ledger=ledger, max_steps=2)
    first = driver.run(loop, "1+2?", conversation="chat")
    second = driver.run(loop, "thanks", conversation="chat")
    assert [
        (r.run_id, r.turn, r.continues, r.status, r.steps, r.calls) for r in (first, second)
    ] == [
        ("chat::1", 1, None, State.FINISHED, 2, 1),
        ("chat::2", 2, "chat::1", State.FINISHED, 1, 0),
    ]
    assert kinds(second.transcript) == [
        "user", "call", "tool_result:ok", "final", "user", "final",
    ]  # fmt: skip
    assert add.calls == [{"a": 1, "b": 2}]
    assert ledger.run_ids(prefix="chat::") == ["chat::1", "chat::2"]
    listed = loop.conversation("chat")
    assert [(r.run_id, r.turn, r.output) for r in listed] == [
        ("chat::1", 1, "3"),
        ("chat::2", 2, "you are welcome"),
    ]
    assert listed[1].transcript == second.transcript
    assert AsyncDriver().runner.run(loop.aconversation("chat")) == listed
    assert loop.conversation("nobody") == ()
    # The record of a turn stands alone: its header holds its whole input.
    assert view_run(ledger, "chat::2").result.transcript == second.transcript


def test_durable_turn_in_another_process(tmp_path: Path) -> None:
    """Turn 1 in one process, turn 2 in another (one ledger file), from the stored transcript."""
    path = tmp_path / "runs.db"
    first = outcome(turn_in_a_process(path, "u", "hello"))
    second = outcome(turn_in_a_process(path, "u", "again"))
    assert (first["run_id"], first["status"], first["output"]) == (
        "u::1",
        "finished",
        "heard hello",
    )
    assert (second["run_id"], second["turn"], second["continues"], second["output"]) == (
        "u::2",
        2,
        "u::1",
        "heard again",
    )
    assert (second["steps"], second["calls"]) == (2, 1)  # its own budgets' counters
    assert path.with_suffix(".effects").read_text() == "u hello\nu again\n"
    transcript = view_run(SQLiteLedger(path), "u::2").result.transcript
    assert [m.get("text") for m in transcript if m["kind"] == "user"] == ["hello", "again"]


def test_two_processes_race_for_one_turn(tmp_path: Path) -> None:
    """Both read turn 4 as the last and begin turn 5 at once: one wins, the other is refused,
    and nothing of the loser is written."""
    path = tmp_path / "runs.db"
    loop = Loop(
        ScriptedModel([final(f"answer {n}") for n in range(1, 5)]), ledger=SQLiteLedger(path)
    )
    for n in range(1, 5):
        loop.run(f"message {n}", conversation="u")
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    (barrier / "expect").write_text("a b")
    racers = {
        name: turn_in_a_process(path, "u", f"from {name}", str(barrier), name) for name in "ab"
    }
    results = {name: outcome(process) for name, process in racers.items()}
    busy = [name for name, result in results.items() if result == {"busy": 5}]
    assert len(busy) == 1, results
    (winner,) = set(results) - set(busy)
    assert (results[winner]["run_id"], results[winner]["status"]) == ("u::5", "finished")
    ledger = SQLiteLedger(path)
    assert ledger.run_ids(prefix="u::") == [f"u::{n}" for n in range(1, 6)]
    header, _ = ledger.read("u::5")
    assert f"from {winner}".encode() in header
    assert f"from {busy[0]}".encode() not in header
    assert path.with_suffix(".effects").read_text() == f"u from {winner}\n"


def test_a_durable_turn_refused_while_the_last_awaits_approval(
    driver: Driver, tmp_path: Path
) -> None:
    """A turn waiting for a person is named in the refusal; nothing is asked, run or recorded."""
    paid: list[int] = []

    def pay(amount: int) -> str:
        """Pay."""
        paid.append(amount)
        return "paid"

    ledger = SQLiteLedger(tmp_path / "runs.db")
    model = ScriptedModel([call("p1", "pay", amount=50), final("paid")])
    loop = Loop(model, tools=[Tool(pay, policy=lambda _call: ask("money"))], ledger=ledger)
    assert driver.run(loop, "pay Bob", conversation="u").status is State.AWAITING_APPROVAL
    with pytest.raises(
        InvalidStateError,
        match="turn 1 of conversation 'u' waits for decisions: decide and resume it first",
    ):
        driver.run(loop, "and now?", conversation="u")
    assert (len(model.seen), paid, ledger.run_ids()) == (1, [], ["u::1"])


def test_after_must_be_the_conversations_last_turn(tmp_path: Path) -> None:
    """With both ``conversation=`` and ``after=``, ``after`` is the last turn, or refused."""
    loop = Loop(
        ScriptedModel([final("1"), final("2"), final("3")]), ledger=SQLiteLedger(tmp_path / "r.db")
    )
    first = loop.run("one", conversation="u")
    second = loop.run("two", conversation="u", after=first)
    with pytest.raises(
        ValueError, match=r"the last turn of conversation 'u' \(u::2\), got run 'u::1'"
    ):
        loop.run("three", conversation="u", after=first)
    assert loop.run("three", conversation="u", after=second).turn == 3
    # after= alone on a durable Loop: the turn after it, in the same ledger.
    with pytest.raises(
        ConversationBusyError, match="turn 2 of conversation 'u' was begun elsewhere"
    ):
        loop.run("again", after=first)


@pytest.mark.parametrize("conversation_id", ["u::1", "a:b", ""])
def test_after_a_result_whose_conversation_id_no_turn_can_have_is_refused(
    conversation_id: str, tmp_path: Path
) -> None:
    """A run file edited by hand cannot make a turn's id that ``conversation=`` refuses."""
    turn = Loop(ScriptedModel([final("1")])).run(
        "one", after=Loop(ScriptedModel([final("0")])).run("zero")
    )
    save_run(turn, tmp_path / "turn.json")
    document = orjson.loads((tmp_path / "turn.json").read_bytes())
    document["conversation_id"] = conversation_id
    (tmp_path / "edited.json").write_bytes(orjson.dumps(document))
    edited = load_run(tmp_path / "edited.json")
    model, ledger = ScriptedModel([final("2")]), SQLiteLedger(tmp_path / "r.db")
    with pytest.raises(ValueError, match=r"expected after=\.conversation_id to be a non-empty str"):
        Loop(model, ledger=ledger).run("two", after=edited)
    assert (model.seen, ledger.run_ids()) == ([], [])


def test_a_ledger_that_cannot_list_runs_still_holds_conversations() -> None:
    """A ``Ledger`` without ``run_ids(prefix=)`` is asked for turns 1, 2, ... until one is not."""
    ledger = MemoryLedger()
    loop = Loop(ScriptedModel([final("1"), final("2")]), ledger=ledger)
    loop.run("one", conversation="u")
    second = loop.run("two", conversation="u")
    assert (second.run_id, second.continues) == ("u::2", "u::1")
    assert [r.output for r in loop.conversation("u")] == ["1", "2"]


def test_runs_and_show_group_turns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``runs`` lists a conversation's turns together under a line of their own, oldest first
    (``--flat``: each run as recorded; ``--conversation``: one); ``show`` and the report name
    the conversation, the turn and the turn before."""
    monkeypatch.setattr(ledger_commands, "when", lambda at: "T" if at else "unknown")
    path = tmp_path / "runs.db"
    loop = Loop(ScriptedModel([final(str(n)) for n in range(6)]), ledger=SQLiteLedger(path))
    loop.run("a", conversation="u")
    loop.run("b", run_id="plain")
    loop.run("c", conversation="v")
    loop.run("d", conversation="u")
    loop.run("e", conversation="u")

    assert run_main(capsys, "runs", path) == [
        "run             state     steps  calls  last change  pending",
        "conversation u  3 turns                 T",
        "  u::1          finished  1      0      T",
        "  u::2          finished  1      0      T",
        "  u::3          finished  1      0      T",
        "plain           finished  1      0      T",
        "conversation v  1 turn                  T",
        "  v::1          finished  1      0      T",
    ]
    assert [line.split()[0] for line in run_main(capsys, "runs", path, "--flat")[1:]] == [
        "u::1", "plain", "v::1", "u::2", "u::3",
    ]  # fmt: skip
    assert run_main(capsys, "runs", path, "--conversation", "v") == [
        "run             state     steps  calls  last change  pending",
        "conversation v  1 turn                  T",
        "  v::1          finished  1      0      T",
    ]
    assert run_main(capsys, "runs", path, "--conversation", "w") == [
        f"no run of conversation w in {path}"
    ]
    shown = run_main(capsys, "show", path, "u::3")
    assert shown[:2] == ["agentloop run u::3: finished", "conversation u, turn 3 (continues u::2)"]
    assert not any(line.startswith("continues run") for line in shown)
    assert run_main(capsys, "show", path, "u::1")[1] == "conversation u, turn 1"
    assert run_main(capsys, "show", path, "plain")[1] == ""
    page = report_html(view_run(SQLiteLedger(path), "u::3").result)
    assert (
        '<dt>conversation</dt><dd id="summary-conversation">'
        "conversation u, turn 3 (continues u::2)</dd>"
    ) in page
    assert 'id="summary-continues"' not in page


def run_main(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> list[str]:
    """``agentloop ARGV``'s lines; it must succeed."""
    assert main(list(map(str, argv))) == 0
    return capsys.readouterr().out.splitlines()


def test_summary_carried_into_the_next_turn(driver: Driver, tmp_path: Path) -> None:
    """Under summarise, the summary in force when a turn ends is where the next one begins:
    the summariser is not asked again for the same fold; the turn's header and run file keep
    it, so the turn replays and is read back the same."""
    model, writer = Chatty(6), summary_writer()
    ledger = SQLiteLedger(tmp_path / "runs.db")
    loop = Loop(
        model, tools=[echo], context=summarise(writer, tokens=300), max_steps=40, ledger=ledger
    )
    first = driver.run(loop, "hello", conversation="c")
    asked = len(writer.asked)  # type: ignore[attr-defined]
    assert (first.status, first.summary) == (State.FINISHED, None)
    assert asked > 0
    second = driver.run(loop, "and?", conversation="c")  # Chatty answers at once now
    assert (second.status, second.steps, second.turn) == (State.FINISHED, 1, 2)
    assert len(writer.asked) == asked  # type: ignore[attr-defined]  # nothing folded again
    assert second.summary is not None
    assert second.summary[1] == "the story so far"
    request = model.seen[-1]
    assert request[0] == {"kind": "user", "text": "hello"}
    assert request[1]["text"].endswith("the story so far")  # the carried summary, after the head
    assert request[-1] == {"kind": "user", "text": "and?"}
    assert tokens_of(request) <= 300
    fold, text = second.summary
    header, _ = ledger.read("c::2")
    assert orjson.loads(header)["summary"] == {"fold": fold, "text": text}
    read = view_run(ledger, "c::2").result
    assert (read.summary, read.transcript, read.status) == (
        second.summary,
        second.transcript,
        State.FINISHED,
    )
    save_run(second, tmp_path / "turn2.json")
    assert load_run(tmp_path / "turn2.json").summary == second.summary  # its replay checked
    # In memory too: the turn after it carries the summary in force at its end.
    third = driver.run(Loop(model, tools=[echo], context=loop.context), "more", after=second)
    assert (third.summary, len(writer.asked)) == (second.summary, asked)  # type: ignore[attr-defined]


def test_a_carried_summary_is_checked_where_it_enters() -> None:
    """An engine takes a summary only under summarise, and only of turns its input has."""
    policy = summarise(summary_writer(), tokens=300)
    messages = [
        {"kind": "user", "text": "hello"},
        {"kind": "final", "text": "hi"},
        {"kind": "user", "text": "and?"},
    ]
    ask = Engine(messages, context=policy, summary=(1, "said hi")).next()
    assert [m["text"][-7:] for m in ask.history] == ["hello", "said hi", "and?"]  # type: ignore[union-attr]
    for summary, says in [
        ((1, "x"), "under summarise"),
        ((9, "x"), r"\(1 to 2\)"),
        ((0, "x"), r"\(1 to 2\)"),
        (("1", "x"), "got"),
    ]:
        context = None if says == "under summarise" else policy
        with pytest.raises(ValueError, match=says):
            Engine(messages, context=context, summary=summary)  # type: ignore[arg-type]


def test_a_failed_durable_turn_continued_by_id_is_the_next_turn(tmp_path: Path) -> None:
    """continue_run(id) of a turn that failed is the conversation's next turn, id and all."""
    ledger = SQLiteLedger(tmp_path / "runs.db")
    model = ScriptedModel([final("hi"), RuntimeError("down"), final("back")])
    loop = Loop(model, ledger=ledger, max_steps=1)
    loop.run("hello", conversation="u")
    assert loop.run("more", conversation="u").status is State.FAILED
    goes_on = loop.continue_run("u::2")
    assert (goes_on.run_id, goes_on.turn, goes_on.continues, goes_on.output) == (
        "u::3",
        3,
        "u::2",
        "back",
    )
    with pytest.raises(ValueError, match="leave run_id= out"):
        loop.continue_run("u::2", run_id="mine")
    assert ledger.run_ids() == ["u::1", "u::2", "u::3"]


def test_a_turn_killed_mid_call_resumes_and_the_conversation_goes_on(tmp_path: Path) -> None:
    """A turn's process killed while its tool runs: the turn has not ended, so no turn goes
    on from it; resumed in another process, the call is not run again (its outcome is
    unknown), the turn ends, and the next turn goes on from it."""
    path = tmp_path / "runs.db"
    assert outcome(turn_in_a_process(path, "u", "hello"))["status"] == "finished"
    killed = turn_in_a_process(path, "u", "crash now")
    killed.communicate(timeout=60)
    assert killed.returncode == -signal.SIGKILL
    effects = path.with_suffix(".effects")
    assert effects.read_text() == "u hello\nu crash now\n"
    loop = Loop(ScriptedModel([]), ledger=SQLiteLedger(path))
    with pytest.raises(InvalidStateError, match="turn 2 of conversation 'u' has not ended"):
        loop.run("too soon", conversation="u")
    resumed = outcome(turn_in_a_process(path, "--resume", "u::2"))
    assert (resumed["run_id"], resumed["status"], resumed["results"]) == (
        "u::2",
        "finished",
        ["ok", "error"],  # turn 1's note, and the one cut off: not run again
    )
    third = outcome(turn_in_a_process(path, "u", "after"))
    assert (third["run_id"], third["continues"], third["status"]) == ("u::3", "u::2", "finished")
    assert effects.read_text() == "u hello\nu crash now\nu after\n"  # each note once


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_durable_turn_after_one_its_ledger_lacks_is_refused_on_every_ledger(
    driver: Driver, kind: str, tmp_path: Path
) -> None:
    """after= an in-memory turn, a plain run or a fork would make a conversation without turn 1.

    A ledger that lists ids by prefix would show it from turn 2, one that asks for turn
    1, 2, ... would show none: both refuse it instead, before anything is written.
    """
    ledger = MemoryLedger() if kind == "memory" else SQLiteLedger(tmp_path / "runs.db")
    model = ScriptedModel([final(str(n)) for n in range(5)])
    loop = Loop(model, ledger=ledger)
    in_memory = driver.run(Loop(ScriptedModel([final("m")])), "zero")
    in_memory_turn = driver.run(Loop(ScriptedModel([final("m")])), "one", after=in_memory)
    plain = driver.run(loop, "plain", run_id="p")
    first = driver.run(loop, "one", conversation="c")
    fork = loop.fork("c::1", at=0, run_id="f").finish()
    assert (fork.conversation_id, fork.turn, fork.continues) == (None, None, "c::1")

    cases = [
        (in_memory, r"got a result in memory"),
        (in_memory_turn, r"got a result in memory"),
        (plain, r"got run 'p', which is not"),
        (fork, r"got run 'f', which is not"),
    ]
    for after, given in cases:
        seen = len(model.seen)
        with pytest.raises(
            ValueError, match=r"expected after= to be turn \d+ of its conversation"
        ) as refused:
            driver.run(loop, "next", after=after)
        assert re.search(given, str(refused.value))
        assert len(model.seen) == seen
    assert [r.run_id for r in loop.conversation("c")] == ["c::1"]
    held = ledger.run_ids() if isinstance(ledger, SQLiteLedger) else list(ledger.headers)
    assert sorted(held) == ["c::1", "f", "p"]
    # The turn before as this ledger holds it goes on; and a result begins a new conversation.
    second = driver.run(loop, "two", after=first)
    assert (second.run_id, second.turn, second.continues) == ("c::2", 2, "c::1")
    again = driver.run(
        loop, [*fork.transcript, {"kind": "user", "text": "go on"}], conversation="d"
    )
    assert (again.run_id, again.turn) == ("d::1", 1)
    assert [r.run_id for r in loop.conversation("c")] == ["c::1", "c::2"]


def test_show_of_a_conversations_id_lists_its_turns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``show DB u`` of a conversation says so, lists its turns and how to show the last."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["/opt/somewhere/bin/agentloop"])  # not on PATH
    loop = Loop(ScriptedModel([final("1"), final("2")]), ledger=SQLiteLedger(tmp_path / "runs.db"))
    loop.run("a", conversation="u")
    loop.run("b", conversation="u")
    for command in ("show", "report"):
        assert main([command, "runs.db", "u"]) == 2
        assert capsys.readouterr().err == (
            "agentloop: error: 'u' is a conversation, not a run: its 2 turns are the runs "
            "u::1, u::2; show one by its id (agentloop show runs.db u::2 shows the last)\n"
        )
    assert main(["show", "runs.db", "w"]) == 2
    assert "no run 'w' is recorded" in capsys.readouterr().err
    assert run_main(capsys, "show", "runs.db", "u::2")[0] == "agentloop run u::2: finished"
