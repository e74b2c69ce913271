"""An event as a ledger keeps it: every field, with what it was given, and back.

A run file keeps less (``runshape.py``: only what an event adds, the rest made
again by the replay). A ledger's records keep each event whole, checked
against ``runfile_schema.EVENT_RECORD`` and read back here.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from agentloop._core.approval import Decision, DecisionKey, PendingCall
from agentloop._core.context_policy import Seen
from agentloop._core.json import exception_content
from agentloop._core.replay import Mismatch
from agentloop._core.table import Guard, State, Trigger
from agentloop._core.values import NotJSON, RecordedException, Transition, Usage
from agentloop._review.runshape import dumps

__all__ = ["event_record", "exception_record", "load_event", "rejected_record", "rejected_value"]


def event_record(event: Transition) -> dict[str, Any]:
    """``event`` as a ledger keeps it; ``load_event`` reads it back."""
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


# Names to members by dict: calling an Enum to look one up costs a microsecond.
_STATES: Final = {state.value: state for state in State}
_TRIGGERS: Final = {trigger.value: trigger for trigger in Trigger}
_GUARDS: Final[dict[str | None, Guard | None]] = {None: None, **{g.value: g for g in Guard}}


def decision_of(record: dict[str, Any], where: str) -> Decision:
    """The decision a record (checked in shape) keeps; ``Mismatch`` at ``where`` if none."""
    try:
        return Decision(**{key: value for key, value in record.items() if key != "call_id"})
    except TypeError as exc:  # a denial with no reason
        raise Mismatch(where, "approve() or deny(reason), as decisions", str(exc)) from None


def _key(call_id: str | list[str]) -> DecisionKey:
    """A decision's key as a record keeps it: a call id, or a child's call's path (a list)."""
    return call_id if type(call_id) is str else tuple(call_id)


def load_event(index: int, event: dict[str, Any]) -> Transition:
    """The event a ledger's ``events[index]`` holds (checked in shape)."""
    exception = event["exception"]
    where = f"$.events[{index}].decisions"
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
        tuple(dumps(message) for message in event["appended"]),
        None if event["usage"] is None else Usage(**event["usage"]),
        event["at"],
        event["took"],
        # The schema's depth limit leaves arguments shallow enough for orjson to write.
        tuple(PendingCall.from_record(call) for call in event["pending"]),
        tuple((_key(call["call_id"]), decision_of(call, where)) for call in event["decisions"]),
        tuple(event["started"]),
        None if event["input"] is None else dumps(event["input"]),
        None if event.get("context") is None else Seen.from_record(event["context"]),
        event.get("wait"),
        event.get("model"),
        event.get("partial_text"),
        event.get("agent"),
    )


def rejected_record(value: object) -> dict[str, Any] | None:
    """A rejected reply as a ledger keeps it: ``{"json": ...}``, ``{"repr", "problem"}``."""
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


def exception_record(exc: BaseException | None) -> dict[str, str] | None:
    return None if exc is None else exception_content(exc)
