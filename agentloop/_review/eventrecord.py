"""An event's every field as JSON, what a record keeps of a decision and of a rejected reply.

A run file and a ledger keep less of an event (``runencode.event_fields``:
only what it adds, the rest made again by the replay); ``event_record``
spells out every field, where a replayed event is compared with a saved one.
"""

from __future__ import annotations

from typing import Any

import orjson

from agentloop._core.approval import Decision
from agentloop._core.json import exception_content
from agentloop._core.replay import Mismatch
from agentloop._core.values import NotJSON, Transition

__all__ = [
    "decision_of",
    "event_record",
    "exception_record",
    "rejected_record",
]


def event_record(event: Transition) -> dict[str, Any]:
    """Every field of ``event``, as JSON: what the replay compares, field by field."""
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
        "decisions": [
            {"call_id": call_id, **decision.record()} for call_id, decision in event.decisions
        ],
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


def decision_of(record: dict[str, Any], where: str) -> Decision:
    """The decision a record (checked in shape) keeps; ``Mismatch`` at ``where`` if none."""
    try:
        return Decision(**{key: value for key, value in record.items() if key != "call_id"})
    except TypeError as exc:  # a denial with no reason
        raise Mismatch(where, "approve() or deny(reason), as decisions", str(exc)) from None


def rejected_record(value: object) -> dict[str, Any] | None:
    """A rejected reply as a ledger keeps it: ``{"json": ...}``, ``{"repr", "problem"}``."""
    if value is None:
        return None
    if isinstance(value, NotJSON):
        return {"repr": value.text, "problem": value.problem}
    return {"json": value}  # the engine keeps only its own decoded copy of a JSON reply


def exception_record(exc: BaseException | None) -> dict[str, str] | None:
    return None if exc is None else exception_content(exc)
