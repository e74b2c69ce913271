"""The engine, recording: every transition committed before the driver acts on it.

``DurableEngine`` is the engine with its driver protocol wrapped, nothing
else: each report's transition (a reply, a call's outcome, a person asked or
deciding) is committed with the transitions the engine made by itself before
it, before the report returns to the driver; a terminal transition is
committed before it is reported, wherever it is made. A commit that fails
takes its transition back: the run in memory stays as its record says, and
the failure shows. The dispatch wrappers commit ``tool_started`` before the
dispatcher (and so the handler) is called; the driver's call context holds
the call's idempotency key. The drivers are the usual ones.

Fed by the one replay (``_core/replay.py``) while ``replaying``, it records
nothing: a resume rebuilds it from its records, then it goes on recording.
A fork's replay into a new durable run records, as a live run does.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Final

from agentloop._core.engine import _ASK_POLICY as _ASK
from agentloop._core.engine import Engine, _Ask
from agentloop._core.table import NEXT, TERMINAL, State, Trigger
from agentloop._core.values import (
    AskModel,
    AwaitApproval,
    NotJSON,
    ReviewCalls,
    RunResult,
    RunTool,
    Transition,
    Wait,
)
from agentloop._durable.journal import events_body, record_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from agentloop._core.approval import Decision
    from agentloop._core.context_policy import ContextPolicy, Summarise
    from agentloop._core.output_schema import OutputSchema
    from agentloop._core.values import Budget, CancelToken
    from agentloop._durable.journal import Journal

__all__ = ["DurableEngine", "async_dispatch", "sync_dispatch"]

_ASK_MODEL, _START_TOOL = Trigger.ASK_MODEL, Trigger.START_TOOL
_BY_ITSELF: Final = frozenset(NEXT.values())


class DurableEngine(Engine):
    """The engine, with each transition committed to the run's ledger before it is acted on.

    Only the protocol's methods are wrapped; the state machine is the
    engine's own. ``handed`` holds the calls a resume handed out (so that the
    outcomes recorded after them could be reported) and no driver has run
    yet: ``next()`` hands them to the driver first, and ``unstarted`` counts them.
    """

    __slots__ = (
        "__weakref__",
        "_given",
        "_recorded",
        "end_unrecorded",
        "handed",
        "journal",
        "replaying",
    )
    journal: Journal

    def __init__(
        self,
        messages: str | list[dict[str, Any]],
        *,
        budget: Budget,
        cancel: CancelToken | None,
        context: ContextPolicy | None = None,
        models: tuple[str, ...] = (),
        output: OutputSchema | None = None,
    ) -> None:
        super().__init__(
            messages, budget=budget, cancel=cancel, context=context, models=models, output=output
        )
        self.handed: list[RunTool] = []
        self._given: str | None = None  # the handed call last given to the driver
        self._recorded = 0  # the events the ledger holds
        #: While a resume feeds the records back: nothing is recorded, calls handed out are kept.
        self.replaying = False
        #: A resume found the run ended before its end was written: ``record_end`` writes it.
        self.end_unrecorded = False

    @property
    def run_id(self) -> str:
        """The run's id in its ledger."""
        return self.journal.run_id

    def __repr__(self) -> str:
        return f"<DurableEngine run_id={self.journal.run_id!r} {super().__repr__()[8:]}"

    @property
    def unstarted(self) -> int:
        return super().unstarted + len(self.handed)

    def replayed(self) -> None:
        """The records are fed back: from here on, every transition is recorded.

        A reply recorded and not yet checked is checked now, as the live run
        did or would have (that transition is the engine's own, recorded with
        the next report); if it ends the run, the end is not recorded yet.
        """
        self._recorded = len(self._events)
        if self.state is State.VALIDATING:
            self.next()
        self.replaying = False
        running = set(self.running)
        self.handed = [need for need in self.handed if need.call["id"] in running]

    def record_end(self) -> None:
        """Write the end a resume made (a reply checked), if any (``end_unrecorded``); release.

        Left to the caller of the resume, so that a resume refused once the run is
        found ended (decisions given to it) writes nothing.
        """
        unrecorded, self.end_unrecorded = self.end_unrecorded, False
        try:
            if unrecorded:
                self._commit(self._events[-1])
        finally:
            self.journal.release()

    def result(self) -> RunResult:
        """The result, once its end is recorded: ``LedgerError`` if the ledger failed first.

        Every end is recorded before it is reported: an end whose record could
        not be written is not reported here (``loop.resume(run_id)`` goes on
        from the last record).
        """
        if self.done:
            self.journal.check()
        return super().result()

    def next(
        self,
    ) -> AskModel | RunTool | ReviewCalls | AwaitApproval | Summarise | Wait | Transition:
        if self.replaying:
            need = super().next()
            if type(need) is RunTool:
                self.handed.append(need)
            return need
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
            self._commit(need)
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
            self._commit(need)
        return need  # type: ignore[return-value]  # awaiting approval: no request to hand out

    def replied(self, reply: object) -> Transition:
        if self.replaying:
            return super().replied(reply)
        self.journal.check()
        return self._commit(super().replied(reply))

    def returned(self, outcome: object, call_id: str | None = None) -> Transition:
        if self.replaying:
            return super().returned(outcome, call_id)
        self.journal.check()
        if call_id is None:  # a one-at-a-time driver reports on the call it was given last
            call_id = self._given
        return self._commit(super().returned(outcome, call_id))

    def raised(
        self, exc: Exception, call_id: str | None = None, *, wait: float | _Ask | None = _ASK
    ) -> Transition:
        if self.replaying:
            return super().raised(exc, call_id, wait=wait)
        self.journal.check()
        if call_id is None:
            call_id = self._given
        # The retry policy's wait is chosen once, here, and recorded on the event.
        return self._commit(super().raised(exc, call_id, wait=wait))

    def waited(self) -> Transition:
        if self.replaying:
            return super().waited()
        self.journal.check()
        made = super().waited()
        if made.dest in TERMINAL:
            return self._commit(made)
        # A wait is no effect: the next record holds it (killed before, it is waited again).
        return made

    def reviewed(self, answers: Mapping[str, object]) -> Transition | None:
        if self.replaying:
            return super().reviewed(answers)
        self.journal.check()
        # The engine takes what was checked, not the caller's mapping again.
        _, taken = self._checked_review(answers)
        transition = super().reviewed(taken)
        if transition is None:
            return None  # nobody asked: nothing to record
        self._commit(transition)
        self.journal.pause()  # a person may decide in any process
        return transition

    def decided(self, decisions: Mapping[str, Decision]) -> Transition:
        if self.replaying:
            return super().decided(decisions)
        checked = self._checked_decisions(decisions)
        self.journal.reclaim()  # RunBusyError here: the run waits, as its ledger says
        return self._commit(super().decided(dict(checked)))  # what was checked, read once

    def interrupted(
        self, exc: BaseException, *, partial_text: str | None = None
    ) -> Transition | None:
        if self.replaying:
            return super().interrupted(exc, partial_text=partial_text)
        if self.journal.paused and self.state is State.AWAITING_APPROVAL:
            # Its end could not be recorded: the run stays waiting, as its ledger says.
            try:
                self.journal.reclaim()
            except Exception:  # noqa: BLE001 - the interruption propagates, not this
                return None
        made = super().interrupted(exc, partial_text=partial_text)
        if made is not None:
            # The interruption propagates, not a failed write (the journal is broken then,
            # and a resume goes on from the last record).
            with contextlib.suppress(Exception):
                self._commit(made)
        return made

    def _commit(self, transition: Transition) -> Transition:
        """Record ``transition`` with the ones the engine made by itself before it.

        If that fails, the transition is taken back before the error shows:
        every report is recorded before it is acted on.
        """
        if transition.trigger in _BY_ITSELF and transition.dest not in TERMINAL:
            return transition  # it follows from the ones before: it goes in the next record
        events = self._events
        at = self._recorded
        rejected = self._reply.value if transition.trigger is Trigger.MODEL_REPLIED else None
        kind, key = record_of(transition)
        assert key is not None, "the engine's transitions name their calls"
        try:
            self.journal.append(
                kind,
                key,
                events_body(at, events[at:], rejected if type(rejected) is NotJSON else None),
            )
        except BaseException:
            self._retract()
            raise
        self._recorded = len(events)
        return transition


def sync_dispatch(engine: DurableEngine, dispatch: Callable[..., object]) -> Callable[..., object]:
    """``dispatch`` with ``tool_started`` recorded first."""
    journal = engine.journal

    def durable(call: dict[str, Any], **review: object) -> object:
        settled = journal.before_call(call)
        if settled is not None:
            return settled
        return dispatch(call, **review)

    return durable


def async_dispatch(
    engine: DurableEngine, dispatch: Callable[..., Awaitable[object]]
) -> Callable[..., Awaitable[object]]:
    """The asyncio driver's dispatch, recorded as ``sync_dispatch`` records."""
    journal = engine.journal

    async def durable(call: dict[str, Any], **review: object) -> object:
        settled = journal.before_call(call)
        if settled is not None:
            return settled
        return await dispatch(call, **review)

    return durable
