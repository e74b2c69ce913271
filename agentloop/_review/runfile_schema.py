"""A run file's JSON Schema (Draft 2020-12): each field stated once, as data.

Optional fields (a context policy's, a typed output's, streaming's) are added
to the schema after it, so every file written without them loads as before.
"""

from __future__ import annotations

from typing import Any, Final

import jsonschema_rs

from agentloop._core.table import Guard, State, Trigger

__all__ = ["FORMAT", "SCHEMA", "VALIDATOR", "VERSION"]

FORMAT: Final = "agentloop.run"
VERSION: Final = 5

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

#: The JSON Schema (Draft 2020-12) of a run file (version ``VERSION``).
SCHEMA: Final = _record(
    format={"const": FORMAT},
    version={"const": VERSION},
    status=_enum(State),
    output=_STR_OR_NULL,
    reason=_STR_OR_NULL,
    error=_STR_OR_NULL,
    steps=_COUNT,
    calls=_COUNT,
    budget={
        **_record(
            max_steps=_COUNT,
            max_calls=_COUNT,
            max_total_tokens={"oneOf": [{"type": "null"}, _COUNT]},
        ),
        # Optional (written only when not the default): typed output, loop guard, wrap-up.
        "properties": {
            "max_steps": _COUNT,
            "max_calls": _COUNT,
            "max_total_tokens": {"oneOf": [{"type": "null"}, _COUNT]},
            "max_output_retries": _COUNT,
            "max_identical_calls": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
            "on_exhausted": {"enum": ["stop", "answer"]},
        },
    },
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
# Optional: the JSON Schema of a typed output (``Loop(output=T)``); its ``output`` is the JSON text.
SCHEMA["properties"]["output_schema"] = {"type": ["object", "boolean"]}

# Optional fields (a context policy's, agentloop.context): absent from runs without one.
_SPAN: Final = {"type": "array", "items": _COUNT, "minItems": 2, "maxItems": 2}
SCHEMA["properties"]["context"] = _record(
    policy={"enum": ["keep_last", "summarise"]},
    tokens=_COUNT,
    counter=_STR,
    keep_tokens=_COUNT,
)
SCHEMA["properties"]["events"]["items"]["properties"]["context"] = _record(
    kept={"type": "array", "items": _SPAN},
    summary={"oneOf": [{"type": "null"}, _SPAN]},
    tokens=_COUNT,
)
# Optional fields, written only when used: a continued run's links, a retry's wait, a model's name.
SCHEMA["properties"]["continues"] = _STR
SCHEMA["properties"]["run_id"] = _STR
# A conversation's turn (``run(..., after=)``): both, or neither.
SCHEMA["properties"]["conversation_id"] = _STR
SCHEMA["properties"]["turn"] = {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}
SCHEMA["dependentRequired"] = {"conversation_id": ["turn"], "turn": ["conversation_id"]}
#: The summary carried in from the turn before (``summarise``): the turns it folds, its text.
SCHEMA["properties"]["summary"] = _record(
    fold={"type": "integer", "minimum": 1, "maximum": 2**63 - 1}, text={"type": "string"}
)
SCHEMA["properties"]["events"]["items"]["properties"].update(
    wait={"type": "number", "minimum": 0}, model=_STR
)
#: The text a streaming reply had delivered when the run was cut off (streaming).
SCHEMA["properties"]["events"]["items"]["properties"]["partial_text"] = {"type": "string"}
#: A run with handoffs: the agent of each model's event and handoff, the team, and the last agent.
SCHEMA["properties"]["events"]["items"]["properties"]["agent"] = _STR
SCHEMA["properties"]["agent"] = _STR
SCHEMA["properties"]["agents"] = {"type": "object"}
#: A child run's call (an agent tool's), pending in its parent and decided there: its path.
_EVENT: Final = SCHEMA["properties"]["events"]["items"]["properties"]
for _field in ("pending", "decisions"):
    _EVENT[_field]["items"]["properties"]["path"] = {"type": "array", "items": _STR, "minItems": 1}

VALIDATOR: Final = jsonschema_rs.Draft202012Validator(SCHEMA)
