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
* its result is kept on the parent's, in ``children``, by call id.

A child is not recorded: a Loop with a ledger can neither be an agent tool
nor have one (``refuse_durable``), so that nothing could run twice after a crash.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import attrs

from agentloop._core.engine import Engine
from agentloop._core.json import exception_content
from agentloop._core.table import State
from agentloop._drivers.callbacks import TokenCancelled
from agentloop._drivers.delegation import Nested
from agentloop._drivers.progress import REPORTER, Reporter
from agentloop._loop.engines import check_ready
from agentloop._loop.running import async_run, sync_run
from agentloop._tools.registry import ToolRegistry
from agentloop._tools.results import Answered, returned
from agentloop._tools.tool import Tool

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from agentloop._core.approval import Policy
    from agentloop._core.values import RunResult
    from agentloop._loop.loop import Loop

__all__ = ["AgentTool", "ChildRunEnded", "refuse_durable"]

#: The arguments of an agent tool: the text the child run starts from.
INPUT_SCHEMA: Final = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "What to ask the agent."}},
    "required": ["input"],
    "additionalProperties": False,
}


class ChildRunEnded(Exception):
    """An agent tool's child run ended without an output: its ``status`` says how."""


class AgentTool(Tool):
    """A tool whose call runs ``loop`` (the child) on the model's ``input``: see the module."""

    __slots__ = ("loop",)

    def __init__(
        self,
        loop: Loop[Any],
        *,
        name: str,
        description: str,
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
                f"agent tool {name!r}: its Loop has a ledger; a child run is not recorded "
                "(durable agent tools are not supported yet), so make its Loop without one"
            )
        super().__init__(
            self._call,
            name=name,
            description=description,
            parameters=INPUT_SCHEMA,
            policy=policy,
            max_result_chars=max_result_chars,
        )
        self.loop = loop

    def __repr__(self) -> str:
        return f"AgentTool({self.name!r})"

    def _call(self, input: str) -> Answered | Awaitable[Answered]:
        """Run the child: under asyncio (its coroutine, awaited by the registry) or here."""
        reporter = REPORTER.get()
        if reporter is not None and reporter.loop is not None:
            return self._arun(input, reporter)
        child = self.loop
        registry = child._sync_driver("an asyncio parent (loop.arun)", awaits=True)
        cancel = None if reporter is None or reporter.parent is None else reporter.parent.cancel
        run = sync_run(child, self._engine(input, reporter), registry, cancel)
        if reporter is not None:
            run.subscribe(_forwarding(reporter))
            run.subscribe_deltas(_forwarding(reporter))
        return self._answer(run.finish(), reporter)

    async def _arun(self, input: str, reporter: Reporter) -> Answered:
        """The child, run under asyncio as its parent is."""
        child = self.loop
        cancel = None if reporter.parent is None else reporter.parent.cancel
        run = async_run(child, self._engine(input, reporter), cancel)
        run.subscribe(_forwarding(reporter))
        run.subscribe_deltas(_forwarding(reporter))
        return self._answer(await run.afinish(), reporter)

    def _engine(self, input: str, reporter: Reporter | None) -> Engine:
        """The child's engine: the child Loop's budget, within what the parent has left."""
        child = self.loop
        check_ready(child)
        budget = child.budget
        parent = None if reporter is None else reporter.parent
        limit = None if parent is None else parent.engine.budget.max_total_tokens
        if parent is not None and limit is not None:
            left = max(0, limit - parent.engine.usage.total)
            if budget.max_total_tokens is None or left < budget.max_total_tokens:
                budget = attrs.evolve(budget, max_total_tokens=left)
        return Engine(
            child._input(input),
            budget=budget,
            cancel=None if parent is None else parent.cancel,
            context=child.context,
            retry=child.retry,
            models=child._model_names,
            output=child.output,
        )

    def _answer(self, result: RunResult[Any], reporter: Reporter | None) -> Answered:
        """The parent's call's outcome: the child's output, or an error saying how it ended.

        A child cancelled by the parent's token answers nothing: the parent's
        call is answered ``cancelled`` as the parent ends so.
        """
        parent = None if reporter is None else reporter.parent
        cancel = None if parent is None else parent.cancel
        if parent is not None:
            parent.children[reporter.call_id] = result  # type: ignore[union-attr]  # with it
        status = result.status
        if status is State.CANCELLED and cancel is not None and cancel.cancelled:
            raise TokenCancelled(f"agent {self.name!r}: its run was cancelled with its parent's")
        if status is State.FINISHED:
            outcome = returned(self.name, result.output)
        else:
            why = result.reason or result.error
            exc = ChildRunEnded(
                f"agent {self.name!r} ended {status.value}" + (f" ({why})" if why else "")
            )
            content = {**exception_content(exc), "status": status.value}
            outcome = {"status": "error", "content": content, "exception": exc}
        return Answered({**outcome, "usage": result.usage._asdict()})


def _forwarding(reporter: Reporter) -> Any:
    """A listener of the child that tells each of its items to the parent's, nested."""
    call_id = reporter.call_id

    def forward(item: object) -> None:
        reporter.hand_on(item.under(call_id) if type(item) is Nested else Nested((call_id,), item))  # type: ignore[arg-type]

    return forward


def refuse_durable(dispatcher: object, what: str) -> None:
    """Refuse a durable run (``what``) of a Loop with an agent tool: a child is not recorded."""
    if isinstance(dispatcher, ToolRegistry):
        for tool in dispatcher:
            if isinstance(tool, AgentTool):
                raise ValueError(
                    f"{what}: tool {tool.name!r} is an agent tool (Loop.as_tool), whose child "
                    "run is not recorded, so a resume could run it twice; durable agent tools "
                    "are not supported yet: make this Loop without a ledger"
                )
