"""Writing a run's records: its header, its events, and the marks.

A run's record is the ordered log of its transitions, each only what it
adds, as a run file encodes it (``_review/runencode.event_fields``), with
every input written out; the one replay (``_core/replay.py``) makes the rest
again. The transitions go in records of the ``Ledger`` protocol's kinds,
written where the run acts on what they hold, each holding the transitions
since the last record and keyed as what it ends is unique:

* ``tool_started`` (the call id): before a call's handler runs; with the
  reply that asked for it, for the batch's first call. At most once needs
  this mark: a call with it and no outcome is never run again (but for an
  idempotent tool): it gets ``OUTCOME_UNKNOWN``;
* ``tool_finished`` (the call id): a call's outcome;
* ``reply`` (the step's number): the model's answers nothing acted on yet (a
  final refused for its output, what the model raised), before the model is
  asked again or a retry's wait begins;
* ``approval_asked``, ``decision`` (the first call's id): a person was asked
  (or a policy denied a call at the review), or decided;
* ``call_waits`` (its child's first pending call's path key, ``c1/k1``): a call's
  child run waits for a person;
* ``handoff`` (the call id): what a handoff's filter answered;
* ``output_checked`` (the step's number): what the output validators answered;
* ``end`` (``""``): the record that holds the terminal transition.

Each body is the JSON array of its events (their times left out: a run's
record is the same whenever it ran; the store keeps when each record was
committed). A call step costs two
commits: its start, with the reply, and its outcome.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import attrs
import orjson

from agentloop._core.approval import key_text
from agentloop._core.replay import output_refusals
from agentloop._core.table import TERMINAL, Guard, Trigger
from agentloop._core.values import Budget
from agentloop._durable.protocol import (
    ASKED,
    CALL_WAITS,
    CHECKED,
    DECISION,
    END,
    FINISHED,
    HANDOFF,
    LedgerRecord,
)
from agentloop._errors import LedgerError, RunBusyError
from agentloop._review.runencode import event_fields
from agentloop._review.runshape import dumps
from agentloop._tools.registry import ToolRegistry

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from agentloop._core.context_policy import ContextPolicy
    from agentloop._core.output_schema import OutputSchema
    from agentloop._core.values import NotJSON, Transition
    from agentloop._durable.protocol import Ledger, LedgerWriter

__all__ = [
    "FORMAT",
    "OUTCOME_UNKNOWN",
    "READS",
    "VERSION",
    "Journal",
    "cut_by",
    "events_body",
    "fingerprint",
    "header",
    "idempotent_tools",
    "record_of",
]

FORMAT: Final = "agentloop.ledger"
#: The version of the header's and the records' JSON (a store keeps its own too).
VERSION: Final = 3
#: The versions this agentloop reads: a format change comes with its reader (and a fixture).
READS: Final = (VERSION,)
#: What a call gets when its ``tool_started`` is recorded and its outcome is not.
OUTCOME_UNKNOWN: Final = {
    "type": "OutcomeUnknown",
    "message": (
        "the process stopped while this call ran, so whether it took effect is unknown; "
        "it was not run again"
    ),
}


#: Set on an interrupt that cut a journal (``Journal.cut``), so a parent run stops writing too.
_CUT: Final = "_agentloop_cut"


def cut_by(exc: BaseException) -> bool:
    """Whether ``exc`` is an interrupt that came while a run's record was written."""
    return getattr(exc, _CUT, False) is True


_NEWER_LIMITS: Final = {
    name: getattr(Budget(), name)
    for name in ("max_output_retries", "max_identical_calls", "on_exhausted")
}


def fingerprint(
    budget: Budget,
    dispatcher: object,
    context: ContextPolicy | None = None,
    output: OutputSchema | None = None,
    team: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What a run's record depends on: the budget, each tool's schema, the context and output.

    With handoffs, ``team`` (the agents, their handoffs, tools and system prompts) too.

    The budget's newer limits (typed output, the loop guard, the wrap-up) are
    in it only when they are not the default, so a run recorded before them
    resumes; the context policy and the output schema only when there is one.
    """
    budget_found = attrs.asdict(budget)
    for name, default in _NEWER_LIMITS.items():
        if budget_found[name] == default:
            del budget_found[name]
    found: dict[str, Any] = {"budget": budget_found}
    if context is not None:
        found["context"] = context.record()
    if output is not None:
        found["output"] = output.schema
    if team is not None:
        found["agents"] = team
    if isinstance(dispatcher, ToolRegistry):
        found["tools"] = {
            tool.name: {"parameters": tool.parameters, "idempotent": tool.idempotent}
            for tool in dispatcher
        }
    else:
        kind = type(dispatcher)
        found["dispatcher"] = f"{kind.__module__}.{kind.__qualname__}"
    return found


def idempotent_tools(dispatcher: object) -> frozenset[str]:
    """The names of the tools a crash may run again (only a ``ToolRegistry`` declares any)."""
    if isinstance(dispatcher, ToolRegistry):
        return frozenset(tool.name for tool in dispatcher if tool.idempotent)
    return frozenset()


def header(
    run_id: str,
    messages: list[dict[str, Any]],
    configuration: dict[str, Any],
    continues: str | None = None,
    models: tuple[str, ...] = (),
    conversation: tuple[str, int] | None = None,
    summary: tuple[int, str] | None = None,
    caller: tuple[str, str] | None = None,
) -> bytes:
    """A run's header: its input and the configuration it was started with.

    Optional, only where used: ``continues`` links it to the run it
    continues (``Loop.continue_run``, a conversation's turn before); ``models``
    names its fallback models, which its replay needs
    (``agentloop.models.fallback``); ``conversation`` is the conversation's id
    and the turn the run is (``conversation_id``, ``turn``); ``summary`` the
    summary carried in from the turn before (``{fold, text}``), which its replay needs;
    ``caller`` the run and call an agent tool's child run answers (``{run_id, call_id}``).
    """
    document: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "run_id": run_id,
        "input": messages,
        "fingerprint": configuration,
    }
    if continues is not None:
        document["continues"] = continues
    if models:
        document["models"] = list(models)
    if conversation is not None:
        document["conversation_id"], document["turn"] = conversation
    if summary is not None:
        document["summary"] = {"fold": summary[0], "text": summary[1]}
    if caller is not None:
        document["caller"] = {"run_id": caller[0], "call_id": caller[1]}
    return orjson.dumps(document)


def events_body(events: Sequence[Transition], rejected: NotJSON | None = None) -> bytes:
    """A record's body: its ``events``, each only what it adds, as a JSON array.

    As a run file writes an event (``_review/runencode.event_fields``), less its
    times (a run's record is the same whenever it ran; the store keeps when each
    record was committed), and with every input written out: a ledger keeps no
    transcript to find them in. A reply that was not JSON (``rejected``) is
    kept as its ``not_json``, as a run file keeps it.
    """
    records = [event_fields(event, _row(event)) for event in events]
    text = None  # the last reply's text: what an output check refused
    refused = None
    for event, record in zip(events, records, strict=True):
        data = event.input_json
        if event.trigger is Trigger.TOOL_RETURNED:
            if event.started != (event.call_id,):
                record["call"] = event.call_id
            record["status"] = event.result_status
            record["input"] = None if data is None else orjson.loads(data)
        elif data is not None:
            record["input"] = orjson.loads(data)
        elif rejected is not None and event.trigger in _REPLIES:  # what the engine kept of it
            record["not_json"] = {"repr": rejected.text, "problem": rejected.problem}
        if event.trigger is Trigger.MODEL_REPLIED:
            reply = record.get("input")
            text = str(reply.get("text")) if type(reply) is dict else None
        elif event.guard in _REFUSED and text is not None:
            if refused is None:
                refused = output_refusals(events, rejected)
            if text in refused:
                record["problems"] = refused[text]
    return dumps(records)


def _row(event: Transition) -> dict[str, Any]:
    if event.guard is None:
        return {"on": event.trigger.value}
    return {"on": event.trigger.value, "if": event.guard.value}


_REFUSED: Final = (Guard.OUTPUT_RETRY, Guard.OUTPUT_INVALID)
_REPLIES: Final = (Trigger.MODEL_REPLIED, Trigger.SUMMARY_WRITTEN)


def record_of(transition: Transition) -> tuple[str, str | None] | None:
    """The (kind, key) of the record ``transition`` ends; None if it waits for another.

    A reply (or a model's exception, a summary, a wait's end) is written with
    what first acts on it: the start of a call (``tool_started``), a person
    asked, the output validators' answer, or the run's end. Killed before
    that, the model is asked again, as when killed while it worked.
    The key is None where the transition does not name its call (an outcome
    without a call id, an approval without calls): the engine makes none
    such, a damaged record may hold one.
    """
    trigger = transition.trigger
    if transition.dest in TERMINAL:
        return END, ""
    if trigger is Trigger.TOOL_RETURNED:
        return FINISHED, transition.call_id
    if trigger is Trigger.APPROVAL_ASKED:  # by the first call a person is asked about, else denied
        if transition.pending:
            return ASKED, transition.pending[0].call_id
        return ASKED, key_text(transition.decisions[0][0]) if transition.decisions else None
    if trigger is Trigger.CALL_WAITS:  # by its own first pending call's path key: c1/k1
        # The last of several waiting calls holds every one's pending calls: its own name it.
        own = [p for p in transition.pending if p.path[:1] == (transition.call_id,)]
        return CALL_WAITS, key_text((own or transition.pending)[0].key) if own else None
    if trigger is Trigger.HANDED_OFF or trigger is Trigger.FILTER_RAISED:
        return HANDOFF, transition.call_id  # what a handoff's filter answered, by the call
    if trigger is Trigger.OUTPUT_CHECKED:
        return CHECKED, str(transition.steps)  # what the output validators answered
    if trigger is Trigger.APPROVAL_DECIDED:
        return DECISION, key_text(transition.decisions[0][0]) if transition.decisions else None
    return None


class Journal:
    """One run's writer, and the calls whose ``tool_started`` the ledger holds.

    A write that fails breaks the journal: the claim is released (another
    process, or a later ``resume``, can take over) and every later write
    raises. While the run waits for a person (``pause``) it holds no claim
    either: the next write claims the run again, if no other process went on
    with it meanwhile.
    """

    __slots__ = (
        "_broken",
        "_cut",
        "_idempotent",
        "_ledger",
        "_paused",
        "_records",
        "_unlink",
        "_writer",
        "parent",
        "run_id",
        "started",
    )

    def __init__(
        self,
        writer: LedgerWriter,
        run_id: str,
        idempotent: frozenset[str],
        started: set[str] | None = None,
        *,
        ledger: Ledger | None = None,
        records: int = 0,
    ) -> None:
        self._writer, self.run_id, self._idempotent = writer, run_id, idempotent
        # The store, to claim the run again after a pause, and how many records it holds.
        self._ledger, self._records, self._paused = ledger, records, False
        self.started = set() if started is None else started
        self._broken: str | None = None
        self._cut = False  # an interrupt came while this run's record was written
        #: The journal of the run whose call this run (an agent tool's child) answers.
        self.parent: Journal | None = None
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

    @property
    def cut(self) -> bool:
        """An interrupt came while this run's record, or a run's above it, was written.

        Whether the store holds that record is unknown: nothing more of the tree is
        written in this process, a child's end neither (a resume goes on with it).
        """
        return self._cut or (self.parent is not None and self.parent.cut)

    def check(self) -> None:
        """Raise ``LedgerError`` if a write failed: the run cannot go on in this process."""
        if self._broken is not None:
            raise LedgerError(
                f"run {self.run_id!r}: the ledger failed earlier ({self._broken}); nothing more "
                "is recorded here: continue the run with loop.resume(run_id)"
            )
        if self.parent is not None and self.parent.cut:
            raise LedgerError(
                f"run {self.run_id!r}: its parent's record was interrupted as it was written; "
                "nothing more is recorded here: resume the top run"
            )

    def broken_by(self, exc: BaseException) -> None:
        """Break the journal for ``exc`` (a child run's record failed): as a failed write does."""
        self._broken = f"{type(exc).__name__}: {exc}"
        self._cut = not isinstance(exc, Exception)
        if self._cut:  # whether the store holds the record is unknown: no run above writes either
            setattr(exc, _CUT, True)
        self.release()

    def pause(self) -> None:
        """Give up the claim while the run waits for a person: any process may go on with it."""
        self._writer.release()
        self._paused = True

    @property
    def ledger(self) -> Ledger | None:
        """The store the run is recorded in (its agent tools' children are recorded there too)."""
        return self._ledger

    @property
    def paused(self) -> bool:
        """Whether the run waits for a person, holding no claim (``pause``)."""
        return self._paused

    def reclaim(self) -> None:
        """Claim the paused run again (``RunBusyError`` if another process holds or went on)."""
        self.check()
        if self._paused:
            assert self._ledger is not None, "a journal that pauses knows its ledger"
            writer = self._ledger.claim(self.run_id)  # RunBusyError while another holds it
            if len(self._ledger.read(self.run_id)[1]) != self._records:
                writer.release()
                raise RunBusyError(
                    f"run {self.run_id!r} went on in another process while it waited for a "
                    "person here; continue it with loop.resume(run_id)"
                )
            self._writer, self._paused = writer, False

    def append(self, kind: str, key: str, body: bytes) -> None:
        """Commit one record (claiming a paused run back first); a failure breaks the journal.

        So does an interrupt (a ``BaseException``): it may have come once the record was
        committed, so whether the store holds it is unknown, and nothing more is written.
        """
        self.reclaim()
        try:
            self._writer.append(LedgerRecord(kind, key, body))
        except BaseException as exc:
            self.broken_by(exc)
            raise
        self._records += 1
        if kind == END:
            self.release()

    def before_call(
        self,
        call: dict[str, Any],
        record_start: Callable[[str], object],
        idempotent: frozenset[str] | None = None,
    ) -> dict[str, Any] | None:
        """Record ``tool_started`` (``record_start``), or the outcome the call gets unrun.

        ``None``: run the call (first time, or again for an idempotent tool).
        ``record_start(call_id)`` commits the ``tool_started`` record. ``idempotent``:
        the idempotent tools of the agent in force, when a team's agents have their own.
        """
        call_id = call["id"]
        if call_id in self.started:
            if call["name"] in (self._idempotent if idempotent is None else idempotent):
                return None  # run again, under the same idempotency key
            return {"status": "error", "content": dict(OUTCOME_UNKNOWN)}
        record_start(call_id)
        self.started.add(call_id)
        return None
