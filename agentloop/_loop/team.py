"""A run's team: every agent reachable by handoffs, and what its driver calls.

The engine decides when a handoff is taken (``_core/rows/handoff.py``) and
which agent is in force (``engine.agent``); here the Loop finds its team,
checks it, and gives the driver one model and one dispatch that read the
agent in force at each request: that agent's model, its system prompt in
place of the first message's, and its tools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic

from agentloop._core.agents import Agents
from agentloop._core.values import OutputT
from agentloop._drivers.callbacks import Model, is_async
from agentloop._loop.fallback import model_name
from agentloop._loop.settings import checked_name, specs_of
from agentloop._tools.registry import ToolRegistry, reviewing

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from agentloop._core.engine import Engine
    from agentloop._loop.loop import Loop

__all__ = [
    "Handoff",
    "Handoffs",
    "agent_asked",
    "checked_handoff",
    "filters_of",
    "team_dispatch",
    "team_model",
    "team_of",
    "team_record",
]


class Handoff(Generic[OutputT]):
    """A handoff to ``target`` (a ``Loop``), offered to the model as the tool ``tool_name``."""

    __slots__ = ("description", "filter", "target", "tool_name")

    def __init__(
        self,
        target: Loop[OutputT, Any],
        tool_name: str,
        description: str,
        filter: Callable[[list[dict[str, Any]], str], list[dict[str, Any]]] | None = None,
    ) -> None:
        self.target, self.tool_name, self.description = target, tool_name, description
        #: What the next agent is sent: ``filter(history, to)``'s view (None: the history).
        self.filter = filter

    def __repr__(self) -> str:
        return f"handoff({self.target.name!r}, tool_name={self.tool_name!r})"

    def spec(self) -> dict[str, Any]:
        """The tool's spec, as a model is offered it: no arguments."""
        return {
            "name": self.tool_name,
            "description": self.description,
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        }


class Handoffs:
    """A Loop as an agent: its name, and its handoffs (``Loop(name=, handoffs=)``)."""

    name: str
    handoffs: list[Handoff[Any]]

    def __init__(self, name: str | None, model: object, handoffs: Iterable[Handoff[Any]]) -> None:
        self.name = model_name(model) if name is None else checked_name(name)
        self.handoffs = []
        for given in handoffs:
            self.add_handoff(given)

    def add_handoff(self, given: Handoff[Any]) -> None:
        """Offer the model a handoff to another agent too (a cycle is made this way)."""
        self.handoffs.append(checked_handoff(self, given))  # type: ignore[arg-type]  # a Loop

    def _with_handoffs(self, tools: Callable[[], list[Any]]) -> Callable[[], list[Any]]:
        """The specs a model is offered: its tools', then its handoffs' (read at each request)."""
        return lambda: [*tools(), *(given.spec() for given in self.handoffs)]


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
    named = [h.target for h in loop.handoffs if h.tool_name == given.tool_name]
    if named and named[0] is not target and named[0].name == target.name:
        raise ValueError(
            f"expected the agents {loop.name!r} hands to to have different names, got two "
            f"named {target.name!r} (a Loop without name= takes its model's name): pass "
            "name= to Loop(...)"
        )
    if named or given.tool_name in _tool_names(loop):
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


def team_of(loop: Loop[Any, Any]) -> tuple[Agents, dict[str, Loop[Any, Any]]] | None:
    """The team a run of ``loop`` has: every agent reachable by handoffs, by name; None: none.

    Refuses two agents of one name, a fallback model, and tools with policies
    (a team's review is not built yet), each naming the agent.
    """
    if not loop.handoffs:
        return None
    found: dict[str, Loop[Any, Any]] = {}
    waiting = [loop]
    while waiting:
        agent = waiting.pop(0)
        known = found.get(agent.name)
        if known is agent:
            continue
        if known is not None:
            raise ValueError(
                f"expected the agents of a team to have different names, got two named "
                f"{agent.name!r}: pass name= to Loop(...)"
            )
        found[agent.name] = agent
        waiting.extend(given.target for given in agent.handoffs)
        if agent._model_names:
            raise ValueError(
                f"expected each agent of a team to have one model, got fallback models "
                f"for {agent.name!r}: a team with fallback models is not supported yet"
            )
        if is_async(agent._bound_model) is not is_async(loop._bound_model):
            raise TypeError(
                f"expected the models of a team to be all plain or all async def, got a mix "
                f"({loop.name!r} and {agent.name!r}): one driver asks them all"
            )
        if loop.budget.on_exhausted != agent.budget.on_exhausted:
            raise ValueError(
                f"expected the agents of a team to share on_exhausted, got "
                f"{loop.budget.on_exhausted!r} for {loop.name!r} and "
                f"{agent.budget.on_exhausted!r} for {agent.name!r}: each agent's model is bound "
                "for the wrap-up step (tools disabled) by its own Loop"
            )
        if loop.context is not None and any(given.filter for given in agent.handoffs):
            raise ValueError(
                f"expected a team under a context policy to have no handoff filters, got one "
                f"in the handoffs of {agent.name!r}: a filter's view and a context policy "
                "cannot be combined yet"
            )
        if reviewing(agent.dispatcher) is not None:
            raise ValueError(
                f"expected the agents of a team to have tools without policies, got policies "
                f"in the tools of {agent.name!r}: a team's approval is not supported yet"
            )
    agents = Agents(
        loop.name,
        {
            name: {h.tool_name: h.target.name for h in agent.handoffs}
            for name, agent in found.items()
        },
        frozenset(filters_of(found)),
    )
    return agents, found


def filters_of(found: dict[str, Loop[Any, Any]]) -> dict[tuple[str, str], Callable[..., Any]]:
    """Each handoff filter of a team, by ``(agent, tool)``."""
    return {
        (name, given.tool_name): given.filter
        for name, agent in found.items()
        for given in agent.handoffs
        if given.filter is not None
    }


def team_record(loop: Loop[Any, Any]) -> dict[str, Any] | None:
    """What a durable run's header keeps of the team: the handoffs and each agent's tools."""
    team = team_of(loop)
    if team is None:
        return None
    agents, found = team
    tools = {
        name: {t.name: t.parameters for t in agent.dispatcher}
        if isinstance(agent.dispatcher, ToolRegistry)
        else type(agent.dispatcher).__qualname__
        for name, agent in found.items()
    }
    return {**agents.as_json(), "tools": tools, "systems": {n: a.system for n, a in found.items()}}


def team_model(found: dict[str, Loop[Any, Any]], engine: Engine) -> Model:
    """The model a driver calls for a team's run: the agent in force's, with its system prompt."""
    first = next(iter(found.values()))
    if is_async(first._bound_model):

        async def ask_async(history: list[dict[str, Any]], **options: Any) -> object:
            agent = found[engine.agent or ""]
            return await agent._bound_model(_as_seen(agent, history), **options)  # type: ignore[misc]

        return ask_async

    def ask(history: list[dict[str, Any]], **options: Any) -> object:
        return agent_asked(found[engine.agent or ""], history, options)

    return ask


def agent_asked(agent: Loop[Any, Any], history: list[dict[str, Any]], options: Any) -> object:
    """What ``agent``'s (plain) model answers: the history with its own system prompt."""
    return agent._bound_model(_as_seen(agent, history), **options)


def _as_seen(agent: Loop[Any, Any], history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history as ``agent`` sees it: its own system prompt in place of the first message's."""
    if history and history[0].get("kind") == "system":
        history = history[1:]
    return history if agent.system is None else [{"kind": "system", "text": agent.system}, *history]


def team_dispatch(
    found: dict[str, Loop[Any, Any]],
    engine: Engine,
    dispatch_of: Callable[[Loop[Any, Any]], Callable[..., object]],
) -> Callable[..., object]:
    """One dispatch for a team's run: each call goes to the agent in force's tools."""
    made = {name: dispatch_of(agent) for name, agent in found.items()}

    def dispatch(call: dict[str, Any], **options: Any) -> object:
        return made[engine.agent or ""](call, **options)

    return dispatch
