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
* ``error`` ``OutcomeUnknown``: once the call was sent, anything else: the
  connection was lost, no answer came within ``timeout``, or the server
  answered with a JSON-RPC error (any code: the SDK's servers answer with the
  error a tool raised, whatever it did first). It may have taken effect;
* ``error`` ``NotRun``: the connection was gone before the call was sent:
  the call provably did not run.

A tool the server runs only as a task (``execution.taskSupport:
"required"``) is left out: agentloop does not run MCP tasks, and the server
refuses any other call of it.

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
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

import mcp
import mcp.types
from mcp.client._transport import Transport, TransportStreams

from agentloop._core.table import State
from agentloop._core.values import Transition
from agentloop._tools.policy import Policy
from agentloop._tools.registry import ToolRegistry
from agentloop._tools.tool import Tool
from agentloop.mcp._calls import ToolCaller
from agentloop.mcp._registration import (
    HINTS,
    Registration,
    add_all_or_none,
    ask_before_destructive,
    both_policies,
    checked_options,
    task_only,
    tool_hints,
)
from agentloop.mcp._results import wraps_result

__all__ = ["HINTS", "MCPTool", "Server", "ask_before_destructive", "http", "stdio"]


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


class Server(ToolCaller):
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
        self._registrations: list[Registration] = []
        self._background: set[asyncio.Task[Any]] = set()
        #: The SDK client's ``mode``: "auto" probes for 2026-07-28 and falls back to the handshake.
        self._mode = "auto"

    def __repr__(self) -> str:
        state = "open" if self._client is not None else "closed"
        return f"Server({self.name!r}, {state})"

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
        only those, ``deny`` leaves those out; a tool the server runs only as a
        task is always left out (naming one in ``allow`` raises, saying so).
        ``policy`` gates every tool; ``destructive`` (for example
        ``ask_before_destructive``) gates the tools that may change or delete
        data as well. ``annotations`` declares,
        by the server's name, ``readOnlyHint``, ``destructiveHint`` or
        ``idempotentHint`` over what the server says: yours win.
        """
        return self._tools(
            self._listing,
            checked_options(prefix, allow, deny, policy, destructive, annotations, self._listing),
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
        options = checked_options(
            prefix, allow, deny, policy, destructive, annotations, self._listing
        )
        made = self._tools(self._listing, options)
        add_all_or_none(registry, made)
        registration = Registration(registry, options)
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
            add_all_or_none(registry, tools)
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
            if (
                listed.name in options["deny"]
                or (options["allow"] is not None and listed.name not in options["allow"])
                or task_only(listed)
            ):
                continue
            hints = tool_hints(listed, options["annotations"].get(listed.name, {}))
            policy = options["policy"]
            if hints["destructiveHint"] and not hints["readOnlyHint"] and options["destructive"]:
                policy = both_policies(policy, options["destructive"])
            made.append(
                MCPTool(
                    self, listed, name=options["prefix"] + listed.name, hints=hints, policy=policy
                )
            )
        return made


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
