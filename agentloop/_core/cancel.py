"""``CancelToken``: the flag a caller sets to stop a run (``agentloop._core.values`` has it too)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["CancelToken"]


class CancelToken:
    """A flag a caller sets to stop a run at its next checkpoint.

    ``cancel()`` is safe from any thread; the run checks ``cancelled`` before
    asking the model, right after its reply, and right before a tool runs.
    The asyncio driver also interrupts an awaited model or tool as soon as
    ``cancel()`` is called (it is woken through ``on_cancel``).
    """

    __slots__ = ("_flag", "_waiters")

    def __init__(self) -> None:
        # The flag is a lock, held once cancelled: ``acquire(False)`` sets it from any
        # thread (again is a no-op) and ``locked()`` reads it, both C calls. Nothing ever
        # waits on it; a threading.Event (a Condition around a lock) costs far more to make,
        # and most runs make a token.
        self._flag = threading.Lock()
        self._waiters: list[Any] = []

    def cancel(self) -> None:
        """Request cancellation. Idempotent."""
        self._flag.acquire(False)
        for wake in list(self._waiters):
            wake()

    @property
    def cancelled(self) -> bool:
        """Whether cancellation has been requested."""
        return self._flag.locked()

    def check(self) -> Callable[[], bool]:
        """A function answering ``cancelled``: what the engine calls at each checkpoint."""
        return self._flag.locked

    def on_cancel(self, wake: Any) -> Any:
        """Call ``wake()`` (from the cancelling thread) once cancelled; returns an undo."""
        self._waiters.append(wake)
        if self._flag.locked():
            wake()
        return lambda: self._waiters.remove(wake) if wake in self._waiters else None

    def __repr__(self) -> str:
        return f"CancelToken(cancelled={self.cancelled})"
