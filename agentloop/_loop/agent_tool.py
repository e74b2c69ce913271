"""``AgentTool``: a ``Loop`` as a tool of another ``Loop`` (``loop.as_tool``).

The model's arguments are the child run's input; the child's output is the
call's result. To the parent's engine an agent call is a call like any other:
reserved, counted as one call, answered and appended with its batch. The
child is a run of its own, with its own ``max_steps`` and ``max_calls``,
driven as its parent is (synchronously, or under asyncio) under the parent's
``CancelToken``:

* its usage rolls into the parent's (the ``tool_returned`` event that answers
  the call carries it), and the parent's ``max_total_tokens`` bounds both: the
  child starts with what the parent has left of it;
* a cancel stops the child at its own checkpoints; its calls are answered,
  and the parent's call is answered ``cancelled`` as the parent ends so;
* a child that ends otherwise than ``finished`` answers the call with an
  ``error`` naming the child's status and why (``ChildRunEnded``);
* its deltas, progress and transitions reach the parent's delta listeners as
  ``Nested((call_id, ...), item)``;
* its result is kept on the parent's, in ``children``, by call id;
* a child that stops for a person makes its call wait (``Waiting``): its
  pending calls are pending in the parent, under the call's id, and the
  parent waits too. Decided there (``PendingCall.key``), the call is handed
  out again with its child's decisions (``engine.delegated``), and the child
  goes on from its waiting result (``_waiting_child``), which answers the call.

Under a durable parent (``Loop(ledger=...)``) the child is recorded in the
parent's ledger, under an id derived from the parent's run id and call id,
and a resume of the parent resumes it where it was (``child_runs.py``). A
child Loop has no ledger of its own. A driver may run the child itself
(``CallScope.run_child``): a ``DBOSLoop`` runs it as a DBOS child workflow
(``agentloop._dbos.child_workflows``), and the call is answered here from its
result (``_answer``): a child that waits for a person waits in its own
workflow, and the parent's ``pending`` and ``decide`` reach it there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import attrs
import orjson

from agentloop._core.engine import Engine
from agentloop._core.table import State
from agentloop._core.values import CancelToken
from agentloop._drivers.callbacks import TokenCancelled
from agentloop._drivers.child_answers import ChildRunEnded, ended_content
from agentloop._drivers.child_waits import Waiting
from agentloop._drivers.delegation import Nested
from agentloop._drivers.run_context import NO_RUN, RunContext, current_context
from agentloop._durable.recording import DurableEngine
from agentloop._loop.child_runs import (
    child_result,
    durable_child,
    had_child,
    recorded_in,
    under,
    waiting_child,
)
from agentloop._loop.continued import release_claim, released_on_error
from agentloop._loop.deps import for_run
from agentloop._loop.engines import check_ready, make_resilient, plain_engine
from agentloop._loop.running import async_run, sync_run
from agentloop._loop.settings import run_input
from agentloop._review.runstory import reopen
from agentloop._tools.output_type import output_schema
from agentloop._tools.results import Answered, failed, returned
from agentloop._tools.tool import Tool

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from agentloop._core.approval import Decisions, Policy
    from agentloop._core.output_schema import OutputSchema
    from agentloop._core.values import Budget, RunResult
    from agentloop._drivers.progress import Reporter
    from agentloop._drivers.transition import RunView
    from agentloop._durable.protocol import Ledger
    from agentloop._loop.loop import Loop

__all__ = ["AgentTool", "AsTool", "ChildRunEnded"]

_NO_CHILDREN: Final[dict[str, Any]] = {}

#: The arguments of an agent tool: the text the child run starts from.
INPUT_SCHEMA: Final = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "What to ask the agent."}},
    "required": ["input"],
    "additionalProperties": False,
}


class AgentTool(Tool):
    """A tool whose call runs ``loop`` (the child) on the model's ``input``: see the module."""

    __slots__ = ("_deps", "_input", "_prompt", "loop")

    def __init__(
        self,
        loop: Loop[Any],
        *,
        name: str,
        description: str,
        input: object = None,
        prompt: Callable[[Any], str] | None = None,
        deps: Callable[[RunContext[Any]], object] | None = None,
        policy: Policy | None = None,
        max_result_chars: int | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"expected as_tool's name to be a non-empty str, got {name!r:.80}")
        if not isinstance(description, str):
            raise TypeError(
                f"agent tool {name!r}: expected description to be a str, "
                f"got {type(description).__name__}"
            )
        if loop.ledger is not None:
            raise ValueError(
                f"agent tool {name!r}: its Loop has a ledger; a child run is recorded in its "
                "parent's ledger, when the parent has one: make the child's Loop without one"
            )
        if prompt is not None and (input is None or not callable(prompt)):
            raise TypeError(
                f"agent tool {name!r}: expected prompt to be a function of the input= type's "
                f"value, given with input=, got {prompt!r:.80}"
                + (" without input=" if input is None else "")
            )
        #: The arguments' type (``input=``), as a schema and converter; None: ``{"input": str}``.
        self._input = None if input is None else _input_schema(name, input)
        self._prompt = prompt
        if deps is not None and not callable(deps):
            raise TypeError(
                f"agent tool {name!r}: expected deps to be a function of the parent call's "
                f"RunContext, got {type(deps).__name__}"
            )
        self._deps = deps  # the child's deps from the parent's call context (None: its deps)
        super().__init__(
            self._call,
            name=name,
            description=description,
            parameters=INPUT_SCHEMA if self._input is None else self._input.schema,
            policy=policy,
            max_result_chars=max_result_chars,
            idempotent=True,  # run again, it resumes the same child (a durable parent's)
        )
        self.loop = loop

    def __repr__(self) -> str:
        return f"AgentTool({self.name!r})"

    def _call(self, **arguments: Any) -> Answered | Awaitable[Answered]:
        """Run the child: under asyncio (its coroutine, awaited by the registry) or here."""
        ctx = current_context()
        scope = None if ctx is None else ctx._scope
        if scope is not None and scope.run_child is not None and ctx is not None:
            input = self._text(arguments)  # the driver's own child (a DBOS child workflow):
            result = scope.run_child(self, input, ctx)
            scope.children[str(ctx.call_id)] = result
            return self._answer(result, ctx)
        reporter = None if ctx is None else ctx._reporter
        if reporter is not None and reporter.loop is not None:
            return self._arun(arguments, ctx)  # type: ignore[arg-type]  # a run's, with a reporter
        child = self.loop
        registry = child._sync_driver("an asyncio parent (loop.arun)", awaits=True)
        try:
            input, given = self._text(arguments), self._given(ctx)
        except Exception as exc:  # noqa: BLE001 - the call's error, the child's tokens with it
            return self._unbegun(exc, ctx)
        with recorded_in(ctx):
            engine, cancel, deps, children, decisions = self._child(input, ctx, given)
            if engine.done:  # a durable child that had ended: its recorded result answers
                return self._answer(_ended(self.loop, engine, ctx), ctx)
            with released_on_error(engine):  # its driver unwound: nothing holds the claim
                run = sync_run(child, engine, registry, cancel, deps, children)
                if reporter is not None:
                    run.subscribe(_forwarding(reporter))
                    run.subscribe_deltas(_forwarding(reporter))
                try:
                    if decisions is not None:
                        run.decide(decisions)
                    return self._answer(run.finish(), ctx)
                finally:
                    _kept(run, ctx)

    def _text(self, arguments: dict[str, Any]) -> str:
        """The child's input: the ``input`` text, or ``prompt(value)``, or the arguments' JSON."""
        schema = self._input
        if schema is None:
            return arguments["input"]  # type: ignore[no-any-return]  # the schema's str
        if self._prompt is None:
            return orjson.dumps(arguments).decode()
        value = arguments if schema.convert is None else schema.convert(arguments)
        text = self._prompt(value)
        if not isinstance(text, str):
            raise TypeError(f"expected prompt= to return a str, got {type(text).__name__}")
        return text

    async def _arun(self, arguments: dict[str, Any], ctx: RunContext[Any]) -> Answered:
        """The child, run under asyncio as its parent is."""
        try:
            input, given = self._text(arguments), self._given(ctx)
        except Exception as exc:  # noqa: BLE001 - the call's error, the child's tokens with it
            return self._unbegun(exc, ctx)
        with recorded_in(ctx):
            engine, cancel, deps, children, decisions = self._child(input, ctx, given)
            if engine.done:
                return self._answer(_ended(self.loop, engine, ctx), ctx)
            try:  # not ``released_on_error``, as ``Loop.arun``: a coroutine's frame holds it
                run = async_run(self.loop, engine, cancel, deps, children)
                reporter: Reporter = ctx._reporter  # type: ignore[assignment]  # asyncio: one
                run.subscribe(_forwarding(reporter))
                run.subscribe_deltas(_forwarding(reporter))
                try:
                    if decisions is not None:
                        await run.adecide(decisions)
                    return self._answer(await run.afinish(), ctx)
                finally:  # interrupted too (the parent's task cancelled while the child ran)
                    _kept(run, ctx)
            except BaseException:
                release_claim(engine)  # its driver unwound: nothing holds the claim
                raise

    def _given(self, ctx: RunContext[Any] | None) -> tuple[object, CancelToken | None]:
        """The child's deps (the parent's, or ``deps(ctx)``), checked for its tools; its token."""
        deps, cancel = (None, None) if ctx is None else (ctx.deps, ctx.cancel)
        if self._deps is not None:
            deps = self._deps(NO_RUN if ctx is None else ctx)
        return deps, for_run(self.loop, deps, cancel)

    def _unbegun(self, exc: Exception, ctx: RunContext[Any] | None) -> Answered:
        """The outcome of a call whose child could not go on: its input or its deps failed.

        A child the call has already (one that waited for a person, or a durable one a
        crash cut) is ended ``cancelled`` with its parent, as a waiting child is; its
        tokens count, as any agent call's do, so the outcome reports them. One that had
        ended answers from its record, as when its call runs again.
        """
        scope = None if ctx is None else ctx._scope
        if scope is None or ctx is None or ctx.call_id is None:
            raise exc
        ledger = _ledger_of(ctx)
        if ledger is not None:
            ended, had = had_child(self.loop, ledger, (str(scope.run_id), ctx.call_id))
            if ended is not None:
                return self._answer(_ended(self.loop, ended, ctx), ctx)
        elif scope.engine.delegated(ctx.call_id) is not None:  # its child waited, in memory
            had = scope.children[ctx.call_id]
        else:
            had = None
        if had is None:
            raise exc
        return Answered({**failed(exc), "usage": had.usage._asdict()})

    def _child(
        self, input: str, ctx: RunContext[Any] | None, given: tuple[object, CancelToken | None]
    ) -> tuple[Engine, CancelToken | None, object, Mapping[str, Any], Decisions | None]:
        """What the call's child run is driven from: a fresh engine, or the waiting child's.

        With its token, deps (``given``: ``_given``'s), the results of its own children so
        far, and the decisions to take first (``None``: a fresh child decides nothing). A
        call handed out again after its child waited (``engine.delegated``
        holds the decisions a person took) goes on from that child
        (``_waiting_child``); any other starts one (``_engine``).
        """
        child = self.loop
        check_ready(child)
        deps, cancel = given
        scope = None if ctx is None else ctx._scope
        if scope is not None and ctx is not None and ctx.call_id is not None:
            decisions = scope.engine.delegated(ctx.call_id)
            if decisions is not None:
                scope.waiting.pop(ctx.call_id, None)  # its live run, which waited: gone on from
                ledger = _ledger_of(ctx)
                if ledger is not None:  # the durable child, from the parent's ledger
                    caller = (str(ctx.run_id), ctx.call_id)
                    resumed, cancel, left = waiting_child(child, ledger, caller, cancel, decisions)
                    return under(resumed, scope.engine), cancel, deps, _NO_CHILDREN, left
                waiting = self._waiting_child(scope.children[ctx.call_id], cancel)
                return waiting, cancel, deps, scope.children[ctx.call_id].children, decisions
        engine, cancel = self._engine(input, ctx, cancel)
        if scope is not None and ctx is not None:
            scope.waiting.pop(str(ctx.call_id), None)  # a begun child (a crash's): resumed here
            engine = under(engine, scope.engine)
        return engine, cancel, deps, _NO_CHILDREN, None

    def _waiting_child(self, waiting: RunResult[Any], cancel: CancelToken | None) -> Engine:
        """The engine of the child whose result ``waiting`` awaits approval, to go on with.

        In memory (a durable child is resumed from the ledger instead,
        ``waiting_child``): its events are replayed
        into a fresh engine (its budget the one it started with) that watches
        ``cancel``, the parent's token, through a token of its own.
        """
        token = CancelToken()
        engine = make_resilient(self.loop, reopen(waiting, token, self.loop.output))
        if cancel is not None:
            cancel.on_cancel(token.cancel)
        return engine

    def _engine(
        self, input: str, ctx: RunContext[Any] | None, cancel: CancelToken | None
    ) -> tuple[Engine, CancelToken | None]:
        """A fresh child's engine and its token: its Loop's budget, within the parent's tokens.

        The child is given the parent's deps (or ``deps(ctx)``'s) and token
        (``for_run`` checks the deps against the child's tools, and makes a
        token if there is none). Under a durable parent it is the child
        recorded in the parent's ledger (``durable_child``): begun, or resumed
        where its records stop.
        """
        child = self.loop
        budget = self.child_budget(ctx)
        messages = run_input(child.system, input)
        ledger: Ledger | None = _ledger_of(ctx)
        if ledger is not None and ctx is not None:  # a durable parent's: in its ledger
            caller = (str(ctx.run_id), str(ctx.call_id))  # a durable run's call has both
            return durable_child(child, ledger, caller, messages, budget, cancel)
        return plain_engine(child, messages, cancel, budget=budget), cancel

    def child_budget(self, ctx: RunContext[Any] | None) -> Budget:
        """The child's budget: its Loop's, its token limit within what the parent has left."""
        budget = self.loop.budget
        limit = None if ctx is None or ctx.budget is None else ctx.budget.max_total_tokens
        if ctx is not None and limit is not None:
            left = max(0, limit - ctx.usage.total)  # spent when this call was handed out
            if budget.max_total_tokens is None or left < budget.max_total_tokens:
                budget = attrs.evolve(budget, max_total_tokens=left)
        return budget

    def _answer(self, result: RunResult[Any], ctx: RunContext[Any] | None) -> Answered:
        """The parent's call's outcome: the child's output, or an error saying how it ended.

        A child that ended cancelled answers nothing: a cancel reached it (the
        parent's token, or, resumed after a crash, the cancel its record or
        its own child's holds), and the cancel wins: the parent's call is
        answered ``cancelled`` as the parent ends so, at every level.
        """
        status = result.status
        if status is State.CANCELLED:
            raise TokenCancelled(f"agent {self.name!r}: its run was cancelled with its parent's")
        if status is State.AWAITING_APPROVAL:  # the call waits: its child's calls are pending
            return Answered(Waiting(result.pending))
        if status is State.FINISHED:
            outcome = returned(self.name, result.output)
        else:
            content, exc = ended_content(self.name, result)
            outcome = {"status": "error", "content": content, "exception": exc}
        return Answered({**outcome, "usage": result.usage._asdict()})


def _input_schema(name: str, input: object) -> OutputSchema:
    """``input=`` as a schema the tool publishes: a type (or schema) whose JSON is an object."""
    try:
        schema: OutputSchema | None = output_schema(input)
    except TypeError:  # its words are about output=: this is input=
        schema = None
    if schema is None or schema.schema.get("type") != "object":
        raise TypeError(
            f"agent tool {name!r}: expected input= to be a type whose JSON is an object (an "
            f"attrs class, a dataclass, a TypedDict, a pydantic model), got {input!r:.80}"
        )
    return schema


class AsTool:
    """``Loop.as_tool``, kept here with the tool it makes (a base of ``Loop``)."""

    __slots__ = ()

    def as_tool(
        self,
        name: str,
        description: str,
        *,
        input: object = None,
        prompt: Callable[[Any], str] | None = None,
        deps: Callable[[RunContext[Any]], object] | None = None,
        policy: Policy | None = None,
        max_result_chars: int | None = None,
    ) -> Tool:
        """A tool of another Loop that runs this one: the model's ``input`` in, its output out.

        The model sends ``{"input": str}``, or, with ``input=T``, a ``T``: the
        child's input is then ``prompt(value)``, or the arguments' JSON. The
        child has its own budgets; its usage rolls into the parent's, it runs
        under the parent's token and deps (or ``deps(ctx)``, the parent call's
        context mapped), and its items reach the parent's delta listeners as
        ``Nested``. See the docs' "Agents as tools".
        """
        return AgentTool(
            self,  # type: ignore[arg-type]  # a Loop's base
            name=name,
            description=description,
            input=input,
            prompt=prompt,
            deps=deps,
            policy=policy,
            max_result_chars=max_result_chars,
        )


def _kept(run: RunView[Any], ctx: RunContext[Any] | None) -> None:
    """The child's result, once it ended (however) or waits, kept on the parent's by call id.

    A child that waits is kept live too, for the parent's driver to end it
    cancelled if the parent ends first (``end_waiting``).
    """
    waits = run.state is State.AWAITING_APPROVAL
    scope = None if ctx is None else ctx._scope
    if (run.done or waits) and scope is not None and ctx is not None and ctx.call_id is not None:
        scope.children[ctx.call_id] = run.result()
        if waits:
            scope.waiting[ctx.call_id] = run


def _ended(child: Loop[Any], engine: Engine, ctx: RunContext[Any] | None) -> RunResult[Any]:
    """The result of a child found ended, kept on the parent's as a child run's is."""
    result = engine.result()
    scope = None if ctx is None else ctx._scope
    if scope is not None and ctx is not None and ctx.call_id is not None:
        # A durable child's own children are read from the ledger (none live here).
        if isinstance(engine, DurableEngine):
            result = child_result(child, engine)
        scope.children[ctx.call_id] = result
    return result


def _ledger_of(ctx: RunContext[Any] | None) -> Ledger | None:
    """The ledger of a durable parent whose call has context ``ctx``, else ``None``."""
    scope = None if ctx is None else ctx._scope
    return None if scope is None else scope.ledger  # type: ignore[return-value]  # a Ledger


def _forwarding(reporter: Reporter) -> Any:
    """A listener of the child that tells each of its items to the parent's, nested."""
    call_id = reporter.call_id

    def forward(item: object) -> None:
        reporter.hand_on(item.under(call_id) if type(item) is Nested else Nested((call_id,), item))  # type: ignore[arg-type]

    return forward
