"""A run file's encoding: its JSON form, and its header checked.

The words that explain what breaks the shape are here too. The shape is
checked with ``jsonschema-rs`` (Draft 2020-12, at Rust speed) against the
schema in ``runfile_schema.py`` (re-exported here): every violation comes with its
exact JSON path. What relates fields to each other is ``runstory.py``'s.
"""

from __future__ import annotations

import json
import reprlib
from typing import TYPE_CHECKING, Any, Final

import orjson

from agentloop._core.approval import decision_record
from agentloop._core.json import exception_content
from agentloop._core.output_schema import OutputSchema
from agentloop._core.values import (
    Budget,
    NotJSON,
    RunResult,
    Transition,
)
from agentloop._errors import RunFileError
from agentloop._review.runfile_schema import FORMAT, SCHEMA, VALIDATOR, VERSION  # re-exported

if TYPE_CHECKING:
    import jsonschema_rs

__all__ = [
    "FORMAT",
    "MAX_BYTES",
    "MAX_DEPTH",
    "READS",
    "SCHEMA",
    "VALIDATOR",
    "VERSION",
    "as_found",
    "as_shown",
    "check_header",
    "check_unique_fields",
    "document_of",
    "dumps",
    "event_record",
    "exception_record",
    "explain",
    "json_path",
    "rejected_record",
    "rejected_value",
    "too_deep",
]

#: The versions this agentloop reads: a format change comes with its reader (and a fixture).
READS: Final = (VERSION,)
#: The largest run file loaded unless asked for more (``max_bytes=``, ``--max-size``).
MAX_BYTES: Final = 256 * 2**20


# The deepest a run file nests: orjson writes values up to 254 levels deep, a
# tool result wraps its content in one more, and ``$.events[i].appended[j]`` is 4 down.
MAX_DEPTH: Final = 254 + 1 + 4

# Short reprs for messages, safe on any nesting.
_REPR: Final = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 100, 100


def check_header(document: object, source: str) -> None:
    """Say "not a run file" or "unknown version" before any field-level complaint."""
    if type(document) is not dict:
        raise RunFileError(source, "a JSON object (a run file)", as_found(document))
    if document.get("format") != FORMAT:
        found = as_found(document["format"]) if "format" in document else "no format field"
        raise RunFileError(f"{source}: $.format", f"format {FORMAT!r}", found)
    version = document.get("version")
    if type(version) is not int or version not in READS:
        raise RunFileError(
            f"{source}: $.version",
            f"version {' or '.join(map(str, READS))} (what this agentloop reads)",
            as_found(version) if "version" in document else "no version field",
        )


def too_deep(document: dict[str, Any]) -> bool:
    """Whether ``document`` nests deeper than ``MAX_DEPTH`` (checked without recursion)."""
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        children = value.values() if type(value) is dict else value
        stack.extend((child, depth + 1) for child in children if type(child) in (dict, list))
    return False


_WHITESPACE: Final = b" \t\r\n"


def check_unique_fields(text: str | bytes | bytearray, written: bytes, source: str) -> None:
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


def json_path(parts: list[str | int]) -> str:
    return "$" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in parts)


def explain(error: jsonschema_rs.ValidationError, field: str = "") -> tuple[str, str]:
    """(expected, found) for a schema error, in the words of this format.

    ``field`` names the value checked when its path is empty (a part checked alone).
    """
    value: Any = error.instance
    name: str = error.kind.name
    rule: Any = error.kind.value  # what the schema asked for
    if name == "required":
        return f"the field {rule!r}", "an object without it"
    if name == "additionalProperties":
        return "only the fields of this format", f"an extra field {rule[0]!r}"
    if name == "type":
        return " or ".join(rule), as_found(value)
    if name == "enum":
        return f"one of {', '.join(repr(v) for v in rule)}", as_found(value)
    if name == "const":
        return repr(rule), as_found(value)
    if name in ("minimum", "maximum"):
        if type(value) is float and value.is_integer():  # past 64 bits: the parser's float
            return "integer", as_found(value)
        if type(value) is not int:  # a number field's (a wait, a time taken): its bound
            return f"a number {'of at least' if name == 'minimum' else 'of at most'} {rule}", (
                as_found(value)
            )
        low = rule if name == "minimum" else 0  # a count's lowest is the schema's (a turn's 1)
        return f"a count from {low} to 2**63 - 1", as_found(value)
    if name == "minItems":
        return f"at least {rule} item{'s' * (rule != 1)}", as_found(value)
    if name == "maxItems":
        return f"at most {rule} item{'s' * (rule != 1)}", as_found(value)
    if name == "oneOf":
        named = [part for part in error.instance_path if type(part) is str] or [field]
        return _ONE_OF.get(named[-1], "one of the forms this field takes"), as_found(value)
    return error.message, as_found(value)


_ONE_OF: Final = {
    "exception": 'null or {"type": str, "message": str}',
    "rejected": 'null, {"json": the reply} or {"repr": str, "problem": str}',
    "max_total_tokens": "null or an int from 0 to 2**63 - 1",
    "usage": 'null or {"input_tokens", "output_tokens", "cached_tokens"}, each an int count',
    "summary": "null or [first, end], the messages a summary folded",
}


def as_found(value: object) -> str:
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
    return f"{kind} {as_shown(value)}"


def as_shown(value: object) -> str:
    """A short repr (``null`` for None), safe on any nesting."""
    shown = "null" if value is None else _REPR.repr(value)
    return f"{shown[:100]}{'...' if len(shown) > 100 else ''}"


# -- the encoding ----------------------------------------------------------------


def output_of(result: RunResult) -> OutputSchema | None:
    """The output schema a run was made with (``Loop(output=T)``), from its result."""
    schema = result.output_schema_json
    return None if schema is None else OutputSchema(orjson.loads(schema))


def _budget_record(budget: Budget) -> dict[str, Any]:
    """The budget as a run file keeps it: the newer limits only when they are not the default."""
    record: dict[str, Any] = {
        "max_steps": budget.max_steps,
        "max_calls": budget.max_calls,
        "max_total_tokens": budget.max_total_tokens,
    }
    for name in ("max_output_retries", "max_identical_calls", "on_exhausted"):
        value = getattr(budget, name)
        if value != _DEFAULT_BUDGET_VALUES[name]:
            record[name] = value
    return record


_DEFAULT_BUDGET_VALUES: Final = {
    "max_output_retries": Budget().max_output_retries,
    "max_identical_calls": Budget().max_identical_calls,
    "on_exhausted": Budget().on_exhausted,
}


def document_of(result: RunResult, *, events: bool = True) -> dict[str, Any]:
    document = {
        "format": FORMAT,
        "version": VERSION,
        "status": result.status.value,
        "output": result.output_text,
        "reason": result.reason,
        "error": result.error,
        "steps": result.steps,
        "calls": result.calls,
        "budget": _budget_record(result.budget),
        "usage": result.usage._asdict(),
        "transcript": orjson.loads(result.transcript_json),
        "events": [event_record(event) for event in result.events] if events else None,
        "rejected": rejected_record(result.rejected_value),
        "held": result.held,
    }
    if not events:
        del document["events"]
    if result.context is not None:
        document["context"] = result.context.record()
    if result.continues is not None:
        document["continues"] = result.continues
    if result.run_id is not None:
        document["run_id"] = result.run_id
    if result.conversation_id is not None:  # a conversation's turn
        document["conversation_id"], document["turn"] = result.conversation_id, result.turn
    if result.summary is not None:  # carried in from the turn before
        document["summary"] = {"fold": result.summary[0], "text": result.summary[1]}
    if result.agents is not None:  # a run with handoffs: the team, and the agent at the end
        document["agents"], document["agent"] = result.agents.as_json(), result.agent
    if result.output_schema_json is not None:  # optional: a run with a typed output
        document["output_schema"] = orjson.loads(result.output_schema_json)
    return document


def event_record(event: Transition) -> dict[str, Any]:
    record: dict[str, Any] = {
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
        "exception": exception_record(event.exception),
        "appended": event.appended,
        "usage": None if event.usage is None else event.usage._asdict(),
        "at": event.at,
        "took": event.took,
        "pending": [call.record() for call in event.pending],
        "decisions": [decision_record(key, decision) for key, decision in event.decisions],
        "started": list(event.started),
        "input": None if event.input_json is None else orjson.loads(event.input_json),
        **({} if event.context is None else {"context": event.context.record()}),
    }
    if event.wait is not None:  # optional fields: written only when used
        record["wait"] = event.wait
    if event.model is not None:
        record["model"] = event.model
    if event.partial_text is not None:  # optional: written only when a stream was cut off
        record["partial_text"] = event.partial_text
    if event.agent is not None:  # optional: a run with handoffs
        record["agent"] = event.agent
    return record


def rejected_record(value: object) -> dict[str, Any] | None:
    """A rejected reply as the run file keeps it: ``{"json": ...}``, ``{"repr", "problem"}``."""
    if value is None:
        return None
    if isinstance(value, NotJSON):
        return {"repr": value.text, "problem": value.problem}
    return {"json": value}  # the engine keeps only its own decoded copy of a JSON reply


def rejected_value(record: dict[str, Any] | None) -> object:
    """The rejected reply a ``rejected_record`` (checked in shape) keeps."""
    if record is None:
        return None
    return NotJSON(record["repr"], record["problem"]) if "repr" in record else record["json"]


def dumps(value: object, option: int = 0) -> bytes:
    """``orjson.dumps`` past its depth limit: what it cannot reach goes in as fragments.

    A run holds messages as deep as orjson writes them, and the document puts
    them a few levels further down (``$.events[i].appended[j]``).
    """
    try:
        return orjson.dumps(value, option=option)
    except orjson.JSONEncodeError:
        if isinstance(value, dict):
            value = {key: orjson.Fragment(dumps(item)) for key, item in value.items()}
        elif isinstance(value, list):
            value = [orjson.Fragment(dumps(item)) for item in value]
        else:
            raise
        return orjson.dumps(value, option=option)


def exception_record(exc: BaseException | None) -> dict[str, str] | None:
    return None if exc is None else exception_content(exc)
