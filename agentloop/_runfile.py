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

Loading checks the document twice: its shape against a JSON Schema (fields,
types, state and trigger names), then its story (each event is a row of the
table, events chain from the initial state, the counters and the outcome agree
with the last event, the transcript ends with what the events appended). Any
failure raises ``RunFileError``; nothing is half-loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import attrs
import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import orjson

from agentloop._engine import AgentloopError
from agentloop._machine import TERMINAL, Guard, State, Trigger, build_machine, rows_of
from agentloop._messages import JSONError, to_json
from agentloop._values import Budget, RunResult, Transition

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
    document = {
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
        "rejected": _rejected(result.rejected_value),
    }
    return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()


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
    return {"type": type(exc).__name__, "message": _safely(lambda: str(exc))}


def _rejected(value: object) -> dict[str, Any] | None:
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


# -- loading -------------------------------------------------------------------


def load(text: str | bytes, *, source: str = "run file") -> RunResult:
    """Parse and check a run file; raises ``RunFileError`` naming the first problem."""
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise RunFileError(source, "a JSON document", f"invalid JSON ({exc})") from None
    _check_header(document, source)
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
    if version != VERSION or isinstance(version, bool):
        raise RunFileError(
            f"{source}: $.version",
            f"version {VERSION} (the only one this agentloop reads)",
            _found(version) if "version" in document else "no version field",
        )


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
    shown = repr(value.value if isinstance(value, State) else value)
    return f"{kind} {shown[:60]}{'...' if len(shown) > 60 else ''}"


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
        transcript_json=_encode(document["transcript"]),
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
        appended_json=tuple(_encode(message) for message in event["appended"]),
    )


def _encode(value: object) -> bytes:
    """The bytes the engine kept (``orjson``'s compact form of parsed JSON is canonical)."""
    return orjson.dumps(value)


def _check_story(result: RunResult, source: str) -> None:
    """The events must be a run this table can make, and the summary must agree."""
    state, steps, calls = State.AWAITING_MODEL, 0, 0
    for index, event in enumerate(result.events):
        where = f"{source}: $.events[{index}]"
        row = (event.source.value, event.trigger.value, event.guard, event.dest.value)
        if row not in _ROWS:
            raise RunFileError(
                where,
                "a row of the state table (source, trigger, guard, dest)",
                f"{row[0]} --{row[1]}{f' [{row[2]}]' if row[2] else ''}--> {row[3]}, "
                "which the table has not",
            )
        if event.source is not state:
            raise RunFileError(
                f"{where}.source",
                f"{state.value!r} (where the run was)",
                _found(event.source.value),
            )
        if event.steps < steps or event.calls < calls:
            raise RunFileError(
                where,
                f"counters that never go down (steps >= {steps}, calls >= {calls})",
                f"steps {event.steps}, calls {event.calls}",
            )
        if event.dest in TERMINAL and index != len(result.events) - 1:
            raise RunFileError(where, "a terminal state only at the last event", event.dest.value)
        state, steps, calls = event.dest, event.steps, event.calls
    last = result.events[-1]
    if last.dest not in TERMINAL:
        raise RunFileError(
            f"{source}: $.events[{len(result.events) - 1}].dest",
            "a terminal state (a saved run is over)",
            _found(last.dest.value),
        )
    for name, want in (
        ("status", last.dest),
        ("steps", last.steps),
        ("calls", last.calls),
        ("reason", last.reason),
        ("error", last.error),
    ):
        if getattr(result, name) != want:
            shown = want.value if isinstance(want, State) else want
            raise RunFileError(
                f"{source}: $.{name}",
                f"{shown!r}, as the last event says",
                _found(getattr(result, name)),
            )
    budget = result.budget
    if result.steps > budget.max_steps or result.calls > budget.max_calls:
        raise RunFileError(
            f"{source}: $.budget",
            f"limits the counters never exceed (steps {result.steps}, calls {result.calls})",
            f"max_steps {budget.max_steps}, max_calls {budget.max_calls}",
        )
    appended = [message for event in result.events for message in event.appended_json]
    transcript = orjson.loads(result.transcript_json)
    tail = transcript[len(transcript) - len(appended) :] if appended else []
    if len(appended) > len(transcript) or tail != [orjson.loads(m) for m in appended]:
        raise RunFileError(
            f"{source}: $.transcript",
            f"the input followed by the {len(appended)} messages the events appended",
            f"a transcript of {len(transcript)} messages that does not end with them",
        )
