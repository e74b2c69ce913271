"""``RunContext``: what a tool or a policy is told about the run and the call it serves.

A tool handler (or a policy) that declares a parameter annotated
``RunContext`` (or ``RunContext[Deps]``) gets the context of its call there;
the parameter is not published in the tool's schema. The drivers set one
context variable, ``RUN_CONTEXT``, around each call they run and each call
their policies review (``in_context``, ``ain_context``, ``reviewed_in``):
``idempotency_key()``, ``report_progress()`` and ``current_context()`` read
it, so a handler without the parameter (or a dispatcher of one's own) reads
the same context.

The dependencies (``deps``) are the caller's live objects, given per run
(``loop.run(..., deps=...)``): never copied, never recorded.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, cast

import attrs

from agentloop._core.json import exception_content
from agentloop._core.values import Budget, CancelToken, Usage
from agentloop._drivers.child_waits import WaitingChild
from agentloop._drivers.progress import Reporter, checked_report, hear, logged

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from agentloop._core.engine import Engine

__all__ = [
    "NO_RUN",
    "RUN_CONTEXT",
    "CallScope",
    "Handed",
    "RunContext",
    "ain_context",
    "ain_context_reviews",
    "areviewed_in",
    "context_here",
    "current_context",
    "current_reporter",
    "esc",
    "idempotency_key",
    "in_context",
    "in_context_reviews",
    "key_of",
    "report_progress",
    "reviewed_in",
    "timed_out_child",
]

Deps = TypeVar("Deps", covariant=True)


class CallScope:
    """What a driver's runs give each call's context: the engine, deps, run id and token.

    ``children``: where the results of its agent tools' child runs go, by call
    id (the run's own dict, which its result reads); ``waiting``: the child
    runs that wait for a person, by call id (the driver ends them cancelled if
    the run ends first); ``ledger``: a durable run's, where its agent tools'
    child runs are recorded (else ``None``); ``run_child``: how the driver runs
    an agent tool's child itself, ``run_child(tool, input, ctx)`` its result
    (a DBOS child workflow), else ``None``: the tool runs it. Defined before ``RunContext``,
    whose ``__init__`` names it: attrs makes that in this module's names as
    they stand then.
    """

    __slots__ = ("cancel", "children", "deps", "engine", "ledger", "run_child", "run_id", "waiting")

    def __init__(
        self,
        engine: Engine,
        deps: object,
        run_id: str | None,
        cancel: CancelToken | None,
        ledger: object = None,
    ) -> None:
        self.engine, self.deps, self.run_id, self.cancel = engine, deps, run_id, cancel
        self.ledger = ledger
        self.run_child: Callable[[Any, str, RunContext[Any]], Any] | None = None
        self.children: dict[str, Any] = {}
        self.waiting: dict[str, WaitingChild] = {}

    def handed(self, call: dict[str, Any], reporter: Reporter | None = None) -> Handed:
        """``call``, handed out by the engine now: its context as the engine stands now."""
        return Handed(self, call, reporter)

    def output_context(self) -> RunContext[Any]:
        """The context of a check of the run's output (its validators'): no call's."""
        engine = self.engine
        return RunContext(
            deps=self.deps,
            run_id=self.run_id,
            steps=engine.steps,
            calls=engine.calls,
            usage=engine.usage,
            budget=engine.budget,
            cancel=self.cancel,
            scope=self,
        )


@attrs.frozen(kw_only=True)
class RunContext(Generic[Deps]):
    """The run and the call a tool handler (or a policy) serves; annotate a parameter with it.

    ``deps``: what the run was given with ``deps=`` (the caller's own objects,
    never copied or recorded). ``run_id``: the run's id in a durable run,
    else ``None``. ``call_id`` and ``tool``: the call. ``idempotency_key``:
    the call's key in a durable run (as ``agentloop.idempotency_key()``),
    else ``None``. ``steps``, ``calls``, ``usage`` and ``budget``: the run's
    counters and budget when the call was handed out. ``cancel``: the run's
    ``CancelToken`` (``ctx.cancel.cancelled`` to look; ``ctx.cancel.cancel()``
    stops the run at its next checkpoint), ``None`` in a run given none whose
    tools take no context. ``report_progress`` reports how far the call has come.
    """

    deps: Deps = None  # type: ignore[assignment]  # no deps given: None
    run_id: str | None = None
    call_id: str | None = None
    tool: str | None = None
    idempotency_key: str | None = None
    steps: int = 0
    calls: int = 0
    usage: Usage = attrs.field(factory=Usage)
    budget: Budget | None = None
    cancel: CancelToken | None = None
    _reporter: Reporter | None = attrs.field(default=None, repr=False, eq=False)
    # The run's calls' scope: where an agent tool's child run's result goes (``children``)
    # and its waiting child (``waiting``), the engine that holds its decisions, and a
    # durable run's ledger, where the child is recorded.
    _scope: CallScope | None = attrs.field(default=None, repr=False, eq=False)

    def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Report how far the call has come: ``agentloop.report_progress``, for this call."""
        checked_report(self._reporter, progress, total, message)


class Handed:
    """A call as its driver handed it out: its ``RunContext`` is made when first read.

    Most calls' handlers never read their context, and a ``RunContext`` costs
    a microsecond to make; what the context says as of the hand-out (the
    counters, the usage) is kept here, a handful of references.
    """

    __slots__ = ("_made", "call_id", "calls", "reporter", "scope", "steps", "tool", "usage")

    def __init__(
        self, scope: CallScope | None, call: dict[str, Any], reporter: Reporter | None
    ) -> None:
        self.scope, self.reporter = scope, reporter
        self.call_id: str = call["id"]
        self.tool: str = call["name"]
        self._made: RunContext[Any] | None = None
        if scope is not None:  # the counters as of the hand-out: a batch's others go on
            engine = scope.engine
            self.steps, self.calls, self.usage = engine.steps, engine.calls, engine.usage

    @classmethod
    def given(cls, context: RunContext[Any]) -> Handed:
        """A context made already (an MCP server's call, which has no run; an output check)."""
        handed = cls(None, {"id": context.call_id, "name": context.tool}, context._reporter)
        handed._made = context
        return handed

    @property
    def key(self) -> str | None:
        """The call's idempotency key (``RunContext.idempotency_key``)."""
        made, scope = self._made, self.scope
        if made is not None or scope is None:
            return None if made is None else made.idempotency_key
        return key_of(scope.run_id, self.call_id)

    def context(self) -> RunContext[Any]:
        """The call's ``RunContext``, made once."""
        made = self._made
        if made is None:
            scope = self.scope
            assert scope is not None, "a context given is made already"
            self._made = made = RunContext(
                deps=scope.deps,
                run_id=scope.run_id,
                call_id=self.call_id,
                tool=self.tool,
                idempotency_key=self.key,
                steps=self.steps,
                calls=self.calls,
                usage=self.usage,
                budget=scope.engine.budget,
                cancel=scope.cancel,
                reporter=self.reporter,
                scope=scope,
            )
        return made


#: The call whose handler (or policy) runs here (a task or thread gets a copy).
RUN_CONTEXT: Final[ContextVar[Handed | None]] = ContextVar("agentloop_run_context", default=None)
#: What a tool called outside any run (a registry dispatched on its own) is given.
NO_RUN: Final[RunContext[Any]] = RunContext()


def current_context() -> RunContext[Any] | None:
    """The ``RunContext`` of the call being run or reviewed here, or ``None`` outside one.

    For a dispatcher of one's own (``Loop(tools=obj)`` with ``obj.dispatch``),
    which is handed the call and no context parameter.
    """
    handed = RUN_CONTEXT.get()
    return None if handed is None else handed.context()


def context_here() -> RunContext[Any]:
    """The context a handler or policy taking one is given: ``NO_RUN`` outside any run."""
    handed = RUN_CONTEXT.get()
    return NO_RUN if handed is None else handed.context()


def idempotency_key() -> str | None:
    """The idempotency key of the call being run: ``f"{run_id}:{call_id}"``, or ``None``.

    A ``%`` or ``:`` in the call id is written ``%25`` or ``%3A``, so that no
    two calls of two runs share a key (provider ids have neither).

    Inside a tool handler of a durable run (``Loop(..., ledger=...)``) this is
    the same string every time the call runs, in any process: pass it to an
    external system that deduplicates (an ``Idempotency-Key`` header, a unique
    column) so that a re-run after a crash has no second effect. Anywhere
    else (no ledger, outside a handler) it is ``None``. ``ctx.idempotency_key``
    is the same string.
    """
    handed = RUN_CONTEXT.get()
    return None if handed is None else handed.key


def report_progress(
    progress: float, total: float | None = None, message: str | None = None
) -> None:
    """Report how far the running tool call has come: delta listeners (or an MCP client) hear it.

    ``progress`` must increase with each report of a call (MCP requires it);
    ``total``, when given, is what it counts towards; ``message`` says what is
    happening. Numbers are finite ints or floats. Outside a tool handler of a
    run or of ``agentloop.mcp.serve`` it does nothing. It never raises for a
    listener's fault (logged instead); it raises ``TypeError`` or
    ``ValueError`` for a report that is wrong.
    """
    checked_report(current_reporter(), progress, total, message)


def current_reporter() -> Reporter | None:
    """Where the running call's progress goes, if anywhere (an MCP client call forwards it)."""
    handed = RUN_CONTEXT.get()
    return None if handed is None else handed.reporter


def key_of(run_id: str | None, call_id: str) -> str | None:
    """A call's idempotency key in the run ``run_id`` (``None``: not a durable run).

    ``f"{run_id}:{esc(call_id)}"``, where ``esc`` writes ``%`` as ``%25`` and
    ``:`` as ``%3A``: the escaped call id has no ``':'``, so the key's last
    ``':'`` ends the run id, and a plain run ``u``'s call ``":2:x"`` is not
    turn ``u::2``'s call ``"x"``. Provider ids hold neither character, so
    their keys read as ``f"{run_id}:{call_id}"``.
    """
    if run_id is None:
        return None
    return f"{run_id}:{esc(call_id)}"


def esc(call_id: str) -> str:
    """``call_id`` with ``%`` written ``%25`` and ``:`` written ``%3A``: an id with no ``':'``."""
    return call_id.replace("%", "%25").replace(":", "%3A")


def in_context(
    dispatch: Callable[..., Any],
    listeners: list[Callable[[Any], object]],
    scope: CallScope,
) -> Callable[..., Any]:
    """``dispatch`` with each call's context set around it: its progress goes to ``listeners``.

    It holds the run's list of listeners, not the run: a run dropped is collected at once.
    """

    def tell(item: Any) -> None:
        for listener in listeners:
            hear(listener, item)

    def dispatch_in_context(call: dict[str, Any], **options: object) -> Any:
        # Set inside the try, and put back by value: a Ctrl-C landing as set() returns
        # would leave no token to reset, and the context would outlive its call.
        previous = RUN_CONTEXT.get()
        try:
            RUN_CONTEXT.set(Handed(scope, call, Reporter(call["id"], tell)))
            return dispatch(call, **options)
        finally:
            RUN_CONTEXT.set(previous)

    return dispatch_in_context


class ain_context:
    """``in_context`` for an async ``dispatch``, whose ``listeners`` say if they are ``async``.

    The context is set in the call's own task, and progress told on the run's
    loop: an async listener hears in a task of its own, and the call's
    outcome is handed on once those tasks are done, so that no report is
    heard after it. One object with slots, not closures: a run in flight
    holds it, and each object a run holds is one more the garbage
    collector's full collections walk for every run at once.
    """

    __slots__ = ("_dispatch", "_hearing", "_listeners", "_scope")

    def __init__(
        self,
        dispatch: Callable[..., Any],
        listeners: list[tuple[Callable[[Any], object], bool]],
        scope: CallScope,
    ) -> None:
        self._dispatch, self._listeners, self._scope = dispatch, listeners, scope
        # The async listeners' tasks still hearing a report: made with the first of them.
        self._hearing: set[asyncio.Future[object]] | None = None

    def _tell(self, item: Any) -> None:
        for listener, awaited in self._listeners:
            heard = hear(listener, item)
            if awaited and heard is not None:
                if self._hearing is None:
                    self._hearing = set()
                task = asyncio.ensure_future(cast("Awaitable[object]", heard))
                self._hearing.add(task)
                task.add_done_callback(self._hearing.discard)
                task.add_done_callback(logged)

    async def __call__(self, call: dict[str, Any], **options: object) -> Any:
        previous = RUN_CONTEXT.get()  # put back by value, as in ``in_context``
        try:
            reporter = Reporter(call["id"], self._tell, asyncio.get_running_loop())
            RUN_CONTEXT.set(Handed(self._scope, call, reporter))
            outcome = await self._dispatch(call, **options)
        finally:
            RUN_CONTEXT.set(previous)
        if self._hearing:
            await asyncio.wait(set(self._hearing))
        return outcome


def timed_out_child(exc: TimeoutError) -> dict[str, Any] | None:
    """The outcome of the call being run, cut by its ``tool_timeout`` (``exc``) once its child ran.

    The ``error`` the engine makes of the exception, with the tokens the
    agent tool's child run spent (its result, kept by call id before the
    timeout reached the driver): they roll into the parent's usage as an
    answered child's do. ``None`` when no child ran under the call.
    """
    handed = RUN_CONTEXT.get()
    if handed is None or handed.scope is None:
        return None
    child = handed.scope.children.get(handed.call_id)
    if child is None:
        return None
    return {
        "status": "error",
        "content": exception_content(exc),
        "exception": exc,
        "usage": child.usage._asdict(),
    }


def in_context_reviews(
    review: Callable[[dict[str, Any]], Any], scope: CallScope
) -> Callable[[dict[str, Any]], Any]:
    """``review`` (the policies' review of a call), each call reviewed in its context."""
    return lambda call: reviewed_in(scope.handed(call), review, call)


def ain_context_reviews(
    review: Callable[[dict[str, Any]], Awaitable[Any]], scope: CallScope
) -> Callable[[dict[str, Any]], Awaitable[Any]]:
    """``in_context_reviews`` for an async ``review``: set in the task that awaits each."""
    return lambda call: areviewed_in(scope.handed(call), review(call))


def reviewed_in(
    context: Handed, review: Callable[[dict[str, Any]], Any], call: dict[str, Any]
) -> Any:
    """``review(call)`` (the policies' review of one call) with ``call``'s ``context`` set."""
    previous = RUN_CONTEXT.get()
    try:
        RUN_CONTEXT.set(context)
        return review(call)
    finally:
        RUN_CONTEXT.set(previous)


async def areviewed_in(context: Handed, review: Awaitable[Any]) -> Any:
    """``reviewed_in`` for an awaitable review: the context set in the task that awaits it."""
    previous = RUN_CONTEXT.get()
    try:
        RUN_CONTEXT.set(context)
        return await review
    finally:
        RUN_CONTEXT.set(previous)
