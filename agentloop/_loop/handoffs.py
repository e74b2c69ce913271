"""``agentloop.handoff``: a handoff to another ``Loop``, the next agent.

``handoff(target)`` is what ``Loop(handoffs=[...])`` and ``add_handoff`` take:
the model is offered a tool ``transfer_to_<name>`` for it. The engine decides
(``_core/rows/handoff.py``); ``team.py`` holds a Loop's handoffs, finds a
run's team and gives its driver the agent in force's model and tools.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from agentloop._core.values import OutputT
from agentloop._loop.loop import Loop
from agentloop._loop.team import Handoff

__all__ = ["handoff"]


def handoff(
    target: Loop[OutputT, Any],
    *,
    description: str | None = None,
    tool_name: str | None = None,
    filter: Callable[[list[dict[str, Any]], str], list[dict[str, Any]]] | None = None,
) -> Handoff[OutputT]:
    """A handoff to ``target``: the model is offered ``transfer_to_<target.name>`` for it.

    Called alone in its reply, the call is taken: the run goes on with
    ``target``'s model, system prompt and tools (and its handoffs), under the
    same budgets and record. ``description`` tells the model when to hand
    off (by default, ``"Hand the conversation to <name>."``). ``filter``, if
    given, is called ``filter(history, to)`` (a copy of the history, and the
    name of the agent handed to) and answers what the next agent is sent in
    place of the history: its answer is recorded on the handoff's event, so
    a replay does not call it again. ``agentloop.handoff_filters`` has
    ready-made ones (``without_tools``, ``last_turns(n)``).
    """
    if not isinstance(target, Loop):
        raise TypeError(f"expected target to be a Loop, got {type(target).__name__}")
    name = (
        tool_name if tool_name is not None else "transfer_to_" + re.sub(r"[^\w-]", "_", target.name)
    )
    if type(name) is not str or not name:
        raise TypeError(f"expected tool_name to be a non-empty str, got {name!r:.80}")
    said = description if description is not None else f"Hand the conversation to {target.name}."
    if type(said) is not str:
        raise TypeError(f"expected description to be a str, got {type(said).__name__}")
    if filter is not None and not callable(filter):
        raise TypeError(f"expected filter to be a callable or None, got {type(filter).__name__}")
    return Handoff(target, name, said, filter)
