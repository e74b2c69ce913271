"""Saved runs: a ``RunResult`` as a versioned JSON document, and back.

A run file is one JSON object (format ``agentloop.run``, version 5)::

    {"format": "agentloop.run", "version": 5,
     "status": "finished", "output": "...", "reason": null, "error": null,
     "steps": 3, "calls": 2,
     "budget": {"max_steps": 5, "max_calls": 2, "max_total_tokens": null},
     "usage": {"input_tokens": 0, "output_tokens": 0, "cached_tokens": 0},
     "transcript": [{"kind": "user", ...}, ...],
     "events": [{"source": "awaiting_model", "dest": "validating",
                 "trigger": "model_replied", "guard": null, "steps": 1, "calls": 0,
                 "call_id": null, "tool": null, "result_status": null, "reason": null,
                 "error": null, "exception": null, "appended": [],
                 "usage": null | {"input_tokens", "output_tokens", "cached_tokens"},
                 "at": 12.5, "took": 0.8,
                 "pending": [{"call_id", "name", "arguments", "reason", "fingerprint"}, ...],
                 "decisions": [{"call_id", "allowed", "reason", "fingerprint"}, ...],
                 "started": ["c1", ...], "input": null | <the reply or content>}, ...],
     "rejected": null | {"json": <the reply>} | {"repr": "...", "problem": "..."},
     "held": null | <the batch that waits for a person>}

``at`` and ``took`` are seconds of the run's monotonic clock (or null); replay
and comparisons ignore them. ``pending`` and ``decisions`` are empty but on
the events of a batch that waited for a person. A run awaiting approval can be
saved too: its last event leaves it ``awaiting_approval``, and
``Loop.resume(result, decisions=...)`` goes on from it. ``started`` and
``input`` say what each event was given (the calls handed out before it, and
the reply or the tool's content), which the one replay feeds back. Only
version 5 is read: a format change comes with its reader and a committed
fixture (``tests/fixtures``). The shape and the encoding are
``runshape.py``'s, the story's check ``runstory.py``'s.

A transition's live ``exception`` is saved as ``{"type", "message"}`` (loaded
back as a ``RecordedException``); a rejected reply that was not JSON is kept
by the engine as its ``repr`` and what was wrong with it (``NotJSON``).
Everything else round-trips exactly: ``run_from_json(run_to_json(r)) == r``.

Loading is linear in the file's size and stops at the first problem: the
size limit (before anything is parsed), the JSON, no field twice in an
object, the shape (a JSON Schema, checked by ``jsonschema-rs``), then the
story: the run is replayed through a fresh engine (``_core/replay.py``) and
must come out as the document says. Any failure raises ``RunFileError``; nothing
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
    except Mismatch as found:
        raise RunFileError(f"{source}: {found.where}", found.expected, found.found) from None
    return result
