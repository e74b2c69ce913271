"""Hardening of the stores and readers: linear reading, and a ledger that never starts over."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import agentloop
from agentloop import Loop, Tool, ToolRegistry, approve, ask
from agentloop.__main__ import main
from agentloop._durable.protocol import LedgerRecord
from agentloop._review import runfile, runread
from agentloop._review.report import report_html
from agentloop._review.text import run_lines
from agentloop.ledger import LedgerError, RunBusyError, SQLiteLedger
from agentloop.review import RunFileError
from agentloop.testing import batch, call, final
from tests.conftest import count
from tests.support import ROOT

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop import RunResult
    from agentloop._core.values import Transition


# -- linear in the events ------------------------------------------------------------
#
# Counted, not timed: a run's events are handed out by a tuple that counts every
# event read from it (by index, by slice or by iteration, itertools.islice included).
# Reading a run twice as long must read at most 2.5 times as many events; a reader
# that walks from the first event for each event reads four times as many.


class _Counted(tuple["Transition", ...]):
    """A run's events, counting each one read."""

    reads: int = 0

    def __iter__(self) -> Any:
        for event in super().__iter__():
            self.reads += 1
            yield event

    def __getitem__(self, key: Any) -> Any:
        found = super().__getitem__(key)
        self.reads += len(found) if isinstance(key, slice) else 1
        return found


class _CountedRecords(list[dict[str, Any]]):
    """A run file's event records, counting each one read."""

    reads: int = 0

    def __iter__(self) -> Any:
        for record in super().__iter__():
            self.reads += 1
            yield record

    def __getitem__(self, key: Any) -> Any:
        found = super().__getitem__(key)
        self.reads += len(found) if isinstance(key, slice) else 1
        return found


def _echo(n: int) -> int:
    """A tool."""
    return n


def _calls_one_by_one(n: int) -> RunResult:
    """``n`` calls, one a step, then a final: 3 events a call."""
    replies = [call(f"c{i}", "echo", n=i) for i in range(n)] + [final("ok")]
    model = agentloop.testing.ScriptedModel(replies)
    return Loop(model, tools={"echo": _echo}, max_steps=n + 1, max_calls=n).run("go")


def _one_batch(n: int) -> RunResult:
    """One batch of ``n`` calls, then a final."""
    replies = [batch(*(call(f"c{i}", "echo", n=i) for i in range(n))), final("ok")]
    model = agentloop.testing.ScriptedModel(replies)
    return Loop(model, tools={"echo": _echo}, max_calls=n).run("go")


def _each_call_approved(n: int) -> RunResult:
    """``n`` calls, one a step, each asked about and approved by a person.

    Decided on the live run: resuming from each paused result would replay the whole
    history at each call (seconds at 200 calls), for the same result.
    """
    replies = [call(f"c{i}", "echo", n=i) for i in range(n)] + [final("ok")]
    tools = ToolRegistry([Tool(_echo, name="echo", policy=lambda _: ask("every call"))])
    loop = Loop(agentloop.testing.ScriptedModel(replies), tools=tools, max_steps=n + 1, max_calls=n)
    run = loop.start("go")
    result = run.finish()
    while result.status == "awaiting_approval":
        run.decide({p.call_id: approve() for p in result.pending})
        result = run.finish()
    return result


def _counted(result: RunResult) -> tuple[RunResult, _Counted]:
    events = _Counted(result.events)
    return result._replace(events=events), events


def _reads_while(load: Callable[[], object], monkeypatch: pytest.MonkeyPatch) -> int:
    """Events read while ``load()`` runs: of every run file's records it replays, and of the
    results it makes."""
    made: list[_Counted | _CountedRecords] = []
    replay = runread.run_of

    def counting_replay(document: dict[str, Any]) -> RunResult:
        records = _CountedRecords(document["events"])
        made.append(records)
        result, events = _counted(replay({**document, "events": records}))
        made.append(events)
        return result

    with monkeypatch.context() as patch:
        patch.setattr(runfile, "run_of", counting_replay)
        load()
    return sum(events.reads for events in made)


def _reads_loading(text: bytes, monkeypatch: pytest.MonkeyPatch) -> int:
    """Event records read by ``run_from_json`` while it replays them, and events of its result."""
    return _reads_while(lambda: agentloop.review.run_from_json(text), monkeypatch)


def _reads_showing(result: RunResult) -> int:
    counted, events = _counted(result)
    run_lines(counted, title="run")
    return events.reads


def _reads_reporting(result: RunResult) -> int:
    counted, events = _counted(result)
    report_html(counted, svg=False)
    return events.reads


def _reads_cli(command: str, path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """Events read by ``agentloop show`` or ``report``, loading included."""
    extra = ["-o", str(tmp_path / "report.html")] if command == "report" else []

    def command_line() -> None:
        assert main([command, str(path), *extra]) == 0

    return _reads_while(command_line, monkeypatch)


SHAPES: dict[str, Callable[[int], RunResult]] = {
    "calls one by one": lambda n: _calls_one_by_one(n),
    "one batch": lambda n: _one_batch(3 * n),
    "each call approved": lambda n: _each_call_approved(n // 2),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_loading_showing_and_reporting_read_each_event_a_bounded_number_of_times(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twice the events are read at most 2.5 times as often by load, show and the report."""
    small, large = SHAPES[shape](200), SHAPES[shape](400)
    assert 1.8 < len(large.events) / len(small.events) < 2.2
    for name, reads in {
        "load": lambda result: _reads_loading(
            agentloop.review.run_to_json(result).encode(), monkeypatch
        ),
        "show": _reads_showing,
        "report": _reads_reporting,
    }.items():
        few, many = reads(small), reads(large)
        assert few >= len(small.events), f"{name} read each event"
        assert many <= 2.5 * few, (
            f"{name}: {few} reads for {len(small.events)} events, {many} for {len(large.events)}"
        )


@pytest.mark.parametrize("command", ["show", "report"])
def test_the_command_line_reads_each_event_a_bounded_number_of_times(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``agentloop show`` and ``report`` on twice the events read at most 2.5 times as many."""
    reads = []
    for n in (200, 400):
        path = tmp_path / f"run{n}.json"
        agentloop.review.save_run(_calls_one_by_one(n), path)
        reads.append(_reads_cli(command, path, tmp_path, monkeypatch))
    capsys.readouterr()
    assert reads[1] <= 2.5 * reads[0], reads


def test_a_call_in_a_batch_shows_its_own_result() -> None:
    """Each call of a batch is described with its own result, found in the batch's closing event."""
    result = _one_batch(3)
    shown = "\n".join(run_lines(result, title="run", limit=None))
    for i in range(3):
        assert f"echo#c{i}  ok: {i}" in shown


# -- a ledger never mistakes a lost log for a new file ---------------------------------


def _echo_noting(effects: Path) -> Callable[[int], int]:
    def echo(n: int) -> int:
        """A tool with an effect outside the ledger."""
        with effects.open("a") as file:
            file.write(f"{n}\n")
        return n

    return echo


def _loop(db: Path, effects: Path) -> Loop:
    replies = [call("c1", "echo", n=1), final("ok")]
    return Loop(
        agentloop.testing.ScriptedModel(replies),
        tools={"echo": _echo_noting(effects)},
        ledger=SQLiteLedger(db),
    )


def _run0(db: Path, effects: Path) -> RunResult:
    return _loop(db, effects).run("go", run_id="run0")


def _run0_kept(db: Path, effects: Path) -> Loop:
    """Run ``run0``; the loop (and its ledger, open) is returned to be kept."""
    loop = _loop(db, effects)
    loop.run("go", run_id="run0")
    return loop


def _killed(work: Callable[[], object]) -> None:
    """Do ``work`` in a forked child, which is then SIGKILLed: nothing is closed or checkpointed.

    What ``work`` returns is kept until then (a ledger dropped is closed).
    """
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            kept = work()
            assert kept is not None
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status), status


@pytest.fixture
def killed_ledger(tmp_path: Path) -> tuple[Path, Path]:
    """A small ledger whose writer was SIGKILLed: its one run lives only in ``runs.db-wal``."""
    db, effects = tmp_path / "runs.db", tmp_path / "effects"
    _killed(lambda: _run0_kept(db, effects))
    assert effects.read_text() == "1\n"
    # The file itself is one empty page: its header has no application_id yet.
    assert db.stat().st_size == 4096
    assert db.read_bytes()[68:72] == b"\0\0\0\0"
    assert Path(f"{db}-wal").stat().st_size > 4096
    return db, effects


def test_a_ledger_whose_writer_was_killed_opens_with_its_runs(
    killed_ledger: tuple[Path, Path],
) -> None:
    """Undamaged, a killed writer's ledger opens with what the WAL holds, and its run is over."""
    db, effects = killed_ledger
    with SQLiteLedger(db) as ledger:
        assert ledger.run_ids() == ["run0"]
        ledger.check()
    assert _loop(db, effects).resume("run0").status == "finished"  # read, not run again
    assert effects.read_text() == "1\n"


@pytest.mark.parametrize(
    ("lost", "message"),
    [
        (("-wal",), r"write-ahead log is lost or damaged: its index \(runs.db-shm\) says it "),
        (("-wal", "-shm"), r"the ledger was written, but its tables are missing"),
    ],
    ids=["wal", "wal and its index"],
)
def test_a_removed_write_ahead_log_is_refused_not_taken_for_a_new_ledger(
    killed_ledger: tuple[Path, Path], lost: tuple[str, ...], message: str
) -> None:
    """Without its WAL (and even its index), the ledger refuses to open; nothing runs again."""
    db, effects = killed_ledger
    for suffix in lost:
        Path(f"{db}{suffix}").unlink()
    for _ in range(2):  # refused again: the refusal changed nothing
        with pytest.raises(LedgerError, match=message):
            _run0(db, effects)
    assert effects.read_text() == "1\n"


def test_every_flipped_bit_of_the_write_ahead_logs_header_is_refused(
    killed_ledger: tuple[Path, Path],
) -> None:
    """SQLite takes a WAL whose header fails its checksum for none at all: each flip is refused."""
    db, _ = killed_ledger
    wal = Path(f"{db}-wal")
    whole = wal.read_bytes()
    for bit in range(32 * 8):
        damaged = bytearray(whole)
        damaged[bit // 8] ^= 1 << (bit % 8)
        wal.write_bytes(bytes(damaged))
        with pytest.raises(LedgerError, match=r"write-ahead log is (lost or )?damaged"):
            SQLiteLedger(db)
    wal.write_bytes(whole)
    with SQLiteLedger(db) as ledger:
        assert ledger.run_ids() == ["run0"]


def test_a_flipped_bit_in_any_frame_of_the_write_ahead_log_is_refused(
    killed_ledger: tuple[Path, Path],
) -> None:
    """SQLite's recovery drops a frame that fails its checksum and every later one: refused."""
    db, _ = killed_ledger
    wal = Path(f"{db}-wal")
    whole = wal.read_bytes()
    page_size = int.from_bytes(whole[8:12], "big")
    frames = (len(whole) - 32) // (24 + page_size)
    assert frames > 1
    for frame in range(frames):
        start = 32 + frame * (24 + page_size)
        for at in (start + 1, start + 20, start + 24 + page_size // 2):  # page, checksum, data
            damaged = bytearray(whole)
            damaged[at] ^= 0x10
            wal.write_bytes(bytes(damaged))
            with pytest.raises(LedgerError, match=rf"its frame {frame + 1} of {frames} fails its"):
                SQLiteLedger(db)
    wal.write_bytes(whole)
    with SQLiteLedger(db) as ledger:
        assert ledger.run_ids() == ["run0"]


def test_a_log_lost_after_a_checkpoint_is_refused(tmp_path: Path) -> None:
    """Runs before the last checkpoint are in the file; losing the WAL after it is still refused."""
    db, effects = tmp_path / "runs.db", tmp_path / "effects"
    with SQLiteLedger(db) as ledger:
        ledger.create("before", b"{}").release()
    assert not Path(f"{db}-wal").exists()  # closed: everything in the file itself
    _killed(lambda: _run0_kept(db, effects))
    Path(f"{db}-wal").unlink()
    with pytest.raises(LedgerError, match=r"says it holds \d+ pages committed and not yet in"):
        SQLiteLedger(db)


def test_a_ledger_closed_or_dropped_opens_without_its_log(tmp_path: Path) -> None:
    """Closed, or dropped unclosed, by its last process: its WAL was copied in and removed."""
    db = tmp_path / "runs.db"
    ledger = SQLiteLedger(db)
    ledger.create("r1", b"{}").release()
    del ledger  # dropped: its connection is closed, the WAL copied into the file
    assert not Path(f"{db}-wal").exists()
    with SQLiteLedger(db) as again:
        assert again.run_ids() == ["r1"]
    with SQLiteLedger(db) as again:
        assert again.run_ids() == ["r1"]


def test_a_killed_ledger_read_by_another_sqlite_client_opens(
    killed_ledger: tuple[Path, Path],
) -> None:
    """No false alarm: SQLite's own client recovers the WAL, copies it in and removes it."""
    db, _ = killed_ledger
    with sqlite3.connect(db) as raw:
        assert raw.execute("SELECT run_id FROM runs").fetchall() == [("run0",)]
    raw.close()
    assert not Path(f"{db}-wal").exists()
    assert not Path(f"{db}-shm").exists()
    with SQLiteLedger(db) as ledger:
        assert ledger.run_ids() == ["run0"]


def test_a_written_ledger_whose_file_has_no_tables_is_refused(db: Path) -> None:
    """The file replaced by an empty SQLite database: the lock file says it was written."""
    SQLiteLedger(db).close()
    db.unlink()
    with sqlite3.connect(db) as raw:
        raw.execute("PRAGMA journal_mode = WAL")
    raw.close()
    with pytest.raises(LedgerError, match=r"the ledger was written, but its tables are missing"):
        SQLiteLedger(db)


_OPENER = """
import os, signal, sys
from agentloop.ledger import SQLiteLedger
db, k, kill = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "kill"
ledger = SQLiteLedger(db)
writer = ledger.create(f"r{k}", b"{}")
if kill:
    os.kill(os.getpid(), signal.SIGKILL)  # with a claim and a WAL
writer.release()
if k % 2:
    ledger.close()
"""


def test_processes_opening_a_ledger_at_once_some_killed_are_never_refused(tmp_path: Path) -> None:
    """No false alarm: five processes make one ledger at once, some killed mid-way; all open it.

    Fresh interpreters, not forks of this one: a fork would inherit this process's
    threads' locks and open files (DBOS's, say), which a real process never has. Two
    trials in the fast tier (one with kills, one without; 25 interpreters less), six
    in the long one.
    """
    for trial in range(count(2, 6)):
        db = tmp_path / f"t{trial}" / "runs.db"
        db.parent.mkdir()
        kill = [k in (1, 3) and trial % 2 == 1 for k in range(5)]
        children = [
            subprocess.Popen(
                [sys.executable, "-c", _OPENER, str(db), str(k), "kill" if kill[k] else "-"],
                stderr=subprocess.PIPE,
            )
            for k in range(5)
        ]
        for k, child in enumerate(children):
            _, err = child.communicate(timeout=60)
            if kill[k]:
                assert child.returncode == -signal.SIGKILL, err.decode()
            else:
                assert child.returncode == 0, err.decode()
        with SQLiteLedger(db) as ledger:
            assert sorted(ledger.run_ids()) == [f"r{k}" for k in range(5)]


def test_a_ledger_whose_files_are_removed_starts_anew(killed_ledger: tuple[Path, Path]) -> None:
    """Removing the ledger file itself (its lock file left behind) makes a new, empty ledger."""
    db, _ = killed_ledger
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink()
    with SQLiteLedger(db) as ledger:
        assert ledger.run_ids() == []
    with SQLiteLedger(db) as ledger:  # and it is a ledger that was written from now on
        assert ledger.run_ids() == []


@pytest.mark.parametrize(
    "change",
    [
        "DROP TABLE records",
        "DROP TABLE runs",
        "CREATE TABLE notes (text TEXT)",
        "ALTER TABLE records ADD COLUMN extra TEXT",
    ],
)
def test_a_ledger_with_tables_missing_or_foreign_is_refused(db: Path, change: str) -> None:
    """A file with the ledger's header but not exactly its tables is refused where it opens."""
    SQLiteLedger(db).close()
    with sqlite3.connect(db) as raw:
        raw.execute(change)
    raw.close()
    with pytest.raises(LedgerError, match=r"the ledger's tables are missing or not its own"):
        SQLiteLedger(db)


# -- one writer per real file ------------------------------------------------------------


def test_a_ledger_under_a_symlink_has_one_lock(db: Path, tmp_path: Path) -> None:
    """Claims through a symlink and through the file's own name exclude each other."""
    link = tmp_path / "link.db"
    link.symlink_to(db)
    real = SQLiteLedger(db)
    writer = real.create("r1", b"{}")
    # Another process, through the other name.
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 3
        try:
            SQLiteLedger(link).claim("r1")
            code = 1
        except RunBusyError as exc:
            code = 0 if "another process" in str(exc) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # This process, through the other name.
    with pytest.raises(RunBusyError, match=r"in this process already"):
        SQLiteLedger(link).claim("r1")
    writer.release()
    SQLiteLedger(link).claim("r1").release()
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.endswith("-lock")) == [
        "runs.db-lock"
    ]
    assert not Path(f"{link}-wal").exists()  # SQLite's own files are the real file's too


def test_a_ledger_with_two_names_is_refused(db: Path, tmp_path: Path) -> None:
    """A hard link gives one file two logs and two locks: the ledger refuses to open either name."""
    SQLiteLedger(db).close()
    other = tmp_path / "other.db"
    os.link(db, other)
    for name in (db, other):
        with pytest.raises(LedgerError, match=r"expected a ledger file with one name, got a file"):
            SQLiteLedger(name)
    other.unlink()
    SQLiteLedger(db).close()


# -- a closed ledger -------------------------------------------------------------------


def test_a_closed_ledger_says_it_is_closed(db: Path) -> None:
    """Using a closed ledger, or a writer of it, says so; it does not call the file damaged."""
    ledger = SQLiteLedger(db)
    writer = ledger.create("r1", b"{}")
    ledger.close()
    ledger.close()  # closing twice is fine
    for use in (
        ledger.run_ids,
        ledger.check,
        lambda: ledger.read("r1"),
        lambda: ledger.claim("r1"),
        lambda: ledger.create("r2", b"{}"),
        lambda: writer.append(LedgerRecord("reply", "0", b"{}")),
    ):
        with pytest.raises(LedgerError, match=r"this SQLiteLedger is closed") as raised:
            use()
        assert "damaged" not in str(raised.value)
    with SQLiteLedger(db) as again:  # the file is fine
        assert again.run_ids() == ["r1"]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A ledger's path in a fresh directory."""
    return tmp_path / "runs.db"


def opens_of(db: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every path of the ledger at ``db`` (its file, WAL, index) opened with open() from now on."""
    import builtins
    import io

    files = {str(db), f"{db}-wal", f"{db}-shm"}
    opened: list[str] = []

    def watching(real: Callable[..., Any]) -> Callable[..., Any]:
        def open_(file: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(file, str | os.PathLike) and os.path.realpath(file) in files:
                opened.append(os.fspath(file))
            return real(file, *args, **kwargs)

        return open_

    for module, name in ((builtins, "open"), (io, "open"), (os, "open")):
        monkeypatch.setattr(module, name, watching(getattr(module, name)))
    return opened


def test_opening_a_ledger_never_opens_sqlites_files_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """While this process has the ledger open, neither a second SQLiteLedger, nor load_run
    given its path, nor the command line opens the database, its WAL or its index with
    open(): closing that descriptor would drop SQLite's locks. (The killed process's test
    below shows what that loses.)"""
    db = tmp_path / "runs.db"
    ledger = SQLiteLedger(db)
    Loop(agentloop.testing.ScriptedModel([final("done")]), ledger=ledger).run("hi", run_id="one")
    assert Path(f"{db}-wal").exists()
    opened = opens_of(db, monkeypatch)
    SQLiteLedger(db).close()
    with pytest.raises(RunFileError, match=r"expected a run file \(JSON\), got a SQLite database"):
        agentloop.review.load_run(db)  # given a ledger's path by mistake: never opened as a file
    assert main(["runs", str(db)]) == 0
    assert main(["show", str(db), "one"]) == 0
    assert main(["report", str(db), "one", "-o", str(tmp_path / "one.html")]) == 0
    capsys.readouterr()
    assert opened == []
    ledger.close()
    # Another SQLite connection of this process (not a ledger's) holds the files: the log
    # is SQLite's then too, and not read.
    with contextlib.closing(sqlite3.connect(db)) as raw:
        assert raw.execute("SELECT count(*) FROM runs").fetchone() == (1,)
        SQLiteLedger(db).close()
    assert opened == []
    SQLiteLedger(db).close()  # held by nobody: the log is checked (SQLite holds none of it)
    assert opened != []


def _holding(db: str, ready: Any, done: Any) -> None:
    """Open the ledger at ``db``, record a run in it, and keep it open until ``done``."""
    with SQLiteLedger(db) as ledger:
        model = agentloop.testing.ScriptedModel([final("done")])
        Loop(model, ledger=ledger).run("hi", run_id="one")
        ready.set()
        done.wait(30)


def test_a_ledger_another_process_has_open_is_opened_without_reading_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process has the ledger open, and may be copying its log into the file at any
    moment (a checkpoint: the file's first page then says more pages than it holds yet).
    Opening it here reads none of its files with open(): only SQLite reads them, under its
    locks. (A look at the file outside them took a checkpoint under way for a truncated file,
    now and then, when six processes opened a new ledger at once.)"""
    import multiprocessing

    db = tmp_path / "runs.db"
    context = multiprocessing.get_context("fork")
    ready, done = context.Event(), context.Event()
    holder = context.Process(target=_holding, args=(str(db), ready, done))
    holder.start()
    try:
        assert ready.wait(30)
        opened = opens_of(db, monkeypatch)
        with SQLiteLedger(db) as here:
            assert agentloop.ledger.view_run(here, "one").result.output == "done"
        assert opened == []
    finally:
        done.set()
        holder.join(30)
    assert holder.exitcode == 0


# -- a second ledger on a file this process has open -----------------------------------

_PAYER = """
import contextlib, io, sys, time
import agentloop
from agentloop.__main__ import main
from tests.durable.test_store_hardening import pay_loop
db, effects = sys.argv[1], sys.argv[2]
run = pay_loop(db, effects).start("pay Ann", run_id="pay-ann")
run.step()  # the model's reply: recorded with the payment's start, below
with agentloop.ledger.SQLiteLedger(db) as second:  # durable.md's example: a second one, to look
    assert agentloop.ledger.view_run(second, "pay-ann").state == "awaiting_model"
with contextlib.redirect_stdout(io.StringIO()):
    assert main(["show", db, "pay-ann"]) == 0  # the command line, in this process
print("ready", flush=True)
sys.stdin.readline()
while not run.transcript[-1]["kind"] == "tool_result":
    run.step()  # the payment: tool_started and tool_finished committed around it
print("paid", flush=True)
time.sleep(60)  # killed here, before the run ends
"""


def pay_loop(db: str | Path, effects: str | Path) -> Loop:
    """A Loop that pays once (a line in ``effects`` per payment), then answers."""

    def pay(amount: int) -> str:
        """Pay Ann."""
        with Path(effects).open("a") as file:
            file.write(f"{agentloop.idempotency_key()}\n")
        return "paid"

    def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        paid = any(message["kind"] == "tool_result" for message in history)
        return final("done") if paid else call("c1", "pay", amount=5)

    return Loop(model, tools={"pay": pay}, ledger=SQLiteLedger(db))


def test_a_second_ledger_on_an_open_file_keeps_every_commit_across_a_kill(
    tmp_path: Path,
) -> None:
    """A process opens the ledger twice; another process lists its runs and closes (the
    last to close checkpoints and removes the WAL it thinks nobody uses); the first pays,
    records it, and is killed. Resumed, the run has the payment: it is not made again.

    The second ledger's file check read the database and its log with plain open() and
    close(), which drops every POSIX lock the process holds on them, SQLite's too: the
    lister then removed the live WAL, and the payment's records went to a deleted file.
    """
    root = ROOT
    for trial in range(count(1, 3)):
        db, effects = tmp_path / f"runs{trial}.db", tmp_path / f"effects{trial}"
        with subprocess.Popen(
            [sys.executable, "-c", _PAYER, str(db), str(effects)],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as payer:
            assert payer.stdout is not None
            assert payer.stdin is not None
            assert payer.stdout.readline() == "ready\n"
            listed = subprocess.run(
                [sys.executable, "-m", "agentloop", "runs", str(db)],
                capture_output=True,
                text=True,
                check=False,
            )
            assert listed.returncode == 0, listed.stderr
            assert "pay-ann" in listed.stdout
            payer.stdin.write("\n")
            payer.stdin.flush()
            assert payer.stdout.readline() == "paid\n"
            payer.kill()
        assert effects.read_text().splitlines() == ["pay-ann:c1"]
        result = pay_loop(db, effects).resume("pay-ann")
        assert result.status == "finished"
        assert [m["kind"] for m in result.transcript] == ["user", "call", "tool_result", "final"]
        assert effects.read_text().splitlines() == ["pay-ann:c1"]  # paid once
