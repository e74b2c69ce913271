"""Saved runs: a ``RunResult`` as a versioned JSON document, and back.

A run file is one JSON object (format ``agentloop.run``, version 4)::

    {"format": "agentloop.run", "version": 4,
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
                 "decisions": [{"call_id", "allowed", "reason", "fingerprint"}, ...]}, ...],
     "rejected": null | {"json": <the reply>} | {"repr": "...", "problem": "..."},
     "held": null | <the batch that waits for a person>}

``at`` and ``took`` are seconds of the run's monotonic clock (or null); replay
and comparisons ignore them. ``pending`` and ``decisions`` are empty but on
the events of a batch that waited for a person. A run awaiting approval can be
saved too: its last event leaves it ``awaiting_approval``, and
``Loop.resume(result, decisions=...)`` goes on from it. A version 3 file
(before approvals) is read as version 4 with empty ``pending`` and
``decisions``; a version 2 file (before usage and times) also with no usage,
no token budget and no times.

A transition's live ``exception`` is saved as ``{"type", "message"}`` (loaded
back as a ``RecordedException``); a rejected reply that was not JSON is kept
by the engine as its ``repr`` and what was wrong with it (``NotJSON``).
Everything else round-trips exactly: ``run_from_json(run_to_json(r)) == r``.

Loading is linear in the file's size and stops at the first problem: the
size limit (before anything is parsed), the JSON, no field twice in an
object, the shape (a JSON Schema, checked by ``jsonschema-rs``), then the
story: the run is replayed through a fresh engine (``_replay.py``) and must
come out as the document says. Any failure raises ``RunFileError``; nothing
is ever half-loaded.
"""

from __future__ import annotations

import itertools
import json
import os
import reprlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import jsonschema_rs
import orjson

from agentloop._core._approval import Decision, PendingCall
from agentloop._core._checked import ROWS
from agentloop._core._json import exception_content
from agentloop._core._replay import Mismatch, row_text
from agentloop._core._replay import replay as replay_events
from agentloop._core._table import TERMINAL, Guard, State, Trigger
from agentloop._core._values import (
    Budget,
    NotJSON,
    RecordedException,
    RunResult,
    Transition,
    Usage,
    require_result,
)
from agentloop._errors import RunFileError
from agentloop._review._replay import replay

if TYPE_CHECKING:
    from agentloop._core._engine import Engine
    from agentloop._core._values import CancelToken

__all__ = [
    "FORMAT",
    "MAX_BYTES",
    "SCHEMA",
    "VERSION",
    "load_run",
    "rejected_record",
    "reopen",
    "run_from_json",
    "run_to_json",
    "save_run",
]

FORMAT: Final = "agentloop.run"
VERSION: Final = 5
#: Older versions this agentloop still reads (upgraded on load).
_READS: Final = (2, 3, 4, 5)
#: The largest run file loaded unless asked for more (``max_bytes=``, ``--max-size``).
MAX_BYTES: Final = 256 * 2**20


# -- the shape -----------------------------------------------------------------

_STR: Final = {"type": "string"}
_STR_OR_NULL: Final = {"type": ["string", "null"]}
_COUNT: Final = {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}
_SECONDS: Final = {"type": ["number", "null"]}
_MESSAGE: Final = {
    "type": "object",
    "required": ["kind"],
    "properties": {"kind": {"type": "string"}},
}


def _enum(values: type[State] | type[Trigger] | type[Guard], *, null: bool = False) -> Any:
    names: list[str | None] = [member.value for member in values]
    return {"enum": [*names, None] if null else names}


def _record(**properties: object) -> dict[str, Any]:
    """An object with exactly these fields, all required."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


_USAGE: Final = _record(input_tokens=_COUNT, output_tokens=_COUNT, cached_tokens=_COUNT)

#: The JSON Schema (Draft 2020-12) of a version 3 run file.
SCHEMA: Final = _record(
    format={"const": FORMAT},
    version={"const": VERSION},
    status=_enum(State),
    output=_STR_OR_NULL,
    reason=_STR_OR_NULL,
    error=_STR_OR_NULL,
    steps=_COUNT,
    calls=_COUNT,
    budget=_record(
        max_steps=_COUNT, max_calls=_COUNT, max_total_tokens={"oneOf": [{"type": "null"}, _COUNT]}
    ),
    usage=_USAGE,
    transcript={"type": "array", "items": _MESSAGE},
    events={
        "type": "array",
        "minItems": 1,
        "items": _record(
            source=_enum(State),
            dest=_enum(State),
            trigger=_enum(Trigger),
            guard=_enum(Guard, null=True),
            steps=_COUNT,
            calls=_COUNT,
            call_id=_STR_OR_NULL,
            tool=_STR_OR_NULL,
            result_status=_STR_OR_NULL,
            reason=_STR_OR_NULL,
            error=_STR_OR_NULL,
            exception={
                "description": 'null or {"type": str, "message": str}',
                "oneOf": [
                    {"type": "null"},
                    _record(type={"type": "string"}, message={"type": "string"}),
                ],
            },
            appended={"type": "array", "items": _MESSAGE},
            usage={"oneOf": [{"type": "null"}, _USAGE]},
            at=_SECONDS,
            took={"type": ["number", "null"], "minimum": 0},
            pending={
                "type": "array",
                "items": _record(
                    call_id=_STR,
                    name=_STR,
                    arguments={},
                    reason=_STR,
                    fingerprint=_STR,
                ),
            },
            decisions={
                "type": "array",
                "items": _record(
                    call_id=_STR,
                    allowed={"type": "boolean"},
                    reason={"type": "string"},
                    fingerprint=_STR_OR_NULL,
                ),
            },
            started={"type": "array", "items": _STR},
            input={"description": "the reply or the content that came with the report, or null"},
        ),
    },
    rejected={
        "description": 'null, {"json": the reply} or {"repr": str, "problem": str}',
        "oneOf": [
            {"type": "null"},
            _record(json={}),
            _record(repr={"type": "string"}, problem={"type": "string"}),
        ],
    },
    held={"description": "null, or the batch a run awaiting approval holds"},
)

_VALIDATOR: Final = jsonschema_rs.Draft202012Validator(SCHEMA)


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
    return _dumps(_document(require_result(result, where)), orjson.OPT_INDENT_2).decode()


def _document(result: RunResult, *, events: bool = True) -> dict[str, Any]:
    document = {
        "format": FORMAT,
        "version": VERSION,
        "status": result.status.value,
        "output": result.output,
        "reason": result.reason,
        "error": result.error,
        "steps": result.steps,
        "calls": result.calls,
        "budget": {
            "max_steps": result.budget.max_steps,
            "max_calls": result.budget.max_calls,
            "max_total_tokens": result.budget.max_total_tokens,
        },
        "usage": result.usage._asdict(),
        "transcript": orjson.loads(result.transcript_json),
        "events": [_event(event) for event in result.events] if events else None,
        "rejected": rejected_record(result.rejected_value),
        "held": result.held,
    }
    if not events:
        del document["events"]
    return document


def _event(event: Transition) -> dict[str, Any]:
    return {
        "source": event.source.value,
        "dest": event.dest.value,
        "trigger": event.trigger.value,
        "guard": event.guard.value if event.guard else None,
        "steps": event.steps,
        "calls": event.calls,
        "call_id": event.call_id,
        "tool": event.tool,
        "result_status": event.result_status,
        "reason": event.reason,
        "error": event.error,
        "exception": _exception_record(event.exception),
        "appended": event.appended,
        "usage": None if event.usage is None else event.usage._asdict(),
        "at": event.at,
        "took": event.took,
        "pending": [call.record() for call in event.pending],
        "decisions": [
            {"call_id": call_id, **decision.record()} for call_id, decision in event.decisions
        ],
        "started": list(event.started),
        "input": None if event.input_json is None else orjson.loads(event.input_json),
    }


def rejected_record(value: object) -> dict[str, Any] | None:
    """A rejected reply as the run file keeps it: ``{"json": ...}``, ``{"repr", "problem"}``."""
    if value is None:
        return None
    if isinstance(value, NotJSON):
        return {"repr": value.text, "problem": value.problem}
    return {"json": value}  # the engine keeps only its own decoded copy of a JSON reply


def _dumps(value: object, option: int = 0) -> bytes:
    """``orjson.dumps`` past its depth limit: what it cannot reach goes in as fragments.

    A run holds messages as deep as orjson writes them, and the document puts
    them a few levels further down (``$.events[i].appended[j]``).
    """
    try:
        return orjson.dumps(value, option=option)
    except orjson.JSONEncodeError:
        if isinstance(value, dict):
            value = {key: orjson.Fragment(_dumps(item)) for key, item in value.items()}
        elif isinstance(value, list):
            value = [orjson.Fragment(_dumps(item)) for item in value]
        else:
            raise
        return orjson.dumps(value, option=option)


# -- loading -------------------------------------------------------------------

# The deepest a run file nests: orjson writes values up to 254 levels deep, a
# tool result wraps its content in one more, and ``$.events[i].appended[j]`` is 4 down.
_MAX_DEPTH: Final = 254 + 1 + 4

# Short reprs for messages, safe on any nesting.
_REPR: Final = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 100, 100


def load_run(path: str | bytes | os.PathLike[str], *, max_bytes: int = MAX_BYTES) -> RunResult:
    """Read a run file; ``OSError`` if unreadable, ``RunFileError`` if invalid or too big.

    A file larger than ``max_bytes`` is refused before it is parsed (also a
    device or pipe that never ends: at most ``max_bytes + 1`` bytes are read).
    """
    if not isinstance(path, str | bytes | os.PathLike):
        raise TypeError(
            f"load_run() expected a path (str or os.PathLike), got {type(path).__name__}"
        )
    with open(path, "rb") as file:
        data = file.read(max_bytes + 1)
    return run_from_json(data, source=str(path), max_bytes=max_bytes)


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
        raise RunFileError(
            source,
            "a run file (JSON)",
            "a SQLite database (a ledger? go on with its runs with loop.resume(run_id))",
        )
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
    _check_header(document, source)
    try:
        # orjson writes at most 255 levels: whatever it writes is shallow enough.
        written = orjson.dumps(document)
    except orjson.JSONEncodeError:
        if _too_deep(document):
            raise RunFileError(
                source, f"JSON nested at most {_MAX_DEPTH} levels deep", "a document nested deeper"
            ) from None
        written = _dumps(document)
    _check_unique_fields(text, written, source)
    if document["version"] == 2:
        _upgrade_from_2(document)
    if document["version"] == 3:
        _upgrade_from_3(document)
    inferred = document["version"] == 4  # its events do not say what they were given
    if inferred:
        _upgrade_from_4(document)
    error = next(iter(_VALIDATOR.iter_errors(document)), None)
    if error is not None:
        raise RunFileError(f"{source}: {_json_path(error.instance_path)}", *_explain(error))
    try:
        result = _build(document)
        return _check_story(result, inferred=inferred)
    except Mismatch as found:
        raise RunFileError(f"{source}: {found.where}", found.expected, found.found) from None


def _check_header(document: object, source: str) -> None:
    """Say "not a run file" or "unknown version" before any field-level complaint."""
    if type(document) is not dict:
        raise RunFileError(source, "a JSON object (a run file)", _found(document))
    if document.get("format") != FORMAT:
        found = _found(document["format"]) if "format" in document else "no format field"
        raise RunFileError(f"{source}: $.format", f"format {FORMAT!r}", found)
    version = document.get("version")
    if type(version) is not int or version not in _READS:
        raise RunFileError(
            f"{source}: $.version",
            f"version {', '.join(map(str, _READS[:-1]))} or {_READS[-1]} "
            "(the ones this agentloop reads)",
            _found(version) if "version" in document else "no version field",
        )


def _upgrade_from_2(document: dict[str, Any]) -> None:
    """A version 2 document as version 3: no token budget, no usage, no times.

    Only fields that are missing are added, so a v2 document with a stray v3
    field still fails the schema as it should.
    """
    document["version"] = 3
    if type(document.get("budget")) is dict:
        document["budget"].setdefault("max_total_tokens", None)
    document.setdefault("usage", {"input_tokens": 0, "output_tokens": 0, "cached_tokens": 0})
    for event in document.get("events") or ():
        if type(event) is dict:
            for name in ("usage", "at", "took"):
                event.setdefault(name, None)


def _upgrade_from_3(document: dict[str, Any]) -> None:
    """A version 3 document as version 4: no batch waited for a person."""
    document["version"] = 4
    document.setdefault("held", None)
    for event in document.get("events") or ():
        if type(event) is dict:
            for name in ("pending", "decisions"):
                event.setdefault(name, [])


def _upgrade_from_4(document: dict[str, Any]) -> None:
    """A version 4 document as version 5, but for what each event was given.

    Before version 5 an event did not keep the calls handed out before it nor
    what came with its report: the run is read by the replay that infers them
    (``_replay.py``), and the events the engine makes there, which keep them,
    are the loaded run's.
    """
    document["version"] = VERSION
    for event in document.get("events") or ():
        if type(event) is dict:
            event.setdefault("started", [])
            event.setdefault("input", None)


def _too_deep(document: dict[str, Any]) -> bool:
    """Whether ``document`` nests deeper than ``_MAX_DEPTH`` (checked without recursion)."""
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > _MAX_DEPTH:
            return True
        children = value.values() if type(value) is dict else value
        stack.extend((child, depth + 1) for child in children if type(child) in (dict, list))
    return False


_WHITESPACE: Final = b" \t\r\n"


def _check_unique_fields(text: str | bytes | bytearray, written: bytes, source: str) -> None:
    r"""Refuse a field given twice in one object: which one counts is up to the parser.

    orjson keeps the last of duplicates silently. The fast path, in C: a key
    ends in ``":`` (whitespace aside), and a string can hold ``":`` only as
    ``\":``, which writing it again keeps; so the text has more of them than
    the parsed document written again only if a key was dropped. Any doubt
    (a count that differs, or ``\u`` escapes, which writing again can change)
    goes to the standard parser, which can tell exactly.
    """
    raw = text.encode() if isinstance(text, str) else bytes(text)
    if b"\\u" not in raw:
        ends = b'":'
        if raw.translate(None, _WHITESPACE).count(ends) == written.translate(
            None, _WHITESPACE
        ).count(ends):
            return

    def unique(pairs: list[tuple[str, object]]) -> None:
        names: set[str] = set()
        for name, _ in pairs:
            if name in names:
                raise RunFileError(source, "each field once in an object", f"{name!r} twice")
            names.add(name)

    # orjson keeps the last of duplicates silently; the standard parser can tell.
    try:
        json.loads(text, object_pairs_hook=unique)
    except RecursionError:
        raise RunFileError(source, "JSON nested less deeply", "deeper nesting") from None


def _json_path(parts: list[str | int]) -> str:
    return "$" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in parts)


def _explain(error: jsonschema_rs.ValidationError) -> tuple[str, str]:
    """(expected, found) for a schema error, in the words of this format."""
    value: Any = error.instance
    name: str = error.kind.name
    rule: Any = error.kind.value  # what the schema asked for
    if name == "required":
        return f"the field {rule!r}", "an object without it"
    if name == "additionalProperties":
        return "only the fields of this format", f"an extra field {rule[0]!r}"
    if name == "type":
        return " or ".join(rule), _found(value)
    if name == "enum":
        return f"one of {', '.join(repr(v) for v in rule)}", _found(value)
    if name == "const":
        return repr(rule), _found(value)
    if name in ("minimum", "maximum"):
        expected = "a count from 0 to 2**63 - 1" if type(value) is int else "integer"
        return expected, _found(value)
    if name == "minItems":
        return f"at least {rule} item", "an empty list"
    if name == "oneOf":
        return _ONE_OF[str(error.instance_path[-1])], _found(value)
    return error.message, _found(value)  # pragma: no cover - the schema uses no other


_ONE_OF: Final = {
    "exception": 'null or {"type": str, "message": str}',
    "rejected": 'null, {"json": the reply} or {"repr": str, "problem": str}',
    "max_total_tokens": "null or an int from 0 to 2**63 - 1",
    "usage": 'null or {"input_tokens", "output_tokens", "cached_tokens"}, each an int count',
}


def _found(value: object) -> str:
    """A value as "<JSON type> <short repr>", for messages."""
    if value is None:
        return "null"
    kinds: tuple[tuple[type, str], ...] = (
        (bool, "boolean"),
        (int, "integer"),
        (float, "number"),
        (str, "string"),
        (dict, "object"),
        (list, "array"),
    )
    kind = next((name for cls, name in kinds if isinstance(value, cls)), type(value).__name__)
    return f"{kind} {_shown(value)}"


def _shown(value: object) -> str:
    """A short repr (``null`` for None), safe on any nesting."""
    shown = "null" if value is None else _REPR.repr(value)
    return f"{shown[:100]}{'...' if len(shown) > 100 else ''}"


def _build(document: dict[str, Any]) -> RunResult:
    """The result, from a document whose shape has been checked."""
    rejected = document["rejected"]
    try:
        budget = Budget(**document["budget"])
    except (TypeError, ValueError) as exc:
        raise Mismatch("$.budget", "a budget of int counts", str(exc)) from None
    return RunResult(
        status=State(document["status"]),
        output=document["output"],
        steps=document["steps"],
        calls=document["calls"],
        budget=budget,
        reason=document["reason"],
        error=document["error"],
        events=tuple(itertools.starmap(_load_event, enumerate(document["events"]))),
        transcript_json=_dumps(document["transcript"]),
        rejected_value=(
            None
            if rejected is None
            else NotJSON(rejected["repr"], rejected["problem"])
            if "repr" in rejected
            else rejected["json"]
        ),
        usage=Usage(**document["usage"]),
        held_json=None if document["held"] is None else _dumps(document["held"]),
    )


# Names to members by dict: calling an Enum to look one up costs a microsecond.
_STATES: Final = {state.value: state for state in State}
_TRIGGERS: Final = {trigger.value: trigger for trigger in Trigger}
_GUARDS: Final[dict[str | None, Guard | None]] = {None: None, **{g.value: g for g in Guard}}


def _decision(record: dict[str, Any], index: int) -> Decision:
    try:
        return Decision(**{key: value for key, value in record.items() if key != "call_id"})
    except TypeError as exc:  # a denial with no reason
        raise Mismatch(
            f"$.events[{index}].decisions", "approve() or deny(reason), as decisions", str(exc)
        ) from None


def _load_event(index: int, event: dict[str, Any]) -> Transition:
    exception = event["exception"]
    return Transition(
        _STATES[event["source"]],
        _STATES[event["dest"]],
        _TRIGGERS[event["trigger"]],
        _GUARDS[event["guard"]],
        event["steps"],
        event["calls"],
        event["call_id"],
        event["tool"],
        event["result_status"],
        event["reason"],
        event["error"],
        RecordedException.from_content(exception) if exception else None,
        tuple(_dumps(message) for message in event["appended"]),
        None if event["usage"] is None else Usage(**event["usage"]),
        event["at"],
        event["took"],
        # The schema's depth limit leaves arguments shallow enough for orjson to write.
        tuple(PendingCall.from_record(call) for call in event["pending"]),
        tuple((call["call_id"], _decision(call, index)) for call in event["decisions"]),
        tuple(event["started"]),
        None if event["input"] is None else _dumps(event["input"]),
    )


# -- the story: replayed through the engine ---------------------------------------


def _check_chain(events: tuple[Transition, ...]) -> None:
    """Each event is a row of the table, from where the last one left the run, to one end."""
    state = State.AWAITING_MODEL
    last = len(events) - 1
    for index, event in enumerate(events):
        where = f"$.events[{index}]"
        if (event.source, event.trigger, event.guard, event.dest) not in _ROWS:
            raise Mismatch(
                where,
                "a row of the state table (source, trigger, guard, dest)",
                f"{row_text(event)}, which the table has not",
            )
        if event.source is not state:
            raise Mismatch(
                f"{where}.source",
                f"{state.value!r} (where the run was)",
                _found(event.source.value),
            )
        if event.dest in TERMINAL and index != last:
            raise Mismatch(where, "a terminal state only at the last event", event.dest.value)
        state = event.dest
    if state not in TERMINAL and state is not State.AWAITING_APPROVAL:
        raise Mismatch(
            f"$.events[{last}].dest",
            "a terminal state or awaiting_approval (where a saved run can stop)",
            _found(state.value),
        )


_ROWS: Final = frozenset(
    (row.source, row.trigger, row.guard, row.dest) for row in ROWS if row.dest is not None
)


def _check_story(result: RunResult, *, inferred: bool) -> RunResult:
    """Replaying the run must give the document: each event, then the outcome; the result.

    A version 5 file's events say what each was given, and the one replay feeds
    them back (``_core/_replay.py``); an older file's are inferred from what they
    appended (``_replay.py``), and the loaded run takes the events made there,
    with the file's times.
    """
    _check_chain(result.events)
    appended = sum(len(event.appended_json) for event in result.events)
    transcript = orjson.loads(result.transcript_json)
    if appended > len(transcript):
        raise _transcript_mismatch(appended, len(transcript))
    try:
        if inferred:
            engine = replay(result, len(transcript) - appended, _compare_events)
        else:
            engine = _replayed(result, transcript[: len(transcript) - appended])
    except (TypeError, ValueError) as exc:  # the input part is not one a run accepts
        raise Mismatch(
            "$.transcript", "input messages a run accepts, then what was appended", str(exc)
        ) from None
    replayed = engine.result()
    if replayed.transcript_json != result.transcript_json:
        made = orjson.loads(replayed.transcript_json)
        for index, (want, got) in enumerate(zip(made, transcript, strict=False)):
            if _dumps(want) != _dumps(got):
                raise Mismatch(
                    f"$.transcript[{index}]",
                    f"{_shown(want)}, as the events appended it",
                    _found(got),
                )
        raise _transcript_mismatch(appended, len(transcript))
    # The events were compared one by one during the replay.
    want, got = _document(replayed, events=False), _document(result, events=False)
    _compare(want, got, "$")
    if not inferred:
        return result
    events = zip(replayed.events, result.events, strict=True)
    return result._replace(
        events=tuple(made._replace(at=saved.at, took=saved.took) for made, saved in events)
    )


def _replayed(
    result: RunResult, messages: list[dict[str, Any]], token: CancelToken | None = None
) -> Engine:
    """The one replay of ``result``'s events, each compared as the run file keeps it."""
    return replay_events(
        messages,
        result.budget,
        result.events,
        rejected=result.rejected_value,
        token=token,
        compare=_compare_events,
    )


def reopen(result: RunResult, token: CancelToken) -> Engine:
    """A saved run replayed into an engine, which goes on if the run has not ended.

    A run that ended gives an engine that is done, as a durable run that
    ended is only read. ``token`` is the engine's cancel token. A result whose
    events do not replay is refused.
    """
    result = require_result(result, "resume()")
    try:
        _check_chain(result.events)
        appended = sum(len(event.appended_json) for event in result.events)
        transcript = orjson.loads(result.transcript_json)
        return _replayed(result, transcript[: len(transcript) - appended], token)
    except (TypeError, ValueError) as exc:  # the input part is not one a run accepts
        raise RunFileError(
            "result: $.transcript", "input messages a run accepts", str(exc)
        ) from None
    except Mismatch as found:
        raise RunFileError(f"result: {found.where}", found.expected, found.found) from None


def _transcript_mismatch(appended: int, length: int) -> Mismatch:
    return Mismatch(
        "$.transcript",
        f"the input followed by the {appended} messages the events appended",
        f"a transcript of {length} messages that does not end with them",
    )


def _compare_events(made: Transition, saved: Transition, where: str) -> None:
    # The fast path: equal as values, counters that are ints (not 1.0 or true), the same
    # message bytes and the same exception record. Anything else is compared field by field.
    if (
        made[:11] == saved[:11]  # every field but the exception, messages, usage and times
        and made.appended_json == saved.appended_json
        and made.usage == saved.usage
        and made.pending == saved.pending
        and made.decisions == saved.decisions
        and type(saved.steps) is int
        and type(saved.calls) is int
        and _exception_record(made.exception) == _exception_record(saved.exception)
    ):
        return
    _compare(_timeless(made), _timeless(saved), where)


def _timeless(event: Transition) -> dict[str, Any]:
    """An event's record without its times, which replay does not reproduce."""
    record = _event(event)
    del record["at"], record["took"]
    return record


def _exception_record(exc: BaseException | None) -> dict[str, str] | None:
    return None if exc is None else exception_content(exc)


def _compare(want: dict[str, Any], got: dict[str, Any], where: str) -> None:
    """Raise at the first field of ``got`` that differs from ``want``, compared as JSON text.

    As text, ``1``, ``1.0`` and ``true`` differ (Python's ``==`` would take them as equal).
    """
    if _dumps(want) == _dumps(got):
        return
    for name, value in want.items():
        if _dumps(value) != _dumps(got[name]):
            raise Mismatch(
                f"{where}.{name}", f"{_shown(value)}, as replaying the run gives", _found(got[name])
            )
