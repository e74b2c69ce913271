"""Saved runs: a ``RunResult`` as a versioned JSON document, and back.

A run file is one JSON object (format ``agentloop.run``, version 6). It
holds the transcript once, one message a line, and each event on a line of
its own holding only what it adds::

    {
      "format": "agentloop.run",
      "version": 6,
      "status": "finished",
      "output": "3",
      "steps": 2,
      "calls": 1,
      "budget": {"max_steps":5,"max_calls":4},
      "input": 1,
      "transcript": [
    {"kind":"user","text":"go"},
    {"kind":"call","id":"c1","name":"add","arguments":{"a":1,"b":2}},
    {"kind":"tool_result","id":"c1","name":"add","status":"ok","content":3},
    {"kind":"final","text":"3"}
      ],
      "events": [
    {"on":"model_replied","at":0.000041,"took":0.000041},
    {"on":"validate","at":0.000063},
    {"on":"tool_returned","at":0.000112,"took":0.000031,"started":["c1"]},
    {"on":"model_replied","at":0.000139,"took":0.000012},
    {"on":"validate","if":"reply_is_final","at":0.000145}
      ]
    }

(The messages and events start at column 0 in the file; they are indented
here only as this docstring is.) At the top level, ``reason``, ``error``,
``usage`` (``[input, output, cached]``), the budget's other limits and the
links and features of a run (``context``, ``output_schema``, ``run_id``,
``continues``, ``conversation_id`` and ``turn``, ``summary``, ``agents``,
``children``: its agent tools' runs, by call id, each a run file of its
own) are written only when the run has them. ``input`` counts the
transcript's first messages that were the run's input.

An event holds its row (``on`` the trigger, ``if`` the guard), ``at``
(seconds since the run began, to the microsecond) and ``took``, the calls
handed out before it (``started``), and what came from outside only where
the transcript does not hold it where the replay looks (``Look``): a reply
is the transcript's message at the history's length, a tool's outcome its
batch's reply's place + 1 + the call's place. Else ``input`` (and a tool's
``status``), ``not_json``, ``exception``, ``usage``, ``asked``,
``decided``, ``problems`` (an output check's refusal), ``wait``, ``model``,
``partial_text``, ``call`` (when it did not start just the call it
answers) say it. Everything else (states, counters, the messages each event
appended, the engine's words, the batch that waits for a person, the
rejected reply) the one replay makes again. Only version 6 is read: a
format change comes with its reader and committed fixtures
(``tests/fixtures``). The encoding is ``runencode.py``'s, the shape's check
``runshape.py``'s and ``runfile_schema.py``'s, the replay ``runread.py``'s.

A transition's live ``exception`` is saved as ``{"type", "message"}`` (loaded
back as a ``RecordedException``). Everything else round-trips exactly:
``run_from_json(run_to_json(r)) == r`` (times aside), and a loaded run is
saved again as the same text.

Loading is linear in the file's size and stops at the first problem: the
size limit (before anything is parsed), the JSON, no field twice in an
object, the shape (a JSON Schema, checked by ``jsonschema-rs``), then the
run replayed through a fresh engine (``_core/replay.py``), which must append
the transcript's messages, and of which the file must be the one this
agentloop writes. Any failure raises ``RunFileError`` naming where; nothing
is ever half-loaded.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from pathlib import Path
from typing import Final

import orjson

from agentloop._core.replay import Mismatch
from agentloop._core.values import RunResult, require_result
from agentloop._errors import RunFileError
from agentloop._review.runchildren import answers_agree
from agentloop._review.runencode import document_of, run_text
from agentloop._review.runread import check_written, run_of
from agentloop._review.runshape import (
    MAX_BYTES,
    MAX_DEPTH,
    VALIDATOR,
    check_header,
    check_unique_fields,
    dumps,
    explain,
    json_path,
    too_deep,
)

__all__ = ["load_run", "run_from_json", "run_to_json", "save_run", "sqlite_header"]

# -- saving --------------------------------------------------------------------


def run_to_json(result: RunResult) -> str:
    """``result`` as run file text (indented JSON); ``run_from_json`` reads it back."""
    return _run_text(result, "run_to_json()")


def save_run(result: RunResult, path: str | os.PathLike[str]) -> None:
    """Write ``result`` to ``path`` as a run file."""
    text = _run_text(result, "save_run()")
    if not isinstance(path, str | os.PathLike):
        raise TypeError(
            f"save_run() expected a path (str or os.PathLike), got {type(path).__name__}"
        )
    Path(path).write_text(text + "\n", encoding="utf-8")


def _run_text(result: object, where: str) -> str:
    return run_text(document_of(require_result(result, where))).decode()


# -- loading -------------------------------------------------------------------


def load_run(path: str | bytes | os.PathLike[str], *, max_bytes: int = MAX_BYTES) -> RunResult:
    """Read a run file; ``OSError`` if unreadable, ``RunFileError`` if invalid or too big.

    A file larger than ``max_bytes`` is refused before it is parsed (also a
    device or pipe that never ends: at most ``max_bytes + 1`` bytes are read).
    """
    if not isinstance(path, str | bytes | os.PathLike):
        raise TypeError(
            f"load_run() expected a path (str or os.PathLike), got {type(path).__name__}"
        )
    # A ledger is never opened here: closing the file would drop SQLite's locks on it in
    # this process (durable.md), so SQLite is asked first whether it is a database.
    if sqlite_header(os.fsdecode(path)) is not None:
        raise RunFileError(str(path), "a run file (JSON)", _A_DATABASE)
    with open(path, "rb") as file:
        data = file.read(max_bytes + 1)
    return run_from_json(data, source=str(path), max_bytes=max_bytes)


def sqlite_header(path: str) -> tuple[int, bool] | None:
    """The application id in ``path``'s header and whether it has tables; None if no database.

    Asked of SQLite (never read with ``open()``, which would drop SQLite's locks
    on the file in this process when closed), read-only and as an immutable
    file: it reads the header, and neither recovers a write-ahead log nor reads
    one (tables made since the last checkpoint are not seen). An empty file, or
    one that is not a regular file (a pipe), is no database; a file SQLite finds
    damaged is one, with id 0.
    """
    try:
        found = os.stat(path)
        if not stat.S_ISREG(found.st_mode) or found.st_size == 0:
            return None
        uri = f"{Path(path).absolute().as_uri()}?mode=ro&immutable=1"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
            (application_id,) = db.execute("PRAGMA application_id").fetchone()
            tables = db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is not None
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorname", "") == "SQLITE_NOTADB":
            return None
        return 0, False  # damaged: SQLiteLedger says how
    except UnicodeDecodeError:  # SQLite's message quotes a damaged name in its schema
        return 0, False
    except (OSError, ValueError, sqlite3.Error):
        return None  # said by whoever reads it next
    return application_id, tables


_A_DATABASE: Final = "a SQLite database (a ledger? go on with its runs with loop.resume(run_id))"


def run_from_json(
    text: str | bytes | bytearray, *, source: str = "run file", max_bytes: int = MAX_BYTES
) -> RunResult:
    """A result from run file text; raises ``RunFileError`` naming the first problem."""
    if not isinstance(text, str | bytes | bytearray | memoryview):
        raise TypeError(
            f"run_from_json() expected a run file's text (str or bytes), got {type(text).__name__}"
        )
    if len(text) > max_bytes:
        raise RunFileError(
            source,
            f"a run file of at most {max_bytes} bytes (raise the limit with max_bytes=, "
            "or --max-size on the command line)",
            f"more than {max_bytes} bytes",
        )
    if isinstance(text, bytes) and text.startswith(b"SQLite format 3\x00"):
        raise RunFileError(source, "a run file (JSON)", _A_DATABASE)
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        if not isinstance(text, str):  # orjson says "surrogates" of bytes that are not UTF-8
            try:
                bytes(text).decode()
            except UnicodeDecodeError as bad:
                found = f"bytes that are not UTF-8 text (from byte {bad.start})"
                raise RunFileError(source, "a JSON document in UTF-8", found) from None
        raise RunFileError(source, "a JSON document", f"invalid JSON ({exc})") from None
    check_header(document, source)
    try:
        # orjson writes at most 255 levels: whatever it writes is shallow enough.
        written = orjson.dumps(document)
    except orjson.JSONEncodeError:
        if too_deep(document):
            raise RunFileError(
                source, f"JSON nested at most {MAX_DEPTH} levels deep", "a document nested deeper"
            ) from None
        written = dumps(document)
    check_unique_fields(text, written, source)
    error = next(iter(VALIDATOR.iter_errors(document)), None)
    if error is not None:
        raise RunFileError(f"{source}: {json_path(error.instance_path)}", *explain(error))
    try:
        result = run_of(document)
        check_written(result, document)
        answers_agree(result)
    except Mismatch as found:
        raise RunFileError(f"{source}: {found.where}", found.expected, found.found) from None
    return result
