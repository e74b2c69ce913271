"""Durable runs from the command line: runs, show, report, pending, decide; read-only but decide.

The ledgers are made by real durable runs in child processes: one paused
awaiting approval (a policy asks about two calls of its batch), one finished,
and one whose process was SIGKILLed while its tool ran. The commands run as
``python -m agentloop``; a run decided from the command line goes on when
another process that has the Loop resumes it.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import subprocess
import sys
import textwrap
import time
from typing import TYPE_CHECKING

import orjson
import pytest

import agentloop
from agentloop import State
from agentloop.__main__ import main
from agentloop._core.approval import call_fingerprint
from agentloop.testing import ScriptedModel, final
from tests.support.ledgers import MemoryLedger, decisions_of

if TYPE_CHECKING:
    from pathlib import Path

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import orjson
    import agentloop
    from agentloop import Loop, Tool, ToolRegistry, allow, ask

    mode, ledger_path, effects = sys.argv[1], sys.argv[2], sys.argv[3]

    def pay(amount: int) -> str:
        with open(effects, "a") as f:
            f.write(f"pay {amount}\\n")
        return "paid"

    def crash(where: str) -> str:
        os.kill(os.getpid(), signal.SIGKILL)  # the process dies while its tool runs
        return "never"

    def policy(call):
        return ask("over 5 EUR") if call["arguments"].get("amount", 0) > 5 else allow()

    def model(history):
        last = history[-1]
        if last["kind"] != "user":
            return {"kind": "final", "text": "done"}
        if last["text"] == "pay":
            return {"kind": "calls", "calls": [
                {"id": "s", "name": "pay", "arguments": {"amount": 1}},
                {"id": "l", "name": "pay", "arguments": {"amount": 50}},
                {"id": "m", "name": "pay", "arguments": {"amount": 60}},
            ]}
        if last["text"] == "crash":
            return {"kind": "call", "id": "k", "name": "crash", "arguments": {"where": "here"}}
        return {"kind": "final", "text": "hello"}

    tools = ToolRegistry([Tool(pay), Tool(crash)], policy=policy)
    loop = Loop(model, tools=tools, ledger=agentloop.ledger.SQLiteLedger(ledger_path))
    if mode == "make":
        assert loop.run("pay", run_id="paused").status == "awaiting_approval"
        assert loop.run("hi", run_id="done").status == "finished"
        loop.run("crash", run_id="cut")
    else:
        result = loop.resume(sys.argv[4])
        print(orjson.dumps(
            [result.status, [[m.get("id"), m.get("status"), m.get("content")]
                             for m in result.transcript if m["kind"] == "tool_result"]]
        ).decode())
    """
)


def child(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """The child script run with ``argv`` (a mode, then its arguments) in a new process."""
    script = folder / "child.py"
    if not script.exists():
        script.write_text(CHILD)
    return subprocess.run(
        [sys.executable, str(script), *argv],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def cli(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    """``python -m agentloop ARGV`` in a new process."""
    return subprocess.run(
        [sys.executable, "-m", "agentloop", *map(str, argv)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def make(folder: Path) -> Path:
    """A ledger of three runs: 'paused' (awaiting approval), 'done' and 'cut' (SIGKILLed)."""
    folder.mkdir(exist_ok=True)
    ledger = folder / "runs.db"
    made = child(folder, "make", str(ledger), str(folder / "effects"))
    assert made.returncode == -9, made.stderr  # killed by its own crash tool
    return ledger


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger made once for the tests that only read it (or whose commands are refused)."""
    return make(tmp_path_factory.mktemp("ledger"))


def records(path: Path) -> dict[str, list[agentloop.ledger.LedgerRecord]]:
    """Every record of every run, to show that a command wrote nothing."""
    with agentloop.ledger.SQLiteLedger(path) as opened:
        return {run_id: opened.read(run_id)[1] for run_id in opened.run_ids()}


def run_main(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main(list(map(str, argv)))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- looking, in real processes --------------------------------------------------------------


def test_runs_lists_each_run_with_state_counters_last_change_and_pending(ledger: Path) -> None:
    """agentloop runs: a header, then a line per run, oldest first; nothing is written."""
    before = records(ledger)
    done = cli("runs", ledger)

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["run", "state", "steps", "calls", "last", "change", "pending"]
    rows = [re.split(r"  +", line) for line in lines[1:]]
    assert [row[:4] for row in rows] == [
        ["paused", "awaiting_approval", "1", "3"],
        ["done", "finished", "1", "0"],
        ["cut", "dispatching", "1", "1"],
    ]
    assert [row[5:] for row in rows] == [["2"], [], []]  # the pending approvals
    for row in rows:
        changed = time.mktime(time.strptime(row[4], "%Y-%m-%d %H:%M:%S"))
        assert time.time() - 300 < changed <= time.time() + 1
    assert records(ledger) == before


def test_pending_lists_each_call_waiting_with_reason_and_arguments(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """agentloop pending: run, call, tool, reason and the arguments whole; how to decide."""
    code, out, _ = run_main(capsys, "pending", ledger)

    assert code == 0
    lines = out.splitlines()
    assert [re.split(r"  +", line) for line in lines[:3]] == [
        ["run", "call", "tool", "reason", "arguments"],
        ["paused", "l", "pay", "over 5 EUR", '{"amount":50}'],
        ["paused", "m", "pay", "over 5 EUR", '{"amount":60}'],
    ]
    assert lines[-1].endswith(f"decide {ledger} RUN_ID CALL_ID=approve|deny:REASON ...")


def test_show_a_paused_run_of_a_ledger_runs_nothing(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """agentloop show LEDGER RUN_ID: the run as a run file shows, how to decide; no effect."""
    before = records(ledger)
    code, out, _ = run_main(capsys, "show", ledger, "paused")

    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "agentloop run paused: awaiting_approval"
    assert "status   awaiting_approval" in lines
    assert 'held     pay#s {"amount":1}  (no person needed)' in lines
    assert 'pending  pay#l {"amount":50}: over 5 EUR' in lines
    assert lines[-1].endswith(f"decide {ledger} paused l=approve|deny:REASON m=approve|deny:REASON")
    assert not (ledger.parent / "effects").exists()  # the allowed call did not run either
    assert records(ledger) == before


def test_a_run_cut_off_mid_call_shows_the_call_as_started(
    ledger: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run whose process died while its tool ran: dispatching, the call started, no outcome."""
    code, out, _ = run_main(capsys, "show", ledger, "cut")

    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "agentloop run cut: dispatching"
    assert (
        'started  crash#k {"where":"here"}  (no outcome recorded: running now, or cut off '
        "when its process stopped)"
    ) in lines
    assert lines[-1] == (
        "not ended: it goes on when a process that has its Loop resumes it (loop.resume('cut'))"
    )

    page = tmp_path / "cut.html"
    assert main(["report", str(ledger), "cut", "-o", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    assert '<h2 id="started">Started, no outcome recorded</h2>' in html
    assert html.index('id="started"') < html.index('id="transitions"')
    assert "<td>k</td><td>crash</td><td>{&quot;where&quot;:&quot;here&quot;}</td>" in html


def test_report_of_a_ledger_run_is_its_page(ledger: Path, tmp_path: Path) -> None:
    """agentloop report LEDGER RUN_ID: the page report_html makes of the view's result."""
    page = tmp_path / "done.html"
    assert main(["report", str(ledger), "done", "-o", str(page)]) == 0
    with agentloop.ledger.SQLiteLedger(ledger) as opened:
        expected = agentloop.review.report_html(agentloop.ledger.view_run(opened, "done").result)
    assert page.read_text(encoding="utf-8") == expected
    assert 'id="summary-output">hello</dd>' in expected


def test_diagram_draws_a_ledger_runs_path_as_it_draws_a_run_files(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """agentloop diagram LEDGER RUN_ID: the path to_mermaid marks on the view's result; a
    ledger without RUN_ID is refused, naming what to add."""
    code, out, _ = run_main(capsys, "diagram", ledger, "paused")
    with agentloop.ledger.SQLiteLedger(ledger) as opened:
        paused = agentloop.ledger.view_run(opened, "paused").result
    assert (code, out) == (0, agentloop.review.to_mermaid(paused))
    assert "awaiting_approval" in out
    code, out, err = run_main(capsys, "diagram", ledger)
    assert (code, out) == (2, "")
    assert f"{ledger} is a ledger, which holds many runs: name one, agentloop diagram" in err


def test_runs_filters_by_state(ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--state, once per state, keeps the runs in those states, before or after LEDGER (the
    usage line's order); none left says so."""
    code, out, _ = run_main(capsys, "runs", ledger, "--state", "finished", "--state", "dispatching")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["done", "cut"]
    code, before, _ = run_main(capsys, "runs", "--state", "finished", ledger)
    assert code == 0
    assert [line.split()[0] for line in before.splitlines()[1:]] == ["done"]

    code, out, _ = run_main(capsys, "runs", ledger, "--state", "cancelled")
    assert (code, out) == (0, f"no run in state cancelled in {ledger}\n")

    with pytest.raises(SystemExit):
        main(["runs", str(ledger), "--state", "asleep"])
    assert "invalid choice: 'asleep'" in capsys.readouterr().err


# -- deciding, then going on in another process -------------------------------------------------


def test_decided_from_the_command_line_then_resumed_in_another_process(tmp_path: Path) -> None:
    """decide records the decisions; a later loop.resume elsewhere runs the approved call and
    answers the denied one with its reason."""
    ledger = make(tmp_path)
    decided = cli("decide", ledger, "paused", "l=approve", "m=deny:over budget: ask Ana")

    assert decided.returncode == 0, decided.stderr
    assert decided.stdout.splitlines() == [
        "recorded for run paused: l approved, m denied (over budget: ask Ana)",
        "the run goes on when a process that has its Loop resumes it: loop.resume('paused')",
    ]
    assert not (tmp_path / "effects").exists()  # recorded only: nothing ran
    last = records(ledger)["paused"][-1]
    assert (last.kind, last.key) == ("decision", "l")  # as the live driver records it
    # Each bound to the call that was shown, as PendingCall.approve() and .deny() bind.
    assert {"decisions": decisions_of(last.body)} == {
        "decisions": {
            "l": {
                "allowed": True,
                "reason": "",
                "fingerprint": call_fingerprint("pay", {"amount": 50}),
            },
            "m": {
                "allowed": False,
                "reason": "over budget: ask Ana",
                "fingerprint": call_fingerprint("pay", {"amount": 60}),
            },
        }
    }
    with agentloop.ledger.SQLiteLedger(ledger) as opened:
        view = agentloop.ledger.view_run(opened, "paused")
        assert view.state is State.DISPATCHING
        assert view.decided  # and nothing runs it until it is resumed
    # Said so, not shown as dispatching as if it ran.
    listed = cli("runs", ledger).stdout.splitlines()
    assert next(line for line in listed if line.startswith("paused")).split()[:2] == [
        "paused",
        "decided",
    ]
    assert [
        line.split()[0] for line in cli("runs", ledger, "--state", "decided").stdout.splitlines()
    ] == [
        "run",
        "paused",
    ]
    shown = cli("show", ledger, "paused").stdout.splitlines()
    assert shown[0] == "agentloop run paused: decided"
    assert shown[-1] == (
        "decided, waiting to be resumed: it goes on when a process that has its Loop resumes "
        "it (loop.resume('paused'))"
    )

    resumed = child(tmp_path, "resume", str(ledger), str(tmp_path / "effects"), "paused")
    assert resumed.returncode == 0, resumed.stderr
    assert orjson.loads(resumed.stdout) == [
        "finished",
        [["s", "ok", "paid"], ["l", "ok", "paid"], ["m", "denied", "over budget: ask Ana"]],
    ]
    assert (tmp_path / "effects").read_text() == "pay 1\npay 50\n"
    with agentloop.ledger.SQLiteLedger(ledger) as opened:
        view = agentloop.ledger.view_run(opened, "paused")
        assert view.state is State.FINISHED
        assert not view.decided


# -- refused, in one line, with nothing written ---------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["show", "{ledger}", "nope"], "{ledger}: no run 'nope' is recorded here ("),
        (["report", "{ledger}", "nope"], "{ledger}: no run 'nope' is recorded here ("),
        (["show", "{ledger}"], "{ledger} is a ledger, which holds many runs: name one"),
        (["show", "{ledger}", ""], "expected a run id ("),
        (["decide", "{ledger}", "nope", "l=approve"], "{ledger}: no run 'nope' is recorded here"),
        (["decide", "{ledger}", "paused", "l"], "expected CALL_ID=approve or CALL_ID=deny:REASON"),
        (["decide", "{ledger}", "paused", "l=yes"], "got 'l=yes'"),
        (["decide", "{ledger}", "paused", "=approve"], "got '=approve'"),
        (["decide", "{ledger}", "paused", "l=deny:"], "expected a reason after deny:"),
        (
            ["decide", "{ledger}", "paused", "l=approve", "l=deny:x"],
            "expected one decision for call 'l', got two",
        ),
        (
            ["decide", "{ledger}", "paused", "l=approve"],
            "expected a decision for each pending call ['l', 'm'], and for no other; "
            "missing: ['m']",
        ),
        (
            ["decide", "{ledger}", "paused", "l=approve", "m=approve", "s=approve"],
            "not pending: ['s']",
        ),
        (["decide", "{ledger}", "done", "x=approve"], "run 'done' is 'finished', not awaiting"),
        (["decide", "{ledger}", "cut", "k=approve"], "run 'cut' is 'dispatching', not awaiting"),
        (["runs", "{missing}"], "cannot read {missing}: No such file or directory"),
        (["pending", "{text}"], "not a ledger: {text} is not an SQLite file"),
        (
            ["runs", "{run_file}"],
            "is not an SQLite file (expected a ledger that agentloop.ledger."
            "SQLiteLedger made, got a file starting with b'{{",
        ),
        (["runs", "{run_file}"], "); a run file is read by agentloop show {run_file}"),
        (["show", "{text}", "paused"], "expected RUN_ID only after a ledger, got 'paused'"),
        (["show", "{missing}", "paused"], "cannot read {missing}: No such file or directory"),
    ],
)
def test_bad_input_exits_2_in_one_line_and_records_nothing(
    ledger: Path,
    tmp_path: Path,
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An unknown run, a bad decision, a run not waiting, a file that is not a ledger: exit 2."""
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    run_file = tmp_path / "run.json"
    agentloop.review.save_run(agentloop.Loop(ScriptedModel([final("hi")])).run("go"), run_file)
    names = {
        "ledger": str(ledger),
        "missing": str(tmp_path / "absent.db"),
        "text": str(text),
        "run_file": str(run_file),
    }
    before = records(ledger)

    code, out, err = run_main(capsys, *(part.format(**names) for part in argv))

    assert (code, out) == (2, "")
    assert err.startswith("agentloop: error: ")
    assert message.format(**names) in err
    assert err.count("\n") == 1
    assert records(ledger) == before
    assert not (tmp_path / "absent.db").exists()  # a ledger is never made by a look


def test_another_sqlite_database_is_refused_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An SQLite file no SQLiteLedger made: refused in one line, its journal mode unchanged."""
    other = tmp_path / "app.sqlite"
    with contextlib.closing(sqlite3.connect(other)) as db:
        db.execute("CREATE TABLE notes (text)")
        db.commit()

    code, _, err = run_main(capsys, "runs", other)

    assert code == 2
    assert err == (
        f"agentloop: error: not a ledger: {other} is an SQLite database that "
        "agentloop.ledger.SQLiteLedger did not make (expected application_id 0x41474c4c, got 0x0)\n"
    )
    with contextlib.closing(sqlite3.connect(other)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["app.sqlite"]


def test_what_decide_prints_stays_one_line_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reason with a newline and terminal controls is recorded as given, printed escaped."""
    ledger = make(tmp_path)
    reason = "no\nstatus   finished\x1b[2J\u202e"
    code, out, _ = run_main(capsys, "decide", ledger, "paused", "l=approve", f"m=deny:{reason}")

    assert code == 0
    assert out.splitlines()[0] == (
        "recorded for run paused: l approved, m denied (no\\nstatus   finished\\x1b[2J\\u202e)"
    )
    body = {"decisions": decisions_of(records(ledger)["paused"][-1].body)}
    assert body["decisions"]["m"]["reason"] == reason


def _paused_with_ids(path: Path, *ids: str) -> None:
    """A run 'odd' in ``path`` awaiting approval of a batch of calls with these ids."""
    tools = agentloop.ToolRegistry(
        [agentloop.Tool(lambda n: n, name="pay", policy=lambda c: agentloop.ask("a person"))]
    )
    calls = [{"id": i, "name": "pay", "arguments": {"n": k}} for k, i in enumerate(ids)]
    model = ScriptedModel([{"kind": "calls", "calls": calls}])
    with agentloop.ledger.SQLiteLedger(path) as opened:
        loop = agentloop.Loop(model, tools=tools, ledger=opened)
        assert loop.run("go", run_id="odd").status == "awaiting_approval"


def test_calls_whose_ids_hold_equals_signs_are_decided_as_show_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A call id holding ``=`` is decided with the line ``show`` prints (filled in); a reason
    may hold ``=`` too. Before, every such call was refused as ``CALL_ID=...`` misread."""
    path = tmp_path / "runs.db"
    _paused_with_ids(path, "a=b", "a", "x=deny:y")
    code, out, _ = run_main(capsys, "show", path, "odd")
    assert code == 0
    assert out.splitlines()[-1].endswith(
        "odd a=b=approve|deny:REASON a=approve|deny:REASON x=deny:y=approve|deny:REASON"
    )
    code, out, err = run_main(
        capsys, "decide", path, "odd", "a=b=approve", "a=deny:over=budget", "x=deny:y=approve"
    )
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == (
        "recorded for run odd: a=b approved, a denied (over=budget), x=deny:y approved"
    )
    decided = decisions_of(records(path)["odd"][-1].body)
    assert {call_id: (d["allowed"], d["reason"]) for call_id, d in decided.items()} == {
        "a=b": (True, ""),
        "a": (False, "over=budget"),
        "x=deny:y": (True, ""),
    }


def test_a_reason_that_is_not_utf8_is_refused_in_one_line(tmp_path: Path) -> None:
    """A byte the terminal's encoding cannot decode, in a reason: exit 2, one line naming the
    bytes, nothing recorded (a traceback and exit 1 before)."""
    path = tmp_path / "runs.db"
    _paused_with_ids(path, "c1")
    before = records(path)
    done = subprocess.run(
        [sys.executable, "-m", "agentloop", "decide", str(path), "odd", b"c1=deny:bad\xff"],
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr == (
        b"agentloop: error: expected CALL_ID=approve or CALL_ID=deny:REASON in UTF-8 text (a "
        b"reason is recorded as text), got bytes that are not: b'c1=deny:bad\\xff'\n"
    )
    assert records(path) == before


def test_decide_refuses_a_run_another_process_holds(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """While a process holds the run's claim, decide is refused (one writer), exit 2."""
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, agentloop
            writer = agentloop.ledger.SQLiteLedger({str(ledger)!r}).claim("paused")
            print("held", flush=True)
            sys.stdin.readline()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        code, _, err = run_main(capsys, "decide", ledger, "paused", "l=approve", "m=approve")
        # A look needs no claim: the held run is still shown.
        assert main(["show", str(ledger), "paused"]) == 0
    finally:
        holder.communicate("\n", timeout=30)
    assert code == 2
    assert "run 'paused' is being driven by another process" in err


# -- a DBOS system database URL, where a ledger path goes ------------------------------------------

DBOS_WORKER = textwrap.dedent(
    """
    import sys, time
    from dbos import DBOS
    import agentloop
    import agentloop.dbos
    from agentloop import Loop, Tool, ToolRegistry, allow, ask
    from agentloop.dbos import DBOSLoop

    url, effects = sys.argv[1], sys.argv[2]

    def pay(amount: int) -> str:
        with open(effects, "a") as f:
            f.write(f"pay {amount}\\n")
        return "paid"

    def policy(call):
        return ask("over 5 EUR") if call["arguments"]["amount"] > 5 else allow()

    def model(history):
        if history[-1]["kind"] != "user":
            return {"kind": "final", "text": "done"}
        if history[-1]["text"] == "hi":
            return {"kind": "final", "text": "hello"}
        return {"kind": "calls", "calls": [
            {"id": "s", "name": "pay", "arguments": {"amount": 1}},
            {"id": "l", "name": "pay", "arguments": {"amount": 50}},
            {"id": "m", "name": "pay", "arguments": {"amount": 60}},
        ]}

    desk = DBOSLoop(Loop(model, tools=ToolRegistry([Tool(pay)], policy=policy)), name="desk")
    DBOS(config={"name": "agentloop-cli-tests", "system_database_url": url,
                 "log_level": "WARNING", "notification_listener_polling_interval_sec": 0.01})
    DBOS.launch()
    print(desk.run("hi", run_id="done").status, flush=True)
    handle = desk.start("pay", run_id="paused")
    while not agentloop.dbos.pending("paused"):
        time.sleep(0.01)
    print("waiting", flush=True)
    result = handle.get_result(polling_interval_sec=0.02)
    print(result.status, [[m["id"], m["status"], m["content"]]
                          for m in result.transcript if m["kind"] == "tool_result"], flush=True)
    DBOS.destroy()
    """
)


def test_a_dbos_system_database_url_works_where_a_ledger_path_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """runs, pending, show and decide take a DBOS system database URL: a run waiting in a
    DBOS worker is listed, its calls shown, and decided from here; the worker goes on."""
    pytest.importorskip("dbos")
    url = f"sqlite:///{tmp_path}/sys.sqlite"
    script = tmp_path / "worker.py"
    script.write_text(DBOS_WORKER)
    worker = subprocess.Popen(
        [sys.executable, str(script), url, str(tmp_path / "effects")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline() == "finished\n"
        assert worker.stdout.readline() == "waiting\n"

        code, out, err = run_main(capsys, "runs", url)
        assert code == 0, err
        rows = [re.split(r"  +", line) for line in out.splitlines()[1:]]
        assert [row[:4] + row[5:] for row in rows] == [
            ["done", "finished", "1", "0"],
            ["paused", "awaiting_approval", "1", "-", "2"],  # accepted calls: known at its end
        ]
        code, out, _ = run_main(capsys, "pending", url)
        assert [re.split(r"  +", line) for line in out.splitlines()[1:3]] == [
            ["paused", "l", "pay", "over 5 EUR", '{"amount":50}'],
            ["paused", "m", "pay", "over 5 EUR", '{"amount":60}'],
        ]
        code, out, _ = run_main(capsys, "show", url, "done")
        assert (code, out.splitlines()[0]) == (0, "agentloop run done: finished")
        code, _, err = run_main(capsys, "show", url, "paused")
        assert code == 2
        assert "run 'paused' has not ended (it is awaiting_approval)" in err
        code, _, err = run_main(capsys, "decide", url, "paused", "l=approve")
        assert code == 2
        assert "missing: ['m']" in err
        assert not (tmp_path / "effects").exists()

        code, out, err = run_main(capsys, "decide", url, "paused", "l=approve", "m=deny:no")
        assert code == 0, err
        assert out.splitlines()[0] == "sent to run paused: l approved, m denied (no)"
        ended, _ = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert ended == "finished [['s', 'ok', 'paid'], ['l', 'ok', 'paid'], ['m', 'denied', 'no']]\n"
    assert (tmp_path / "effects").read_text() == "pay 1\npay 50\n"


def test_a_dbos_url_is_never_made_by_a_look(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sqlite URL naming no file: one line, exit 2, and no database is made."""
    missing = tmp_path / "sys.sqlite"
    code, out, err = run_main(capsys, "runs", f"sqlite:///{missing}")
    assert (code, out) == (2, "")
    assert err == f"agentloop: error: cannot read {missing}: no such DBOS system database\n"
    assert not missing.exists()


# -- the Python view ---------------------------------------------------------------------------


def test_view_run_needs_no_loop_and_never_claims(ledger: Path) -> None:
    """view_run: the state, counters, pending calls and a result, while the run is claimed."""
    with agentloop.ledger.SQLiteLedger(ledger) as opened:
        writer = opened.claim("paused")  # as a live process would hold it
        try:
            view = agentloop.ledger.view_run(opened, "paused")
        finally:
            writer.release()
        done = agentloop.ledger.view_run(opened, "done")
        cut = agentloop.ledger.view_run(opened, "cut")
    assert (view.state, view.steps, view.calls, view.done) == (State.AWAITING_APPROVAL, 1, 3, False)
    assert [(c.call_id, c.reason) for c in view.pending] == [
        ("l", "over 5 EUR"),
        ("m", "over 5 EUR"),
    ]
    assert view.result.status == "awaiting_approval"
    assert view.transcript == [{"kind": "user", "text": "pay"}]
    assert all(event.at is None and event.took is None for event in view.events)
    assert (done.state, done.result.output, done.done) == ("finished", "hello", True)
    assert done.events[-1].dest is State.FINISHED
    assert cut.state is State.DISPATCHING
    assert cut.started == ({"id": "k", "name": "crash", "arguments": {"where": "here"}},)
    assert cut.result.status is State.DISPATCHING


def test_view_run_reads_any_ledger_and_list_runs_needs_one_that_lists() -> None:
    """view_run takes the Ledger protocol alone; list_runs needs run_ids() and says so."""
    memory = MemoryLedger()
    agentloop.Loop(lambda history: {"kind": "final", "text": "ok"}, ledger=memory).run(
        "go", run_id="r"
    )
    assert agentloop.ledger.view_run(memory, "r").result.output == "ok"
    with pytest.raises(TypeError, match="expected a ledger that lists its runs with run_ids"):
        agentloop.ledger.list_runs(memory)


def test_decide_run_records_what_run_decide_would_on_any_ledger() -> None:
    """decide_run on the protocol alone: refused input records nothing; a decision is the
    record the live driver writes, and loop.resume goes on from it."""
    memory = MemoryLedger()
    ran: list[int] = []

    def pay(amount: int) -> str:
        """Pay."""
        ran.append(amount)
        return "paid"

    tools = agentloop.ToolRegistry([agentloop.Tool(pay)], policy=lambda call: agentloop.ask("$"))

    def model(history: list[dict[str, object]]) -> dict[str, object]:
        if history[-1]["kind"] == "user":
            return {"kind": "call", "id": "p", "name": "pay", "arguments": {"amount": 3}}
        return {"kind": "final", "text": "done"}

    loop = agentloop.Loop(model, tools=tools, ledger=memory)
    assert loop.run("go", run_id="r").status == "awaiting_approval"
    count = len(memory.records["r"])
    with pytest.raises(TypeError, match="expected decisions to be a dict"):
        agentloop.ledger.decide_run(memory, "r", [("p", agentloop.approve())])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bound to fingerprint 'x'"):
        agentloop.ledger.decide_run(memory, "r", {"p": agentloop.approve(fingerprint="x")})
    assert len(memory.records["r"]) == count
    assert not memory.claimed  # every claim given back

    agentloop.ledger.decide_run(memory, "r", {"p": agentloop.approve()})
    last = memory.records["r"][-1]
    assert (last.kind, last.key) == ("decision", "p")
    assert decisions_of(last.body) == {"p": {"allowed": True, "reason": "", "fingerprint": None}}
    with pytest.raises(agentloop.InvalidStateError, match="'dispatching', not awaiting"):
        agentloop.ledger.decide_run(memory, "r", {"p": agentloop.approve()})
    assert loop.resume("r").output == "done"
    assert ran == [3]


def test_a_run_that_does_not_replay_is_listed_as_unreadable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A damaged run does not hide the others: listed as unreadable with its problem, exit 1."""
    ledger = tmp_path / "runs.db"
    with agentloop.ledger.SQLiteLedger(ledger) as opened:
        loop = agentloop.Loop(lambda history: {"kind": "final", "text": "ok"}, ledger=opened)
        loop.run("go", run_id="good")
        opened.create("bad", b"not json").release()

    summaries = agentloop.ledger.list_runs(agentloop.ledger.SQLiteLedger(ledger))
    assert [(s.run_id, s.state) for s in summaries] == [("good", "finished"), ("bad", None)]
    assert str(summaries[1].problem).startswith("run 'bad': its header is not JSON: ")
    code, out, _ = run_main(capsys, "runs", ledger)
    assert code == 1
    assert [line.split()[:2] for line in out.splitlines()[1:3]] == [
        ["good", "finished"],
        ["bad", "unreadable"],
    ]
    assert out.splitlines()[-1] == f"unreadable: {summaries[1].problem}"
