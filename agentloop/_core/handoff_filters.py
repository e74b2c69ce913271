"""Ready-made handoff filters: what the next agent of a team is sent (``handoff(filter=...)``).

A filter is called as ``filter(history, to)`` with a copy of the history up to
the handoff's call, and answers the view the next agent is sent. Each view
here keeps every call with its result, so the engine's check of a view
(every call answered) always accepts it.
"""

from __future__ import annotations

from collections.abc import Callable  # at run time: get_type_hints reads last_turns' return
from typing import Any

__all__ = ["last_turns", "without_tools"]

Message = dict[str, Any]


def without_tools(history: list[Message], to: str) -> list[Message]:
    """The history without its tool calls and their results: what was said, in order.

    System, user and final messages are kept as they are. A ``call`` message
    and every ``tool_result`` are dropped; a ``calls`` message is dropped too,
    but the text the model wrote beside its calls, if any, is kept as a
    ``final`` message in its place, so what the model said is not lost.
    """
    view: list[Message] = []
    for message in history:
        kind = message["kind"]
        if kind == "calls":
            if message.get("text"):
                view.append({"kind": "final", "text": message["text"]})
        elif kind not in ("call", "tool_result"):
            view.append(message)
    return view


def last_turns(n: int) -> Callable[[list[Message], str], list[Message]]:
    """A filter that keeps the system messages and the last ``n`` user turns, whole.

    A turn starts at a user message sent while no call is waiting for its
    result, and holds everything after it up to the next turn, so a call is
    never kept without its result. System messages from before the turns kept
    are kept too, in their places. A history of ``n`` turns or fewer is kept whole.
    """
    if type(n) is not int or n < 1:
        raise ValueError(f"expected last_turns(n) with n an int of 1 or more, got {n!r:.40}")

    def last_turns_filter(history: list[Message], to: str) -> list[Message]:
        starts = _turn_starts(history)
        if len(starts) <= n:
            return list(history)
        cut = starts[-n]
        return [m for m in history[:cut] if m["kind"] == "system"] + history[cut:]

    last_turns_filter.__doc__ = f"A handoff filter: the system messages and the last {n} turns."
    return last_turns_filter


def _turn_starts(history: list[Message]) -> list[int]:
    """Where each turn starts: each user message sent while no call is open."""
    starts, open_calls = [], set[str]()
    for index, message in enumerate(history):
        kind = message["kind"]
        if kind == "call":
            open_calls.add(message["id"])
        elif kind == "calls":
            open_calls.update(call["id"] for call in message["calls"])
        elif kind == "tool_result":
            open_calls.discard(message["id"])
        elif kind == "user" and not open_calls:
            starts.append(index)
    return starts
