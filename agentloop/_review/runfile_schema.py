"""A run file's JSON Schema (Draft 2020-12): each field stated once, as data.

A run file's fields, and an event's, are required or optional: an optional
one is written only when it says something. A ledger's records hold events
of the same schema (``_durable/records.py``), each with its inputs.
"""

from __future__ import annotations

from typing import Any, Final

import jsonschema_rs

from agentloop._core.table import Guard, State, Trigger

__all__ = ["EVENT", "FORMAT", "SCHEMA", "VALIDATOR", "VERSION"]

FORMAT: Final = "agentloop.run"
VERSION: Final = 6

_STR: Final = {"type": "string"}
_STR_OR_NULL: Final = {"type": ["string", "null"]}
_COUNT: Final = {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}
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


# Tokens as a run file keeps them: [input, output, cached].
_TOKENS: Final = {"type": "array", "items": _COUNT, "minItems": 3, "maxItems": 3}
_EXCEPTION: Final = _record(type={"type": "string"}, message={"type": "string"})
_DECISION: Final = _record(
    allowed={"type": "boolean"}, reason={"type": "string"}, fingerprint=_STR_OR_NULL
)


def _fields(required: dict[str, Any], optional: dict[str, Any]) -> dict[str, Any]:
    """An object with the ``required`` fields, and the ``optional`` ones only when present."""
    return {
        "type": "object",
        "properties": {**required, **optional},
        "required": list(required),
        "additionalProperties": False,
    }


#: An event of a run file: its row, its times, and only what it adds (``runfile.py``).
EVENT: Final = _fields(
    {"on": _enum(Trigger)},
    {
        "if": _enum(Guard),
        "at": {"type": "number"},
        "took": {"type": "number", "minimum": 0},
        "started": {"type": "array", "items": _STR, "minItems": 1},
        "call": _STR,
        "input": {"description": "the reply or the content that came with the report"},
        "status": _STR,
        "not_json": _record(repr=_STR, problem=_STR),
        "exception": _EXCEPTION,
        "usage": _TOKENS,
        "asked": {"type": "object", "additionalProperties": _STR, "minProperties": 1},
        "decided": {"type": "object", "additionalProperties": _DECISION, "minProperties": 1},
        # A child run's calls (an agent tool's), pending here under their paths, and the
        # decisions about them by path: written whole, as no batch of this run holds them.
        "waits": {
            "type": "array",
            "minItems": 1,
            "items": _record(
                call_id=_STR,
                name=_STR,
                arguments={},
                reason=_STR,
                fingerprint=_STR,
                path={"type": "array", "items": _STR, "minItems": 1},
            ),
        },
        "decided_paths": {
            "type": "array",
            "minItems": 1,
            "items": _record(
                key={"type": "array", "items": _STR, "minItems": 2}, **_DECISION["properties"]
            ),
        },
        "problems": {"type": "array", "items": _STR},
        "wait": {"type": "number", "minimum": 0},
        "model": _STR,
        "partial_text": _STR,
    },
)
# An outcome's status comes with the outcome: both, or neither (the transcript holds them).
EVENT["dependentRequired"] = {"status": ["input"]}

#: The JSON Schema (Draft 2020-12) of a run file (version ``VERSION``).
SCHEMA: Final = _fields(
    {
        "format": {"const": FORMAT},
        "version": {"const": VERSION},
        "status": _enum(State),
        "output": _STR_OR_NULL,
        "steps": _COUNT,
        "calls": _COUNT,
        # The other limits only when not the default: tokens, typed output, loop guard, wrap-up.
        "budget": _fields(
            {"max_steps": _COUNT, "max_calls": _COUNT},
            {
                "max_total_tokens": {"oneOf": [{"type": "null"}, _COUNT]},
                "max_output_retries": _COUNT,
                "max_identical_calls": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
                "on_exhausted": {"enum": ["stop", "answer"]},
            },
        ),
        "input": _COUNT,
        "transcript": {"type": "array", "items": _MESSAGE},
        "events": {"type": "array", "minItems": 1, "items": EVENT},
    },
    {
        "reason": _STR,
        "error": _STR,
        "usage": _TOKENS,
        # A context policy's (agentloop.context): the policy the requests were fitted by.
        "context": _record(
            policy={"enum": ["keep_last", "summarise"]},
            tokens=_COUNT,
            counter=_STR,
            keep_tokens=_COUNT,
        ),
        # A typed output's JSON Schema (``Loop(output=T)``); its ``output`` is the JSON text.
        "output_schema": {"type": ["object", "boolean"]},
        # A continued run's links.
        "continues": _STR,
        "run_id": _STR,
        # A conversation's turn (``run(..., after=)``): both, or neither.
        "conversation_id": _STR,
        "turn": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
        # The summary carried in from the turn before (``summarise``): the turns it folds, its text.
        "summary": _record(
            fold={"type": "integer", "minimum": 1, "maximum": 2**63 - 1}, text={"type": "string"}
        ),
        # A run with handoffs: the team.
        "agents": {"type": "object"},
        # The child runs of its agent tools (``Loop.as_tool``), by call id: run files too.
        "children": {"type": "object", "additionalProperties": {"$ref": "#"}},
    },
)
SCHEMA["dependentRequired"] = {"conversation_id": ["turn"], "turn": ["conversation_id"]}

VALIDATOR: Final = jsonschema_rs.Draft202012Validator(SCHEMA)
