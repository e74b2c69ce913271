"""A ``Loop``'s runs handed to their drivers: ``Run`` (synchronous) or ``AsyncRun`` (asyncio).

Each takes a fresh engine and the Loop's model (or the fallback model the
run has come to), its tools' dispatch (recorded for a durable run), their
policies, listeners and timeouts.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import orjson
from typing_extensions import TypeVar

from agentloop._core.agents import with_filters
from agentloop._core.children import Children
from agentloop._core.output_schema import OutputSchema
from agentloop._core.table import State
from agentloop._core.values import CancelToken, RunResult
from agentloop._drivers.asyncio import AsyncRun
from agentloop._drivers.awaiter import Awaiter, awaiting
from agentloop._drivers.callbacks import TokenCancelled, is_async
from agentloop._drivers.child_waits import WaitingChild, end_waiting
from agentloop._drivers.run_context import CallScope, ain_context_reviews, in_context_reviews
from agentloop._drivers.sync import Run
from agentloop._drivers.tool_calls import asyncio_dispatch
from agentloop._durable import recording
from agentloop._durable.journal import idempotent_tools
from agentloop._loop.child_runs import recorded_begun, recorded_children, recorded_waiting
from agentloop._loop.fallback import per_run
from agentloop._loop.output_checks import acheck, check
from agentloop._loop.settings import async_policies
from agentloop._loop.team import filters_of, team_dispatch, team_model, team_of
from agentloop._review.runstory import reopen
from agentloop._tools.registry import ToolRegistry, reviewing

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from agentloop._core.engine import Engine
    from agentloop._drivers.callbacks import Model
    from agentloop._loop.loop import Loop

__all__ = ["async_run", "children_of", "model_of", "sync_run"]

_O = TypeVar("_O")
_NONE: Final[Mapping[str, Any]] = MappingProxyType({})


def sync_run(
    loop: Loop[_O],
    engine: Engine,
    registry: ToolRegistry | None,
    cancel: CancelToken | None,
    deps: object = None,
    children: Mapping[str, RunResult[Any]] = _NONE,
) -> Run[_O]:
    """A synchronous run of ``engine``, reviewed by ``registry`` (``Loop._sync_driver``'s answer).

    Its calls and their reviews run in their contexts (``call_scope``), which hold ``deps``
    and ``children``, the child runs of a resumed run's agent tools (``children_of``).

    Its ``Awaiter`` awaits what is async: an async tool's call (through the
    registry's ``adispatch``), an awaitable outcome, async policies.
    """
    awaiter = Awaiter(cancel)
    dispatch = _sync_dispatch(loop, awaiter, loop)
    team = team_of(loop)
    if team is not None:  # each call goes to the tools of the agent in force
        with_filters(engine, filters_of(team[1]))
        dispatch = team_dispatch(
            team[1], engine, lambda agent: _sync_dispatch(agent, awaiter, loop)
        )
    if isinstance(engine, recording.DurableEngine):
        dispatch = recording.sync_dispatch(engine, dispatch, _idempotent(team, engine))
    scope = call_scope(loop, engine, deps, cancel, children)
    if loop.output_validators:  # each final the schema accepts is checked by them first
        engine.output_check = check(loop.output_validators, scope, awaiter)
    review: Callable[[dict[str, Any]], Any] | None = None
    if registry is not None:
        areview = registry.areview
        review = (  # a batch's policies run to the end, as under asyncio: not cancellable
            (lambda call: awaiter(areview(call), cancellable=False))
            if async_policies(registry)
            else registry.review
        )
        review = in_context_reviews(review, scope)
        if isinstance(engine, recording.DurableEngine):
            review = recording.sync_review(engine, review)
    return Run(
        engine,
        model_of(loop, engine),
        dispatch,
        loop.listeners,
        review,
        awaiter=awaiter,
        model_timeout=loop.model_timeout,
        scope=scope,
    )


def _sync_dispatch(agent: Loop, awaiter: Awaiter, loop: Loop) -> Callable[..., object]:
    """``agent``'s tools as the synchronous driver of ``loop``'s run calls them, awaiting any."""
    dispatcher = agent.dispatcher
    dispatch: Callable[..., object] = dispatcher.dispatch
    if isinstance(dispatcher, ToolRegistry):
        if dispatcher.async_tools:
            dispatch = awaiting(dispatcher.dispatch_or_adispatch, awaiter, loop.tool_timeout)
    else:  # a dispatcher of the user's may answer with an awaitable
        dispatch = awaiting(dispatch, awaiter, loop.tool_timeout)
    return dispatch


def _adispatch(agent: Loop, loop: Loop) -> Callable[..., Awaitable[object]]:
    """``agent``'s tools as ``loop``'s asyncio run calls them, with ``loop``'s timeout and threads.

    As the synchronous driver applies ``loop``'s ``tool_timeout`` to every agent's tools.
    """
    if agent is loop:
        return loop._adispatch
    return asyncio_dispatch(
        agent.dispatcher, to_thread=loop.to_thread, tool_timeout=loop.tool_timeout
    )


def _idempotent(
    team: tuple[object, dict[str, Loop]] | None, engine: Engine
) -> Callable[[], frozenset[str]] | None:
    """For a team's run, the idempotent tools of the agent in force, which runs each call.

    A call a crash cut runs again if its own agent's tool is idempotent (an agent tool
    resumes its child so), not by the starting agent's tools. ``None``: no team.
    """
    if team is None:
        return None
    tools = {name: idempotent_tools(agent.dispatcher) for name, agent in team[1].items()}
    return lambda: tools[engine.agent or ""]


def model_of(loop: Loop, engine: Engine) -> Model:
    """What the driver calls: the model, the fallback model the run has come to, or an agent's."""
    team = team_of(loop)
    if team is not None:
        return team_model(team[1], engine)
    bound = loop._bound_models
    if len(bound) == 1:  # one model: nothing to choose, nothing made per run
        return loop._bound_model
    return per_run(bound, engine, is_async(bound[0]))


def async_run(
    loop: Loop[_O],
    engine: Engine,
    cancel: CancelToken | None,
    deps: object = None,
    children: Mapping[str, RunResult[Any]] = _NONE,
) -> AsyncRun[_O]:
    """An asyncio run of ``engine``, reviewed by the tools' policies, if any (``sync_run``'s)."""
    dispatch = loop._adispatch
    team = team_of(loop)
    if team is not None:  # each call goes to the tools of the agent in force
        with_filters(engine, filters_of(team[1]))
        dispatch = team_dispatch(team[1], engine, lambda agent: _adispatch(agent, loop))  # type: ignore[assignment]
    registry = reviewing(loop.dispatcher)
    if isinstance(engine, recording.DurableEngine):
        dispatch = recording.async_dispatch(engine, dispatch, _idempotent(team, engine))
    scope = call_scope(loop, engine, deps, cancel, children)
    if loop.output_validators:  # each final the schema accepts is checked by them first
        engine.output_check = acheck(loop.output_validators, scope)
    return AsyncRun(
        engine,
        model_of(loop, engine),
        dispatch,
        cancel=cancel,
        model_timeout=loop.model_timeout,
        to_thread=loop.to_thread,
        max_concurrency=loop.max_concurrency,
        listeners=loop.listeners,
        review=None if registry is None else _areview(engine, registry, scope),
        scope=scope,
    )


def _areview(engine: Engine, registry: ToolRegistry, scope: CallScope) -> Any:
    """The asyncio driver's review: the policies, in each call's context (``async_review``)."""
    review = ain_context_reviews(registry.areview, scope)
    if isinstance(engine, recording.DurableEngine):
        return recording.async_review(engine, review)
    return review


def call_scope(
    loop: Loop[Any],
    engine: Engine,
    deps: object,
    cancel: CancelToken | None,
    children: Mapping[str, RunResult[Any]] = _NONE,
) -> CallScope:
    """What each call's context holds: ``deps``; the run's id (its key's) and ledger if durable.

    ``children``: the results of the child runs the run's agent tools ran so
    far (a resumed run's): a call that waited on its child resumes it from there.
    A resumed durable run's start with those of the agent calls it had answered,
    read from its ledger.
    """
    if isinstance(engine, recording.DurableEngine):
        scope = CallScope(engine, deps, engine.run_id, cancel, engine.journal.ledger)
        if engine.events():
            scope.children.update(recorded_children(loop, engine))
            scope.waiting.update(recorded_waiting(loop, engine))
            scope.waiting.update(recorded_begun(loop, engine))  # ended unless run again
        # A waiting child's end is committed before its parent's. (Not through ``scope``,
        # which holds the engine: a cycle would keep a dropped run's claim until collected.)
        children_of_run, waiting = scope.children, scope.waiting
        engine.before_end(lambda: end_waiting(children_of_run, waiting), waiting.clear)
    else:
        scope = CallScope(engine, deps, None, cancel)
        if children:  # a resumed result's
            scope.waiting.update(waiting_children(children))
    if children:
        scope.children.update(children)
    return scope


def waiting_children(children: Mapping[str, RunResult[Any]]) -> dict[str, WaitingChild]:
    """The children among ``children`` that wait for a person, to end if their parent ends first."""
    return {
        call_id: SavedChild(child)
        for call_id, child in children.items()
        if child.status is State.AWAITING_APPROVAL
    }


class SavedChild:
    """A waiting child that a resumed run holds as its result (``WaitingChild``).

    If the run ends first (cancelled), the child ends ``cancelled`` too:
    its events replayed into an engine, then interrupted, as a live child's
    driver ends it; its own waiting children first.
    """

    __slots__ = ("_result",)

    def __init__(self, result: RunResult[Any]) -> None:
        self._result = result

    def _end_cancelled(self) -> RunResult[Any]:
        result = self._result
        saved = result.output_schema_json
        output = None if saved is None else OutputSchema(orjson.loads(saved))
        engine = reopen(result, CancelToken(), output)
        children = dict(result.children)
        end_waiting(children, waiting_children(children))
        engine.interrupted(TokenCancelled("its parent run ended while it waited for a person"))
        return engine.result()._replace(children=Children(children))


def children_of(run: object) -> Mapping[str, RunResult[Any]]:
    """The child runs of a saved result's agent tools (a run given by id: none in memory).

    A result that waits on a child's calls must hold that child (``ValueError``).
    """
    if not isinstance(run, RunResult):
        return _NONE
    missing = sorted({p.path[0] for p in run.pending if p.path and p.path[0] not in run.children})
    if missing:
        raise ValueError(
            f"the run waits on the child runs of calls {missing}, which this result does not "
            "hold: resume it from the RunResult the run returned (or its run file), whose "
            "children hold them"
        )
    return run.children
