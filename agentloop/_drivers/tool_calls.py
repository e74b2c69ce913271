"""``asyncio_dispatch``: the tools' dispatcher as the asyncio driver calls it.

Its ``adispatch`` if it has one (an ``agentloop.ToolRegistry`` does), else its
``dispatch`` awaited as needed, in a worker thread with ``to_thread``, within
``tool_timeout``. An agent call the timeout cuts is answered with the
timeout's error and the tokens its child run spent (``timed_out_child``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import TYPE_CHECKING, Any

from agentloop._drivers.callbacks import within
from agentloop._drivers.run_context import timed_out_child

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["asyncio_dispatch"]


def asyncio_dispatch(
    dispatcher: object, *, to_thread: bool, tool_timeout: float | None
) -> Callable[..., Awaitable[object]]:
    """The dispatcher as the asyncio driver calls it: ``adispatch`` if it has one.

    Looked up once, here: a dispatcher whose ``adispatch`` cannot even be read
    is refused when the loop is built, not in the middle of a run.
    """
    try:
        adispatch = getattr(dispatcher, "adispatch", None)
        dispatch = dispatcher.dispatch  # type: ignore[attr-defined]
    except Exception as exc:
        raise TypeError(
            f"expected tools to offer dispatch (and optionally adispatch), but reading them "
            f"raised {type(exc).__name__}"
        ) from exc
    expired = f"the tool did not finish within tool_timeout={tool_timeout} s"
    if adispatch is not None and tool_timeout is None:
        # Awaited as it is: no wrapper coroutine on the common path.
        return functools.partial(adispatch, to_thread=to_thread)

    async def run(call: dict[str, Any], **decision: object) -> object:
        if adispatch is not None:
            pending = adispatch(call, to_thread=to_thread, **decision)
        elif to_thread:
            pending = asyncio.to_thread(dispatch, call)
        else:
            pending = dispatch(call)
            if type(pending) is dict or not inspect.isawaitable(pending):
                return pending
        if tool_timeout is None:
            return await pending
        try:
            return await within(tool_timeout, expired, pending)
        except TimeoutError as exc:  # an agent call's child is cut: what it spent still counts
            cut = timed_out_child(exc)
            if cut is None:
                raise
            return cut

    return run
