"""The engine, recording: every transition committed to the run's ledger before it counts.

``DurableEngine`` is the engine with one commit hook (``Recorder``): each
transition is handed to it before the engine commits it. Where the run acts
on the outside (a call's outcome taken, a person asked or deciding, a
handoff's view, the output validators' answer, the run's end) the
transitions not yet written are written, as one record; a write that fails
refuses the transition, and the failure shows. A reply is written with what
first acts on it: the dispatch wrappers commit ``tool_started``, with the
transitions before it, before the dispatcher (and so the handler) is called.
So a call step costs two commits. The driver's call context holds the call's
idempotency key. The drivers are the usual ones.

Fed by the one replay (``_core/replay.py``) while ``replaying``, it writes
nothing: a resume rebuilds it from its records, then it goes on recording.
A fork's replay into a new durable run records, as a live run does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from agentloop._core.approval import allow
from agentloop._core.context_policy import Summarise
from agentloop._core.engine import Engine
from agentloop._core.requests import AskModel, Need, Wait
from agentloop._core.table import MODEL_ANSWERS, TERMINAL, State
from agentloop._core.values import RunTool, Transition
from agentloop._durable.journal import cut_by, events_body, record_of
from agentloop._durable.protocol import REPLY, STARTED

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from agentloop._core.agents import Agents
    from agentloop._core.context_policy import ContextPolicy
    from agentloop._core.output_schema import OutputSchema
    from agentloop._core.retry_policy import RetryPolicy
    from agentloop._core.values import Budget, CancelToken, NotJSON
    from agentloop._durable.journal import Journal

# The requests the run waits on the outside for: the model's answers are kept before them.
_WAITS: Final = (AskModel, Summarise, Wait)

__all__ = ["ChildUnrecorded", "DurableEngine", "Recorder", "async_dispatch", "sync_dispatch"]


class Recorder:
    """The commit hook of a durable engine: what it writes to the journal, and when.

    The transitions not yet written are written as one record where the run
    acts (``journal.record_of``) and before a call starts (``record_start``).
    A reply acts on nothing by itself: it goes with what first acts on it
    (killed before, the model is asked again). What the model answered and
    nothing acted on (a refused final, an exception) is kept before the run
    waits on the outside again (``keep_answers``); a wait's end goes with the
    next record (killed before, it is waited again). After a person is asked,
    the run waits holding no claim: any process may go on with it. While
    ``replaying`` nothing is written; while ``holding``, nothing either: the
    transitions wait for ``flush``.
    """

    __slots__ = (
        "before_end",
        "holding",
        "journal",
        "left_waiting",
        "rejected",
        "replaying",
        "unwritten",
    )

    def __init__(self) -> None:
        self.journal: Journal | None = None
        self.replaying = False
        self.holding = False
        self.unwritten: list[Transition] = []
        self.rejected: NotJSON | None = None  # an unwritten reply that was not JSON
        #: Called before the run's end is written: the driver ends the children that wait.
        self.before_end: Callable[[], object] | None = None
        #: Called as the run ends once its recording was cut: its waiting children stay so.
        self.left_waiting: Callable[[], object] | None = None

    def __call__(self, transition: Transition, rejected: NotJSON | None) -> None:
        if self.replaying:
            return
        journal = self.journal
        if journal is not None and journal.cut:
            # Interrupted as a record was written: the record stops where it stands, its
            # waiting children's too (a resume goes on with them).
            if transition.dest in TERMINAL and self.left_waiting is not None:
                self.left_waiting()
            return
        if transition.dest in TERMINAL and self.before_end is not None:
            try:
                self.before_end()  # a waiting child's end is committed before its parent's
            except BaseException as exc:
                if journal is not None and cut_by(exc):  # interrupted as that end was written
                    journal.broken_by(exc)
                raise
        self.unwritten.append(transition)
        if rejected is not None:
            self.rejected = rejected
        if self.holding:
            return
        mark = record_of(transition)
        if mark is None:  # it goes with what first acts on it
            return
        try:
            self.flush(mark)
        except BaseException:
            self.unwritten.pop()  # refused: the engine does not make it
            raise
        if transition.dest is State.AWAITING_APPROVAL:
            self.journal.pause()  # type: ignore[union-attr]  # a person may decide in any process

    def keep_answers(self) -> None:
        """Write the model's answers no record holds yet, before the run waits on the outside.

        A reply that started no call (an output retry's, say), or what the model
        raised, is kept before the model is asked again or a retry's wait begins:
        killed then, it is not asked for again.
        """
        for event in reversed(self.unwritten):
            if event.trigger in MODEL_ANSWERS:
                self.flush((REPLY, str(event.steps)))
                return

    def flush(self, mark: tuple[str, str | None] | None = None) -> None:
        """Write the unwritten transitions as one record, of the kind and key ``mark`` says.

        By default, the last one's (``record_of``). Raises if the write fails.
        """
        journal, events = self.journal, self.unwritten
        assert journal is not None, "a durable engine records to its journal"
        if mark is None:
            mark = record_of(events[-1])
            assert mark is not None, "a record ends where the run acts on what it holds"
        kind, key = mark
        assert key is not None, "the engine's transitions name their calls"
        journal.append(kind, key, events_body(events, self.rejected))
        events.clear()
        self.rejected = None


class DurableEngine(Engine):
    """The engine, with each transition committed to the run's ledger before it counts.

    The state machine is the engine's own; recording is its commit hook
    (``Recorder``). ``handed`` holds the calls a resume handed out (so that
    the outcomes recorded after them could be reported) and no driver has
    run yet: ``next()`` hands them to the driver first, and ``unstarted``
    counts them.
    """

    __slots__ = ("__weakref__", "_recorder", "end_unrecorded", "handed")

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
        if self.handed and not self.done:
            return self.handed.pop(0)  # its cancel checkpoint was passed when it was handed
        need = super().next()
        if type(need) in _WAITS and self._recorder.unwritten:
            self._recorder.keep_answers()
        return need

    def replayed(self) -> None:
        """The records are fed back: from here on, every transition is recorded.

        A final whose output validators' answer is recorded and not yet taken
        is taken now, as the live run did or would have (that transition is the
        engine's own, recorded with the next record); if it ends the run, the
        end is not recorded yet. (A final is recorded with its check, so none
        waits for the validators here.)
        """
        recorder = self._recorder
        recorder.replaying = False
        # Only the calls still running are handed out again (first, so that a check is
        # taken here, not a call an earlier batch's replay handed out), each once: as the
        # replay last handed it out (a call whose child waited was handed out again after
        # the decisions).
        running = set(self.running)
        last = {need.call["id"]: need for need in self.handed if need.call["id"] in running}
        self.handed = list(last.values())
        if self.state is State.VALIDATING:
            recorder.holding = True  # the check goes in the next record (or record_end's)
            try:
                taken = self.next()
            finally:
                recorder.holding = False
            assert type(taken) is Transition, "a final is recorded with its check"

    def record_start(self, call_id: str) -> None:
        """Commit ``tool_started`` for ``call_id``, with the transitions not yet written."""
        self._recorder.flush(mark=(STARTED, call_id))

    def before_end(self, call: Callable[[], object], left: Callable[[], object]) -> None:
        """Call ``call`` before the run's end is written (its waiting children end first).

        ``left`` instead, as the run ends once its recording was cut (``Journal.cut``):
        its waiting children are left waiting, as their records and its own say.
        """
        self._recorder.before_end, self._recorder.left_waiting = call, left

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

    ``cause`` is the child's ``LedgerError``, or the interrupt that came while the
    child wrote a record (``journal.cut_by``). Raised in the call, so the registry
    makes it the call's outcome: the durable dispatch raises ``cause`` instead,
    and the run stops as it does when its own record fails (or is interrupted).
    The call keeps ``tool_started`` and no outcome, and a resume resumes the child.
    """

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _recorded(journal: Journal, outcome: object) -> object:
    """``outcome``, unless it says a child run could not be recorded: then that raises."""
    if type(outcome) is dict and type(outcome.get("exception")) is ChildUnrecorded:
        cause = outcome["exception"].cause
        journal.broken_by(cause)
        raise cause
    return outcome


def sync_dispatch(
    engine: DurableEngine,
    dispatch: Callable[..., object],
    idempotent: Callable[[], frozenset[str]] | None = None,
) -> Callable[..., object]:
    """``dispatch`` with ``tool_started`` recorded first.

    ``idempotent``: the idempotent tools of the agent in force (a team's run), else the
    journal's, those of the Loop's own tools.
    """
    journal = engine.journal

    def durable(call: dict[str, Any], **review: object) -> object:
        settled = journal.before_call(call, engine.record_start, idempotent and idempotent())
        if settled is not None:
            return settled
        return _recorded(journal, dispatch(call, **review))

    return durable


def sync_review(engine: DurableEngine, review: Callable[[dict[str, Any]], Any]) -> Any:
    """``review``, but ``allow()`` for a call a crashed process had started, unasked.

    Its policies let it start then, and it may have taken effect: it is neither denied
    nor held for a person now, but answered as at most once says (``before_call``).
    """

    def reviewed(call: dict[str, Any]) -> Any:
        return allow() if call["id"] in engine.journal.started else review(call)

    return reviewed


def async_review(
    engine: DurableEngine, review: Callable[[dict[str, Any]], Awaitable[Any]]
) -> Callable[[dict[str, Any]], Awaitable[Any]]:
    """``sync_review`` for the asyncio driver's review."""

    async def reviewed(call: dict[str, Any]) -> Any:
        return allow() if call["id"] in engine.journal.started else await review(call)

    return reviewed


def async_dispatch(
    engine: DurableEngine,
    dispatch: Callable[..., Awaitable[object]],
    idempotent: Callable[[], frozenset[str]] | None = None,
) -> Callable[..., Awaitable[object]]:
    """The asyncio driver's dispatch, recorded as ``sync_dispatch`` records."""
    journal = engine.journal

    async def durable(call: dict[str, Any], **review: object) -> object:
        settled = journal.before_call(call, engine.record_start, idempotent and idempotent())
        if settled is not None:
            return settled
        return _recorded(journal, await dispatch(call, **review))

    return durable
