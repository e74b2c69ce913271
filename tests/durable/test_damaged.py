"""Every reader of a record is total: damaged run files and ledgers give a result or one error.

Real records (``tests/support/records.py``: a run of every kind, as a ledger and as run
files, with the committed fixtures, ledgers and run files) are damaged one
value at a time: any value, container or not, is replaced by a value of
another JSON type, a number out of range, a string that names something else,
or removed. Each reader then returns a result or raises exactly its typed
error naming where: ``run_from_json`` and ``load_run`` a ``RunFileError``;
``view_run``, ``list_runs``, ``Loop.resume`` and ``decide_run`` a
``LedgerError`` (``RunFileError`` and ``LedgerError`` are the only errors a
damaged record may raise, but for a refusal a healthy record gets too: a
run no longer awaiting approval refuses decisions). The command line, in
process, exits 0, 1 or 2 with one line per error, never a traceback, and
``runs`` lists every healthy run as it was beside the damaged one. A
ledger is also damaged below its JSON: a column of another SQLite type, text
that is not UTF-8, a row removed.

Hypothesis draws the record, the value and its replacement: the fast tier
draws 25 examples of each property (10 of each through the command line),
the long tier 3,000 (1,000 of each through the command line, and of the
decisions).
"""

from __future__ import annotations

import contextlib
import io
import shutil
import sqlite3
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import InvalidStateError
from agentloop.__main__ import main
from agentloop._core.table import TERMINAL
from agentloop._review.diagram import to_mermaid
from agentloop._review.report import report_html
from agentloop._review.text import run_lines
from agentloop.ledger import LedgerError, LedgerRecord, SQLiteLedger, list_runs, view_run
from agentloop.review import RunFileError, run_from_json, run_to_json
from tests.conftest import count
from tests.support import records
from tests.support.ledgers import MemoryLedger

if TYPE_CHECKING:
    from pathlib import Path

    from agentloop import RunResult

from tests.support import FIXTURES

LEDGERS = ("v3-ledger.db",)


class Corpus(NamedTuple):
    """The records to damage: run files by name, and ledgers' runs by (ledger, run id)."""

    files: dict[str, bytes]
    #: (ledger's name, run id) -> (header, records)
    runs: dict[tuple[str, str], tuple[bytes, list[LedgerRecord]]]
    #: The ledger files, by name.
    ledgers: dict[str, Path]

    def __repr__(self) -> str:
        # Short: Hypothesis prints a failing test's arguments, and a long repr of one
        # makes it report its replay as inconsistent data generation instead.
        return f"<Corpus of {len(self.files)} run files and {len(self.runs)} ledger runs>"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    directory = tmp_path_factory.mktemp("records")
    made, files = records.make(directory)
    for path in sorted(FIXTURES.glob("v*.json")):
        files[path.name] = path.read_bytes()
    ledgers = {"made": made}
    for name in LEDGERS:
        ledgers[name] = directory / name
        shutil.copy(FIXTURES / name, ledgers[name])
    runs = {}
    for name, path in ledgers.items():
        with SQLiteLedger(path) as ledger:
            for run_id in ledger.run_ids():
                runs[name, run_id] = ledger.read(run_id)
    return Corpus(files, runs, ledgers)


# -- what replaces a value -------------------------------------------------------------------

_NAMES = st.sampled_from(
    [
        "",
        "c1",
        "c2",
        "add",
        "finished",
        "awaiting_approval",
        "dispatching",
        "model_replied",
        "tool_returned",
        "approval_decided",
        "cancel_requested",
        "approve",
        "summarise",
        "keep_last",
        "approx",
        "tiktoken:nope",
        "reply",
        "end",
        "agentloop.run",
        "agentloop.ledger",
        "\x00",
        "\ud800",  # a lone surrogate: not UTF-8
    ]
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([-1, 0, 1, 2, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, -(2**63)]),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    _NAMES,
)
#: A value of any JSON type, or ``REMOVED``.
VALUES = st.one_of(
    _SCALARS,
    st.just(records.REMOVED),
    st.lists(_SCALARS, max_size=3),
    st.dictionaries(
        st.sampled_from(["kind", "type", "message", "call_id", "id", "name", "text", "json"]),
        _SCALARS,
        max_size=2,
    ),
)


def encoded(document: object) -> bytes:
    """``document`` as JSON; a lone surrogate stays in, as bytes that are not UTF-8."""
    try:
        return orjson.dumps(document)
    except orjson.JSONEncodeError:
        import json

        return json.dumps(document).encode("utf-8", "surrogatepass")


@st.composite
def damaged_document(draw: st.DrawFn, document: object) -> bytes:
    """``document`` with one value replaced or removed, as JSON bytes (an empty one, replaced)."""
    paths = list(records.paths(document))
    if not paths:  # an empty body (a batch's later call's start): another value instead
        return encoded(draw(_SCALARS | st.lists(_SCALARS, min_size=1, max_size=3), label="value"))
    path = draw(st.sampled_from(paths), label="path")
    return encoded(records.changed(document, path, draw(VALUES, label="value")))


def rendered(result: RunResult) -> None:
    """Everything that shows a run: text, page, diagram, and its run file read back (a run
    file holds a run that ended or waits for a person)."""
    run_lines(result, title="run")
    report_html(result, svg=False)
    to_mermaid(result)
    text = run_to_json(result)
    if result.events and (result.status in TERMINAL or result.status == "awaiting_approval"):
        assert run_from_json(text).events == result.events


def command(*argv: str | Path) -> tuple[int, str, str]:
    """The command line, in this process: its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(part) for part in argv])
    return code, out.getvalue(), err.getvalue()


def said_in_one_line(code: int, err: str) -> None:
    """Exit 0 or 1 (a run the command could not read), or 2 with one line saying why."""
    assert code in (0, 1, 2), code
    if code == 2:
        assert err.startswith("agentloop: error: "), err
        assert err.count("\n") == 1, err


# -- run files -------------------------------------------------------------------------------


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_damaged_run_file_loads_or_says_where(corpus: Corpus, data: st.DataObject) -> None:
    """``run_from_json`` returns a run (which every reader shows) or a ``RunFileError``."""
    name = data.draw(st.sampled_from(sorted(corpus.files)), label="file")
    text = data.draw(damaged_document(orjson.loads(corpus.files[name])))
    try:
        result = run_from_json(text, source=name)
    except RunFileError as exc:
        refused = exc
    else:
        rendered(result)
        return
    assert refused.where.startswith(name)
    assert str(refused) == f"{refused.where}: expected {refused.expected}, got {refused.found}"


@settings(max_examples=count(10, 1000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_command_line_shows_a_damaged_run_file_or_says_why(
    corpus: Corpus, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """``show``, ``report`` and ``diagram`` (``load_run``) on a damaged file: output or one line."""
    name = data.draw(st.sampled_from(sorted(corpus.files)), label="file")
    path = tmp_path_factory.mktemp("file") / "run.json"
    if data.draw(st.booleans(), label="bytes"):  # any bytes, not only JSON
        whole = corpus.files[name]
        at = data.draw(st.integers(0, len(whole) - 1), label="at")
        path.write_bytes(
            whole[:at] + data.draw(st.binary(max_size=4), label="bytes") + whole[at + 1 :]
        )
    else:
        path.write_bytes(data.draw(damaged_document(orjson.loads(corpus.files[name]))))
    argvs: list[list[str | Path]] = [
        ["show", path],
        ["report", path, "-o", path.with_suffix(".html")],
        ["diagram", path],
    ]
    for argv in argvs:
        code, _, err = command(*argv)
        said_in_one_line(code, err)
        assert code in (0, 2)


# -- ledgers, through the protocol -----------------------------------------------------------


def memory_ledger(corpus: Corpus, ledger: str) -> MemoryLedger:
    """The runs of one of the corpus's ledgers, in a ``MemoryLedger``."""
    memory = MemoryLedger()
    for (name, run_id), (header, kept) in corpus.runs.items():
        if name == ledger:
            memory.headers[run_id], memory.records[run_id] = header, list(kept)
    return memory


@st.composite
def damaged_run(
    draw: st.DrawFn, header: bytes, kept: list[LedgerRecord]
) -> tuple[bytes, list[LedgerRecord]]:
    """The run's header and records with one thing damaged: a value in the header or a
    record, a record's kind or key, or a record removed, repeated or moved."""
    where = draw(st.integers(-1, len(kept) - 1), label="record (-1: the header)")
    if where == -1:
        return draw(damaged_document(orjson.loads(header))), list(kept)
    record = kept[where]
    how = draw(
        st.sampled_from(["body", "kind", "key", "removed", "repeated", "moved"]), label="how"
    )
    changed = list(kept)
    if how == "body":
        changed[where] = record._replace(body=draw(damaged_document(orjson.loads(record.body))))
    elif how == "kind":
        changed[where] = record._replace(kind=draw(_NAMES | st.text(max_size=4), label="kind"))
    elif how == "key":
        changed[where] = record._replace(key=draw(_NAMES | st.text(max_size=4), label="key"))
    elif how == "removed":
        del changed[where]
    elif how == "repeated":
        changed.insert(where, record)
    else:
        changed.insert(draw(st.integers(0, len(kept) - 1), label="to"), changed.pop(where))
    return header, changed


def summaries(ledger: MemoryLedger) -> dict[str, tuple[object, ...]]:
    """What ``list_runs`` says of each run (but when it last changed)."""
    return {
        s.run_id: (s.state, s.steps, s.calls, [p.call_id for p in s.pending], s.problem)
        for s in list_runs(_Listed(ledger))
    }


class _Listed:
    """A ``MemoryLedger`` that lists its runs, as ``list_runs`` needs."""

    def __init__(self, ledger: MemoryLedger) -> None:
        self.ledger = ledger

    def run_ids(self) -> list[str]:
        return list(self.ledger.headers)

    def read(self, run_id: str) -> tuple[bytes, list[LedgerRecord]]:
        return self.ledger.read(run_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ledger, name)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_damaged_ledger_run_is_read_or_refused_and_hides_no_other(
    corpus: Corpus, data: st.DataObject
) -> None:
    """``view_run`` gives the run (which every reader shows) or a ``LedgerError``;
    ``list_runs`` lists every other run as it was; ``Loop.resume`` goes on or refuses."""
    name, run_id = data.draw(st.sampled_from(sorted(corpus.runs)), label="run")
    memory = memory_ledger(corpus, name)
    before = summaries(memory)
    header, kept = data.draw(damaged_run(*corpus.runs[name, run_id]))
    memory.headers[run_id], memory.records[run_id] = header, kept
    after = summaries(memory)
    assert after.keys() == before.keys()
    assert {k: v for k, v in after.items() if k != run_id} == {
        k: v for k, v in before.items() if k != run_id
    }
    try:
        run = view_run(memory, run_id)
    except LedgerError as exc:
        refused = str(exc)
    else:
        refused = ""
        rendered(run.result)
    if refused:  # list_runs names it, in the same words
        assert refused.startswith(f"run {run_id!r}")
        assert after[run_id][4] == refused
        return
    kind = records.KINDS.get(run_id)
    if name == "made" and kind is not None:
        loop = kind.loop(memory, records.answers)
        try:
            resumed = loop.resume(run_id)
        except LedgerError:
            return
        rendered(resumed)


# -- ledger files, and the command line --------------------------------------------------------

#: Values a damaged SQLite column may hold: every storage class SQLite has.
_COLUMN_VALUES = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=6),
    st.binary(max_size=6),
    st.sampled_from(["not utf-8", "c1", "", "reply", "end", "tool_started", 1, 2, 9]),
)


def damage_file(path: Path, data: st.DataObject, corpus: Corpus, name: str) -> str | None:
    """Damage the ledger file at ``path`` once, with SQL; the run damaged (None: all or none)."""
    run_ids = [run_id for ledger, run_id in sorted(corpus.runs) if ledger == name]
    run_id = data.draw(st.sampled_from(run_ids), label="run")
    header, kept = corpus.runs[name, run_id]
    how = data.draw(
        st.sampled_from(["json", "header", "column", "run_id", "at", "row", "byte"]), label="how"
    )
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        (row,) = db.execute("SELECT id FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        seqs = [  # the run's records' places: its row id * 2**32 + a place
            seq
            for (seq,) in db.execute(
                "SELECT place FROM records WHERE place >> 32 = ? ORDER BY place", (row,)
            )
        ]
        if how == "json" and seqs:
            at = data.draw(st.integers(0, len(seqs) - 1), label="record")
            body = data.draw(damaged_document(orjson.loads(kept[at].body)))
            db.execute("UPDATE records SET body = ? WHERE place = ?", (body, seqs[at]))
        elif how in ("json", "header"):
            body = data.draw(damaged_document(orjson.loads(header)))
            db.execute("UPDATE runs SET header = ? WHERE id = ?", (body, row))
        elif how == "column" and seqs:
            column = data.draw(st.sampled_from(["kind", "key", "body"]), label="column")
            value = _sql(data.draw(_COLUMN_VALUES, label="value"))
            db.execute(
                f"UPDATE records SET {column} = {value[0]} WHERE place = ?",
                (*value[1], data.draw(st.sampled_from(seqs))),
            )
        elif how == "run_id":
            value = _sql(data.draw(_COLUMN_VALUES, label="value"))
            with contextlib.suppress(sqlite3.IntegrityError):  # an id taken
                db.execute(f"UPDATE runs SET run_id = {value[0]} WHERE id = ?", (*value[1], row))
        elif how == "at":
            value = _sql(data.draw(_COLUMN_VALUES, label="value"))
            db.execute(f"UPDATE runs SET at = {value[0]} WHERE id = ?", (*value[1], row))
            db.execute(
                f"UPDATE records SET at = {value[0]} WHERE place >> 32 = ?", (*value[1], row)
            )
        elif how == "row" and seqs:
            db.execute("DELETE FROM records WHERE place = ?", (data.draw(st.sampled_from(seqs)),))
        elif how == "byte":
            db.close()
            whole = bytearray(path.read_bytes())
            at = data.draw(st.integers(0, len(whole) - 1), label="at")
            whole[at] ^= data.draw(st.integers(1, 255), label="xor")
            path.write_bytes(bytes(whole))
            return None
    return run_id


def _sql(value: object) -> tuple[str, tuple[object, ...]]:
    """A value as SQL and its parameters: ``'not utf-8'`` is text SQLite holds that is not UTF-8."""
    if value == "not utf-8":
        return "CAST(x'ff00fe' AS TEXT)", ()
    return "?", (value,)


@settings(max_examples=count(10, 1000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_command_line_on_a_damaged_ledger_file_never_fails_with_a_traceback(
    corpus: Corpus, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """``runs``, ``pending``, ``show``, ``report`` and ``decide``, in process, on a ledger
    damaged in its JSON, its columns, its rows or its bytes: an exit code and one line per
    error; ``runs`` names each healthy run as it was."""
    name = data.draw(st.sampled_from(sorted(corpus.ledgers)), label="ledger")
    path = tmp_path_factory.mktemp("ledger") / "runs.db"
    shutil.copy(corpus.ledgers[name], path)
    healthy = {
        run_id: view_run_state(corpus, name, run_id)
        for ledger, run_id in corpus.runs
        if ledger == name
    }
    damaged = damage_file(path, data, corpus, name)
    code, out, err = command("runs", path)
    said_in_one_line(code, err)
    if damaged is not None and code != 2:
        lines = out.splitlines()
        for run_id, state in healthy.items():
            if run_id != damaged:
                assert any(line.split()[:2] == [run_id, state] for line in lines), (run_id, out)
    said_in_one_line(*command("pending", path)[::2])
    for run_id in sorted({damaged or "plain", "waiting"}):
        said_in_one_line(*command("show", path, run_id)[::2])
        said_in_one_line(*command("report", path, run_id, "-o", path.with_suffix(".html"))[::2])
    said_in_one_line(*command("decide", path, "waiting", "c1=approve")[::2])


def view_run_state(corpus: Corpus, name: str, run_id: str) -> str:
    memory = memory_ledger(corpus, name)
    return view_run(memory, run_id).state.value


# -- decisions ---------------------------------------------------------------------------------


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_decisions_on_a_damaged_paused_run_are_recorded_or_refused(
    corpus: Corpus, data: st.DataObject
) -> None:
    """``decide_run`` on the waiting run, damaged: recorded, or refused as it says."""
    memory = memory_ledger(corpus, "made")
    header, kept = data.draw(damaged_run(*corpus.runs["made", "waiting"]))
    memory.headers["waiting"], memory.records["waiting"] = header, kept
    try:
        agentloop.ledger.decide_run(memory, "waiting", {"c1": agentloop.approve()})
    except (LedgerError, InvalidStateError, ValueError):
        assert memory.records["waiting"] == kept  # refused: nothing recorded


# -- the damages found, one by one ---------------------------------------------------------------


def _event_index(document: dict[str, Any], found: Any) -> int:
    return next(i for i, event in enumerate(document["events"]) if found(event))


@pytest.mark.parametrize(
    ("name", "where", "value", "said"),
    [
        pytest.param(
            "summarised",
            lambda d: ("events", _event_index(d, lambda e: e["on"] == "summary_written"), "input"),
            records.REMOVED,
            "$.events[10].input: expected the summariser's reply, which the transcript "
            "never holds, got none",
            id="summary gone",
        ),
        pytest.param(
            "summarised",
            lambda d: ("context",),
            records.REMOVED,
            "$.events[9]: expected ",
            id="context policy gone",
        ),
        pytest.param(
            "summarised",
            lambda d: ("context", "tokens"),
            0,
            "$.context: expected a context policy this agentloop makes, got expected tokens "
            "to be an int from 1 to 2**63 - 1, got 0",
            id="context of no tokens",
        ),
    ],
)
def test_a_damaged_run_file_is_refused_where_it_is_damaged(
    corpus: Corpus, tmp_path: Path, name: str, where: Any, value: object, said: str
) -> None:
    """Each was a bare ``KeyError``, ``ValueError`` or ``TypeError`` from ``load_run``."""
    document = orjson.loads(corpus.files[name])
    path = tmp_path / "run.json"
    path.write_bytes(orjson.dumps(records.changed(document, where(document), value)))
    with pytest.raises(RunFileError) as raised:
        agentloop.review.load_run(path)
    assert str(raised.value) == f"{path}: {said}" or str(raised.value).startswith(f"{path}: {said}")
    code, out, err = command("show", path)
    assert (code, out) == (2, "")
    assert err == f"agentloop: error: not a valid run file: {raised.value}\n"


def _record(kept: list[LedgerRecord], kind: str, key: str) -> int:
    return next(i for i, record in enumerate(kept) if (record.kind, record.key) == (kind, key))


@pytest.mark.parametrize(
    ("run_id", "record", "where", "value", "said"),
    [
        pytest.param(
            "decided",
            ("tool_finished", "c1"),
            (-1, "started"),
            records.REMOVED,
            "record 3 (tool_finished 'c1'): $.events[4].call: expected the call it answers, "
            "as it did not start just that call, got None",
            id="an outcome naming no call after an approval",
        ),
        pytest.param(
            "decided",
            ("approval_asked", "c1"),
            (-1, "asked"),
            records.REMOVED,
            "its records do not replay through this engine (event [2]: expected a report the "
            "engine takes, got the recorded review asked nobody)",
            id="an approval asked of nobody",
        ),
        pytest.param(
            "decided",
            ("decision", "c1"),
            (-1, "decided"),
            records.REMOVED,
            "its records do not replay through this engine (event [3]: expected a report the "
            "engine takes",
            id="a decision of nothing",
        ),
        pytest.param(
            "summarised",
            None,
            ("fingerprint", "context", "counter"),
            5,
            "its header's context policy: expected a context policy's record",
            id="a context counter that is a number",
        ),
        pytest.param(
            "summarised",
            None,
            ("fingerprint", "context", "keep_tokens"),
            None,
            "its header's context policy: expected a context policy's record",
            id="a context keeping no count",
        ),
        pytest.param(
            "kept-last",
            None,
            ("fingerprint", "context", "tokens"),
            records.REMOVED,
            "its header's context policy: expected a context policy's record",
            id="a context of no size",
        ),
        pytest.param(
            "kept-last",
            None,
            ("fingerprint", "context", "tokens"),
            2**63,
            "its header's context policy: expected tokens to be an int from 1 to 2**63 - 1",
            id="a context larger than a run file keeps",
        ),
        pytest.param(
            "rejected",
            ("end", ""),
            (0, "not_json"),
            {"x": 1},
            "record 0 (end ''): $.events[0].not_json: expected",
            id="a rejected reply of another shape",
        ),
    ],
)
def test_a_damaged_ledger_run_is_refused_where_it_is_damaged(
    corpus: Corpus,
    run_id: str,
    record: tuple[str, str] | None,
    where: tuple[Any, ...],
    value: object,
    said: str,
) -> None:
    """Each raised ``AssertionError``, ``IndexError``, ``AttributeError`` or ``TypeError``
    from ``view_run``, and from ``list_runs``, so ``agentloop runs`` listed nothing."""
    memory = memory_ledger(corpus, "made")
    header, kept = corpus.runs["made", run_id]
    if record is None:
        memory.headers[run_id] = orjson.dumps(records.changed(orjson.loads(header), where, value))
    else:
        at = _record(kept, *record)
        body = orjson.dumps(records.changed(orjson.loads(kept[at].body), where, value))
        memory.records[run_id][at] = kept[at]._replace(body=body)
    with pytest.raises(LedgerError) as raised:
        view_run(memory, run_id)
    assert str(raised.value).startswith(f"run {run_id!r}: {said}"), raised.value
    listed = {s.run_id: s for s in list_runs(_Listed(memory))}
    assert listed[run_id].problem == str(raised.value)
    assert all(s.state is not None for other, s in listed.items() if other != run_id)


def _stored(corpus: Corpus, tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    shutil.copy(corpus.ledgers["made"], path)
    return path


@pytest.mark.parametrize(
    ("change", "shown", "problem"),
    [
        pytest.param(
            "UPDATE runs SET run_id = CAST('plain' AS BLOB) WHERE run_id = 'plain'",
            "b'plain'",
            "its id is damaged: expected run_id to be a non-empty str",
            id="an id that is a blob",
        ),
        pytest.param(
            "UPDATE runs SET run_id = CAST(x'706cff' AS TEXT) WHERE run_id = 'plain'",
            "b'pl\\xff'",
            "its id is damaged: expected run_id to be a non-empty str",
            id="an id that is not UTF-8",
        ),
        pytest.param(
            "UPDATE runs SET run_id = '' WHERE run_id = 'plain'",
            "",
            "its id is damaged: expected run_id to be a non-empty str",
            id="an empty id",
        ),
        pytest.param(
            "UPDATE records SET key = CAST(x'ff' AS TEXT) WHERE kind = 9 AND place >> 32 = "
            "(SELECT id FROM runs WHERE run_id = 'plain')",
            "plain",
            "run 'plain': Could not decode to UTF-8",
            id="a key that is not UTF-8",
        ),
    ],
)
def test_runs_names_a_run_damaged_in_its_columns_and_lists_the_others(
    corpus: Corpus, tmp_path: Path, change: str, shown: str, problem: str
) -> None:
    """``agentloop runs``: the damaged run is named, unreadable, with its error; every other
    run is listed as it was (one damaged run stopped the listing with a traceback)."""
    path = _stored(corpus, tmp_path)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute(change)
    code, out, err = command("runs", path)
    assert (code, err) == (1, "")
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["run", "state"]
    states = {
        line.split()[0]: line.split()[1] for line in lines[1:] if not line.startswith("unreadable:")
    }
    for (ledger, run_id), _ in corpus.runs.items():
        if ledger == "made" and run_id != "plain":
            assert states[run_id] == view_run_state(corpus, "made", run_id)
    damaged = [line for line in lines if line.startswith("unreadable:")]
    assert len(damaged) == 1
    assert problem in damaged[0]
    if shown:
        assert any(line.split()[:2] == [shown, "unreadable"] for line in lines[1:])
    # pending: the calls it can read, and the damaged run named (it may hold some too).
    code, out, err = command("pending", path)
    assert (code, err) == (1, "")
    assert out.splitlines()[1].split()[:3] == ["waiting", "c1", "add"]
    assert out.splitlines()[-1] == damaged[0]


def test_a_commit_time_that_is_no_time_is_shown_unknown(corpus: Corpus, tmp_path: Path) -> None:
    """A time the file holds as text, or out of any clock's range, is ``unknown``."""
    path = _stored(corpus, tmp_path)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("UPDATE runs SET at = CAST(x'ff' AS TEXT) WHERE run_id = 'plain'")
        plain = "(SELECT id FROM runs WHERE run_id = 'plain')"
        db.execute(f"UPDATE records SET at = 'noon' WHERE place >> 32 = {plain}")
        db.execute("UPDATE runs SET at = 1e300 WHERE run_id = 'typed'")
        db.execute(
            "UPDATE records SET at = 1e300 "
            "WHERE place >> 32 = (SELECT id FROM runs WHERE run_id = 'typed')"
        )
    code, out, err = command("runs", path)
    assert (code, err) == (0, "")
    for run_id in ("plain", "typed"):
        line = next(line for line in out.splitlines() if line.startswith(f"{run_id} "))
        assert "unknown" in line


def test_a_damaged_name_in_the_schema_is_one_line_on_the_command_line(
    corpus: Corpus, tmp_path: Path
) -> None:
    """SQLite's error quotes the damaged name as bytes Python cannot decode: said in one
    line, exit 2 (``UnicodeDecodeError`` out of the command before)."""
    path = _stored(corpus, tmp_path)
    data = bytearray(path.read_bytes())
    data[data.index(b"tablerunsruns") + 5] = 0xFF  # the runs table's name in sqlite_master
    path.write_bytes(bytes(data))
    argvs: list[list[str | Path]] = [["runs", path], ["pending", path], ["show", path, "plain"]]
    for argv in argvs:
        code, out, err = command(*argv)
        assert (code, out) == (2, "")
        assert err.startswith("agentloop: error: ")
        assert err.count("\n") == 1


def test_show_of_a_run_a_damaged_file_cannot_find_says_so_in_one_line(tmp_path: Path) -> None:
    """The run is not found, and looking for a conversation of that id meets the damage too."""
    path = tmp_path / "runs.db"
    shutil.copy(FIXTURES / "v3-ledger.db", path)
    data = bytearray(path.read_bytes())
    data[4096] ^= 1  # a page of the runs' index (as a long-tier draw found)
    path.write_bytes(bytes(data))
    code, _, err = command("show", path, "plain")
    said_in_one_line(code, err)
    assert code == 2


def test_runs_of_a_file_whose_index_names_a_row_the_table_lacks_says_so_in_one_line(
    tmp_path: Path,
) -> None:
    """A run id's index entry leads to no row of the runs' table: that run's damage, said."""
    path = tmp_path / "runs.db"
    shutil.copy(FIXTURES / "v3-ledger.db", path)
    data = bytearray(path.read_bytes())
    data[12264] ^= 3  # a row of the runs' table (as a long-tier draw found)
    path.write_bytes(bytes(data))
    code, out, err = command("runs", path)
    said_in_one_line(code, err)
    assert "its header is damaged" in out + err
