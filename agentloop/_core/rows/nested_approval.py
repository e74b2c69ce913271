"""Agents as tools: the rows that hold a batch while a call's child run waits for a person.

An agent tool's call (``Loop.as_tool``) runs a child run of its own. When
that child stops in ``awaiting_approval``, the driver reports ``call_waits``
in place of an outcome: the call has none yet, and the child's pending calls
are pending in this run too, each under the call's id (``PendingCall.path``).
The batch then hands out no new call; once no call of it runs, the run waits
in ``awaiting_approval``, its ``pending`` the children's calls. A person's
decisions about them (keyed by path, ``PendingCall.key``) are kept for the
call, which is handed out again first, so that its child resumes with them
(``engine.delegated``) and the call is answered from the child's result.
A child's denial answers the child's call, never this run's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from agentloop._core.approval import PendingCall
from agentloop._core.checks import answering, refused
from agentloop._core.drafts import Draft
from agentloop._core.register import effect, guard
from agentloop._core.requests import RunTool
from agentloop._core.rows.basic import batch_open, keep_result, name_call
from agentloop._core.table import Effect, Entry, Feature, Guard, State, Trigger

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agentloop._core.approval import Decision, DecisionKey
    from agentloop._core.state import RunState
    from agentloop._core.values import Transition

__all__ = ["FEATURE", "ROWS", "delegated", "still_waiting", "waiting_at", "waits_draft"]

FEATURE: Final = Feature.NESTED_APPROVAL

S, T, G, E = State, Trigger, Guard, Effect

_START_TOOL: Final = Trigger.START_TOOL


@guard(G.CALLS_RUNNING)
def calls_running(run: RunState) -> bool:
    """A call of the batch besides the one reported is still running."""
    batch = run.batch
    assert batch is not None, "a call waits in a batch"
    return len(batch.running) > 1


@guard(G.WAITS_KEPT)
def waits_kept(run: RunState) -> bool:
    """A call waits on its child, and no call besides the one reported runs."""
    batch = run.batch
    assert batch is not None, "a tool returns in a batch"
    return bool(batch.waiting) and len(batch.running) == 1


@guard(G.CALL_RESUMES)
def call_resumes(run: RunState) -> bool:
    """The call in hand waited on its child, and a person decided its child's calls."""
    batch, call = run.batch, run.draft.call
    return batch is not None and call is not None and call[0] in batch.resumes


@effect(E.KEEP_WAIT)
def keep_wait(run: RunState) -> None:
    """Keep the reported call waiting, its child's calls under its id; the event lists them."""
    batch, draft = run.batch, run.draft
    assert batch is not None, "a call waits in a batch"
    assert draft.call is not None, "the reported call is in hand"
    call_id = draft.call[0]
    del batch.running[call_id]
    batch.waiting[call_id] = draft.pending = tuple(call.under(call_id) for call in draft.asked)


@effect(E.HOLD_WAITING)
def hold_waiting(run: RunState) -> None:
    """The run waits for a person: every waiting call's child's calls, in the batch's order."""
    batch = run.batch
    assert batch is not None, "a batch waits"
    waiting = batch.waiting
    held = tuple(call for call_id, _ in batch.calls for call in waiting.get(call_id, ()))
    batch.pending = run.draft.pending = held


@effect(E.RESUME_CALL)
def resume_call(run: RunState) -> None:
    """Hand the waiting call in hand out again (``RunTool``), its child's decisions kept for it."""
    batch, draft = run.batch, run.draft
    assert batch is not None, "a call is handed out of a batch"
    assert draft.call is not None, "next() put the waiting call in hand"
    call_id = draft.call[0]
    index = batch.index(call_id)
    del batch.waiting[call_id]
    batch.resumed[call_id] = batch.resumes.pop(call_id)
    batch.running[call_id] = index
    batch.handed += 1
    run.handed += (call_id,)
    run.outstanding = _START_TOOL
    run.since[call_id] = run.clock()
    draft.request = RunTool(*batch.handed_out(index))


def waits_draft(run: RunState, pending: object, call_id: str | None) -> Draft:
    """The draft of ``call_waits``: the running call's child waits on ``pending``; else a raise."""
    if run.outstanding is not _START_TOOL:
        raise refused(run, "a call's wait")
    if (
        type(pending) is not tuple
        or not pending
        or not all(type(call) is PendingCall for call in pending)
    ):
        raise TypeError(
            "expected the child run's pending calls, a non-empty tuple of PendingCall, "
            f"got {type(pending).__name__}"
        )
    assert run.batch is not None, "a call runs in a batch"
    call = run.batch.calls[answering(run, call_id)]
    draft = Draft(call, run.since.pop(call[0], None))
    draft.asked = pending
    return draft


def keep_child_decisions(
    run: RunState, decisions: tuple[tuple[DecisionKey, Decision], ...]
) -> None:
    """Keep each decision about a child's call for its waiting call, keyed as the child keys it."""
    batch = run.batch
    assert batch is not None, "a batch is decided about"
    for key, decision in decisions:
        if type(key) is tuple:
            tail = key[1] if len(key) == 2 else key[1:]
            batch.resumes.setdefault(key[0], {})[tail] = decision


def delegated(run: RunState, call_id: str) -> dict[DecisionKey, Decision] | None:
    """The decisions the waiting call ``call_id`` was handed out again with, if it was."""
    batch = run.batch
    return None if batch is None else batch.resumed.get(call_id)


def still_waiting(events: Sequence[Transition]) -> dict[str, tuple[PendingCall, ...]]:
    """The batch's waiting calls, as its events since it was accepted leave them."""
    waiting: dict[str, tuple[PendingCall, ...]] = {}
    for event in events:
        for call_id in event.started:
            waiting.pop(call_id, None)  # handed out again
        if event.trigger is Trigger.CALL_WAITS and event.call_id is not None:
            waiting[event.call_id] = tuple(p for p in event.pending if p.path[0] == event.call_id)
    return waiting


def waiting_at(state: State, events: Sequence[Transition]) -> list[str]:
    """The calls that wait on their child runs once ``events`` are made (ending in ``state``)."""
    if state is not S.DISPATCHING and state is not S.AWAITING_APPROVAL:
        return []
    accepted = max(i for i, event in enumerate(events) if event.source is S.VALIDATING)
    return list(still_waiting(events[accepted + 1 :]))


# -- the rows: each names the functions of its guard and effects (above, or imported)

ROWS: Final[tuple[Entry, ...]] = (
    # -- a call's child waits: the batch hands out no more calls. While another call
    #    runs, the batch stays dispatching; else the run waits for a person
    {"source": S.DISPATCHING, "trigger": T.CALL_WAITS, "conditions": [calls_running],
     "dest": S.DISPATCHING, "before": [name_call, keep_wait]},
    {"source": S.DISPATCHING, "trigger": T.CALL_WAITS,
     "dest": S.AWAITING_APPROVAL, "before": [name_call, keep_wait, hold_waiting]},
    # -- the last call running returns while another waits: the run waits for a person
    #    (ahead of batch_open, which the waiting call, still without a result, would hold)
    {"source": S.DISPATCHING, "trigger": T.TOOL_RETURNED, "conditions": [waits_kept],
     "dest": S.AWAITING_APPROVAL, "before": [name_call, keep_result, hold_waiting],
     "ahead_of": batch_open},
    # -- decided: the waiting call is handed out again first, with its child's decisions
    #    (after the cancel rows, so a cancellation still wins here)
    {"source": S.DISPATCHING, "trigger": T.START_TOOL, "conditions": [call_resumes],
     "dest": None, "before": [resume_call]},
)  # fmt: skip
