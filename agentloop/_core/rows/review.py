"""Review and approval: the rows' guards and effects that hold a batch for a person.

The driver's review of an accepted batch (``ReviewCalls``), the calls held
for a person (``AwaitApproval``) and the decisions kept, denials answered by
the engine itself. ``RunState`` inherits them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from agentloop._core.json import kept
from agentloop._core.requests import AwaitApproval, ReviewCalls
from agentloop._core.table import State

if TYPE_CHECKING:
    from agentloop._core.approval import Decision, PendingCall
    from agentloop._core.batch import Batch
    from agentloop._core.rows.state import _Draft
    from agentloop._core.values import Transition

__all__ = ["ReviewRows"]


class ReviewRows:
    """The review and approval guards and effects, as methods of ``RunState`` (a mixin of it)."""

    if TYPE_CHECKING:  # what these rows read, as RunState holds it
        _batch: Batch | None
        _draft: _Draft
        _reviews: bool
    else:
        # RunState holds the slots (an instance has one layout). The type checker is not
        # shown this empty tuple, which to it would forbid assigning RunState's slots here.
        __slots__ = ()

    def _denials_answer_batch(self) -> bool:
        batch = self._batch
        assert batch is not None, "a person decides about a batch"
        denied = {call_id for call_id, d in self._draft.decisions_in if not d.allowed}
        return all(
            index in batch.results or call_id in denied
            for index, (call_id, _) in enumerate(batch.calls)
        )

    def _batch_unreviewed(self) -> bool:
        batch = self._batch
        return self._reviews and batch is not None and batch.review is None and not batch.handed

    def _nobody_asked(self) -> bool:
        return not self._draft.asked

    def _hold_calls(self) -> None:
        assert self._batch is not None, "a batch waits"
        self._batch.pending = self._draft.pending = self._draft.asked

    def _keep_decisions(self) -> None:
        batch, draft = self._batch, self._draft
        assert batch is not None, "a person decides about a batch"
        decisions = draft.decisions_in
        # A denied call is answered here, by the engine: no driver is handed it to run.
        # Every denial is encoded before anything is kept, so none is kept half-way.
        place = {call_id: index for index, (call_id, _) in enumerate(batch.calls)}
        denials = {
            place[call_id]: kept(orjson.dumps(decision.reason))
            for call_id, decision in decisions
            if not decision.allowed
        }
        draft.decisions = decisions
        batch.decided.update(decisions)
        for index, reason in denials.items():
            batch.answer(index, "denied", reason)
            if draft.call is not None and batch.calls[index] == draft.call:
                draft.status = "denied"

    def _ask_for_review(self) -> None:
        assert self._batch is not None, "a batch is reviewed"
        self._draft.request = ReviewCalls(self._batch.to_review())

    def _keep_review(self) -> None:
        assert self._batch is not None, "a batch is reviewed"
        # Fed by a replay (no reviewing driver), only the asks were recorded: none is kept,
        # so the driver that goes on reviews the calls no person decided again.
        self._batch.review = self._draft.review if self._reviews else None

    def _ask_for_decisions(self) -> None:
        assert self._batch is not None, "a batch waits"
        self._draft.request = AwaitApproval(self._batch.pending)


def _approvals(events: list[Transition]) -> tuple[tuple[PendingCall, ...], dict[str, Decision]]:
    """The batch in hand's pending calls and decisions, from the events since it was accepted."""
    pending: tuple[PendingCall, ...] = ()
    decided: dict[str, Decision] = {}
    for event in reversed(events):
        if event.source is State.VALIDATING:
            break
        if event.pending and not pending:
            pending = event.pending
        decided.update(event.decisions)
    return pending, decided
