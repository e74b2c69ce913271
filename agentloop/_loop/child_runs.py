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

import contextlib
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import orjson

from agentloop._core.children import Children
from agentloop._core.table import State, Trigger
from agentloop._drivers.callbacks import TokenCancelled
from agentloop._drivers.child_waits import WaitingChild, end_waiting
from agentloop._durable import resume
from agentloop._durable.ids import child_run_id
from agentloop._durable.journal import cut_by
from agentloop._durable.recording import ChildUnrecorded, DurableEngine
from agentloop._durable.view import carried, view_run
from agentloop._errors import ConfigurationMismatchError, LedgerError, RunNotFoundError
from agentloop._loop.engines import agents_of, make_resilient
from agentloop._loop.team import team_of, team_record
from agentloop._tools.registry import ToolRegistry

if TYPE_CHECKING:
    from collections.abc import Mapping

    from agentloop._core.approval import Decisions
    from agentloop._core.engine import Engine
    from agentloop._core.values import Budget, CancelToken, RunResult
    from agentloop._drivers.run_context import RunContext
    from agentloop._durable.protocol import Ledger
    from agentloop._loop.loop import Loop

__all__ = [
    "RecordedChild",
    "child_result",
    "durable_child",
    "had_child",
    "read_child",
    "recorded_begun",
    "recorded_children",
    "recorded_in",
    "recorded_waiting",
    "typed_carried",
    "waiting_child",
]


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
        checks=bool(child.output_validators),  # a check the crash cut is made again
        child=True,
        models=child._model_names,
    )
    if engine.done:
        engine.record_end()  # an end the resume made (a reply checked), not yet written
    elif read:
        engine.journal.release()
    return make_resilient(child, engine), token


_E = TypeVar("_E", bound="Engine")


def under(engine: _E, parent: Engine) -> _E:
    """``engine``, a durable child's, whose record stops with its ``parent``'s (``Journal.cut``).

    An interrupt that comes while the parent's record is written stops the
    whole tree's: the child, still running in a task of the parent's batch,
    writes nothing more, its end neither, and a resume goes on with it.
    """
    if isinstance(engine, DurableEngine) and isinstance(parent, DurableEngine):
        engine.journal.parent = parent.journal
    return engine


class recorded_in:
    """Around a child run of a call with context ``ctx``: a failure of its record stops the parent.

    Under a durable parent, a ``LedgerError`` of the child (a write that
    failed, its Loop changed since it was recorded, another process holding
    it) is raised as ``ChildUnrecorded``, which the parent's durable dispatch
    raises again, unanswered: never the call's outcome, which would leave the
    child unended for good. So is an interrupt that came while the child wrote
    a record: the child wrote nothing more, and neither does the parent (its
    interruption is not its end). (A class, not a ``contextlib`` generator: it
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
        if self._durable and exc is not None and (isinstance(exc, LedgerError) or cut_by(exc)):
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


#: The events after which a call's child run has ended, or waits for a person.
_CHILD_ENDS = (Trigger.TOOL_RETURNED, Trigger.CALL_WAITS)


def recorded_children(loop: Loop[Any], engine: DurableEngine) -> dict[str, RunResult[Any]]:
    """The child runs of the agent calls a resumed run had answered, read from its ledger.

    By call id, as the run that answered them kept them (``RunResult.children``):
    each resumed through its agent tool's Loop, only read (it has ended).
    """
    ledger = engine.journal.ledger
    agents = _agent_loops(loop)
    found: dict[str, RunResult[Any]] = {}
    if ledger is None or not agents:
        return found
    # Every agent call answered (a batch's before it was appended too) or waiting on its child,
    # those the history answers otherwise (a call cut by a cancel, answered by the run's end),
    # and those its record started whose reply a cancel rejected (their children ended too).
    calls = {e.call_id: e.tool for e in engine.events() if e.trigger in _CHILD_ENDS}
    for message in engine.history():
        if message["kind"] == "tool_result":
            calls.setdefault(message["id"], message["name"])
    for begun, name in _started(engine).items() if engine.done else ():
        calls.setdefault(begun, name)  # a begun child, ended with its parent
    unfound: list[str | None] = []  # a fork's carried calls among them: their children are
    for call_id, tool in calls.items():  # under the run it was forked from (``carried``)
        child = agents.get(tool or "")
        if child is None or call_id is None:
            continue
        caller = (str(engine.run_id), call_id)
        try:
            ended, _ = durable_child(child, ledger, caller, [], child.budget, None, read=True)
        except RunNotFoundError:
            unfound.append(call_id)  # answered without a child (its arguments refused, say)
            continue
        except ConfigurationMismatchError:  # the child's Loop changed since: read as recorded
            found[call_id] = read_child(ledger, caller)
            continue
        if ended.done or ended.state is State.AWAITING_APPROVAL:  # as the answering run kept it
            found[call_id] = child_result(child, ended)
    answered = {e.call_id for e in engine.events() if e.trigger is Trigger.TOOL_RETURNED}
    kept = carried(ledger, engine.continues, [c for c in unfound if c in answered])
    found.update(typed_carried(loop, ledger, kept, calls))
    return found


def typed_carried(
    loop: Loop[Any],
    ledger: Ledger,
    children: Mapping[str, RunResult[Any]],
    tools: Mapping[str | None, str | None],
) -> dict[str, RunResult[Any]]:
    """A fork's carried ``children`` (``view_run``'s, by call id) read through their Loops.

    Each is recorded under the run it was forked from, and is read again through the
    Loop of its agent tool (``tools``: each call's tool name), so typed as the run that
    answered it had it; one whose Loop changed since is kept as it was read.
    """
    agents, found = _agent_loops(loop), dict(children)
    for call_id, kept in children.items():
        child, suffix = agents.get(tools.get(call_id) or ""), child_run_id("", call_id)
        if child is None or kept.run_id is None or not kept.run_id.endswith(suffix):
            continue
        caller = (kept.run_id[: -len(suffix)], call_id)
        with contextlib.suppress(ConfigurationMismatchError, RunNotFoundError):
            ended, _ = durable_child(child, ledger, caller, [], child.budget, None, read=True)
            if ended.done:
                found[call_id] = child_result(child, ended)
    return found


def had_child(
    child: Loop[Any], ledger: Ledger, caller: tuple[str, str]
) -> tuple[DurableEngine | None, RunResult[Any] | None]:
    """The child recorded under ``caller``, if any: its engine if it had ended, and its result.

    Read only: an ended child is not claimed (``durable_child``), one that has not ended
    is viewed as its records stand (``view_run``, no claim), for the tokens it spent.
    """
    try:
        seen = view_run(ledger, child_run_id(*caller), children=False)
    except RunNotFoundError:
        return None, None
    if not seen.done:
        return None, seen.result
    ended, _ = durable_child(child, ledger, caller, [], child.budget, None, read=True)
    return ended, seen.result


def read_child(ledger: Ledger, caller: tuple[str, str]) -> RunResult[Any]:
    """A recorded child's result as its records stand, its own children read too."""
    return view_run(ledger, child_run_id(*caller)).result


def child_result(child: Loop[Any], engine: DurableEngine) -> RunResult[Any]:
    """The result of ``engine``, a recorded child resumed through its Loop ``child``.

    As the live run returned it: its output typed by the child Loop's ``output=``
    (``view_run``, which has no Loop, gives the JSON), its own children read so too.
    """
    result = engine.result()
    children = recorded_children(child, engine)
    return result._replace(children=Children(children)) if children else result


def waiting_child(
    child: Loop[Any],
    ledger: Ledger,
    caller: tuple[str, str],
    cancel: CancelToken | None,
    decisions: Decisions,
) -> tuple[DurableEngine, CancelToken | None, Decisions | None]:
    """The child that waited for a person, resumed from ``ledger`` to go on with ``decisions``.

    The parent's call ``caller`` was handed out again with the decisions a
    person took about its child's calls. Also the decisions the child is
    still to take: ``None`` when its record holds them already (a crash came
    after the child recorded them and before the parent went on), which must
    then be the parent's, else ``LedgerError``.
    """
    run_id = child_run_id(*caller)
    try:
        ledger.read(run_id)
    except RunNotFoundError:
        raise LedgerError(
            f"run {caller[0]!r} waits on the child run {run_id!r} of its call {caller[1]!r}, "
            "which the ledger does not hold"
        ) from None
    engine, token = durable_child(child, ledger, caller, [], child.budget, cancel)
    keys = set(decisions)
    for event in engine.events():
        if event.trigger is not Trigger.APPROVAL_DECIDED or {k for k, _ in event.decisions} != keys:
            continue
        if dict(event.decisions) != dict(decisions):
            engine.journal.release()
            disagree = sorted(k for k, d in event.decisions if decisions.get(k) != d)
            raise LedgerError(
                f"the records of {caller[0]!r} and {run_id!r} disagree about call "
                f"{', '.join(map(str, disagree))}: the child recorded other decisions than its "
                "parent's; nothing more was recorded"
            )
        return engine, token, None  # decided already: it goes on from its records
    return engine, token, decisions


class RecordedChild:
    """A durable child that waits for a person, as a resumed parent holds it (``WaitingChild``).

    If the parent ends first (cancelled), the child is resumed from the ledger
    and ended ``cancelled`` there, its own waiting children first: each end
    committed before its parent's. So is a child a crash cut mid-run
    (``recorded_begun``) whose call the parent ends before running it again.
    """

    __slots__ = ("_caller", "_child", "_ledger", "_said")

    def __init__(
        self,
        child: Loop[Any],
        ledger: Ledger,
        caller: tuple[str, str],
        said: str = "its parent run ended while it waited for a person",
    ) -> None:
        self._child, self._ledger, self._caller, self._said = child, ledger, caller, said

    def _end_cancelled(self) -> RunResult[Any]:
        engine, _ = durable_child(
            self._child, self._ledger, self._caller, [], self._child.budget, None
        )
        children = recorded_children(self._child, engine)
        if not engine.done:
            left = {**recorded_begun(self._child, engine), **recorded_waiting(self._child, engine)}
            end_waiting(children, left)
            engine.interrupted(TokenCancelled(self._said))
        return engine.result()._replace(children=children)


def recorded_begun(loop: Loop[Any], engine: DurableEngine) -> dict[str, WaitingChild]:
    """The children a resumed durable run had begun under calls it has not answered.

    By call id: each call started (``tool_started``) in a process that died, its child
    recorded there. A call run again resumes its child; one the run ends before (a
    cancel) ends it ``cancelled`` first, as a waiting child is (``RecordedChild``), or
    only reads it if it had ended.
    """
    ledger, agents = engine.journal.ledger, _agent_loops(loop)
    answered = {m["id"] for m in engine.history() if m["kind"] == "tool_result"}
    answered |= {e.call_id for e in engine.events() if e.trigger in _CHILD_ENDS}
    found: dict[str, WaitingChild] = {}
    for call_id, tool in _started(engine).items():
        child = agents.get(tool)
        if ledger is None or child is None or call_id in answered:
            continue
        caller = (str(engine.run_id), call_id)
        with contextlib.suppress(RunNotFoundError):  # begun only if its header was written
            ledger.read(child_run_id(*caller))
            found[call_id] = RecordedChild(child, ledger, caller, "its parent run ended first")
    return found


def _started(engine: DurableEngine) -> dict[str, str]:
    """The calls of the run's last reply its record started, by id: their tools' names."""
    replies = [e for e in engine.events() if e.trigger is Trigger.MODEL_REPLIED]
    reply = orjson.loads(replies[-1].input_json or b"null") if replies else None
    calls = (reply.get("calls", [reply]) if type(reply) is dict else None) or ()
    started = engine.journal.started
    return {str(c.get("id")): str(c.get("name")) for c in calls if c.get("id") in started}


def recorded_waiting(loop: Loop[Any], engine: DurableEngine) -> dict[str, WaitingChild]:
    """The children a resumed durable run waits on, by call id, to end if it ends first."""
    ledger = engine.journal.ledger
    agents = _agent_loops(loop)
    found: dict[str, WaitingChild] = {}
    if ledger is None or engine.state is not State.AWAITING_APPROVAL:
        return found
    waits = {p.path[0] for p in engine.pending if p.path}
    for event in engine.events():
        child = agents.get(event.tool or "") if event.trigger is Trigger.CALL_WAITS else None
        if child is not None and event.call_id in waits:
            caller = (str(engine.run_id), str(event.call_id))
            found[str(event.call_id)] = RecordedChild(child, ledger, caller)
    return found


def _agent_loops(loop: Loop[Any]) -> dict[str, Loop[Any]]:
    """The child Loops of ``loop``'s agent tools by tool name (with handoffs, any agent's)."""
    from agentloop._loop.agent_tool import AgentTool  # it makes its children here

    team = team_of(loop)
    return {
        tool.name: tool.loop
        for member in ([loop] if team is None else team[1].values())
        if isinstance(member.dispatcher, ToolRegistry)
        for tool in member.dispatcher
        if isinstance(tool, AgentTool)
    }
