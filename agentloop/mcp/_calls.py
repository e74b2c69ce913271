"""A call of a server's tool: sent on the connection's loop, its failures named.

A synchronous run awaits a call on its private event loop (``Awaiter``),
which hands the call to the connection's loop and waits for the answer
(``run_coroutine_threadsafe``). Cancelling the wait (a ``tool_timeout``, the
run's ``CancelToken``) cancels the request on the connection's loop, and the
SDK tells the server. A lost connection or a timeout while the call ran is
``OutcomeUnknown``; a call that never left, or a refused request, ``NotRun``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any, Final, cast

import mcp
from mcp.shared.exceptions import MCPError

from agentloop._durable._key import idempotency_key
from agentloop.mcp._results import NotRun, OutcomeUnknown, content_of
from agentloop.mcp._session import SessionHolder, describe_exception

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    import mcp.types

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
        called = self._call_there(remote, arguments, idempotency_key())
        if asyncio.get_running_loop() is loop:
            return await called
        try:
            future = asyncio.run_coroutine_threadsafe(called, loop)
        except RuntimeError:  # its loop closed meanwhile
            called.close()
            raise NotRun(f"MCP server {self.name!r}: the connection was closed") from None
        return await asyncio.wrap_future(future)

    async def _call_there(
        self, remote: str, arguments: dict[str, Any], key: str | None
    ) -> mcp.types.CallToolResult:
        client = self._client
        if client is None or self._lost is not None:  # gone before the call: it never left
            raise NotRun(f"MCP server {self.name!r}: {self._lost or 'not connected'}")
        meta = None if key is None else cast("mcp.types.RequestParamsMeta", {KEY_META: key})
        limit = self._limit or contextlib.nullcontext()
        async with limit:
            try:
                return await client.call_tool(
                    remote, arguments, read_timeout_seconds=self.timeout, meta=meta
                )
            except MCPError as exc:
                raise self._failure(remote, exc) from None
            except Exception as exc:  # noqa: BLE001 - a transport torn down mid-call (anyio's)
                if self._lost is not None:  # it was gone before: the call never left
                    raise NotRun(f"MCP server {self.name!r}: {self._lost}") from None
                raise OutcomeUnknown(
                    f"the connection to the MCP server {self.name!r} was lost while "
                    f"{remote!r} ran ({describe_exception(exc)}); whether it took effect is unknown"
                ) from None

    def _failure(self, remote: str, exc: MCPError) -> Exception:
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
        return NotRun(
            f"the MCP server {self.name!r} refused {remote!r}: {exc.message} (code {exc.code})"
        )
