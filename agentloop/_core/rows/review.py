"""Review and approval: the rows, guards and effects that hold a batch for a person.

The driver's review of an accepted batch (``ReviewCalls``), the calls held
for a person (``AwaitApproval``) and the decisions kept. Every denial, a
policy's at the review or a person's, is answered ``denied`` by the engine
itself, recorded, and never handed out to be dispatched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import orjson

from agentloop._core.json import kept
from agentloop._core.register import effect, guard
from agentloop._core.requests import AwaitApproval, ReviewCalls
from agentloop._core.rows.basic import answer_rest, append_batch, cancel_requested, name_call
from agentloop._core.rows.nested_approval import keep_child_decisions
from agentloop._core.table import Effect, Entry, Feature, Guard, State, Trigger

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agentloop._core.approval import Decision, DecisionKey, PendingCall
    from agentloop._core.state import RunState
    from agentloop._core.values import Transition

__all__ = ["FEATURE", "ROWS", "approvals"]

FEATURE: Final = Feature.REVIEW

S, T, G, E = State, Trigger, Guard, Effect


@guard(G.BATCH_UNREVIEWED)
def batch_unreviewed(run: RunState) -> bool:
    """The driver reviews, and the batch in hand has not been reviewed nor started."""
    batch = run.batch
    return run.reviews and batch is not None and batch.review is None and not batch.handed


@guard(G.NOBODY_ASKED)
def nobody_asked(run: RunState) -> bool:
    """No answer of the review asks a person."""
    return not run.draft.asked


@guard(G.REVIEW_DENIES_ALL)
def review_denies_all(run: RunState) -> bool:
    """No answer asks a person, and the review denies every call still without a result."""
    batch, draft = run.batch, run.draft
    assert batch is not None, "a batch is reviewed"
    denied = {call_id for call_id, _ in draft.denied}
    return (
        not draft.asked
        and bool(denied)
        and all(
            index in batch.results or call_id in denied
            for index, (call_id, _) in enumerate(batch.calls)
        )
    )


@guard(G.REVIEW_DENIES)
def review_denies(run: RunState) -> bool:
    """No answer asks a person, and the review denies a call of the batch."""
    return not run.draft.asked and bool(run.draft.denied)


@guard(G.DENIALS_ANSWER_BATCH)
def denials_answer_batch(run: RunState) -> bool:
    """The person denied every call of the batch that has no result yet."""
    batch = run.batch
    assert batch is not None, "a person decides about a batch"
    denied = {call_id for call_id, d in run.draft.decisions_in if not d.allowed}
    return all(
        index in batch.results or call_id in denied
        for index, (call_id, _) in enumerate(batch.calls)
    )


@effect(E.ASK_FOR_REVIEW)
def ask_for_review(run: RunState) -> None:
    """Hand the driver ``ReviewCalls``: the batch's calls no person decided."""
    assert run.batch is not None, "a batch is reviewed"
    run.draft.request = ReviewCalls(run.batch.to_review())


@effect(E.KEEP_REVIEW)
def keep_review(run: RunState) -> None:
    """Keep the review's answers, each to be handed out with its call."""
    assert run.batch is not None, "a batch is reviewed"
    # Fed by a replay (no reviewing driver), only the asks were recorded: none is kept,
    # so the driver that goes on reviews the calls no person decided again.
    run.batch.review = run.draft.review if run.reviews else None


@effect(E.ANSWER_DENIALS)
def answer_denials(run: RunState) -> None:
    """Answer each call the review denied ``denied``; the event keeps the denials."""
    _answer_denied(run, run.draft.denied)


@effect(E.HOLD_CALLS)
def hold_calls(run: RunState) -> None:
    """The event lists the calls a policy asked about (``pending``)."""
    assert run.batch is not None, "a batch waits"
    run.batch.pending = run.draft.pending = run.draft.asked


@effect(E.ASK_FOR_DECISIONS)
def ask_for_decisions(run: RunState) -> None:
    """Hand the driver ``AwaitApproval``: the calls that wait for a person."""
    assert run.batch is not None, "a batch waits"
    run.draft.request = AwaitApproval(run.batch.pending)


@effect(E.KEEP_DECISIONS)
def keep_decisions(run: RunState) -> None:
    """Keep a person's decisions; answer each denied call ``denied``, with their reason."""
    _answer_denied(run, run.draft.decisions_in)


def _answer_denied(run: RunState, decisions: tuple[tuple[DecisionKey, Decision], ...]) -> None:
    """The event and the batch keep ``decisions``; each denied call is answered ``denied``.

    A decision about a child run's call (keyed by its path) is kept for the
    call that waits on that child: it answers nothing here (``nested_approval.py``).
    """
    batch, draft = run.batch, run.draft
    assert batch is not None, "a batch is decided about"
    draft.decisions = decisions
    own = [(key, decision) for key, decision in decisions if type(key) is str]
    # A denied call is answered here, by the engine: no driver is handed it to run.
    # Every denial is encoded before anything is kept, so none is kept half-way.
    place = {call_id: index for index, (call_id, _) in enumerate(batch.calls)}
    denials = {
        place[call_id]: kept(orjson.dumps(decision.reason))
        for call_id, decision in own
        if not decision.allowed
    }
    if len(own) < len(decisions):
        keep_child_decisions(run, decisions)
    batch.decided.update(own)  # the str keys: this run's calls
    for index, reason in denials.items():
        batch.answer(index, "denied", reason)
        if draft.call is not None and batch.calls[index] == draft.call:
            draft.status = "denied"


def approvals(events: Sequence[Transition]) -> tuple[tuple[PendingCall, ...], dict[str, Decision]]:
    """The batch in hand's pending calls and decisions, from the events since it was accepted."""
    pending: tuple[PendingCall, ...] = ()
    decided: dict[str, Decision] = {}
    for event in reversed(events):
        if event.source is State.VALIDATING:
            break
        if event.pending and not pending and event.dest is State.AWAITING_APPROVAL:
            pending = event.pending
        decided.update((key, d) for key, d in event.decisions if type(key) is str)
    return pending, decided


# -- the rows: each names the functions of its guard and effects (above, or imported)

ROWS: Final[tuple[Entry, ...]] = (
    # -- before a batch's first call, a driver that reviews is handed its calls
    {"source": S.DISPATCHING, "trigger": T.START_TOOL, "conditions": [batch_unreviewed],
     "dest": None, "before": [ask_for_review]},
    # -- reviewed: a policy's denials are answered here, and recorded; if a policy asked,
    #    the batch waits, reserved and counted, until a person decides; cancelled
    #    meanwhile, every call is answered and none runs. A review that neither denied nor
    #    asked is kept, and nothing is recorded
    {"source": S.DISPATCHING, "trigger": T.APPROVAL_ASKED, "conditions": [review_denies_all],
     "dest": S.AWAITING_MODEL,
     "before": [name_call, keep_review, answer_denials, append_batch]},
    {"source": S.DISPATCHING, "trigger": T.APPROVAL_ASKED, "conditions": [review_denies],
     "dest": S.DISPATCHING, "before": [name_call, keep_review, answer_denials]},
    {"source": S.DISPATCHING, "trigger": T.APPROVAL_ASKED, "conditions": [nobody_asked],
     "dest": None, "before": [keep_review]},
    {"source": S.DISPATCHING, "trigger": T.APPROVAL_ASKED,
     "dest": S.AWAITING_APPROVAL,
     "before": [name_call, keep_review, answer_denials, hold_calls]},
    {"source": S.AWAITING_APPROVAL, "trigger": T.AWAIT_APPROVAL, "conditions": [cancel_requested],
     "dest": S.CANCELLED, "before": [name_call, answer_rest, append_batch]},
    {"source": S.AWAITING_APPROVAL, "trigger": T.AWAIT_APPROVAL,
     "dest": None, "before": [ask_for_decisions]},
    {"source": S.AWAITING_APPROVAL, "trigger": T.APPROVAL_DECIDED,
     "conditions": [denials_answer_batch],
     "dest": S.AWAITING_MODEL, "before": [name_call, keep_decisions, append_batch]},
    {"source": S.AWAITING_APPROVAL, "trigger": T.APPROVAL_DECIDED,
     "dest": S.DISPATCHING, "before": [name_call, keep_decisions]},
    {"source": S.AWAITING_APPROVAL, "trigger": T.INTERRUPTED,
     "dest": S.CANCELLED, "before": [name_call, answer_rest, append_batch]},
)  # fmt: skip
