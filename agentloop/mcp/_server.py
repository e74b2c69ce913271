"""``Server``: one connection to an MCP server, whose tools become the ``Tool``s of a registry.

Where the connection lives. An MCP client session belongs to the event loop it
was opened on. ``async with server`` opens it on the running loop, and an
asyncio run awaits its calls there, natively. ``with server`` opens it on an
event loop of its own, in a thread of its own, so that it outlives any one run:
a synchronous run awaits a call on its private event loop (``Awaiter``), which
hands the call to the connection's loop and waits for the answer
(``run_coroutine_threadsafe``). Cancelling the wait (a ``tool_timeout``, the
run's ``CancelToken``) cancels the request on the connection's loop, and the
SDK tells the server.

What each call can end in (the tool's outcome, through the registry):

* ``ok``: the result (``content_of``);
* ``error`` ``ToolFailed``: the server answered ``isError``;
* ``error`` ``OutcomeUnknown``: the connection was lost, or no answer came
  within ``timeout``, while the call ran: it may have taken effect;
* ``error`` ``NotRun``: the connection was lost before the call, or the
  server answered with a protocol error: the call did not run.

A server's tools list may change (``notifications/tools/list_changed``, or the
``subscriptions/listen`` stream of 2026-07-28 servers). The new listing is
fetched at once, in the background, and kept aside: ``refresh()`` puts it into
the registries, and ``refresh_between_steps``, a ``Loop`` listener, calls it
when the run is about to ask the model, never while a batch runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Final, cast

import mcp
import mcp.types
from mcp.shared.exceptions import MCPError

from agentloop._core._approval import Decision, allow, ask
from agentloop._core._table import State
from agentloop._durable._key import idempotency_key
from agentloop._tools._registry import ToolRegistry
from agentloop._tools._tool import Tool
from agentloop.mcp._results import NotRun, OutcomeUnknown, content_of, wraps_result

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping

    from mcp.client._transport import Transport, TransportStreams

    from agentloop._core._values import Transition
    from agentloop._tools._policy import Policy

__all__ = ["HINTS", "MCPTool", "Server", "ask_before_destructive", "http", "stdio"]

#: The annotations a user may declare for a tool, over the server's (MCP's spelling).
HINTS: Final = ("readOnlyHint", "destructiveHint", "idempotentHint")
#: The key under which a durable run's idempotency key goes to the server, in ``_meta``.
KEY_META: Final = "io.github.agentloop/idempotency-key"
_CONNECTION_CLOSED: Final = -32000
_REQUEST_TIMEOUT: Final = -32001


def ask_before_destructive(call: dict[str, Any]) -> Decision:
    """A ready policy for ``register(destructive=...)``: a person approves each call first."""
    return ask(
        f"the MCP tool {call['name']!r} may change or delete data "
        "(its server does not say it is read-only or non-destructive)"
    )


class MCPTool(Tool):
    """A ``Tool`` whose handler calls a tool of an MCP server.

    ``remote_name`` is the server's name for it (``name`` may carry a prefix);
    ``read_only``, ``destructive`` and ``idempotent`` are the server's
    annotations with the user's declarations over them.
    """

    __slots__ = ("destructive", "read_only", "remote_name", "server")

    def __init__(
        self,
        server: Server,
        listed: mcp.types.Tool,
        *,
        name: str,
        hints: Mapping[str, bool],
        policy: Policy | None,
    ) -> None:
        self.server = server
        self.remote_name = listed.name
        #: True when the tool only reads (so is idempotent too).
        self.read_only = hints["readOnlyHint"]
        #: True unless the tool reads only or says it is not destructive (MCP's default).
        self.destructive = not self.read_only and hints["destructiveHint"]
        try:
            super().__init__(
                server._handler(listed.name, wraps_result(listed.name, listed.output_schema)),
                name=name,
                description=listed.description or listed.title or "",
                parameters=listed.input_schema,
                policy=policy,
                idempotent=hints["idempotentHint"] or self.read_only,
            )
        except TypeError as exc:
            raise TypeError(f"MCP server {server.name!r}: {exc}") from None

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r}, server={self.server.name!r})"


def _hints(listed: mcp.types.Tool, declared: Mapping[str, bool]) -> dict[str, bool]:
    """The tool's hints: the user's declarations, else the server's, else MCP's defaults."""
    given = listed.annotations
    server = {
        "readOnlyHint": None if given is None else given.read_only_hint,
        "destructiveHint": None if given is None else given.destructive_hint,
        "idempotentHint": None if given is None else given.idempotent_hint,
    }
    defaults = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}
    out = {}
    for hint in HINTS:
        value = declared.get(hint, server[hint])
        out[hint] = defaults[hint] if value is None else bool(value)
    return out


class _Registration:
    """One ``register`` call: its registry (weakly held), options, and the names it added."""

    __slots__ = ("names", "options", "registry")

    def __init__(self, registry: ToolRegistry, options: dict[str, Any]) -> None:
        self.registry = weakref.ref(registry)
        self.options, self.names = options, list[str]()


class Server:
    """A connection to one MCP server; use it as a context manager (``with`` or ``async with``).

    Made by ``stdio(...)`` or ``http(...)``. Inside it, ``tools()`` makes the
    server's tools into ``MCPTool``s, and ``register(registry)`` adds them to
    a ``ToolRegistry`` and keeps them current (``refresh``).
    """

    def __init__(
        self,
        target: mcp.StdioServerParameters | str | Callable[[], Transport],
        *,
        name: str,
        timeout: float | None,
        max_concurrency: int | None,
        connect_timeout: float,
    ) -> None:
        if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
            raise ValueError(
                f"expected timeout to be a positive number of seconds, got {timeout!r}"
            )
        if max_concurrency is not None and not (
            type(max_concurrency) is int and max_concurrency > 0
        ):
            raise ValueError(
                f"expected max_concurrency to be a positive int or None, got {max_concurrency!r}"
            )
        self.name = name
        self.timeout = timeout
        self.max_concurrency = max_concurrency
        self._target = target
        self._connect_timeout = connect_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: mcp.Client | None = None
        self._holder: asyncio.Task[None] | None = None
        self._closing: asyncio.Event | None = None
        self._limit: asyncio.Semaphore | None = None
        self._lost: str | None = None  # why the connection ended, once it has
        self._listing: list[mcp.types.Tool] = []
        self._pending: list[mcp.types.Tool] | None = None  # a newer listing, not put in yet
        self._stale = False  # the server said its tools changed; not put in yet
        self._home: int | None = None  # the thread of the connection's event loop
        self._lock = threading.Lock()
        self._registrations: list[_Registration] = []
        self._background: set[asyncio.Task[Any]] = set()
        #: The SDK client's ``mode``: "auto" probes for 2026-07-28 and falls back to the handshake.
        self._mode = "auto"

    def __repr__(self) -> str:
        state = "open" if self._client is not None else "closed"
        return f"Server({self.name!r}, {state})"

    # -- the connection's lifetime

    def __enter__(self) -> Server:
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

    async def __aenter__(self) -> Server:
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
        client = mcp.Client(target, mode=self._mode, message_handler=self._on_message, cache=None)
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
            why = _describe(exc)
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

    # -- tools

    def tools(
        self,
        *,
        prefix: str = "",
        allow: Iterable[str] | None = None,
        deny: Iterable[str] = (),
        policy: Policy | None = None,
        destructive: Policy | None = None,
        annotations: Mapping[str, Mapping[str, bool]] | None = None,
    ) -> list[MCPTool]:
        """The server's tools as ``MCPTool``s, as it lists them now.

        ``prefix`` goes before each name; ``allow`` (the server's names) keeps
        only those, ``deny`` leaves those out. ``policy`` gates every tool;
        ``destructive`` (for example ``ask_before_destructive``) gates the
        tools that may change or delete data as well. ``annotations`` declares,
        by the server's name, ``readOnlyHint``, ``destructiveHint`` or
        ``idempotentHint`` over what the server says: yours win.
        """
        return self._tools(
            self._listing,
            _options(prefix, allow, deny, policy, destructive, annotations, self._listing),
        )

    def register(
        self,
        registry: ToolRegistry,
        *,
        prefix: str = "",
        allow: Iterable[str] | None = None,
        deny: Iterable[str] = (),
        policy: Policy | None = None,
        destructive: Policy | None = None,
        annotations: Mapping[str, Mapping[str, bool]] | None = None,
    ) -> list[MCPTool]:
        """Add the server's tools to ``registry`` (options as for ``tools``), and keep them current.

        Every tool is made before any is added: a schema the registry refuses
        leaves the registry as it was. ``refresh`` later replaces them with
        the server's newer listing, under the same options.
        """
        if not isinstance(registry, ToolRegistry):
            raise TypeError(f"expected a ToolRegistry, got {type(registry).__name__}")
        options = _options(prefix, allow, deny, policy, destructive, annotations, self._listing)
        made = self._tools(self._listing, options)
        _add_all(registry, made)
        registration = _Registration(registry, options)
        registration.names = [tool.name for tool in made]
        self._registrations.append(registration)
        return made

    @property
    def changed(self) -> bool:
        """Whether the server said its tools changed since the registries were last refreshed."""
        return self._stale

    def refresh(self, *, wait: float = 0.0) -> bool:
        """Put the server's newest listing into every registry ``register`` filled.

        Call it between runs, or between a run's model steps
        (``refresh_between_steps`` does), never while a batch runs. The new
        listing is fetched as soon as the server says it changed; ``wait``: the
        seconds to wait for it if it is still on its way (not from the thread
        of the connection's own event loop, which would stall it). False when
        there was nothing new. A new tool whose schema is refused raises
        ``TypeError``, one whose name another tool has ``ValueError``, and no
        registry changes (the change stays waiting).
        """
        if wait and self._stale and self._pending is None and threading.get_ident() != self._home:
            deadline = time.monotonic() + wait
            while self._pending is None and time.monotonic() < deadline:
                time.sleep(0.002)
        with self._lock:
            listing = self._pending
        if listing is None:
            return False
        # Every registry's new tools are made, and their names checked, before any changes.
        live = [
            (registration, registry)
            for registration in self._registrations
            if (registry := registration.registry()) is not None
        ]
        self._registrations = [registration for registration, _ in live]
        made = [self._tools(listing, registration.options) for registration, _ in live]
        for (registration, registry), tools in zip(live, made, strict=True):
            ours = set(registration.names)
            taken = [tool.name for tool in tools if tool.name in registry and tool.name not in ours]
            if taken:
                raise ValueError(
                    f"MCP server {self.name!r} now lists tools whose names the registry has "
                    f"already: {', '.join(map(repr, taken))} (register(prefix=...) keeps apart)"
                )
        with self._lock:
            if self._pending is listing:  # not replaced meanwhile by a newer one
                self._pending, self._stale = None, False
        self._listing = listing
        for (registration, registry), tools in zip(live, made, strict=True):
            for name in registration.names:
                if isinstance(registry.get(name), MCPTool):
                    registry.remove(name)
            _add_all(registry, tools)
            registration.names = [tool.name for tool in tools]
        return True

    def refresh_between_steps(self, transition: Transition) -> None:
        """A ``Loop`` listener: ``refresh()`` when the run is about to ask the model.

        It waits up to ``connect_timeout`` for a listing the server announced
        (a tool that changes the list says so before it returns, but the new
        listing is one more request away).
        """
        if transition.dest is State.AWAITING_MODEL and self._stale:
            self.refresh(wait=self._connect_timeout)

    def _tools(self, listing: list[mcp.types.Tool], options: dict[str, Any]) -> list[MCPTool]:
        if self._loop is None:
            raise RuntimeError(
                f"MCP server {self.name!r} is not connected: use its tools inside "
                "`with server:` (or `async with server:`)"
            )
        made = []
        for listed in listing:
            if listed.name in options["deny"] or (
                options["allow"] is not None and listed.name not in options["allow"]
            ):
                continue
            hints = _hints(listed, options["annotations"].get(listed.name, {}))
            policy = options["policy"]
            if hints["destructiveHint"] and not hints["readOnlyHint"] and options["destructive"]:
                policy = _both(policy, options["destructive"])
            made.append(
                MCPTool(
                    self, listed, name=options["prefix"] + listed.name, hints=hints, policy=policy
                )
            )
        return made

    # -- calls

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
                    f"{remote!r} ran ({_describe(exc)}); whether it took effect is unknown"
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


def _options(
    prefix: str,
    allow: Iterable[str] | None,
    deny: Iterable[str],
    policy: Policy | None,
    destructive: Policy | None,
    annotations: Mapping[str, Mapping[str, bool]] | None,
    listing: list[mcp.types.Tool],
) -> dict[str, Any]:
    """``tools``' options, checked: a name the server does not list is a mistake, said so."""
    if not isinstance(prefix, str):
        raise TypeError(f"expected prefix to be a str, got {type(prefix).__name__}")
    for what, value in (("allow", allow), ("deny", deny)):
        if isinstance(value, str):
            raise TypeError(
                f"expected {what} to be a collection of tool names, got a str {value!r}"
            )
    for what, gate in (("policy", policy), ("destructive", destructive)):
        if gate is not None and not callable(gate):
            raise TypeError(f"expected {what} to be a policy (callable), got {type(gate).__name__}")
    annotations = dict(annotations or {})
    for name, declared in annotations.items():
        wrong = [hint for hint in declared if hint not in HINTS]
        if wrong or not all(type(value) is bool for value in declared.values()):
            raise ValueError(
                f"expected the annotations of {name!r} to map {', '.join(HINTS)} to bools, "
                f"got {dict(declared)!r}"
            )
    allowed = None if allow is None else frozenset(allow)
    denied = frozenset(deny)
    listed = {tool.name for tool in listing}
    unknown = sorted(((allowed or frozenset()) | denied | annotations.keys()) - listed)
    if unknown:
        raise ValueError(
            f"expected names of tools the server lists ({', '.join(sorted(listed)) or 'none'}), "
            f"got {', '.join(map(repr, unknown))}"
        )
    return {
        "prefix": prefix,
        "allow": allowed,
        "deny": denied,
        "policy": policy,
        "destructive": destructive,
        "annotations": annotations,
    }


def _both(first: Policy | None, second: Policy) -> Policy:
    """One policy that asks two (plain ones): a denial wins, then an ask, then ``allow()``."""
    if first is None:
        return second

    def both(call: dict[str, Any]) -> Decision:
        answers = [cast("Decision", policy(call)) for policy in (first, second)]
        for answer in answers:
            if not (answer.allowed or answer.asks):
                return answer
        return next((answer for answer in answers if answer.asks), allow())

    return both


def _add_all(registry: ToolRegistry, tools: list[MCPTool]) -> None:
    """Add every tool, or none: a name taken already raises before any is added."""
    taken = [tool.name for tool in tools if tool.name in registry]
    if taken:
        raise ValueError(
            f"expected unique tool names, got {', '.join(map(repr, taken))} in the registry "
            "already (register(prefix=...) tells a server's tools apart)"
        )
    for tool in tools:
        registry.add(tool)


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


def _describe(exc: BaseException) -> str:
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


def stdio(
    command: str,
    args: Iterable[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    name: str | None = None,
    timeout: float | None = None,
    max_concurrency: int | None = None,
    connect_timeout: float = 30.0,
) -> Server:
    """An MCP server launched as ``command args...``, spoken to over its stdin and stdout.

    The SDK passes the server only a few variables of this environment (HOME,
    PATH, SHELL, TERM, USER, LOGNAME): give it more with ``env``. ``timeout``:
    the seconds each call may take before its outcome is ``OutcomeUnknown``;
    ``max_concurrency``: the most calls this server runs at once.
    """
    if not isinstance(command, str) or not command:
        raise TypeError(f"expected command to be a non-empty str, got {command!r}")
    if isinstance(args, str):
        raise TypeError(f"expected args to be a list of str, got a str {args!r}")
    parameters = mcp.StdioServerParameters(
        command=command, args=list(args), env=None if env is None else dict(env), cwd=cwd
    )
    return Server(
        parameters,
        name=name or command.rsplit("/", 1)[-1],
        timeout=timeout,
        max_concurrency=max_concurrency,
        connect_timeout=connect_timeout,
    )


def http(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    name: str | None = None,
    timeout: float | None = None,
    max_concurrency: int | None = None,
    connect_timeout: float = 30.0,
) -> Server:
    """An MCP server at ``url``, spoken to over streamable HTTP (options as for ``stdio``).

    ``headers`` go with every request (an ``Authorization`` token, say).
    """
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(f"expected an http:// or https:// URL, got {url!r}")
    if headers is not None and not all(
        isinstance(key, str) and isinstance(value, str) for key, value in headers.items()
    ):
        raise TypeError(f"expected headers to map str to str, got {dict(headers)!r:.80}")
    fixed = None if headers is None else dict(headers)
    return Server(
        url if fixed is None else (lambda: _with_headers(url, fixed)),
        name=name or url,
        timeout=timeout,
        max_concurrency=max_concurrency,
        connect_timeout=connect_timeout,
    )


@contextlib.asynccontextmanager
async def _with_headers(url: str, headers: dict[str, str]) -> AsyncIterator[TransportStreams]:
    """The SDK's streamable HTTP transport over an HTTP client that sends ``headers``."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with (
        create_mcp_http_client(headers=headers) as http_client,
        streamable_http_client(url, http_client=http_client) as streams,
    ):
        yield streams
