"""A Loop's dependencies: ``deps_type=`` checked against its tools, ``deps=`` against each run.

A tool (or a policy) that takes ``RunContext[Deps]`` names the dependencies
it expects; ``Loop(deps_type=D)`` says what its runs are given. Both are
checked when they meet: a tool for other dependencies when the Loop is
made, a run without (or with other) ``deps=`` when it starts. Dependencies
are live objects and never recorded, so a resumed run is given them again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from agentloop._core.values import CancelToken
from agentloop._loop.output_checks import NONE, Validators, name_of
from agentloop._loop.team import team_of
from agentloop._tools.registry import ToolRegistry

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from agentloop._loop.loop import Loop

__all__ = ["checked_deps_type", "deps_provider", "for_run", "takes_context"]


def _contexts(dispatcher: object, validators: Validators = NONE) -> Iterator[tuple[str, object]]:
    """What each tool, policy and output validator that takes a context names: (who, deps)."""
    for validator, context in zip(validators, validators.contexts, strict=True):
        if context is not None:
            yield f"output validator {name_of(validator)}", context[1]
    if not isinstance(dispatcher, ToolRegistry):
        return
    if dispatcher.policy_context is not None:
        yield "the registry's policy", dispatcher.policy_context[1]
    for tool in dispatcher:
        if tool.context is not None:
            yield f"tool {tool.name!r}", tool.context[1]
        if tool.policy_context is not None:
            yield f"the policy of tool {tool.name!r}", tool.policy_context[1]


def takes_context(dispatcher: object, validators: Validators = NONE) -> bool:
    """Whether a tool or a policy of ``dispatcher`` (or an output validator) takes a context."""
    if not validators and not isinstance(dispatcher, ToolRegistry):
        return False  # asked at every run: a dispatcher of one's own takes none
    return next(_contexts(dispatcher, validators), None) is not None


def checked_deps_type(
    deps_type: object, dispatcher: object, validators: Validators = NONE
) -> object:
    """``deps_type``, once every tool's and policy's ``RunContext[X]`` accepts it.

    ``X`` accepts ``deps_type`` when it is a class ``deps_type`` subclasses,
    or equals it (a type that is no class), or says nothing (bare, ``Any``, a
    type variable). Else ``TypeError``, naming the tool and both types.
    """
    if deps_type is None:
        return None
    for who, wanted in _contexts(dispatcher, validators):
        if not _accepts(wanted, deps_type):
            raise TypeError(
                f"{who} takes RunContext[{_shown(wanted)}], but this Loop's deps_type is "
                f"{_shown(deps_type)}"
            )
    return deps_type


def _members(loop: Loop) -> list[tuple[object, Validators]]:
    """Each agent's tools a run of ``loop`` may use (its own first, with its validators).

    The starting Loop's output validators check every agent's final.
    """
    team = team_of(loop)
    others = [] if team is None else [agent for agent in team[1].values() if agent is not loop]
    return [(loop.dispatcher, loop.output_validators), *((a.dispatcher, NONE) for a in others)]


def _accepts(wanted: object, given: object) -> bool:
    if wanted is Any or isinstance(wanted, TypeVar):
        return True
    if isinstance(wanted, type) and isinstance(given, type):
        return issubclass(given, wanted)
    return wanted == given


def _shown(kind: object) -> str:
    return kind.__qualname__ if isinstance(kind, type) else repr(kind)


def for_run(loop: Loop, deps: object, cancel: CancelToken | None) -> CancelToken | None:
    """A run's token, once its ``deps`` are what the Loop's tools expect (``TypeError`` else).

    A Loop with ``deps_type`` whose tools take a context refuses a run without
    ``deps=``, and one whose ``deps_type`` is a class refuses ``deps`` of
    another; a tool added to its registry since the Loop was made is checked
    against ``deps_type`` as the Loop checked its tools. When the tools take
    a context and the caller gave no token, the run gets one of its own:
    ``ctx.cancel`` is always the run's.
    """
    members = _members(loop)
    context = any(takes_context(*member) for member in members)
    wanted = loop.deps_type
    if wanted is not None:
        for member in members:
            checked_deps_type(wanted, *member)
        if deps is None and context:
            raise TypeError(
                f"expected deps= (a {_shown(wanted)}): this Loop's tools take "
                f"RunContext[{_shown(wanted)}], and a run was given none (dependencies are "
                "never recorded, so a resumed run is given them again)"
            )
        if deps is not None and isinstance(wanted, type) and not isinstance(deps, wanted):
            raise TypeError(
                f"expected deps to be a {_shown(wanted)} (this Loop's deps_type), got "
                f"{type(deps).__qualname__}"
            )
    if context:
        _given_what_tools_take(loop, deps)
    return CancelToken() if cancel is None and context else cancel


def _given_what_tools_take(loop: Loop, deps: object) -> None:
    """Refuse ``deps`` that is not an ``X`` for a tool's or policy's ``RunContext[X]``.

    Without it a Loop with no ``deps_type`` would run the tool with
    ``deps=None``, and the model would read its ``AttributeError``.
    """
    unfit = _unfit(loop, deps)
    if unfit is not None:
        who, wanted = unfit
        given = "no deps=" if deps is None else f"deps of type {type(deps).__qualname__}"
        raise TypeError(
            f"{who} takes RunContext[{wanted}], and this run was given {given}: "
            f"pass deps={wanted}(...) to the run, and say so with "
            f"Loop(deps_type={wanted}) (dependencies are never recorded, so a "
            "resumed run is given them again)"
        )


def _unfit(loop: Loop, deps: object) -> tuple[str, str] | None:
    """The first tool or policy whose ``RunContext[X]`` ``deps`` is no ``X`` of: (who, X).

    ``X`` a class other than ``object``; a type ``isinstance`` cannot check (a
    ``Protocol`` that is not runtime-checkable, a ``TypedDict``) is left to
    the type checker.
    """
    for who, wanted in (found for member in _members(loop) for found in _contexts(*member)):
        if not isinstance(wanted, type) or wanted is object:
            continue
        try:
            fits = isinstance(deps, wanted)
        except TypeError:
            continue
        if not fits:
            return who, _shown(wanted)
    return None


def deps_provider(
    loop: Loop, provider: Callable[[str], object] | None
) -> Callable[[str], object] | None:
    """A DBOSLoop's ``deps=``: a callable of the run id, needed when its tools take a context."""
    if provider is not None and not callable(provider):
        raise TypeError(
            f"expected deps to be a callable of the run id (lambda run_id: Deps(...)), "
            f"got {type(provider).__name__}: DBOS records a workflow's arguments, and "
            "dependencies are never recorded"
        )
    unfit = None if provider is not None else _unfit(loop, None)
    if unfit is not None and loop.deps_type is None:
        who, wanted = unfit
        raise TypeError(
            f"expected deps= (a callable of the run id that makes a {wanted}): {who} takes "
            f"RunContext[{wanted}]; say so with Loop(deps_type={wanted}) too"
        )
    if provider is None and loop.deps_type is not None and takes_context(loop.dispatcher):
        raise TypeError(
            f"expected deps= (a callable of the run id that makes a {_shown(loop.deps_type)}): "
            f"this Loop's tools take RunContext[{_shown(loop.deps_type)}]"
        )
    return provider
