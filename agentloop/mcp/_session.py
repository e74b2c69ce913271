"""The connection's lifetime: the session held open on its event loop, and its tools list followed.

An MCP client session belongs to the event loop it was opened on. ``async
with server`` opens it on the running loop; ``with server`` opens it on an
event loop of its own, in a thread of its own, so that it outlives any one
run. One task holds the session open (``_hold``) until the server is closed;
a server's changed tools list is fetched aside, at once, for ``refresh``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import threading
from collections.abc import Callable
from typing import Any, Final, Self

import mcp
import mcp.types
from mcp.client._transport import Transport

__all__ = ["AGENTLOOP", "SessionHolder", "describe_exception"]


def _version() -> str:
    try:
        return importlib.metadata.version("agentloop-fsm")
    except importlib.metadata.PackageNotFoundError:  # a copy of the source, not installed
        return "0+unknown"


#: Who agentloop says it is, as a client (``clientInfo``) and as a server (``serverInfo``).
AGENTLOOP: Final = mcp.types.Implementation(name="agentloop", version=_version())


class SessionHolder:
    """What ``Server`` does to open, hold and close its connection, and follow its tools list."""

    # Set by Server.__init__.
    name: str
    max_concurrency: int | None
    _target: mcp.StdioServerParameters | str | Callable[[], Transport]
    _connect_timeout: float
    _loop: asyncio.AbstractEventLoop | None
    _thread: threading.Thread | None
    _client: mcp.Client | None
    _holder: asyncio.Task[None] | None
    _closing: asyncio.Event | None
    _limit: asyncio.Semaphore | None
    _lost: str | None
    _listing: list[mcp.types.Tool]
    _pending: list[mcp.types.Tool] | None
    _stale: bool
    _home: int | None
    _lock: threading.Lock
    _background: set[asyncio.Task[Any]]
    _mode: str

    # -- the connection's lifetime

    def __enter__(self) -> Self:
        self._refuse_reentry()
        loop = asyncio.new_event_loop()
        thread = threading.Thread(
            target=_run_forever, args=(loop,), name=f"agentloop.mcp {self.name}", daemon=True
        )
        thread.start()
        self._loop, self._thread = loop, thread
        try:
            asyncio.run_coroutine_threadsafe(self._open(), loop).result(self._connect_timeout)
        except BaseException:
            self._stop_thread()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close(), loop).result(self._connect_timeout)
        finally:
            self._stop_thread()

    async def __aenter__(self) -> Self:
        self._refuse_reentry()
        self._loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(self._open(), self._connect_timeout)
        except BaseException:
            self._loop = None
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await self._close()
        finally:
            self._loop = None

    def _refuse_reentry(self) -> None:
        if self._loop is not None:
            raise RuntimeError(f"MCP server {self.name!r} is connected already: enter it once")

    def _stop_thread(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()

    async def _open(self) -> None:
        """Start the task that holds the session open, and wait until its tools are listed."""
        self._closing, self._lost = asyncio.Event(), None
        self._home = threading.get_ident()
        self._limit = (
            None if self.max_concurrency is None else asyncio.Semaphore(self.max_concurrency)
        )
        ready = asyncio.get_running_loop().create_future()
        holder = self._holder = asyncio.create_task(self._hold(ready))
        try:
            await ready
        except BaseException:  # it failed, or we were cancelled (connect_timeout)
            holder.cancel()
            with contextlib.suppress(BaseException):
                await holder
            raise

    async def _close(self) -> None:
        if self._closing is not None and self._holder is not None:
            self._closing.set()
            with contextlib.suppress(asyncio.CancelledError):  # a holder cancelled in _open
                await self._holder

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        """Open the session, list the tools, and keep it open until ``_close`` (one task).

        The SDK's client enters and leaves its task groups in this one task. A
        server that dies makes the client's exit raise (an ``ExceptionGroup``):
        it is caught here, and every call in flight has been answered already.
        """
        # A transport of our own making is made afresh for each connection: it is used once.
        target = self._target() if callable(self._target) else self._target
        client = mcp.Client(
            target,
            mode=self._mode,
            message_handler=self._on_message,
            cache=None,
            client_info=AGENTLOOP,
        )
        listening: asyncio.Task[None] | None = None
        try:
            async with client:
                self._listing = await _listing(client)
                self._client = client
                if _notifies(client):
                    listening = asyncio.create_task(self._listen(client))
                ready.set_result(None)
                assert self._closing is not None
                await self._closing.wait()
                self._lost = "the connection was closed"
                self._client = None
        except BaseException as exc:
            why = describe_exception(exc)
            self._lost = self._lost or f"the connection was lost ({why})"
            if not ready.done():
                ready.set_exception(
                    ConnectionError(f"could not connect to the MCP server {self.name!r}: {why}")
                )
            if isinstance(exc, KeyboardInterrupt | SystemExit | asyncio.CancelledError):
                raise
        finally:
            self._client = None
            if listening is not None and not listening.done():
                listening.cancel()
                with contextlib.suppress(BaseException):
                    await listening

    async def _listen(self, client: mcp.Client) -> None:
        """Follow a 2026-07-28 server's tools changes (``subscriptions/listen``)."""
        # A server that stops streaming (or dies) ends the stream: its calls will say so.
        with contextlib.suppress(Exception):
            async with client.listen(tools_list_changed=True) as events:
                async for _ in events:
                    self._changed(client)

    async def _on_message(self, message: object) -> None:
        """A handshake-era server's ``notifications/tools/list_changed``."""
        client = self._client
        if isinstance(message, mcp.types.ToolListChangedNotification) and client is not None:
            self._changed(client)

    def _changed(self, client: mcp.Client) -> None:
        """The server's tools changed: say so at once, and fetch the new listing aside."""
        self._stale = True
        # Not awaited here: the answer to tools/list comes through the reader that called us.
        task = asyncio.create_task(self._relist(client))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _relist(self, client: mcp.Client) -> None:
        try:
            listing = await _listing(client)
        except Exception:  # noqa: BLE001 - a connection lost meanwhile: its calls will say so
            return
        with self._lock:
            self._pending = listing


async def _listing(client: mcp.Client) -> list[mcp.types.Tool]:
    """Every tool the server lists, page after page."""
    tools: list[mcp.types.Tool] = []
    cursor = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools


def _notifies(client: mcp.Client) -> bool:
    """Whether a 2026-07-28 server says its tools list may change (it then streams the changes)."""
    tools = client.server_capabilities.tools
    return bool(tools and tools.list_changed) and client.protocol_version >= "2026"


def describe_exception(exc: BaseException) -> str:
    """The first leaf of an exception group (the SDK's task groups wrap them), as type: message."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _run_forever(loop: asyncio.AbstractEventLoop) -> None:
    """The connection thread: its loop runs until stopped, then is closed cleanly."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
