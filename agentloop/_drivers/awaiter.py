"""``Awaiter``: the event loop of one synchronous run, on which it awaits async callables.

A synchronous run (``Run``) awaits what a model, a tool or a policy returns
(``async def`` ones) to completion in the calling thread, on an event loop
of its own: ``model_timeout``/``tool_timeout`` bite there, and the run's
``CancelToken`` interrupts it, as under asyncio. ``awaiting`` wraps a
dispatch so that an async tool's outcome is awaited so.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import signal
import threading
import weakref
from typing import TYPE_CHECKING, Any, TypeVar

from agentloop._drivers.callbacks import unless_cancelled

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine

    from agentloop._core.values import CancelToken

__all__ = ["Awaiter", "awaiting"]

_T = TypeVar("_T")


class Awaiter:
    """The event loop of one synchronous run, on which it awaits its async callables.

    Made at the first awaitable, in the thread that steps the run (each
    awaitable runs to its end there, by ``loop.run_until_complete``); closed
    when the run ends, or when it is garbage collected. A Ctrl-C cancels the
    awaited task, whose end then raises ``KeyboardInterrupt``, as under
    ``asyncio.run``. Called inside a running event loop, it refuses: that
    thread's loop would stall, and the run belongs under ``arun``.
    """

    def __init__(self, cancel: CancelToken | None = None) -> None:
        self._cancel = cancel
        self._runner: asyncio.Runner | None = None  # the loop's making and closing
        self._closer: weakref.finalize[Any, Any] | None = None
        self._task: asyncio.Task[Any] | None = None  # the task a Ctrl-C cancels
        self._interrupted = False

    @property
    def cancel(self) -> CancelToken | None:
        """The run's token: it interrupts what is awaited, a wait, and a stream between chunks."""
        return self._cancel

    @property
    def open(self) -> bool:
        """Whether its event loop exists (and is not closed yet)."""
        return self._runner is not None

    def __call__(
        self,
        awaitable: Awaitable[_T],
        seconds: float | None = None,
        expired: str = "",
        *,
        cancellable: bool = True,
    ) -> _T:
        """Await ``awaitable`` to its end, within ``seconds``, unless the token cancels it.

        ``TokenCancelled`` when it does (``cancellable``); ``TimeoutError(expired)``
        when the deadline passes.
        """
        if asyncio._get_running_loop() is not None:
            getattr(awaitable, "close", lambda: None)()  # never awaited: say so, without a warning
            raise RuntimeError(
                "a synchronous run cannot await an async model, tool or policy inside a "
                "running event loop (its thread's loop would stall): in async code, use "
                "await loop.arun(...) (or astart, aresume)"
            )
        runner = self._runner
        if runner is None:
            runner = self._runner = asyncio.Runner(loop_factory=asyncio.new_event_loop)
            self._closer = weakref.finalize(self, _close, runner)
        loop = runner.get_loop()
        token = self._cancel if cancellable else None
        main: Coroutine[Any, Any, _T] = unless_cancelled(token, awaitable, seconds, expired)
        # In the caller's context, as it is now (a durable run's idempotency key).
        task = loop.create_task(main, context=contextvars.copy_context())
        # Ctrl-C as asyncio.Runner.run handles it, whose handler (a partial holding
        # the task, formatted by signal's enum lookups) costs twice this whole call.
        sigint = (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        )
        if sigint:
            self._task, self._interrupted = task, False
            signal.signal(signal.SIGINT, self._on_sigint)
        try:
            return loop.run_until_complete(task)
        except asyncio.CancelledError:
            if self._interrupted and task.uncancel() == 0:
                raise KeyboardInterrupt from None
            raise
        finally:
            if sigint:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                self._task = None

    def _on_sigint(self, signum: int, frame: object) -> None:
        """The first Ctrl-C cancels the awaited task; another interrupts at once."""
        task = self._task
        if self._interrupted or task is None or task.done():
            raise KeyboardInterrupt
        self._interrupted = True
        task.cancel()
        task.get_loop().call_soon_threadsafe(lambda: None)  # wake a select() that waits long

    def close(self) -> None:
        """Close its event loop, if it has one: its tasks cancelled, its executor shut down."""
        if self._closer is not None:
            self._closer()
        self._runner = self._closer = None


def _close(runner: asyncio.Runner) -> None:
    if asyncio._get_running_loop() is not None:
        # Collected inside another running loop (a thread's, an MCP connection's): the
        # run's loop cannot run here to shut its async generators down, so it is closed
        # from a thread of its own, where it can.
        closer = threading.Thread(target=_close, args=(runner,), name="agentloop close")
        closer.start()
        closer.join()
        return
    with contextlib.suppress(RuntimeError):
        runner.close()


def awaiting(
    dispatch: Callable[..., object], awaiter: Awaiter, tool_timeout: float | None
) -> Callable[..., object]:
    """``dispatch``, awaiting an awaitable outcome (an async tool's) on the run's ``awaiter``.

    Inside whatever wraps it (a durable run's journal), so that the tool sees
    the context its call was made in (the idempotency key).
    """
    expired = f"the tool did not finish within tool_timeout={tool_timeout} s"

    def run(call: dict[str, Any], **decision: object) -> object:
        outcome = dispatch(call, **decision)
        if type(outcome) is dict or not inspect.isawaitable(outcome):
            return outcome
        return awaiter(outcome, tool_timeout, expired)

    return run
