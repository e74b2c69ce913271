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
    from collections.abc import Callable

    from agentloop._core.engine import Engine
    from agentloop._core.values import Transition

__all__ = ["Agents", "checked_agents", "with_filters"]


class Agents(NamedTuple):
    """The team of a run with handoffs: its first agent, and each agent's handoffs."""

    #: The agent a run starts with.
    start: str
    #: For each agent, by name: each handoff tool it is offered, and the agent it hands to.
    handoffs: Mapping[str, Mapping[str, str]]
    #: The handoffs that have a filter, as ``(agent, tool)``: the filter's view is recorded.
    filtered: frozenset[tuple[str, str]] = frozenset()

    def in_turn(self, events: Iterable[Transition]) -> list[str]:
        """The agents in force over ``events``, in turn: the first, then each handed to."""
        named = [self.start, *(event.agent for event in events if event.agent is not None)]
        return [name for at, name in enumerate(named) if not at or named[at - 1] != name]

    def as_json(self) -> dict[str, Any]:
        """Plain JSON: ``{"start": name, "handoffs": {agent: {tool: target}}}``."""
        found: dict[str, Any] = {
            "start": self.start,
            "handoffs": {agent: dict(tools) for agent, tools in self.handoffs.items()},
        }
        if self.filtered:
            found["filtered"] = sorted(map(list, self.filtered))
        return found

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
        filtered = document.get("filtered", [])
        if type(filtered) is not list or not all(
            type(pair) is list and len(pair) == 2 and all(type(n) is str for n in pair)
            for pair in filtered
        ):
            raise ValueError(f"expected filtered to be [[agent, tool], ...], got {filtered!r:.120}")
        handoffs = {a: dict(t) for a, t in document["handoffs"].items()}
        return cls(document["start"], handoffs, frozenset((a, t) for a, t in filtered))


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


def with_filters(engine: Engine, filters: Mapping[tuple[str, str], Callable[..., Any]]) -> None:
    """``engine`` asks these handoff filters, by ``(agent, tool)`` (the Loop's, never recorded).

    A replay needs none (it feeds back the views its record holds); a run
    that goes on live asks them.
    """
    engine._run.filters = dict(filters)  # the core's own: the engine takes its live parts here
