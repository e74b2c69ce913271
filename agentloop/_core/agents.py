"""A team of agents, as the engine knows it: who starts, and the handoffs each agent has.

``Agents`` is what a ``Loop`` with handoffs gives its engine: the name of the
agent a run starts with, and for each agent the handoff tools it is offered
(``transfer_to_billing``) with the agent each hands to. The rows of
``rows/handoff.py`` read it; which agent is in force is the record's (the
``agent`` of the last event that names one).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from agentloop._core.values import Transition

__all__ = ["Agents", "checked_agents"]


class Agents(NamedTuple):
    """The team of a run with handoffs: its first agent, and each agent's handoffs."""

    #: The agent a run starts with.
    start: str
    #: For each agent, by name: each handoff tool it is offered, and the agent it hands to.
    handoffs: Mapping[str, Mapping[str, str]]

    def in_turn(self, events: Iterable[Transition]) -> list[str]:
        """The agents in force over ``events``, in turn: the first, then each handed to."""
        named = [self.start, *(event.agent for event in events if event.agent is not None)]
        return [name for at, name in enumerate(named) if not at or named[at - 1] != name]

    def as_json(self) -> dict[str, Any]:
        """Plain JSON: ``{"start": name, "handoffs": {agent: {tool: target}}}``."""
        return {
            "start": self.start,
            "handoffs": {agent: dict(tools) for agent, tools in self.handoffs.items()},
        }

    @classmethod
    def from_json(cls, document: object) -> Agents:
        """The team ``as_json`` wrote; ``ValueError`` naming what is wrong otherwise."""
        if (
            type(document) is not dict
            or type(document.get("start")) is not str
            or type(document.get("handoffs")) is not dict
            or not all(
                type(tools) is dict and all(type(t) is str for t in (*tools, *tools.values()))
                for tools in document["handoffs"].values()
            )
        ):
            raise ValueError(
                'expected agents to be {"start": name, "handoffs": {agent: {tool: target}}}, '
                f"got {document!r:.120}"
            )
        return cls(document["start"], {a: dict(t) for a, t in document["handoffs"].items()})


def checked_agents(agents: object) -> Agents | None:
    """``agents`` if it is an ``Agents`` whose every handoff names an agent of the team."""
    if agents is None:
        return None
    if type(agents) is not Agents:
        raise TypeError(f"expected agents to be an Agents or None, got {type(agents).__name__}")
    team = set(agents.handoffs)
    unknown = {target for tools in agents.handoffs.values() for target in tools.values()} - team
    if agents.start not in team or unknown:
        raise ValueError(
            f"expected every agent named (start {agents.start!r}, the handoffs' targets) to "
            f"be one of the team {sorted(team)}, got {sorted(unknown | {agents.start} - team)}"
        )
    return agents
