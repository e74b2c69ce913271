"""Test helpers: a scripted model, a recording tool, and a path recorder."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    import agentloop

Message = dict[str, Any]


def call(call_id: str, name: str = "add", **arguments: Any) -> Message:
    """A well-formed call reply."""
    return {"kind": "call", "id": call_id, "name": name, "arguments": arguments}


def final(text: str = "done") -> Message:
    """A well-formed final reply."""
    return {"kind": "final", "text": text}


@attrs.define
class Script:
    """A deterministic model: returns (or raises) its replies in order.

    Each entry is a reply, an exception instance to raise, or a callable that
    receives the history and returns the reply. It records every history it saw.
    """

    replies: list[object]
    seen: list[list[Message]] = attrs.field(factory=list)

    def __call__(self, history: list[Message]) -> object:
        self.seen.append(history)
        if not self.replies:
            raise AssertionError("the script ran out of replies")
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply):
            return reply(history)
        return reply


@attrs.define
class Recorder:
    """A tool handler that records each call's arguments and returns ``result``."""

    result: Callable[..., Any] = lambda **kwargs: sum(kwargs.values())
    calls: list[dict[str, Any]] = attrs.field(factory=list)

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return self.result(**kwargs)


def drive(run: agentloop.Run) -> list[tuple[str, str]]:
    """Step ``run`` to the end; return the (source, dest) path taken."""
    return [(t.source.value, t.dest.value) for t in run]


def kinds(transcript: list[Message]) -> list[str]:
    """The transcript's message kinds, with the status of tool results."""
    return [
        f"tool_result:{m['status']}" if m["kind"] == "tool_result" else m["kind"]
        for m in transcript
    ]
