"""What the two drivers share: the read-only view of a run and small helpers."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from agentloop._engine import Engine, InvalidStateError

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop._machine import State
    from agentloop._values import RunResult, Transition

__all__ = ["RunView", "is_async"]


def is_async(fn: object) -> bool:
    """Whether calling ``fn`` gives a coroutine (an ``async def`` function or ``__call__``)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - a callable object's own __call__
    )


class RunView:
    """The state, counters and record of one run; drivers add the stepping."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"<{name} state={self.state.value!r} steps={self.steps} calls={self.calls}>"

    @property
    def state(self) -> State:
        """The current state (a ``str`` enum)."""
        return self._engine.state

    @property
    def done(self) -> bool:
        """Whether the run has reached a terminal state."""
        return self._engine.done

    @property
    def steps(self) -> int:
        """Model callback invocations so far."""
        return self._engine.steps

    @property
    def calls(self) -> int:
        """Accepted tool attempts so far."""
        return self._engine.calls

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """The history so far (a fresh copy on each access)."""
        return self._engine.history()

    @property
    def events(self) -> tuple[Transition, ...]:
        """Every transition so far, in order."""
        return self._engine.events()

    def result(self) -> RunResult:
        """The result; raises ``InvalidStateError`` until the run is done."""
        return self._engine.result()

    def _subscribe_sync(self, listener: Callable[[Transition], object]) -> None:
        if is_async(listener):
            raise TypeError(
                f"expected a plain function as a listener of a synchronous run, got the async "
                f"{listener!r}; async listeners need loop.astart() or loop.arun()"
            )
        self._engine.subscribe(listener)

    def _over(self) -> InvalidStateError:
        return InvalidStateError(
            f"step() needs a run that is not over, but it ended in state "
            f"{self.state.value!r}; read run.result()",
            state=self.state,
        )
