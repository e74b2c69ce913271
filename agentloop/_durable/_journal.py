"""Recording a run as it is driven: every report committed before the engine takes it.

``DurableEngine`` is the engine with its driver protocol wrapped, nothing
else: ``replied`` commits the reply (``reply``, keyed by the step) before
the engine copies it in; ``returned``/``raised`` commit the call's outcome
(``tool_finished``, keyed by the call id) before the engine keeps it; a
transition into a terminal state commits ``end``. The dispatch wrappers
commit ``tool_started`` before the dispatcher (and so the handler) is
called, set the idempotency key around it, and answer a call the ledger
already settled without running it. The drivers are the usual ones.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Final

import attrs
import orjson

from agentloop._core._engine import Engine
from agentloop._core._intake import checked_outcome, checked_usage, not_json
from agentloop._core._json import exception_content, intake
from agentloop._core._table import TERMINAL, State, Trigger
from agentloop._core._values import (
    AskModel,
    AwaitApproval,
    Budget,
    NotJSON,
    RunResult,
    RunTool,
    Transition,
    Usage,
)
from agentloop._durable._key import KEY
from agentloop._durable._ledger import ASKED, DECISION, END, FINISHED, REPLY, STARTED, LedgerRecord
from agentloop._errors import JSONError, LedgerError, RunBusyError
from agentloop._tools._registry import ToolRegistry

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from agentloop._core._approval import Decision, PendingCall
    from agentloop._core._output import OutputSchema
    from agentloop._core._values import CancelToken
    from agentloop._durable._ledger import Ledger, LedgerWriter

__all__ = [
    "FORMAT",
    "OUTCOME_UNKNOWN",
    "VERSION",
    "DurableEngine",
    "Journal",
    "async_dispatch",
    "end_body",
    "fingerprint",
    "header",
    "idempotent_tools",
    "outcome_record",
    "raised_record",
    "reply_record",
    "sync_dispatch",
]

FORMAT: Final = "agentloop.ledger"
#: The version of the header's and the records' JSON (a store keeps its own too).
VERSION: Final = 1
#: What a call gets when its ``tool_started`` is recorded and its ``tool_finished`` is not.
OUTCOME_UNKNOWN: Final = {
    "type": "OutcomeUnknown",
    "message": (
        "the process stopped while this call ran, so whether it took effect is unknown; "
        "it was not run again"
    ),
}
_ASK_MODEL, _START_TOOL = Trigger.ASK_MODEL, Trigger.START_TOOL


def fingerprint(
    budget: Budget, dispatcher: object, output: OutputSchema | None = None
) -> dict[str, Any]:
    """What a run's record depends on: the budget, each tool's name and schema, the output's.

    The budget's newer limits (typed output, the loop guard, the wrap-up) are
    in it only when they are not the default, so a run recorded before them
    resumes; so is the output schema, only when there is one.
    """
    budget_found = attrs.asdict(budget)
    for name, default in _NEWER_LIMITS.items():
        if budget_found[name] == default:
            del budget_found[name]
    found: dict[str, Any] = {"budget": budget_found}
    if output is not None:
        found["output"] = output.schema
    if isinstance(dispatcher, ToolRegistry):
        found["tools"] = {
            tool.name: {"parameters": tool.parameters, "idempotent": tool.idempotent}
            for tool in dispatcher
        }
    else:
        kind = type(dispatcher)
        found["dispatcher"] = f"{kind.__module__}.{kind.__qualname__}"
    return found


_NEWER_LIMITS: Final = {
    name: getattr(Budget(), name)
    for name in ("max_output_retries", "max_identical_calls", "on_exhausted")
}


def idempotent_tools(dispatcher: object) -> frozenset[str]:
    """The names of the tools a crash may run again (only a ``ToolRegistry`` declares any)."""
    if isinstance(dispatcher, ToolRegistry):
        return frozenset(tool.name for tool in dispatcher if tool.idempotent)
    return frozenset()


def header(run_id: str, messages: list[dict[str, Any]], configuration: dict[str, Any]) -> bytes:
    """A run's header: its input and the configuration it was started with."""
    return orjson.dumps(
        {
            "format": FORMAT,
            "version": VERSION,
            "run_id": run_id,
            "input": messages,
            "fingerprint": configuration,
        }
    )


class Journal:
    """One run's writer, and what the ledger holds of it that the live run needs.

    ``started`` and ``answered`` are the calls whose ``tool_started`` and
    ``tool_finished`` are recorded; ``finished`` maps those recorded by an
    earlier process to their outcome, which a call gets instead of running
    (only an outcome recorded before a resume can be asked for). A write that fails
    breaks the journal: the claim is released (another process, or a later
    ``resume``, can take over) and every later write raises. While the run
    waits for a person (``pause``) it holds no claim either: the next write
    claims the run again, if no other process went on with it meanwhile.
    """

    __slots__ = (
        "_broken",
        "_idempotent",
        "_ledger",
        "_paused",
        "_records",
        "_unlink",
        "_writer",
        "answered",
        "finished",
        "run_id",
        "started",
    )

    def __init__(
        self,
        writer: LedgerWriter,
        run_id: str,
        idempotent: frozenset[str],
        started: set[str] | None = None,
        finished: dict[str, dict[str, Any]] | None = None,
        *,
        ledger: Ledger | None = None,
        records: int = 0,
    ) -> None:
        self._writer, self.run_id, self._idempotent = writer, run_id, idempotent
        # The store, to claim the run again after a pause, and how many records it holds.
        self._ledger, self._records, self._paused = ledger, records, False
        self.started = set() if started is None else started
        self.finished = {} if finished is None else finished
        self.answered = set(self.finished)
        self._broken: str | None = None
        self._unlink: Callable[[], object] | None = None

    def link(self, unlink: Callable[[], object]) -> None:
        """Call ``unlink`` when the run ends (a cancel token's forwarding, say)."""
        self._unlink = unlink

    def release(self) -> None:
        """Give up the run's claim (idempotent)."""
        unlink, self._unlink = self._unlink, None
        if unlink is not None:
            unlink()
        self._writer.release()

    def check(self) -> None:
        """Raise ``LedgerError`` if a write failed: the run cannot go on in this process."""
        if self._broken is not None:
            raise LedgerError(
                f"run {self.run_id!r}: the ledger failed earlier ({self._broken}); nothing more "
                "is recorded here: continue the run with loop.resume(run_id)"
            )

    def pause(self) -> None:
        """Give up the claim while the run waits for a person: any process may go on with it."""
        self._writer.release()
        self._paused = True

    @property
    def paused(self) -> bool:
        """Whether the run waits for a person, holding no claim (``pause``)."""
        return self._paused

    def reclaim(self) -> None:
        """Claim the paused run again (``RunBusyError`` if another process holds or went on)."""
        self.check()
        if self._paused:
            self._reclaim()

    def _reclaim(self) -> None:
        """Claim the paused run again, unless another process went on with it meanwhile."""
        assert self._ledger is not None, "a journal that pauses knows its ledger"
        writer = self._ledger.claim(self.run_id)  # RunBusyError while another holds it
        if len(self._ledger.read(self.run_id)[1]) != self._records:
            writer.release()
            raise RunBusyError(
                f"run {self.run_id!r} went on in another process while it waited for a person "
                "here; continue it with loop.resume(run_id)"
            )
        self._writer, self._paused = writer, False

    def _append(self, kind: str, key: str, body: bytes) -> None:
        self.check()
        if self._paused:
            self._reclaim()
        try:
            self._writer.append(LedgerRecord(kind, key, body))
        except Exception as exc:
            self._broken = f"{type(exc).__name__}: {exc}"
            self.release()
            raise
        self._records += 1

    # -- what the engine is told, recorded first --------------------------------------

    def reply(self, step: int, reply: object) -> object:
        """Record the model's reply for ``step``; return what the engine is to take."""
        record, taken = reply_record(reply)
        self._append(REPLY, str(step), orjson.dumps(record))
        return taken

    def asked(self, pending: tuple[PendingCall, ...]) -> None:
        """Record what the policies asked a person, and why: one record, so all or nothing."""
        reasons = {call.call_id: call.reason for call in pending}
        self._append(ASKED, pending[0].call_id, orjson.dumps({"reasons": reasons}))

    def decided(self, decisions: tuple[tuple[str, Decision], ...]) -> None:
        """Record a person's decisions: one record, so all or nothing."""
        body = {call_id: decision.record() for call_id, decision in decisions}
        self._append(DECISION, decisions[0][0], orjson.dumps({"decisions": body}))

    def model_raised(self, step: int, exc: Exception) -> None:
        """Record that the model raised ``exc`` at ``step`` (and what it cost, if it says)."""
        self._append(REPLY, str(step), orjson.dumps(raised_record(exc)))

    def before_call(self, call: dict[str, Any]) -> dict[str, Any] | None:
        """Record ``tool_started``, or the outcome this call gets without running.

        ``None``: run the call (first time, or again for an idempotent tool).
        """
        call_id = call["id"]
        settled = self.finished.get(call_id)
        if settled is not None:
            return settled
        if call_id in self.started:
            if call["name"] in self._idempotent:
                return None  # run again, under the same idempotency key
            return {"status": "error", "content": dict(OUTCOME_UNKNOWN)}
        self._append(STARTED, call_id, orjson.dumps({"name": call["name"]}))
        self.started.add(call_id)
        return None

    def tool_finished(self, call_id: str, outcome: object) -> object:
        """Record the call's outcome; return what the engine is to take."""
        if call_id in self.answered:
            return outcome  # answered from the ledger: recorded already
        record, taken = outcome_record(outcome)
        self._append(FINISHED, call_id, orjson.dumps(record))
        self.answered.add(call_id)
        return taken

    def tool_raised(self, call_id: str, exc: Exception) -> None:
        """Record that the call's dispatcher raised ``exc`` (an ``error`` result)."""
        content = exception_content(exc)
        record = {"status": "error", "content": content, "exception": content}
        self._append(FINISHED, call_id, orjson.dumps(record))
        self.answered.add(call_id)

    def end(self, transition: Transition, at: int) -> None:
        """Record the run's terminal transition (the ``at``-th event), then release the run."""
        try:
            self._append(END, "", end_body(transition, at))
        finally:
            self.release()


def reply_record(reply: object) -> tuple[dict[str, Any], object]:
    """A model's reply as recorded, and what the engine is to take (the ledger's and DBOS's).

    ``{'reply': ...}``, or ``{'not_json': {'repr', 'problem'}}`` for one that is not JSON.
    """
    if type(reply) is not NotJSON:
        try:
            taken = intake(reply, "reply")[1]
        except JSONError as exc:
            reply = not_json(reply, str(exc))
        else:
            return {"reply": taken}, taken
    return {"not_json": {"repr": reply.text, "problem": reply.problem}}, reply


def raised_record(exc: Exception) -> dict[str, Any]:
    """What a model raised, as recorded: ``{'raised'}``, and ``'usage'`` if it cost any."""
    raised: dict[str, Any] = {"raised": exception_content(exc)}
    spent = checked_usage(vars(exc).get("usage"))  # as the engine reads it: no user code
    if isinstance(spent, Usage):
        raised["usage"] = spent._asdict()
    return raised


def outcome_record(outcome: object) -> tuple[dict[str, Any], object]:
    """A dispatcher's outcome as recorded, and what the engine is to take.

    ``{'status', 'content', 'exception'}``; the engine's copy keeps the live exception.
    """
    status, content = checked_outcome(outcome)
    exception = outcome.get("exception") if type(outcome) is dict else None
    plain = orjson.loads(content)
    taken: dict[str, Any] = {"status": status, "content": plain}
    recorded = None
    if isinstance(exception, BaseException):
        taken["exception"], recorded = exception, exception_content(exception)
    return {"status": status, "content": plain, "exception": recorded}, taken


def end_body(transition: Transition, at: int) -> bytes:
    """The ``end`` record: the terminal transition, every field, and its place in the log."""
    event = {
        "source": transition.source.value,
        "dest": transition.dest.value,
        "trigger": transition.trigger.value,
        "guard": None if transition.guard is None else transition.guard.value,
        "steps": transition.steps,
        "calls": transition.calls,
        "call_id": transition.call_id,
        "tool": transition.tool,
        "result_status": transition.result_status,
        "reason": transition.reason,
        "error": transition.error,
        "exception": (
            None if transition.exception is None else exception_content(transition.exception)
        ),
        "appended": [orjson.Fragment(data) for data in transition.appended_json],
        "usage": None if transition.usage is None else transition.usage._asdict(),
    }
    return orjson.dumps({"at": at, "event": event})


class DurableEngine(Engine):
    """The engine, with each report committed to the run's ledger before it is taken.

    Only the protocol's methods are wrapped; the state machine is the
    engine's own. During a resume the records are fed to ``Engine``'s own
    methods (nothing is recorded twice); the drivers then call these.

    ``handed`` holds the calls a resume handed out (so that the outcomes
    recorded after them could be reported) and no driver has run yet:
    ``next()`` hands them to the driver first, and ``unstarted`` counts them.
    """

    __slots__ = ("__weakref__", "_given", "handed", "journal")
    journal: Journal

    def __init__(
        self,
        messages: str | list[dict[str, Any]],
        *,
        budget: Budget,
        cancel: CancelToken | None,
        output: OutputSchema | None = None,
    ) -> None:
        super().__init__(messages, budget=budget, cancel=cancel, output=output)
        self.handed: list[RunTool] = []
        self._given: str | None = None  # the handed call last given to the driver

    @property
    def run_id(self) -> str:
        """The run's id in its ledger."""
        return self.journal.run_id

    def __repr__(self) -> str:
        return f"<DurableEngine run_id={self.journal.run_id!r} {super().__repr__()[8:]}"

    @property
    def unstarted(self) -> int:
        return super().unstarted + len(self.handed)

    def result(self) -> RunResult:
        """The result, once its end is recorded: ``LedgerError`` if the ledger failed first.

        Every end is recorded before it is reported: an end whose record could
        not be written is not reported here (``loop.resume(run_id)`` goes on
        from the last record).
        """
        if self.done:
            self.journal.check()
        return super().result()

    def next(self) -> AskModel | RunTool | AwaitApproval | Transition:
        self.journal.check()
        if self.handed and not self.done:
            # Handed out by the resume: its cancel checkpoint was passed then.
            handed = self.handed.pop(0)
            self._given = handed.call["id"]
            return handed
        self._given = None
        if self.journal.paused and self.state is State.AWAITING_APPROVAL:
            return self._next_while_paused()
        need = super().next()
        if type(need) is Transition and need.dest in TERMINAL:
            self._ended(need)
        return need

    def _next_while_paused(self) -> AwaitApproval | Transition:
        """``next()`` of a run that waits holding no claim: it ends only once claimed back.

        Every end is recorded before it is reported: a cancellation is taken
        only once the run is claimed again, so a claim refused (another process
        holds the run, or went on with it) raises and changes nothing; the
        cancellation is still to come. The token is read once: a cancellation
        that lands after that reading is taken at the next step.
        """
        cancelled = self._cancelled
        if cancelled():
            self.journal.reclaim()  # RunBusyError here: the run is as it was
            need = super().next()
        else:
            self._cancelled = bool  # bool() is False: as the engine's check without a token
            try:
                need = super().next()
            finally:
                self._cancelled = cancelled
        if type(need) is Transition and need.dest in TERMINAL:
            self._ended(need)
        return need  # type: ignore[return-value]  # awaiting approval: no request to hand out

    def replied(self, reply: object) -> Transition:
        if self.outstanding is _ASK_MODEL:
            reply = self.journal.reply(self.steps, reply)
        return self._after(super().replied(reply))

    def returned(self, outcome: object, call_id: str | None = None) -> Transition:
        if call_id is None:  # a one-at-a-time driver reports on the call it was given last
            call_id = self._given
        answering = self._answering_id(call_id)
        if answering is not None:
            outcome = self.journal.tool_finished(answering, outcome)
        return self._after(super().returned(outcome, call_id))

    def raised(self, exc: Exception, call_id: str | None = None) -> Transition:
        if call_id is None:
            call_id = self._given
        if isinstance(exc, Exception):
            if self.outstanding is _ASK_MODEL:
                self.journal.model_raised(self.steps, exc)
            else:
                answering = self._answering_id(call_id)
                if answering is not None:
                    self.journal.tool_raised(answering, exc)
        return self._after(super().raised(exc, call_id))

    def asked_approval(self, reasons: Mapping[str, str]) -> Transition:
        pending = self.checked_reasons(reasons)
        self.journal.asked(pending)
        # The engine takes what was checked and recorded, not the caller's mapping again.
        transition = super().asked_approval({call.call_id: call.reason for call in pending})
        self.journal.pause()  # a person may decide in any process
        return transition

    def decided(self, decisions: Mapping[str, Decision]) -> Transition:
        checked = self.checked_decisions(decisions)
        self.journal.decided(checked)
        return super().decided(dict(checked))  # what was checked and recorded, read once

    def interrupted(self, exc: BaseException) -> Transition | None:
        if self.journal.paused and self.state is State.AWAITING_APPROVAL:
            # Its end could not be recorded: the run stays waiting, as its ledger says.
            try:
                self.journal.reclaim()
            except Exception:  # noqa: BLE001 - the interruption propagates, not this
                return None
        made = super().interrupted(exc)
        if made is not None:
            # The interruption propagates, not a failed write (the journal is broken then,
            # and a resume goes on from the last record).
            with contextlib.suppress(Exception):
                self._ended(made)
        return made

    def _after(self, transition: Transition) -> Transition:
        if transition.dest in TERMINAL:
            self._ended(transition)
        return transition

    def _ended(self, transition: Transition) -> None:
        """Record the run's end; if that fails, the end is taken back before the error shows."""
        try:
            self.journal.end(transition, len(self.events()) - 1)
        except BaseException:
            self._retract()  # every end is recorded before it is reported, or not made
            raise

    def _answering_id(self, call_id: str | None) -> str | None:
        """The running call a tool report answers, or ``None`` when the engine will refuse it."""
        if self.outstanding is not _START_TOOL:
            return None
        running = self.running
        if call_id is None:
            return running[0] if len(running) == 1 else None
        return call_id if call_id in running else None


def sync_dispatch(engine: DurableEngine, dispatch: Callable[..., object]) -> Callable[..., object]:
    """``dispatch`` with ``tool_started`` recorded first and the idempotency key set."""
    journal = engine.journal
    prefix = f"{journal.run_id}:"

    def durable(call: dict[str, Any], **decision: Decision | None) -> object:
        settled = journal.before_call(call)
        if settled is not None:
            return settled
        token = KEY.set(prefix + call["id"])
        try:
            return dispatch(call, **decision)
        finally:
            KEY.reset(token)

    return durable


def async_dispatch(
    engine: DurableEngine, dispatch: Callable[..., Awaitable[object]]
) -> Callable[..., Awaitable[object]]:
    """The asyncio driver's dispatch, recorded as ``sync_dispatch`` records."""
    journal = engine.journal
    prefix = f"{journal.run_id}:"

    async def durable(call: dict[str, Any], **decision: Decision | None) -> object:
        settled = journal.before_call(call)
        if settled is not None:
            return settled
        token = KEY.set(prefix + call["id"])  # a task of its own, or this one: reset below
        try:
            return await dispatch(call, **decision)
        finally:
            KEY.reset(token)

    return durable
