"""An agent tool's child run under a durable parent: recorded in the parent's ledger.

The child that answers call ``k`` of the durable run ``r`` is the run
``child_run_id(r, k)`` of ``r``'s ledger, its header naming its ``caller``.
Running the call again (a resume of the parent after a crash) resumes that
same child where its records stop: each of its tools keeps at most once by
its own journal, and a child that had ended is only read, so the parent's
call is answered from its recorded result. An agent tool is therefore
idempotent: the parent's journal lets its call run again instead of
answering ``OutcomeUnknown``.

A child's end is committed before the parent's ``tool_finished`` that
answers from it (the child ends inside the call), and a resume of the parent
claims the child when it resumes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import orjson

from agentloop._core.table import State
from agentloop._durable import resume
from agentloop._durable.ids import child_run_id
from agentloop._durable.recording import ChildUnrecorded
from agentloop._durable.view import view_run
from agentloop._errors import ConfigurationMismatchError, LedgerError, RunNotFoundError
from agentloop._loop.engines import agents_of, make_resilient
from agentloop._loop.team import team_of, team_record
from agentloop._tools.registry import ToolRegistry

if TYPE_CHECKING:
    from agentloop._core.values import Budget, CancelToken, RunResult
    from agentloop._drivers.run_context import RunContext
    from agentloop._durable.protocol import Ledger
    from agentloop._durable.recording import DurableEngine
    from agentloop._loop.loop import Loop

__all__ = ["durable_child", "recorded_children", "recorded_in"]


def durable_child(
    child: Loop[Any],
    ledger: Ledger,
    caller: tuple[str, str],
    messages: str | list[dict[str, Any]],
    budget: Budget,
    cancel: CancelToken | None,
    *,
    read: bool = False,
) -> tuple[DurableEngine, CancelToken | None]:
    """The engine of the child run that answers ``caller`` (the parent's run and call ids).

    Resumed from ``ledger`` when it is recorded there (ended: only read, its
    end written if the resume made it), else begun with ``messages`` and
    ``budget``. Also the token its driver is to watch. ``read``: only read
    it (``RunNotFoundError`` if it is not recorded; not claimed).
    """
    run_id = child_run_id(*caller)
    try:
        head, _ = ledger.read(run_id)
    except RunNotFoundError:
        if read:
            raise
        engine = resume.begin(
            ledger,
            None,
            messages,
            budget=budget,
            dispatcher=child.dispatcher,
            cancel=cancel,
            context=child.context,
            models=child._model_names,
            output=child.output,
            retry=child.retry,
            agents=agents_of(child),
            team=team_record(child),
            caller=caller,
        )
        return engine, cancel
    engine, token = resume.resume(
        ledger,
        run_id,
        budget=_started_with(head, budget),
        dispatcher=child.dispatcher,
        cancel=cancel,
        context=child.context,
        output=child.output,
        team=team_record(child),
    )
    if engine.done:
        engine.record_end()  # an end the resume made (a reply checked), not yet written
    elif read:
        engine.journal.release()
    return make_resilient(child, engine), token


class recorded_in:
    """Around a child run of a call with context ``ctx``: a failure of its record stops the parent.

    Under a durable parent, a ``LedgerError`` of the child (a write that
    failed, its Loop changed since it was recorded, another process holding
    it) is raised as ``ChildUnrecorded``, which the parent's durable dispatch
    raises again, unanswered: never the call's outcome, which would leave the
    child unended for good. (A class, not a ``contextlib`` generator: it
    wraps every agent call.)
    """

    __slots__ = ("_durable",)

    def __init__(self, ctx: RunContext[Any] | None) -> None:
        self._durable = ctx is not None and ctx._scope is not None and ctx._scope.ledger is not None

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _: object
    ) -> None:
        if self._durable and isinstance(exc, LedgerError):
            raise ChildUnrecorded(exc) from exc


def _started_with(head: bytes, budget: Budget) -> Budget:
    """``budget`` with the token limit the child was begun with, as its header records it.

    The limit is what the parent had left when it handed the call out, which
    a resume may see otherwise (a sibling answered since, under asyncio).
    """
    try:
        recorded = orjson.loads(head)["fingerprint"]["budget"]["max_total_tokens"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return budget  # a damaged header: the resume says what is wrong with it
    if recorded is None or type(recorded) is int:
        return attrs.evolve(budget, max_total_tokens=recorded)
    return budget


def recorded_children(loop: Loop[Any], engine: DurableEngine) -> dict[str, RunResult[Any]]:
    """The child runs of the agent calls a resumed run had answered, read from its ledger.

    By call id, as the run that answered them kept them (``RunResult.children``):
    each resumed through its agent tool's Loop, only read (it has ended).
    """
    from agentloop._loop.agent_tool import AgentTool  # it makes its children here

    ledger = engine.journal.ledger
    team = team_of(loop)  # with handoffs, any agent's agent tools
    agents = {
        tool.name: tool.loop
        for member in ([loop] if team is None else team[1].values())
        if isinstance(member.dispatcher, ToolRegistry)
        for tool in member.dispatcher
        if isinstance(tool, AgentTool)
    }
    found: dict[str, RunResult[Any]] = {}
    if ledger is None or not agents:
        return found
    for message in engine.history():
        child = agents.get(message.get("name", "")) if message["kind"] == "tool_result" else None
        if child is None:
            continue
        caller = (str(engine.run_id), message["id"])
        try:
            ended, _ = durable_child(child, ledger, caller, [], child.budget, None, read=True)
        except RunNotFoundError:
            continue  # answered without a child (its arguments refused, say)
        except ConfigurationMismatchError:  # the child's Loop changed since: read as recorded
            found[message["id"]] = view_run(ledger, child_run_id(*caller)).result
            continue
        if ended.done or ended.state is State.AWAITING_APPROVAL:  # as the answering run kept it
            found[message["id"]] = ended.result()
    return found
