"""``Loop``: a run's configuration (a model, its tools, budgets), and where runs start.

``start``/``run`` hand a fresh engine to the synchronous driver,
``astart``/``arun`` to the asyncio one. A ``Loop`` is reusable: every run has
its own counters, reserved ids and history. With a ``ledger``, each run is
durable (``agentloop._durable``): the engine records as it goes, and
``resume``/``aresume`` continue a run from its records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, overload

from typing_extensions import TypeVar, Unpack

from agentloop._core.approval import Decisions
from agentloop._core.context_policy import ContextPolicy
from agentloop._core.retry_policy import RetryPolicy
from agentloop._core.values import Budget, CancelToken, OnExhausted, OutputT, RunResult
from agentloop._drivers.asyncio import AsyncRun
from agentloop._drivers.callbacks import Dispatcher, Listener, Model, bind_model
from agentloop._drivers.sync import Run
from agentloop._drivers.tool_calls import asyncio_dispatch
from agentloop._durable.protocol import Ledger
from agentloop._loop.agent_tool import AsTool
from agentloop._loop.continued import read_ended, release_claim, released_on_error
from agentloop._loop.conversation import Conversations, turn_engine
from agentloop._loop.deps import checked_deps_type
from agentloop._loop.engines import continued_engine, forked_engine, resumed_engine
from agentloop._loop.fallback import Fallback
from agentloop._loop.output_checks import Validators
from agentloop._loop.owner import Owner
from agentloop._loop.running import async_run, children_of, sync_run
from agentloop._loop.settings import (
    DEFAULT,
    AnyOptions,
    Default,
    LoopOptions,
    asyncio_only,
    checked_bool,
    checked_context,
    checked_ledger,
    checked_listeners,
    checked_model,
    checked_retry,
    checked_system,
    checked_tool_names,
    concurrency,
    default_retry,
    for_sync_driver,
    name_rules,
    single_attempts,
    specs_of,
    timeout,
    timeout_bites,
)
from agentloop._loop.team import Handoff, Handoffs
from agentloop._tools.dispatcher import as_dispatcher
from agentloop._tools.output_type import output_schema
from agentloop._tools.registry import ToolRegistry

__all__ = ["Loop"]


#: What each run is given as ``deps=``: second, with a default, so Loop[City] keeps its meaning.
DepsT = TypeVar("DepsT", default=Any)
#: The output and deps types an overload of ``Loop.__init__`` reads (``output=``, ``deps_type=``).
_T = TypeVar("_T")
_D = TypeVar("_D")


class Loop(Owner, Conversations[OutputT], AsTool, Handoffs, Generic[OutputT, DepsT]):
    """Configuration for runs: a model, its tools and its budgets. Reusable.

    Generic in its output: ``Loop(model)`` is a ``Loop[str]``, ``Loop(model,
    output=City)`` a ``Loop[City]`` (its results are ``RunResult[City]``), and
    an ``output`` that is not a class (a union, a JSON Schema) a ``Loop[Any]``;
    and in its ``deps_type``: ``Loop(model, deps_type=D)`` is a ``Loop[str, D]``.

    ``max_steps`` bounds the model calls of a run (failed and malformed ones
    included), ``max_calls`` its accepted tool calls (whatever their outcome);
    a run that would pass either ends ``exhausted``. ``max_total_tokens``
    (optional) ends a run ``exhausted`` before a model call once the tokens
    its replies reported (``usage``) reach it.
    ``tools`` is a mapping of name to handler or a list of ``Tool`` objects and
    handlers (either becomes a ``ToolRegistry``), a ``ToolRegistry``, or any
    object with ``dispatch(call) -> {'status': ..., 'content': ...}``.
    ``listeners`` are called with each transition of every run; one that
    raises does so from ``step()``/``finish()``/``run()`` after the transition
    was made, and the run, consistent, goes on when finished again.
    ``system`` (a str) is the system prompt: every run's input starts with
    ``{'kind': 'system', 'text': system}`` (an input that starts with that
    same message, a previous run's transcript, is taken as it is; one that
    starts with another system message is refused).
    ``model_timeout`` and ``tool_timeout`` (seconds) bite on an awaited model or tool (an
    ``async def`` one, which ``run`` awaits on an event loop of the run's own, or a
    ``to_thread`` one); a ``tool_timeout`` over a registry's plain tool, which it could not
    interrupt, is refused with a ``ValueError`` naming the tool. ``to_thread`` (run plain
    callables in a worker thread) and ``max_concurrency`` (run up to that many calls of a batch
    at once; 1 runs them one at a time) need the asyncio driver: a synchronous run cannot run
    two calls at once, so ``start``/``run`` refuse them. Unless given, ``max_concurrency`` is 10
    under asyncio, and a synchronous run runs one call at a time. A model that takes a keyword
    parameter ``tools`` is called ``model(history, tools=specs)``, the specs of the tools
    (``{'name', 'description', 'parameters'}`` each) made for every request. ``output`` (a type,
    or a JSON Schema as a dict) asks for a typed final answer: its text must be JSON that
    matches ``output``'s schema, and ``RunResult.output`` is the value as that type; an invalid
    one goes back to the model up to ``max_output_retries`` times (each a model step), then the
    run ends ``invalid_output``; ``output_validators`` (``fn(value[, ctx])``, raising
    ``agentloop.Retry(why)``) check a final further (the docs' "Typed output" page).
    ``on_exhausted='answer'`` gives a run whose budget runs out one last model step with tools
    disabled, to answer; ``max_identical_calls=N`` refuses a tool called with the same arguments
    more than ``N`` times (the docs' "Loop guard and wrap-up" page). ``ledger`` (an
    ``agentloop.ledger.SQLiteLedger``, or any ``Ledger``) makes every run durable: recorded as
    it goes, and continued after a crash by ``resume(run_id)``. ``context``
    (``agentloop.context.keep_last(tokens=...)`` or ``summarise(model, tokens=...)``) fits each
    model request to a context window in whole turns; the record keeps the whole history.
    ``retry`` (an ``agentloop.models.RetryPolicy``, or ``None`` for none) retries a model that
    failed with a passing error (a rate limit, a 5xx, a timeout, a lost connection) after a
    wait; unless given, the provider adapters' models get ``RetryPolicy()`` and plain callbacks
    none. ``model`` may be ``agentloop.models.fallback(primary, secondary, ...)``: models asked
    in turn. See the docs' "Resilience" page. ``owns`` are context managers the Loop opens and
    closes (MCP servers, say): ``with loop:`` (or ``async with``) opens each in order and closes
    them in reverse. ``deps_type`` is the type of each run's ``deps=``, which its tools read in
    their ``RunContext`` (the docs' "Dependencies" page). ``name`` (by default, its model's) and
    ``handoffs`` (``agentloop.handoff(loop)`` each) make it an agent of a team (docs: "Handoffs").
    """

    @overload
    def __init__(
        self: Loop[str],
        model: Model | Fallback,
        *,
        output: None = None,
        **options: Unpack[LoopOptions],
    ) -> None: ...
    @overload
    def __init__(
        self: Loop[_T], model: Model | Fallback, *, output: type[_T], **options: Unpack[LoopOptions]
    ) -> None: ...
    @overload
    def __init__(
        self: Loop[str, _D],
        model: Model | Fallback,
        *,
        output: None = None,
        deps_type: type[_D],
        **options: Unpack[LoopOptions],
    ) -> None: ...
    @overload
    def __init__(
        self: Loop[_T, _D],
        model: Model | Fallback,
        *,
        output: type[_T],
        deps_type: type[_D],
        **options: Unpack[LoopOptions],
    ) -> None: ...
    @overload
    def __init__(
        self: Loop[Any], model: Model | Fallback, *, output: object, **options: Unpack[AnyOptions]
    ) -> None: ...
    def __init__(
        self,
        model: Model | Fallback,
        *,
        tools: object = None,
        system: str | None = None,
        max_steps: int = 25,
        max_calls: int = 100,
        max_total_tokens: int | None = None,
        listeners: Iterable[Listener] = (),
        model_timeout: float | None = None,
        tool_timeout: float | None = None,
        to_thread: bool = False,
        max_concurrency: int | None = None,
        ledger: Ledger | None = None,
        context: ContextPolicy | None = None,
        retry: RetryPolicy | Default | None = DEFAULT,
        output: object = None,
        max_output_retries: int = 1,
        output_validators: Iterable[Callable[..., Any]] = (),
        on_exhausted: OnExhausted = "stop",
        max_identical_calls: int | None = None,
        owns: Iterable[object] = (),
        deps_type: object = None,
        name: str | None = None,
        handoffs: Iterable[Handoff[OutputT]] = (),
    ) -> None:
        models: tuple[Model, ...] = model.models if isinstance(model, Fallback) else (model,)
        if not isinstance(model, Fallback):
            checked_model(model)
        self.model = model
        self.dispatcher: Dispatcher = as_dispatcher(tools)
        #: The rules for tool names of the models' providers (the adapters declare them).
        self._name_rules = name_rules(models)
        checked_tool_names(self._name_rules, self.dispatcher)
        self._model_names = model.names if isinstance(model, Fallback) else ()
        self.retry = default_retry(models) if retry is DEFAULT else checked_retry(retry)
        if self.retry is not None:  # one layer retries: an adapter's SDK makes one attempt
            models = single_attempts(models)
        #: The final's schema and converter (``output=T``), or None: text (``output=str`` too).
        self.output = None if output is None or output is str else output_schema(output)
        self.output_validators = Validators(output_validators)  # checks of a final, in order
        self.budget = Budget(
            max_steps=max_steps,
            max_calls=max_calls,
            max_total_tokens=max_total_tokens,
            max_output_retries=max_output_retries,
            max_identical_calls=max_identical_calls,
            on_exhausted=on_exhausted,
        )
        specs = self._with_handoffs(specs_of(self.dispatcher))  # what bind_model offers a model
        requested = None if self.output is None else self.output.request()
        self._bound_models = tuple(
            bind_model(one, specs, requested, wraps_up=on_exhausted == "answer") for one in models
        )
        self._bound_model = self._bound_models[0]
        self.listeners = checked_listeners(listeners)
        self.model_timeout = timeout("model_timeout", model_timeout)
        self.tool_timeout = timeout("tool_timeout", tool_timeout)
        self.to_thread = checked_bool("to_thread", to_thread)
        timeout_bites(self.dispatcher, self.tool_timeout, self.to_thread)
        self.system = checked_system(system)
        self.max_concurrency = concurrency(max_concurrency)
        # What only asyncio can do, and why a sync run cannot (the first three: no loop of its own).
        self._asyncio_only = asyncio_only(
            models[0], self.model_timeout, self.tool_timeout, self.to_thread, max_concurrency
        )
        self._adispatch = asyncio_dispatch(
            self.dispatcher, to_thread=to_thread, tool_timeout=self.tool_timeout
        )
        self.ledger = checked_ledger(ledger)
        self.context = checked_context(context)
        Owner.__init__(self, owns)
        self.deps_type: Any = checked_deps_type(deps_type, self.dispatcher, self.output_validators)
        Handoffs.__init__(self, name, model, handoffs)  # each checked against this Loop

    def __repr__(self) -> str:
        return (
            f"Loop({self.model!r}, tools={self.dispatcher!r}, "
            f"max_steps={self.budget.max_steps}, max_calls={self.budget.max_calls})"
        )

    def start(
        self,
        messages: str | list[dict[str, Any]],
        *,
        cancel: CancelToken | None = None,
        deps: DepsT | None = None,
        run_id: str | None = None,
        after: RunResult | None = None,
        conversation: str | None = None,
    ) -> Run[OutputT]:
        """Begin a run driven by ``step()``; bad input raises here, before any model call.

        With a ledger, the run is recorded under ``run_id`` (a fresh one when
        not given: ``run.run_id``); ``RunExistsError`` if it is taken. ``deps``
        are the run's dependencies, which its tools read as ``ctx.deps``
        (``RunContext``); never recorded, so ``resume`` and the others take them too.
        ``after=`` or ``conversation=``: a conversation's next turn (the docs' "Conversations").
        """
        registry = self._sync_driver("loop.arun or loop.astart", awaits=True)
        engine, cancel = turn_engine(self, messages, cancel, run_id, deps, after, conversation)
        with released_on_error(engine):
            return sync_run(self, engine, registry, cancel, deps)

    def run(
        self,
        messages: str | list[dict[str, Any]],
        *,
        cancel: CancelToken | None = None,
        deps: DepsT | None = None,
        run_id: str | None = None,
        after: RunResult | None = None,
        conversation: str | None = None,
    ) -> RunResult[OutputT]:
        """Run to a terminal state and return the result (``start``'s notes)."""
        # start()'s body, not start().finish(): the claim is given up if finishing raises too
        registry = self._sync_driver("loop.arun or loop.astart", awaits=True)
        engine, cancel = turn_engine(self, messages, cancel, run_id, deps, after, conversation)
        with released_on_error(engine):
            return sync_run(self, engine, registry, cancel, deps).finish()

    def resume(
        self,
        run: str | RunResult,
        *,
        cancel: CancelToken | None = None,
        deps: DepsT | None = None,
        decisions: Decisions | None = None,
    ) -> RunResult[OutputT]:
        """Continue a run to its end: the recorded run ``run`` (an id), or a saved result.

        By id (a Loop with a ledger): recorded replies and outcomes are fed to
        a fresh engine, never asked for or run again, and a run that ended is
        only read. By ``RunResult`` (``load_run(path)``, a Loop without a
        ledger): its events are replayed into a fresh engine, and a result
        that ended is returned as it is (a typed output made this Loop's type).
        Either way a run that has not ended goes on with this Loop's model and
        tools; a run awaiting approval takes ``decisions`` (as ``run.decide``),
        and without them stays paused, which its result says. See the docs'
        "Durable runs and approval" page.
        """
        registry = self._sync_driver("loop.aresume", awaits=True)
        engine, token = resumed_engine(self, "resume", run, cancel, deps)
        if engine.done:
            return read_ended(engine, run, decisions, self)
        with released_on_error(engine):
            live = sync_run(self, engine, registry, token, deps, children_of(run))
            if decisions is not None:
                live.decide(decisions)
            return live.finish()

    def continue_run(
        self,
        run: str | RunResult,
        *,
        cancel: CancelToken | None = None,
        deps: DepsT | None = None,
        run_id: str | None = None,
        continues: str | None = None,
    ) -> RunResult[OutputT]:
        """A new run that goes on from a ``failed`` or ``exhausted`` run's transcript.

        ``run`` is the old run's result, or its id in this Loop's ledger. The
        new run's input is the old run's transcript (every message it got
        and made; a reply that ended it unrecorded is not among them), and
        it starts with this Loop's budgets afresh: ``max_steps`` and the
        others bound the new run alone, not the two together. It is linked to
        the old one: its result's ``continues`` is the old run's id (the
        id given, or a durable run's result's ``run_id``, or ``continues=``), kept in
        its run file and shown by ``show`` and the report. With a ledger the
        new run is durable, under ``run_id`` (a fresh one when not given).
        """
        registry = self._sync_driver("loop.acontinue_run", awaits=True)
        engine, cancel = continued_engine(self, run, cancel, run_id, continues, deps)
        with released_on_error(engine):
            return sync_run(self, engine, registry, cancel, deps).finish()

    async def acontinue_run(
        self,
        run: str | RunResult,
        *,
        cancel: CancelToken | None = None,
        deps: DepsT | None = None,
        run_id: str | None = None,
        continues: str | None = None,
    ) -> RunResult[OutputT]:
        """``continue_run`` under asyncio."""
        engine, cancel = continued_engine(self, run, cancel, run_id, continues, deps)
        with released_on_error(engine):
            return await async_run(self, engine, cancel, deps).afinish()

    def fork(
        self,
        run: str | RunResult,
        *,
        at: int,
        cancel: CancelToken | None = None,
        deps: DepsT | None = None,
        run_id: str | None = None,
    ) -> Run[OutputT]:
        """A new run that starts as ``run`` was after its first ``at`` transitions.

        ``run`` is a result (``load_run(path)``, a finished run's, a paused
        one's), or a run's id in this Loop's ledger, read as its records stand;
        the fork's ``continues`` is that run's id when it was durable. Its
        first ``at`` events are replayed under this Loop's budget,
        and ``step()``/``finish()`` go on with this Loop's model and tools: to
        try another model or tool from any point of a run. With a ledger the
        fork is a durable run of its own, under ``run_id`` (a fresh one when
        not given), whose replayed part is recorded as it is fed. A cut where
        a batch's calls are running, or that this budget cannot replay, raises
        ``ValueError``. See the docs' "Reviewing runs" page.
        """
        registry = self._sync_driver("loop.afork", awaits=True)
        engine, token, children = forked_engine(self, run, "fork", at, cancel, run_id, deps)
        with released_on_error(engine):
            return sync_run(self, engine, registry, token, deps, children)

    def afork(
        self,
        run: str | RunResult,
        *,
        at: int,
        cancel: CancelToken | None = None,
        deps: DepsT | None = None,
        run_id: str | None = None,
    ) -> AsyncRun[OutputT]:
        """``fork`` under asyncio: the new run is driven by ``await run.astep()``."""
        engine, token, children = forked_engine(self, run, "afork", at, cancel, run_id, deps)
        with released_on_error(engine):
            return async_run(self, engine, token, deps, children)

    def astart(
        self,
        messages: str | list[dict[str, Any]],
        *,
        cancel: CancelToken | None = None,
        deps: DepsT | None = None,
        run_id: str | None = None,
        after: RunResult | None = None,
        conversation: str | None = None,
    ) -> AsyncRun[OutputT]:
        """Begin a run driven by ``await run.astep()`` (or ``async for``) under asyncio."""
        engine, cancel = turn_engine(self, messages, cancel, run_id, deps, after, conversation)
        with released_on_error(engine):
            return async_run(self, engine, cancel, deps)

    async def arun(
        self,
        messages: str | list[dict[str, Any]],
        *,
        cancel: CancelToken | None = None,
        deps: DepsT | None = None,
        run_id: str | None = None,
        after: RunResult | None = None,
        conversation: str | None = None,
    ) -> RunResult[OutputT]:
        """Run to a terminal state under asyncio and return the result (``start``'s notes)."""
        engine, cancel = turn_engine(self, messages, cancel, run_id, deps, after, conversation)
        try:  # not ``released_on_error``: it and its ``__exit__`` are two objects a run holds
            return await async_run(self, engine, cancel, deps).afinish()
        except BaseException:
            release_claim(engine)
            raise

    async def aresume(
        self,
        run: str | RunResult,
        *,
        cancel: CancelToken | None = None,
        deps: DepsT | None = None,
        decisions: Decisions | None = None,
    ) -> RunResult[OutputT]:
        """``resume`` under asyncio: the run goes on with the asyncio driver."""
        engine, token = resumed_engine(self, "aresume", run, cancel, deps)
        if engine.done:
            return read_ended(engine, run, decisions, self)
        with released_on_error(engine):
            live = async_run(self, engine, token, deps, children_of(run))
            if decisions is not None:
                await live.adecide(decisions)
            return await live.afinish()

    def _sync_driver(self, instead: str, *, awaits: bool = False) -> ToolRegistry | None:
        """``for_sync_driver`` for this Loop, read on every run: the run made next takes it."""
        return for_sync_driver(self._asyncio_only, self.dispatcher, instead, awaits=awaits)
