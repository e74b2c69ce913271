"""The engine, recording: every transition committed to the run's ledger before it counts.

``DurableEngine`` is the engine with one commit hook (``Recorder``): each
transition is handed to it before the engine commits it, and a report's
transition (a reply, a call's outcome, a person asked or deciding) is written
then, with the transitions the engine made by itself before it; a terminal
transition is written wherever it is made. A write that fails refuses the
transition: the run in memory stays as its record says, and the failure
shows. The dispatch wrappers commit ``tool_started`` before the dispatcher
(and so the handler) is called; the driver's call context holds the call's
idempotency key. The drivers are the usual ones.

Fed by the one replay (``_core/replay.py``) while ``replaying``, it writes
nothing: a resume rebuilds it from its records, then it goes on recording.
A fork's replay into a new durable run records, as a live run does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from agentloop._core.engine import Engine
from agentloop._core.requests import CheckOutput, Need
from agentloop._core.table import NEXT, TERMINAL, State, Trigger
from agentloop._core.values import RunTool, Transition
from agentloop._durable.journal import events_body, record_of
from agentloop._errors import LedgerError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from agentloop._core.agents import Agents
    from agentloop._core.context_policy import ContextPolicy
    from agentloop._core.output_schema import OutputSchema
    from agentloop._core.retry_policy import RetryPolicy
    from agentloop._core.values import Budget, CancelToken, NotJSON
    from agentloop._durable.journal import Journal

__all__ = ["ChildUnrecorded", "DurableEngine", "Recorder", "async_dispatch", "sync_dispatch"]

# The transitions that follow from the ones before: they go in the next record.
_BY_ITSELF: Final = frozenset(NEXT.values()) | {Trigger.WAITED}


class Recorder:
    """The commit hook of a durable engine: what it writes to the journal, and when.

    A report's transition is written with the ones the engine made by itself
    since the last write (a step costs one commit), and a terminal one
    wherever it is made; a wait is no effect, so its end goes in the next
    record (killed before, it is waited again). After a person is asked, the
    run waits holding no claim: any process may go on with it. While
    ``replaying`` nothing is written; while ``holding``, nothing either: the
    transitions wait for ``flush``.
    """

    __slots__ = ("at", "before_end", "holding", "journal", "replaying", "unwritten")

    def __init__(self) -> None:
        self.journal: Journal | None = None
        self.replaying = False
        self.holding = False
        self.at = 0  # the events the ledger holds
        self.unwritten: list[Transition] = []
        #: Called before the run's end is written: the driver ends the children that wait.
        self.before_end: Callable[[], object] | None = None

    def __call__(self, transition: Transition, rejected: NotJSON | None) -> None:
        if self.replaying:
            return
        if transition.dest in TERMINAL and self.before_end is not None:
            self.before_end()  # a waiting child's end is committed before its parent's
        self.unwritten.append(transition)
        if self.holding or (transition.trigger in _BY_ITSELF and transition.dest not in TERMINAL):
            return
        try:
            self.flush(rejected)
        except BaseException:
            self.unwritten.pop()  # refused: the engine does not make it
            raise
        if transition.dest is State.AWAITING_APPROVAL:
            self.journal.pause()  # type: ignore[union-attr]  # a person may decide in any process

    def flush(self, rejected: NotJSON | None = None) -> None:
        """Write the unwritten transitions as one record, keyed by the last; raises if it fails."""
        journal, events = self.journal, self.unwritten
        assert journal is not None, "a durable engine records to its journal"
        kind, key = record_of(events[-1])
        assert key is not None, "the engine's transitions name their calls"
        journal.append(kind, key, events_body(self.at, events, rejected))
        self.at += len(events)
        events.clear()


class DurableEngine(Engine):
    """The engine, with each transition committed to the run's ledger before it counts.

    The state machine is the engine's own; recording is its commit hook
    (``Recorder``). ``handed`` holds the calls a resume handed out (so that
    the outcomes recorded after them could be reported) and no driver has
    run yet: ``next()`` hands them to the driver first, and ``unstarted``
    counts them.
    """

    __slots__ = ("__weakref__", "_recorder", "checking", "end_unrecorded", "handed")

    def __init__(
        self,
        messages: str | list[dict[str, Any]],
        *,
        budget: Budget,
        cancel: CancelToken | None,
        context: ContextPolicy | None = None,
        retry: RetryPolicy | None = None,
        models: tuple[str, ...] = (),
        output: OutputSchema | None = None,
        run_id: str | None = None,
        continues: str | None = None,
        conversation: tuple[str, int] | None = None,
        summary: tuple[int, str] | None = None,
        agents: Agents | None = None,
    ) -> None:
        recorder = Recorder()
        super().__init__(
            messages,
            budget=budget,
            cancel=cancel,
            context=context,
            retry=retry,
            models=models,
            output=output,
            run_id=run_id,
            continues=continues,
            commit=recorder,
            conversation=conversation,
            summary=summary,
            agents=agents,
        )
        self._recorder = recorder
        self.handed: list[RunTool] = []
        #: A resume found the run ended before its end was written: ``record_end`` writes it.
        self.end_unrecorded = False
        #: The output check a resume handed out (a final recorded, its check not): next()'s.
        self.checking: CheckOutput | None = None

    @property
    def journal(self) -> Journal:
        """The run's journal in its ledger."""
        journal = self._recorder.journal
        assert journal is not None, "a durable engine is given its journal when it begins"
        return journal

    @journal.setter
    def journal(self, journal: Journal) -> None:
        self._recorder.journal = journal

    @property
    def replaying(self) -> bool:
        """Whether a resume is feeding the records back: nothing is written meanwhile."""
        return self._recorder.replaying

    @replaying.setter
    def replaying(self, value: bool) -> None:
        self._recorder.replaying = value

    def __repr__(self) -> str:
        return f"<DurableEngine run_id={self.run_id!r} {super().__repr__()[8:]}"

    @property
    def unstarted(self) -> int:
        return super().unstarted + len(self.handed)

    def next(self) -> Need | Transition:
        """The engine's next request; first, the calls a resume handed out and none ran."""
        if self.replaying:
            need = super().next()
            if type(need) is RunTool:
                self.handed.append(need)
            return need
        self.journal.check()  # nothing is asked of a run whose ledger failed
        if self.checking is not None:  # with the check the driver set since
            held, self.checking = self.checking, None
            return held._replace(check=self.output_check or held.check)
        if self.handed and not self.done:
            return self.handed.pop(0)  # its cancel checkpoint was passed when it was handed
        return super().next()

    def replayed(self) -> None:
        """The records are fed back: from here on, every transition is recorded.

        A reply recorded and not yet checked is checked now, as the live run
        did or would have (that transition is the engine's own, recorded with
        the next report); if it ends the run, the end is not recorded yet. A
        final its output validators are to check is handed out here, and kept
        for the driver's first ``next()`` (``checking``).
        """
        recorder = self._recorder
        recorder.at, recorder.replaying = len(self.events()), False
        if self.state is State.VALIDATING:
            recorder.holding = True  # the check goes in the next record (or record_end's)
            try:
                need = self.next()
            finally:
                recorder.holding = False
            if type(need) is CheckOutput:
                self.checking = need
        running = set(self.running)
        self.handed = [need for need in self.handed if need.call["id"] in running]

    def before_end(self, call: Callable[[], object]) -> None:
        """Call ``call`` before the run's end is written (its waiting children end first)."""
        self._recorder.before_end = call

    def record_end(self) -> None:
        """Write the end a resume made (a reply checked), if any (``end_unrecorded``); release.

        Left to the caller of the resume, so that a resume refused once the run is
        found ended (decisions given to it) writes nothing.
        """
        unrecorded, self.end_unrecorded = self.end_unrecorded, False
        try:
            if unrecorded:
                self._recorder.flush()  # what replayed() held: the end is its last
        finally:
            self.journal.release()


class ChildUnrecorded(Exception):
    """An agent tool's child run could not be recorded in the run's ledger (its ``cause``).

    Raised in the call, so the registry makes it the call's outcome: the
    durable dispatch raises ``cause`` instead, and the run stops as it does
    when its own record fails. The call keeps ``tool_started`` and no
    outcome, and a resume resumes the child.
    """

    def __init__(self, cause: LedgerError) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _recorded(journal: Journal, outcome: object) -> object:
    """``outcome``, unless it says a child run could not be recorded: then that raises."""
    if type(outcome) is dict and type(outcome.get("exception")) is ChildUnrecorded:
        cause = outcome["exception"].cause
        journal.broken_by(cause)
        raise cause
    return outcome


def sync_dispatch(engine: DurableEngine, dispatch: Callable[..., object]) -> Callable[..., object]:
    """``dispatch`` with ``tool_started`` recorded first."""
    journal = engine.journal

    def durable(call: dict[str, Any], **review: object) -> object:
        settled = journal.before_call(call)
        if settled is not None:
            return settled
        return _recorded(journal, dispatch(call, **review))

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
        return _recorded(journal, await dispatch(call, **review))

    return durable
