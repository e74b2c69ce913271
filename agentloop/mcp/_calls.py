"""A call of a server's tool: sent on the connection's loop, its failures named.

A synchronous run awaits a call on its private event loop (``Awaiter``),
which hands the call to the connection's loop and waits for the answer
(``run_coroutine_threadsafe``). Cancelling the wait (a ``tool_timeout``, the
run's ``CancelToken``) cancels the request on the connection's loop, and the
SDK tells the server. A call made in a run asks for progress (a
``progressToken``): each ``notifications/progress`` is handed back to the
caller's loop, to the run's delta listeners (as ``agentloop.report_progress``'s).

What the model is told is what is known. ``NotRun`` only for a request that
provably never left: the connection was gone before it was sent. Once sent,
any failure is ``OutcomeUnknown``: a lost connection, a timeout, and any
JSON-RPC error the server answers with, whatever its code (the SDK's servers
answer with the error a tool raised, after it may have taken effect).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, Final, cast

import mcp
import mcp.types
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError

from agentloop._drivers.progress import Reporter
from agentloop._drivers.run_context import current_reporter, idempotency_key
from agentloop.mcp._results import NotRun, OutcomeUnknown, content_of
from agentloop.mcp._session import SessionHolder, describe_exception

__all__ = ["KEY_META", "ToolCaller"]

#: The key under which a durable run's idempotency key goes to the server, in ``_meta``.
KEY_META: Final = "io.github.agentloop/idempotency-key"
_CONNECTION_CLOSED: Final = -32000
_REQUEST_TIMEOUT: Final = -32001


class ToolCaller(SessionHolder):
    """What ``Server`` does to call a tool of its server, from any event loop."""

    timeout: float | None  # set by Server.__init__

    def _handler(self, remote: str, wrapped: bool) -> Callable[..., Coroutine[Any, Any, Any]]:
        async def call_mcp_tool(**arguments: Any) -> Any:
            return content_of(await self._call(remote, arguments), wrapped=wrapped)

        call_mcp_tool.__name__ = remote
        return call_mcp_tool

    async def _call(self, remote: str, arguments: dict[str, Any]) -> mcp.types.CallToolResult:
        """Call ``remote`` on the connection's loop, from whichever loop awaits this."""
        loop = self._loop
        if loop is None or self._client is None:
            raise NotRun(f"MCP server {self.name!r}: {self._lost or 'not connected'}")
        here = asyncio.get_running_loop()
        reporter = current_reporter()  # read here: the connection's loop runs in no run's context
        progress = None if reporter is None else _forwarding(reporter, here, loop)
        called = self._call_there(remote, arguments, idempotency_key(), progress)
        if here is loop:
            return await called
        try:
            future = asyncio.run_coroutine_threadsafe(called, loop)
        except RuntimeError:  # its loop closed meanwhile
            called.close()
            raise NotRun(f"MCP server {self.name!r}: the connection was closed") from None
        return await asyncio.wrap_future(future)

    async def _call_there(
        self,
        remote: str,
        arguments: dict[str, Any],
        key: str | None,
        progress: ProgressFnT | None,
    ) -> mcp.types.CallToolResult:
        meta = None if key is None else cast("mcp.types.RequestParamsMeta", {KEY_META: key})
        limit = self._limit or contextlib.nullcontext()
        async with limit:
            client = self._client
            # Checked after the wait for a place, with no await before the call: it never left.
            if client is None or self._lost is not None:
                raise NotRun(f"MCP server {self.name!r}: {self._lost or 'not connected'}")
            try:
                return await client.call_tool(
                    remote,
                    arguments,
                    read_timeout_seconds=self.timeout,
                    progress_callback=progress,
                    meta=meta,
                )
            except MCPError as exc:
                raise self._failure(remote, exc) from None
            except Exception as exc:  # noqa: BLE001 - a transport torn down (anyio's), a bad answer
                # Sent, or on its way: a connection lost meanwhile says nothing of the call, nor
                # does an answer the SDK refuses (structuredContent its outputSchema refuses).
                raise OutcomeUnknown(
                    f"the call of {remote!r} on the MCP server {self.name!r} failed once sent "
                    f"({describe_exception(exc)}); whether it took effect is unknown"
                ) from None

    def _failure(self, remote: str, exc: MCPError) -> OutcomeUnknown:
        """What a call the server answered with an error, or never answered, is known to be."""
        if exc.code == _REQUEST_TIMEOUT:
            return OutcomeUnknown(
                f"the MCP server {self.name!r} did not answer {remote!r} within "
                f"timeout={self.timeout} s; the request was cancelled, and whether it took "
                "effect is unknown"
            )
        if exc.code == _CONNECTION_CLOSED:
            if self._lost is None:
                self._lost = "the connection was lost"
            return OutcomeUnknown(
                f"the MCP server {self.name!r} closed the connection while {remote!r} ran "
                "(it may have exited); whether the call took effect is unknown"
            )
        # Any code: the SDK's servers answer with the error a tool raised, whatever it did first.
        return OutcomeUnknown(
            f"the MCP server {self.name!r} answered {remote!r} with an error: {exc.message} "
            f"(code {exc.code}); whether the call took effect is unknown"
        )


def _forwarding(
    reporter: Reporter, here: asyncio.AbstractEventLoop, there: asyncio.AbstractEventLoop
) -> ProgressFnT:
    """The progress callback of a call awaited on ``here``: the server's reports, to ``reporter``.

    It runs on the connection's loop (``there``): a report is handed to the
    caller's loop, where the run's listeners hear it, after what came before.
    """

    async def forward(progress: float, total: float | None, message: str | None) -> None:
        if here is there:
            reporter(progress, total, message)
        else:
            with contextlib.suppress(RuntimeError):  # the caller's loop closed: nobody listens
                here.call_soon_threadsafe(reporter, progress, total, message)

    return forward
