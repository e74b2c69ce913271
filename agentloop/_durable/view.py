"""Looking at a ledger's runs without running them, and deciding a paused one.

``view_run`` feeds a run's records to a fresh engine as a resume does
(``_resume.replayed``: the one replay), with no model, no tools and no claim: the run may be
held by a live process, and nothing is written. ``list_runs`` does so for
every run of a ledger that lists them. ``decide_run`` records a person's
decisions about a paused run as its live driver would (``DurableEngine.decided``),
holding the run's claim while it checks and writes; the run goes on when a
process that has its ``Loop`` resumes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import attrs
import orjson

from agentloop._core.approval import Decision, DecisionKey, PendingCall, key_text
from agentloop._core.children import Children
from agentloop._core.table import TERMINAL, State, Trigger
from agentloop._core.values import Budget, CancelToken, RunResult, Transition, Usage
from agentloop._durable.ids import child_run_id
from agentloop._durable.journal import Journal
from agentloop._durable.protocol import Ledger, LedgerRecord
from agentloop._durable.recording import DurableEngine
from agentloop._durable.records import Recorded
from agentloop._durable.resume import checked_run_id, replayed
from agentloop._errors import InvalidStateError, LedgerError, RunNotFoundError

__all__ = ["LedgerRun", "RunSummary", "carried", "decide_run", "list_runs", "view_run"]


@attrs.frozen
class LedgerRun:
    """A ledger's run as its records stand: read, never run (``view_run``).

    ``result`` is a ``RunResult`` whatever the state, for ``report_html`` and
    ``save_run``: a run that has not ended has its working state as ``status``
    (``dispatching``, say) and no output. Events carry no times (the ledger
    keeps none per event). ``started`` are the calls of the batch in hand
    whose ``tool_started`` is recorded and whose outcome is not: still running
    in a live process, or cut off when its process stopped.
    """

    run_id: str
    result: RunResult
    started: tuple[dict[str, Any], ...] = ()
    #: The parent's run id and call id, when the run is an agent tool's child run.
    caller: tuple[str, str] | None = None

    @property
    def state(self) -> State:
        """Where the run is: a terminal state, ``awaiting_approval``, or a working state."""
        return self.result.status

    @property
    def done(self) -> bool:
        """Whether the run has ended (its end may not be recorded yet)."""
        return self.result.status in TERMINAL

    @property
    def decided(self) -> bool:
        """Whether a person's decisions are the run's last record: it waits to be resumed.

        Its ``state`` is ``dispatching``, but nothing runs its calls until a
        process that has its ``Loop`` resumes it (``loop.resume(run_id)``).
        """
        events = self.result.events
        return not self.done and bool(events) and events[-1].trigger is Trigger.APPROVAL_DECIDED

    @property
    def steps(self) -> int:
        """Model steps so far."""
        return self.result.steps

    @property
    def calls(self) -> int:
        """Accepted tool calls so far."""
        return self.result.calls

    @property
    def budget(self) -> Budget:
        """The budget the run was started with."""
        return self.result.budget

    @property
    def usage(self) -> Usage:
        """The tokens the model's replies reported so far, summed."""
        return self.result.usage

    @property
    def events(self) -> Sequence[Transition]:
        """Every transition so far, in order (a read-only sequence)."""
        return self.result.events

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """The history so far (a fresh copy); a batch in hand joins it once all of it ran."""
        return self.result.transcript

    @property
    def pending(self) -> tuple[PendingCall, ...]:
        """The calls waiting for a person (``awaiting_approval``): see ``decide_run``."""
        return self.result.pending


class RunSummary(NamedTuple):
    """One run of ``list_runs``: where it is, and when it last changed."""

    run_id: str
    #: Where the run is; ``None`` when its records cannot be read (``problem`` says why).
    state: State | None
    steps: int
    calls: int
    #: When its last record was committed, as ``time.time()``; ``None`` if not kept.
    changed: float | None
    #: The calls waiting for a person.
    pending: tuple[PendingCall, ...]
    #: Why the run's records cannot be read (damaged, or from a newer agentloop).
    problem: str | None = None
    #: A person decided and nothing ran since: it waits to be resumed (``LedgerRun.decided``).
    decided: bool = False
    #: The conversation the run is a turn of, and which turn (from 1); else ``None``.
    conversation_id: str | None = None
    turn: int | None = None
    #: The parent's run id and call id, when the run is an agent tool's child run.
    caller: tuple[str, str] | None = None


def view_run(ledger: Ledger, run_id: str, *, children: bool = True) -> LedgerRun:
    """Run ``run_id`` of ``ledger`` as its records stand; nothing is run, claimed or written.

    Needs no ``Loop``: the records are fed to a fresh engine with no model and
    no tools. ``RunNotFoundError`` if the ledger has no such run, ``LedgerError``
    if its records are damaged. Its agent tools' child runs, recorded under
    ids derived from its own (``ids.child_run_id``), are in its result's
    ``children`` by call id, each viewed so (unless ``children=False``).
    """
    run_id = checked_run_id(run_id)
    head, records = ledger.read(run_id)
    engine, recorded = _replayed(run_id, head, records, Journal(_Reader(run_id), run_id, _NONE))
    result = _result(engine, recorded)
    if children:
        found = _children(ledger, run_id, result)
        if found:
            result = result._replace(children=Children(found))
    return LedgerRun(run_id, result, _started(engine, recorded), recorded.caller)


_RETURNED = Trigger.TOOL_RETURNED


def _children(ledger: Ledger, run_id: str, result: RunResult) -> dict[str, RunResult]:
    """The child runs recorded for the calls of run ``run_id``, by call id, in call order.

    Each call an event names, and each the history answers otherwise: a call of
    a batch a cancel cut, answered by the run's end (which names the first).
    """
    found: dict[str, RunResult] = {}
    calls = dict.fromkeys(event.call_id for event in result.events if event.call_id is not None)
    calls.update((m["id"], None) for m in result.transcript if m["kind"] == "tool_result")
    for call_id in calls:
        try:
            child = view_run(ledger, child_run_id(run_id, call_id))
        except RunNotFoundError:
            continue
        if child.caller == (run_id, call_id):
            found[call_id] = child.result
    # An agent call's answer carries its child's usage; a plain call's carries none.
    agents = [e.call_id for e in result.events if e.trigger is _RETURNED and e.usage is not None]
    found.update(carried(ledger, result.continues, [c for c in agents if c not in found]))
    return found


def carried(ledger: Ledger, source: str | None, calls: list[str | None]) -> dict[str, RunResult]:
    """The children a fork carries, recorded under the run it was forked from.

    Of ``calls`` (answered agent calls with no child under the run's own id), those of
    ``source`` (its ``continues``), as ``Loop.fork`` kept them; none when ``source`` is not
    in ``ledger``. Read only when there are such calls. A turn's and a continued run's calls
    are their own (their ids new, their children under their own run's id).
    """
    if source is None or not calls:
        return {}
    try:
        kept = view_run(ledger, source).result.children
    except RunNotFoundError:
        return {}
    return {call_id: kept[call_id] for call_id in calls if call_id is not None and call_id in kept}


def list_runs(ledger: Ledger) -> list[RunSummary]:
    """Every run of ``ledger``, oldest first: its state, counters, last change and pending calls.

    The ledger lists its runs with ``run_ids()`` (``SQLiteLedger`` does); a
    run whose records cannot be read is listed with its ``problem``.
    """
    run_ids = getattr(ledger, "run_ids", None)
    if not callable(run_ids):
        raise TypeError(
            "expected a ledger that lists its runs with run_ids() (say "
            f"agentloop.ledger.SQLiteLedger), got {type(ledger).__name__}"
        )
    changed = getattr(ledger, "changed", None)
    times: dict[str, float | None] = changed() if callable(changed) else {}
    found = []
    for run_id in run_ids():
        at = times.get(run_id)
        try:
            checked_run_id(run_id)
        except (TypeError, ValueError) as exc:  # the store holds an id that is none: damaged
            shown = run_id if type(run_id) is str else repr(run_id)
            found.append(RunSummary(shown, None, 0, 0, at, (), f"its id is damaged: {exc}"))
            continue
        try:
            run = view_run(ledger, run_id, children=False)
        except LedgerError as exc:
            found.append(RunSummary(run_id, None, 0, 0, at, (), str(exc)))
            continue
        result = run.result
        found.append(
            RunSummary(
                run_id,
                run.state,
                run.steps,
                run.calls,
                at,
                run.pending,
                decided=run.decided,
                conversation_id=result.conversation_id,
                turn=result.turn,
                caller=run.caller,
            )
        )
    return found


def decide_run(ledger: Ledger, run_id: str, decisions: dict[DecisionKey, Decision]) -> None:
    """Record a person's decisions about paused run ``run_id``, as ``run.decide`` would.

    ``decisions`` maps every pending call's key (``PendingCall.key``: its id,
    or a child run's call's path) to ``approve()`` or ``deny(reason)``, and no
    other (all or nothing). A child run whose parent waits on it is refused
    (``InvalidStateError`` naming the parent and the keys to decide there).
    The run is claimed while its records are checked and the decision
    written (``RunBusyError`` while a process drives it); a run that does not
    await approval is refused (``InvalidStateError``). The run goes on when a
    process that has its ``Loop`` resumes it: ``loop.resume(run_id)``.
    """
    run_id = checked_run_id(run_id)
    writer = ledger.claim(run_id)
    try:
        head, records = ledger.read(run_id)
        journal = Journal(writer, run_id, _NONE, ledger=ledger, records=len(records))
        engine, recorded = _replayed(run_id, head, records, journal)
        _not_waited_on(ledger, run_id, recorded.caller, engine.pending)
        if engine.state is not State.AWAITING_APPROVAL:
            raise InvalidStateError(
                f"run {run_id!r} is {engine.state.value!r}, not awaiting approval: it takes "
                "no decisions (were they recorded already?); nothing was recorded",
                state=engine.state,
            )
        engine.decided(decisions)
    finally:
        writer.release()


# -- inside ---------------------------------------------------------------------------


def _not_waited_on(
    ledger: Ledger, run_id: str, caller: tuple[str, str] | None, pending: tuple[PendingCall, ...]
) -> None:
    """Refuse to decide on a child run whose parent waits on it: decided on the parent.

    So that a decision is made in one place, the parent's record, which hands
    it to the child when it goes on.
    """
    if caller is None or not pending:
        return
    parent, call_id = caller
    try:
        waits = view_run(ledger, parent).result.pending
    except (LedgerError, RunNotFoundError):
        return  # a parent that cannot be read waits on nothing here
    keys = [key_text(p.key) for p in waits if p.path and p.path[0] == call_id]
    if keys:
        raise InvalidStateError(
            f"run {run_id!r} is the child of {parent!r}, which waits on it: decide on "
            f"{parent!r} with {' '.join(f'{key}=...' for key in keys)}; nothing was recorded",
            state=State.AWAITING_APPROVAL,
        )


_NONE: frozenset[str] = frozenset()  # no tool is run here, idempotent or not


class _Reader:
    """The writer of a run only viewed: writing to it is a bug."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def append(self, record: LedgerRecord) -> None:
        raise LedgerError(f"run {self.run_id!r} is only viewed here; nothing is recorded")

    def release(self) -> None:
        pass


def _replayed(
    run_id: str, head: bytes, records: list[LedgerRecord], journal: Journal
) -> tuple[DurableEngine, Recorded]:
    recorded = Recorded(run_id, head, records)
    budget = recorded.fingerprint.get("budget")
    try:
        if type(budget) is not dict:
            raise TypeError("none recorded")
        given = Budget(**budget)
    except (TypeError, ValueError) as exc:
        raise LedgerError(
            f"run {run_id!r}: its header's fingerprint: expected a budget "
            f"{{'max_steps', 'max_calls', 'max_total_tokens'}}, got {budget!r:.80} ({exc})"
        ) from None
    return replayed(recorded, given, journal, CancelToken()), recorded


def _result(engine: DurableEngine, recorded: Recorded) -> RunResult:
    """The engine's result, in any state; its events without the replay's times."""
    if engine.done or engine.state is State.AWAITING_APPROVAL:
        result = engine.result()
    else:
        result = RunResult(
            engine.state,
            None,
            engine.steps,
            engine.calls,
            engine.budget,
            None,
            None,
            engine.events(),
            orjson.dumps(engine.history()),
            usage=engine.usage,
            continues=engine.continues,
            run_id=engine.run_id,
            conversation_id=None if recorded.conversation is None else recorded.conversation[0],
            turn=None if recorded.conversation is None else recorded.conversation[1],
            summary=recorded.summary,
        )
    events = tuple(event._replace(at=None, took=None) for event in result.events)
    return result._replace(events=events)


def _started(engine: DurableEngine, recorded: Recorded) -> tuple[dict[str, Any], ...]:
    """The calls of the batch in hand started and never answered, in emission order."""
    if engine.state is not State.DISPATCHING:
        return ()
    events = engine.events()
    last = max(i for i, event in enumerate(events) if event.trigger is Trigger.MODEL_REPLIED)
    reply = orjson.loads(events[last].input_json or b"null")
    answered = {event.call_id for event in events[last:] if event.trigger is Trigger.TOOL_RETURNED}
    calls = reply.get("calls") if reply.get("kind") == "calls" else [reply]
    return tuple(
        {"id": call.get("id"), "name": call.get("name"), "arguments": call.get("arguments")}
        for call in calls or ()
        if type(call) is dict
        and call.get("id") in recorded.started
        and call.get("id") not in answered
    )
