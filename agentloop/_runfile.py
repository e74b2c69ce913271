"""Saved runs: a ``RunResult`` as a versioned JSON document, and back.

A run file is one JSON object (format ``agentloop.run``, version 1)::

    {"format": "agentloop.run", "version": 1,
     "status": "finished", "output": "...", "reason": null, "error": null,
     "steps": 3, "calls": 2, "budget": {"max_steps": 5, "max_calls": 2},
     "transcript": [{"kind": "user", ...}, ...],
     "events": [{"source": "awaiting_model", "dest": "validating",
                 "trigger": "model_replied", "guard": null, "steps": 1, "calls": 0,
                 "call_id": null, "tool": null, "status": null, "reason": null,
                 "error": null, "exception": null, "appended": []}, ...],
     "rejected": null | {"json": <the reply>} | {"repr": "<repr of a non-JSON reply>"}}

Two things cannot be saved as they were, and are saved as what a reviewer
needs instead: a transition's live ``exception`` becomes ``{"type", "message"}``
(loaded back as a ``RecordedException``), and a rejected reply that is not
JSON becomes its ``repr`` (loaded back as ``NotJSON``). Everything else
round-trips exactly: ``RunResult.from_json(r.to_json()) == r``.

Loading checks the document in three passes. Its shape: a JSON Schema (fields,
types, state and trigger names), no field twice in an object, and no deeper
nesting than a run makes. Its chain: each event is a row of the table, taken
where the last one left the run, ending in a terminal state. Its story: what
came from outside (input messages, replies, what was raised, tool results,
cancellations) is replayed through a fresh engine, and everything else (rows,
counters, every event field, the outcome, the transcript) must come out as
the engine records it. Any failure raises ``RunFileError``; nothing is
half-loaded.
"""

from __future__ import annotations

import json
import reprlib
from typing import TYPE_CHECKING, Any, Final

import attrs
import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import orjson

from agentloop._engine import AgentloopError, Engine
from agentloop._machine import TERMINAL, Guard, State, Trigger, build_machine, rows_of
from agentloop._messages import JSONError, exception_content, input_messages, to_json
from agentloop._values import Budget, CancelToken, RunResult, Transition

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["FORMAT", "SCHEMA", "VERSION", "NotJSON", "RecordedException", "RunFileError"]

FORMAT: Final = "agentloop.run"
VERSION: Final = 1


class RunFileError(AgentloopError, ValueError):
    """A run file could not be loaded: not JSON, an unknown version, or damaged.

    ``where`` locates the problem (a JSON path such as ``$.events[2].steps``);
    ``expected`` and ``found`` say what should have been there and what was.
    """

    def __init__(self, where: str, expected: str, found: str) -> None:
        super().__init__(f"{where}: expected {expected}, got {found}")
        self.where, self.expected, self.found = where, expected, found


class RecordedException(Exception):
    """A saved transition's exception: only its type name and message survive.

    ``Transition.exception`` on a loaded run is one of these, so saving a loaded
    run again writes the same ``{"type", "message"}``.
    """

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name, self.message = type_name, message

    def __repr__(self) -> str:
        return f"RecordedException({self.type_name!r}, {self.message!r})"

    def __reduce__(self) -> tuple[type[RecordedException], tuple[str, str]]:
        # Exception pickles and copies by ``args``, which holds the message alone.
        return RecordedException, (self.type_name, self.message)


@attrs.frozen(repr=False)
class NotJSON:
    """A saved rejected reply that was not JSON: only its ``repr`` survives."""

    text: str

    def __repr__(self) -> str:
        return self.text


# -- the shape -----------------------------------------------------------------

_STR_OR_NULL: Final = {"type": ["string", "null"]}
_COUNT: Final = {"type": "integer", "minimum": 0}
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


#: The JSON Schema (Draft 2020-12) of a version 1 run file.
SCHEMA: Final = _record(
    format={"const": FORMAT},
    version={"const": VERSION},
    status=_enum(State),
    output=_STR_OR_NULL,
    reason=_STR_OR_NULL,
    error=_STR_OR_NULL,
    steps=_COUNT,
    calls=_COUNT,
    budget=_record(max_steps=_COUNT, max_calls=_COUNT),
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
            status=_STR_OR_NULL,
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
        ),
    },
    rejected={
        "description": 'null, {"json": the reply} or {"repr": str}',
        "oneOf": [
            {"type": "null"},
            _record(json={}),
            _record(repr={"type": "string"}),
        ],
    },
)

# JSON Schema's "integer" admits 1.0 and Python's int admits True: counters are neither.
_Validator: Final = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)
    ),
)
_VALIDATOR: Final = _Validator(SCHEMA)

# The rows that leave an event, by what an event says of its row.
_ROWS: Final = frozenset(
    (row.source, row.trigger, row.guard, row.dest)
    for row in rows_of(build_machine())
    if row.dest is not None
)


# -- saving --------------------------------------------------------------------


def dump(result: RunResult) -> str:
    """``result`` as a version 1 run file (indented JSON text)."""
    return _dumps(_document(result), orjson.OPT_INDENT_2).decode()


def _document(result: RunResult) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "status": result.status.value,
        "output": result.output,
        "reason": result.reason,
        "error": result.error,
        "steps": result.steps,
        "calls": result.calls,
        "budget": {"max_steps": result.budget.max_steps, "max_calls": result.budget.max_calls},
        "transcript": orjson.loads(result.transcript_json),
        "events": [_event(event) for event in result.events],
        "rejected": rejected_record(result.rejected_value),
    }


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
        "status": event.status,
        "reason": event.reason,
        "error": event.error,
        "exception": _exception(event.exception),
        "appended": event.appended,
    }


def _exception(exc: BaseException | None) -> dict[str, str] | None:
    if exc is None:
        return None
    if isinstance(exc, RecordedException):
        return {"type": exc.type_name, "message": exc.message}
    return exception_content(exc)


def rejected_record(value: object) -> dict[str, Any] | None:
    """A rejected reply as the run file keeps it: ``{"json": ...}``, ``{"repr": ...}`` or None."""
    if value is None:
        return None
    if isinstance(value, NotJSON):
        return {"repr": value.text}
    try:
        return {"json": orjson.loads(to_json(value, "rejected"))}
    except JSONError:
        return {"repr": _safely(lambda: repr(value))}


def _safely(text: Callable[[], str]) -> str:
    """A user object's ``str``/``repr``, or a placeholder if that raises."""
    try:
        return text()
    except Exception as exc:  # noqa: BLE001 - saving must not fail on a broken __repr__
        return f"<unprintable: {type(exc).__name__}>"


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


def load(text: str | bytes, *, source: str = "run file") -> RunResult:
    """Parse and check a run file; raises ``RunFileError`` naming the first problem."""
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise RunFileError(source, "a JSON document", f"invalid JSON ({exc})") from None
    _check_header(document, source)
    if _too_deep(document):
        raise RunFileError(
            source, f"JSON nested at most {_MAX_DEPTH} levels deep", "a document nested deeper"
        )
    _check_unique_fields(text, source)
    error = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(document))
    if error is not None:
        raise RunFileError(f"{source}: {error.json_path}", *_explain(error))
    result = _build(document)
    _check_story(result, source)
    return result


def _check_header(document: object, source: str) -> None:
    """Say "not a run file" or "unknown version" before any field-level complaint."""
    if not isinstance(document, dict):
        raise RunFileError(source, "a JSON object (a run file)", _found(document))
    if document.get("format") != FORMAT:
        found = _found(document["format"]) if "format" in document else "no format field"
        raise RunFileError(f"{source}: $.format", f"format {FORMAT!r}", found)
    version = document.get("version")
    if type(version) is not int or version != VERSION:
        raise RunFileError(
            f"{source}: $.version",
            f"version {VERSION} (the only one this agentloop reads)",
            _found(version) if "version" in document else "no version field",
        )


def _too_deep(document: dict[str, Any]) -> bool:
    """Whether ``document`` nests deeper than ``_MAX_DEPTH`` (checked without recursion)."""
    stack: list[tuple[dict[str, Any] | list[Any], int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value
        if depth > _MAX_DEPTH:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _check_unique_fields(text: str | bytes, source: str) -> None:
    """Refuse a field given twice in one object: which one counts is up to the parser."""

    def unique(pairs: list[tuple[str, object]]) -> None:
        names = [name for name, _ in pairs]
        if len(set(names)) < len(names):
            twice = next(name for name in names if names.count(name) > 1)
            raise RunFileError(source, "each field once in an object", f"{twice!r} twice")

    # orjson keeps the last of duplicates silently; the standard parser can tell.
    json.loads(text, object_pairs_hook=unique)


def _explain(error: jsonschema.exceptions.ValidationError) -> tuple[str, str]:
    """(expected, found) for a schema error, in the words of this format."""
    kind = error.validator
    # What the schema asked for, and the part of the document that failed it.
    rule: Any = error.validator_value
    value: Any = error.instance
    if kind == "required":
        missing = [name for name in rule if name not in value]
        return f"the field {missing[0]!r}", "an object without it"
    if kind == "additionalProperties":
        fields = error.schema["properties"] if isinstance(error.schema, dict) else {}
        extra = sorted(set(value) - set(fields))
        return f"only the fields {', '.join(fields)}", f"an extra field {extra[0]!r}"
    if kind == "type":
        types = rule if isinstance(rule, list) else [rule]
        return " or ".join(types), _found(value)
    if kind == "enum":
        return f"one of {', '.join(repr(v) for v in rule)}", _found(value)
    if kind == "const":
        return repr(rule), _found(value)
    if kind == "minimum":
        return f"a number >= {rule}", _found(value)
    if kind == "minItems":
        return f"at least {rule} item", "an empty list"
    if kind == "oneOf":
        assert isinstance(error.schema, dict), "every oneOf in SCHEMA is described"
        return error.schema["description"], _found(value)
    return f"{kind} {rule!r}", _found(value)  # pragma: no cover - the schema uses no other


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
    return RunResult(
        status=State(document["status"]),
        output=document["output"],
        steps=document["steps"],
        calls=document["calls"],
        budget=Budget(**document["budget"]),
        reason=document["reason"],
        error=document["error"],
        events=tuple(_load_event(event) for event in document["events"]),
        transcript_json=_dumps(document["transcript"]),
        rejected_value=(
            None
            if rejected is None
            else NotJSON(rejected["repr"])
            if "repr" in rejected
            else rejected["json"]
        ),
    )


def _load_event(event: dict[str, Any]) -> Transition:
    exception = event["exception"]
    return Transition(
        source=State(event["source"]),
        dest=State(event["dest"]),
        trigger=Trigger(event["trigger"]),
        guard=Guard(event["guard"]) if event["guard"] else None,
        steps=event["steps"],
        calls=event["calls"],
        call_id=event["call_id"],
        tool=event["tool"],
        status=event["status"],
        reason=event["reason"],
        error=event["error"],
        exception=RecordedException(exception["type"], exception["message"]) if exception else None,
        appended_json=tuple(_dumps(message) for message in event["appended"]),
    )


# -- the story: replayed through the engine ---------------------------------------


def _check_story(result: RunResult, source: str) -> None:
    """The events must chain through the table, and replaying them must give the document."""
    _check_chain(result.events, source)
    _replay(result, source)


def _check_chain(events: tuple[Transition, ...], source: str) -> None:
    """Each event is a row of the table, from where the last one left the run, to one end."""
    state = State.AWAITING_MODEL
    last = len(events) - 1
    for index, event in enumerate(events):
        where = f"{source}: $.events[{index}]"
        row = (event.source.value, event.trigger.value, event.guard, event.dest.value)
        if row not in _ROWS:
            raise RunFileError(
                where,
                "a row of the state table (source, trigger, guard, dest)",
                f"{_row_text(event)}, which the table has not",
            )
        if event.source is not state:
            raise RunFileError(
                f"{where}.source",
                f"{state.value!r} (where the run was)",
                _found(event.source.value),
            )
        if event.dest in TERMINAL and index != last:
            raise RunFileError(where, "a terminal state only at the last event", event.dest.value)
        state = event.dest
    if state not in TERMINAL:
        raise RunFileError(
            f"{source}: $.events[{last}].dest",
            "a terminal state (a saved run is over)",
            _found(state.value),
        )


def _replay(result: RunResult, source: str) -> None:
    """Replay the run: the document must be what the engine records, given its inputs.

    The inputs are what came from outside, as the document says: the input
    messages (the transcript before what the events appended), each reply (the
    first message appended after it, else the rejected reply), what the model
    raised, each tool's result, and where cancellation came. Everything else
    (which row fired, the counters, every event field, the outcome) must come
    out as the engine makes it. One thing is taken as saved: the error of a
    malformed reply that was not JSON, whose problem was not kept (only its repr).
    """
    events, transcript = result.events, result.transcript
    appended = sum(len(event.appended_json) for event in events)
    if appended > len(transcript):
        raise _transcript_error(source, appended, len(transcript))
    try:
        encoded = input_messages(transcript[: len(transcript) - appended])
    except (TypeError, ValueError) as exc:
        raise RunFileError(
            f"{source}: $.transcript",
            "input messages a run accepts, then what was appended",
            str(exc),
        ) from None
    token = CancelToken()
    engine = Engine.start(encoded, result.budget, token)
    not_json = error_as_saved = False
    for index, event in enumerate(events):
        where = f"{source}: $.events[{index}]"
        reply = None
        if event.trigger is Trigger.MODEL_REPLIED:
            reply = _reply(events, index, result.rejected_value)
            not_json = isinstance(reply, NotJSON)
        replayed = _fire(engine, event, reply, token)
        if replayed is None or _row_text(replayed) != _row_text(event):
            row = (
                _row_text(replayed)
                if replayed is not None
                else f"no event (the internal row {event.source.value} --{event.trigger.value}"
                f"--> {event.source.value})"
            )
            raise RunFileError(
                where,
                f"{row}, which the table takes here (at steps {engine.steps} of "
                f"{result.budget.max_steps}, calls {engine.calls} of {result.budget.max_calls})",
                _row_text(event),
            )
        if isinstance(replayed.exception, _Unsaved):
            raise RunFileError(f"{where}.exception", "the exception raised here", "null")
        want, got = _event(replayed), _event(event)
        error_as_saved = not_json and replayed.guard is Guard.REPLY_MALFORMED
        if error_as_saved:
            want["error"] = got["error"]
        _compare(want, got, where)
    replayed_result = engine.result()
    if replayed_result.transcript_json != result.transcript_json:
        raise _transcript_error(source, appended, len(transcript))
    want, got = _document(replayed_result), _document(result)
    del want["events"], got["events"]  # compared one by one above
    if error_as_saved:
        want["error"] = events[-1].error
    _compare(want, got, f"{source}: $")


def _transcript_error(source: str, appended: int, length: int) -> RunFileError:
    return RunFileError(
        f"{source}: $.transcript",
        f"the input followed by the {appended} messages the events appended",
        f"a transcript of {length} messages that does not end with them",
    )


def _row_text(event: Transition) -> str:
    guard = f" [{event.guard.value}]" if event.guard else ""
    return f"{event.source.value} --{event.trigger.value}{guard}--> {event.dest.value}"


def _compare(want: dict[str, Any], got: dict[str, Any], where: str) -> None:
    """Raise at the first field of ``got`` that differs from ``want``, compared as JSON text.

    As text, ``1``, ``1.0`` and ``true`` differ (Python's ``==`` would take them as equal).
    """
    if _dumps(want) == _dumps(got):
        return
    for name, value in want.items():
        if _dumps(value) != _dumps(got[name]):
            raise RunFileError(
                f"{where}.{name}", f"{_shown(value)}, as replaying the run gives", _found(got[name])
            )


# The internal row of each state that has one: it leaves no event, and the
# driver fires its trigger first there (ask_model counts the step; start_tool).
_INTERNAL: Final = {
    State(row.source): row.trigger for row in rows_of(build_machine()) if row.dest is None
}


class _Unsaved(RecordedException):
    """Stands in for an exception the document did not record (the engine may need one)."""


def _fire(
    engine: Engine, event: Transition, reply: object, token: CancelToken
) -> Transition | None:
    """Make the engine take ``event``'s step, with the inputs the document gives."""
    internal = _INTERNAL.get(event.source)
    if internal is not None and internal != event.trigger:
        stopped: Transition | None = getattr(engine, internal)()
        if stopped is not None:
            return stopped
    if event.guard is Guard.CANCEL_REQUESTED:
        token.cancel()
    fire = getattr(engine, event.trigger.value)  # the engine's triggers are named so
    if event.trigger is Trigger.MODEL_REPLIED:
        return fire(reply)  # type: ignore[no-any-return]
    if event.trigger in (Trigger.MODEL_RAISED, Trigger.TOOL_INTERRUPTED):
        return fire(_raised(event.exception))  # type: ignore[no-any-return]
    if event.trigger is Trigger.TOOL_RETURNED:
        return fire(_outcome(event))  # type: ignore[no-any-return]
    return fire()  # type: ignore[no-any-return]


def _reply(events: tuple[Transition, ...], index: int, rejected: object) -> object:
    """The reply a ``model_replied`` event received: what it appended, else what was rejected."""
    for later in events[index + 1 :]:
        if later.appended_json:
            return later.appended[0]
        if later.source is State.AWAITING_MODEL:
            break
    return rejected


def _raised(record: BaseException | None) -> BaseException:
    """An exception the engine describes as the recorded one (it reads the type's name)."""
    if not isinstance(record, RecordedException):
        return _Unsaved("", "")
    kind: type[RecordedException] = type(record.type_name, (RecordedException,), {})
    return kind(record.type_name, record.message)


def _outcome(event: Transition) -> dict[str, Any]:
    """The dispatcher's outcome, from the tool_result the event appended."""
    appended = event.appended
    result = appended[-1] if appended else {}
    status = result.get("status")
    outcome = {
        # A status that is not a string is not one a tool can give (nor one to look up).
        "status": status if isinstance(status, str) else None,
        "content": result.get("content"),
    }
    if event.exception is not None:
        outcome["exception"] = event.exception
    return outcome
