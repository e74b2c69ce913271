"""A ``Loop``'s runs handed to their drivers: ``Run`` (synchronous) or ``AsyncRun`` (asyncio).

Each takes a fresh engine and the Loop's model (or the fallback model the
run has come to), its tools' dispatch (recorded for a durable run), their
policies, listeners and timeouts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from typing_extensions import TypeVar

from agentloop._core.agents import with_filters
from agentloop._drivers.asyncio import AsyncRun
from agentloop._drivers.awaiter import Awaiter, awaiting
from agentloop._drivers.callbacks import is_async
from agentloop._drivers.run_context import CallScope, ain_context_reviews, in_context_reviews
from agentloop._drivers.sync import Run
from agentloop._durable import recording
from agentloop._loop.child_runs import recorded_children
from agentloop._loop.fallback import per_run
from agentloop._loop.settings import async_policies
from agentloop._loop.team import filters_of, team_dispatch, team_model, team_of
from agentloop._tools.registry import ToolRegistry, reviewing

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop._core.engine import Engine
    from agentloop._core.values import CancelToken
    from agentloop._drivers.callbacks import Model
    from agentloop._loop.loop import Loop

__all__ = ["async_run", "model_of", "sync_run"]

_O = TypeVar("_O")


def sync_run(
    loop: Loop[_O],
    engine: Engine,
    registry: ToolRegistry | None,
    cancel: CancelToken | None,
    deps: object = None,
) -> Run[_O]:
    """A synchronous run of ``engine``, reviewed by ``registry`` (``Loop._sync_driver``'s answer).

    Its calls and their reviews run in their contexts (``call_scope``), which hold ``deps``.

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
        dispatch = recording.sync_dispatch(engine, dispatch)
    scope = call_scope(loop, engine, deps, cancel)
    review: Callable[[dict[str, Any]], Any] | None = None
    if registry is not None:
        areview = registry.areview
        review = (  # a batch's policies run to the end, as under asyncio: not cancellable
            (lambda call: awaiter(areview(call), cancellable=False))
            if async_policies(registry)
            else registry.review
        )
        review = in_context_reviews(review, scope)
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
    loop: Loop[_O], engine: Engine, cancel: CancelToken | None, deps: object = None
) -> AsyncRun[_O]:
    """An asyncio run of ``engine``, reviewed by the tools' policies, if any (``sync_run``'s)."""
    dispatch = loop._adispatch
    team = team_of(loop)
    if team is not None:  # each call goes to the tools of the agent in force
        with_filters(engine, filters_of(team[1]))
        dispatch = team_dispatch(team[1], engine, lambda agent: agent._adispatch)  # type: ignore[assignment]
    registry = reviewing(loop.dispatcher)
    if isinstance(engine, recording.DurableEngine):
        dispatch = recording.async_dispatch(engine, dispatch)
    scope = call_scope(loop, engine, deps, cancel)
    return AsyncRun(
        engine,
        model_of(loop, engine),
        dispatch,
        cancel=cancel,
        model_timeout=loop.model_timeout,
        to_thread=loop.to_thread,
        max_concurrency=loop.max_concurrency,
        listeners=loop.listeners,
        review=None if registry is None else ain_context_reviews(registry.areview, scope),
        scope=scope,
    )


def call_scope(loop: Loop, engine: Engine, deps: object, cancel: CancelToken | None) -> CallScope:
    """What each call's context holds: ``deps``; the run's id (its key's) and ledger if durable.

    A resumed durable run's ``children`` start with those of the agent calls it had answered.
    """
    if not isinstance(engine, recording.DurableEngine):
        return CallScope(engine, deps, None, cancel)
    scope = CallScope(engine, deps, engine.run_id, cancel, engine.journal.ledger)
    if engine.events():
        scope.children.update(recorded_children(loop, engine))
    return scope
