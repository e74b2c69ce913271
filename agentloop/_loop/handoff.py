"""Handoffs: a ``Loop`` hands the run to another ``Loop``, the next agent, by a named row.

``handoff(target)`` is what ``Loop(handoffs=[...])`` and ``add_handoff`` take:
the model is offered a tool ``transfer_to_<name>`` for it. The engine decides
(``_core/rows/handoff.py``); ``team.py`` finds a run's team and gives its
driver the agent in force's model and tools. This module imports ``Loop``
(its signatures name it), so ``loop.py`` imports it last.
"""

from __future__ import annotations

import re
from typing import Any, Generic

from agentloop._core.values import OutputT
from agentloop._loop.loop import Loop
from agentloop._loop.settings import specs_of

__all__ = ["Handoff", "checked_handoff", "handoff"]


class Handoff(Generic[OutputT]):
    """A handoff to ``target`` (a ``Loop``), offered to the model as the tool ``tool_name``."""

    __slots__ = ("description", "target", "tool_name")

    def __init__(self, target: Loop[OutputT, Any], tool_name: str, description: str) -> None:
        self.target, self.tool_name, self.description = target, tool_name, description

    def __repr__(self) -> str:
        return f"handoff({self.target.name!r}, tool_name={self.tool_name!r})"

    def spec(self) -> dict[str, Any]:
        """The tool's spec, as a model is offered it: no arguments."""
        return {
            "name": self.tool_name,
            "description": self.description,
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        }


def handoff(
    target: Loop[OutputT, Any], *, description: str | None = None, tool_name: str | None = None
) -> Handoff[OutputT]:
    """A handoff to ``target``: the model is offered ``transfer_to_<target.name>`` for it.

    Called alone in its reply, the call is taken: the run goes on with
    ``target``'s model, system prompt and tools (and its handoffs), under the
    same budgets and record. ``description`` tells the model when to hand
    off (by default, ``"Hand the conversation to <name>."``).
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
    return Handoff(target, name, said)


def checked_handoff(loop: Loop[Any, Any], given: object) -> Handoff[Any]:
    """``given``, a ``Handoff`` whose target ``loop`` may share a run with; else an error."""
    if not isinstance(given, Handoff):
        raise TypeError(
            f"expected each handoff to be agentloop.handoff(loop, ...), got {type(given).__name__}"
        )
    target = given.target
    mine = None if loop.output is None else loop.output.schema
    theirs = None if target.output is None else target.output.schema
    if mine != theirs:
        raise TypeError(
            f"expected the agents of a team to share one output type: {loop.name!r} answers "
            f"{_said(mine)}, and {target.name!r}, which it hands to, {_said(theirs)}"
        )
    if loop.deps_type != target.deps_type:
        raise TypeError(
            f"expected the agents of a team to share one deps_type: {loop.name!r} has "
            f"{loop.deps_type!r}, and {target.name!r}, which it hands to, {target.deps_type!r}"
        )
    if given.tool_name in _tool_names(loop) or any(
        h.tool_name == given.tool_name for h in loop.handoffs
    ):
        raise ValueError(
            f"expected the handoff's tool name to be new to {loop.name!r}, got "
            f"{given.tool_name!r}, which it already has: pass tool_name= to handoff()"
        )
    return given


def _tool_names(loop: Loop[Any, Any]) -> set[str]:
    """The names of ``loop``'s tools, as its models are offered them."""
    return {str(spec.get("name")) for spec in specs_of(loop.dispatcher)()}


def _said(schema: object) -> str:
    return "text" if schema is None else f"the schema {schema!r:.120}"
