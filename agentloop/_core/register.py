"""The functions the table's guards and effects name, each registered against its member.

``@guard(Guard.CALLS_EXHAUSTED)`` over ``def calls_exhausted(run) -> bool``, and
``@effect(Effect.RESERVE_CALLS)`` over ``def reserve_calls(run) -> None``: each
feature's module (``rows/``) registers its own, above the rows that name
them. A row names the functions themselves (one go-to-definition away);
``build.py`` reads each one's member here (``MEMBERS``: what the record keeps)
and refuses a function that is not registered, and a member with no function
(``TableError``): nothing is looked up by name while a run goes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, TypeVar

from agentloop._errors import TableError

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop._core.state import RunState
    from agentloop._core.terms import Effect, Guard

__all__ = ["EFFECTS", "GUARDS", "MEMBERS", "effect", "guard"]

_Guard = TypeVar("_Guard", bound="Callable[[RunState], bool]")
_Effect = TypeVar("_Effect", bound="Callable[[RunState], None]")

#: Each guard's function, by its member: it reads the run (and the report in hand,
#: ``run.draft``) and answers whether the guard holds.
GUARDS: Final[dict[Guard, Callable[[RunState], bool]]] = {}
#: Each effect's function, by its member: it changes the run, or fills in the draft of
#: the transition being made.
EFFECTS: Final[dict[Effect, Callable[[RunState], None]]] = {}
#: Each registered function's member: how a row that names the function is recorded.
MEMBERS: Final[dict[Callable[..., object], Guard | Effect]] = {}


def guard(member: Guard) -> Callable[[_Guard], _Guard]:
    """Register the decorated function as the guard ``member`` names in the table."""

    def register(function: _Guard) -> _Guard:
        _refuse_twice("guard", member, GUARDS.get(member), function)
        GUARDS[member] = function
        MEMBERS[function] = member
        return function

    return register


def effect(member: Effect) -> Callable[[_Effect], _Effect]:
    """Register the decorated function as the effect ``member`` names in the table."""

    def register(function: _Effect) -> _Effect:
        _refuse_twice("effect", member, EFFECTS.get(member), function)
        EFFECTS[member] = function
        MEMBERS[function] = member
        return function

    return register


def _refuse_twice(
    what: str,
    member: Guard | Effect,
    taken: Callable[..., object] | None,
    function: Callable[..., object],
) -> None:
    """A second function for one member is a ``TableError`` naming both."""
    if taken is not None:
        raise TableError(
            f"{what} {member.value!r} has two functions, {_where(taken)} and "
            f"{_where(function)}: register one"
        )


def _where(function: Callable[..., object]) -> str:
    return f"{function.__module__}.{function.__qualname__}"
