"""What the contract's assertions read from a run, and how their failures are worded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import attrs

from agentloop._core.table import State
from agentloop._core.values import Budget, RunResult, Transition
from agentloop._drivers.asyncio import AsyncRun
from agentloop._drivers.sync import Run

__all__ = [
    "ContractViolation",
    "Message",
    "RunLike",
    "calls_made_by",
    "describe_message",
    "event_location",
    "run_record",
    "short_repr",
]

Message = dict[str, Any]


class ContractViolation(AssertionError):
    """A run broke the contract: ``where`` it did, what was ``expected`` and what was ``found``."""

    def __init__(self, where: str, expected: str, found: str) -> None:
        super().__init__(f"{where}: expected {expected}, got {found}")
        self.where, self.expected, self.found = where, expected, found


@attrs.frozen
class _Record:
    """What the assertions read, from a result or a run in progress."""

    transcript: list[Message]
    events: Sequence[Transition]
    steps: int
    calls: int
    budget: Budget
    status: State


RunLike = RunResult | Run | AsyncRun


def run_record(run: object) -> _Record:
    if isinstance(run, Run | AsyncRun):
        status = run.state  # a run in progress has no result yet, but the same record
    elif isinstance(run, RunResult):
        status = run.status
    else:
        raise TypeError(f"expected a RunResult, Run or AsyncRun, got {type(run).__name__}")
    return _Record(
        transcript=run.transcript,
        events=run.events,
        steps=run.steps,
        calls=run.calls,
        budget=run.budget,
        status=status,
    )


_SHOWN: Final = 120


def short_repr(value: object) -> str:
    """A value for a failure message, cut to a readable length."""
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def describe_message(message: object) -> str:
    if not isinstance(message, dict):
        return f"a {type(message).__name__} {short_repr(message)}"
    kind = message.get("kind")
    if kind in ("call", "tool_result"):
        return f"a {kind} with id {message.get('id')!r}"
    return f"a {kind!r} message" if isinstance(kind, str) else f"a message {short_repr(message)}"


def event_location(index: int, event: Transition) -> str:
    return f"events[{index}] ({event.source.value} -> {event.dest.value} on {event.trigger.value})"


def calls_made_by(message: object) -> list[dict[str, Any]]:
    """The calls a ``call`` or ``calls`` message makes, in emission order (else none)."""
    if not isinstance(message, dict):
        return []
    if message.get("kind") == "call":
        return [message]
    calls = message.get("calls") if message.get("kind") == "calls" else None
    return [made for made in calls if isinstance(made, dict)] if isinstance(calls, list) else []
