"""Waiting before a retry: what the drivers do with the engine's ``Wait`` request.

The engine chose the wait (its retry policy did, and the event keeps it);
a driver only waits, unless the run's ``CancelToken`` is cancelled first,
and the one transition (``transition.py``) reports ``waited()`` either way:
the table's ``waited [cancel_requested]`` row then ends the run ``cancelled``
at once. A
``KeyboardInterrupt`` (or a cancelled task) during the wait propagates, and
the driver reports it as any interruption (``wait_interrupted``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time

from agentloop._core.values import CancelToken, Wait

__all__ = ["asleep", "await_wait", "sleep", "wait"]


def sleep(seconds: float, token: CancelToken | None) -> None:
    """Wait ``seconds`` in this thread, or less: until ``token`` is cancelled."""
    if token is None:
        time.sleep(seconds)
        return
    woken = threading.Event()
    undo = token.on_cancel(woken.set)
    try:
        woken.wait(seconds)
    finally:
        undo()


async def asleep(seconds: float, token: CancelToken | None) -> None:
    """``sleep`` under asyncio: the task waits, woken at once by a cancel from any thread."""
    if token is None:
        await asyncio.sleep(seconds)
        return
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()
    undo = token.on_cancel(lambda: loop.call_soon_threadsafe(woken.set))
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await woken.wait()
    finally:
        undo()


def wait(need: Wait, token: CancelToken | None) -> None:
    """The synchronous driver's wait: the policy's ``sleep``, or ours."""
    (need.sleep or sleep)(need.seconds, token)


async def await_wait(need: Wait, token: CancelToken | None) -> None:
    """The asyncio driver's wait: the policy's ``sleep`` (awaited if it gives an awaitable)."""
    if need.sleep is None:
        await asleep(need.seconds, token)
    else:
        waiting = need.sleep(need.seconds, token)
        if inspect.isawaitable(waiting):
            await waiting
