"""Retries and fallback models: their rows, guards and effects, and what they read.

A failed model call is retried after the wait the retry policy chose
(``retry_planned``, ``backing_off``), then the next fallback model is asked
(``fallback_left``). What these rows read is derived from the log, so nothing
needs settling.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol

from agentloop._core.register import effect, guard
from agentloop._core.requests import Wait
from agentloop._core.rows.basic import cancel_requested, note_model_error
from agentloop._core.table import Effect, Entry, Feature, Guard, State, Trigger

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agentloop._core.state import RunState

__all__ = ["ASK_POLICY", "FEATURE", "ROWS", "Ask", "model_index", "planned_wait", "retries"]

FEATURE: Final = Feature.RETRY

S, T, G, E = State, Trigger, Guard, Effect

_BACK_OFF: Final = Trigger.BACK_OFF


class Ask:
    """No wait given with a model's error: ``retry_planned`` asks the retry policy."""


#: What ``raised()`` takes when no wait is given (a replay and DBOS give the recorded one).
ASK_POLICY: Final = Ask()


# The wrap-up step is one model step past the budget, whatever it meets: no retry, no
# fallback model (a model that raises there ends the run failed).
@guard(G.RETRY_PLANNED)
def retry_planned(run: RunState) -> bool:
    """A wait before a retry: the one the report brought (a replay's), else the policy's."""
    if run.wrapping is not None:
        return False
    draft = run.draft
    if isinstance(draft.wait_in, Ask):  # none brought: the retry policy chooses, once
        assert draft.exception is not None, "the model raised"
        draft.wait_in = planned_wait(run, draft.exception)
    return draft.wait_in is not None


@guard(G.FALLBACK_LEFT)
def fallback_left(run: RunState) -> bool:
    """A fallback model comes after the one that failed."""
    return run.wrapping is None and model_index(run.log.rows) + 1 < len(run.models)


@effect(E.PLAN_WAIT)
def plan_wait(run: RunState) -> None:
    """The event keeps the wait chosen (``wait``)."""
    wait = run.draft.wait_in
    assert not isinstance(wait, Ask), "retry_planned chose the wait"
    run.draft.wait = wait


@effect(E.ASK_FOR_WAIT)
def ask_for_wait(run: RunState) -> None:
    """Hand the driver ``Wait(seconds)``, the wait the event into ``backing_off`` keeps."""
    last = run.events[-1]
    assert last.wait is not None, "backing_off is entered by a row that plans the wait"
    run.outstanding = _BACK_OFF
    run.since[None] = run.clock()
    run.draft.request = Wait(last.wait, None if run.retry is None else run.retry.sleep)


@effect(E.NEXT_MODEL)
def next_model(run: RunState) -> None:
    """The next fallback model is asked from now on: the event that took this row says so."""
    # model_index counts the rows that took it: nothing to keep but the event.


class Taken(Protocol):
    """What the retry rows read of an event: a ``Transition``, or the log's ``Row``."""

    @property
    def trigger(self) -> Trigger: ...

    @property
    def guard(self) -> Guard | None: ...


def model_index(events: Sequence[Taken]) -> int:
    """Which fallback model is asked now: the rows that moved on to the next, counted."""
    return sum(event.guard is Guard.FALLBACK_LEFT for event in events)


def retries(events: Sequence[Taken]) -> int:
    """The retries of the model ask in hand made so far.

    The ``retry_planned`` rows since the model last replied or a fallback model took over.
    """
    count = 0
    for event in reversed(events):
        if event.guard is Guard.RETRY_PLANNED:
            count += 1
        elif event.trigger is not Trigger.WAITED:
            break
    return count


def planned_wait(run: RunState, exc: BaseException) -> float | None:
    """The wait the retry policy chooses after the model raised ``exc`` (None: no retry)."""
    policy = run.retry
    return None if policy is None else policy.wait_for(exc, retries(run.log.rows))


def model_name(run: RunState) -> str | None:
    """The name of the fallback model asked now (None with one model)."""
    models = run.models
    return models[model_index(run.log.rows)] if models else None


# -- the rows: each names the functions of its guard and effects (above, or imported)

ROWS: Final[tuple[Entry, ...]] = (
    # -- a failed model is retried after a wait (retry=), then a fallback model is asked;
    #    every attempt spent its step. Only then does the run fail.
    {"source": S.AWAITING_MODEL, "trigger": T.MODEL_RAISED, "conditions": [retry_planned],
     "dest": S.BACKING_OFF, "before": [note_model_error, plan_wait]},
    {"source": S.AWAITING_MODEL, "trigger": T.MODEL_RAISED, "conditions": [fallback_left],
     "dest": S.AWAITING_MODEL, "before": [note_model_error, next_model]},
    # -- the wait before a retry: cancellation wins before it, during it and after it
    {"source": S.BACKING_OFF, "trigger": T.BACK_OFF, "conditions": [cancel_requested],
     "dest": S.CANCELLED},
    {"source": S.BACKING_OFF, "trigger": T.BACK_OFF,
     "dest": None, "before": [ask_for_wait]},
    {"source": S.BACKING_OFF, "trigger": T.WAITED, "conditions": [cancel_requested],
     "dest": S.CANCELLED},
    {"source": S.BACKING_OFF, "trigger": T.WAITED,
     "dest": S.AWAITING_MODEL},
    {"source": S.BACKING_OFF, "trigger": T.WAIT_INTERRUPTED,
     "dest": S.CANCELLED},
    {"source": S.BACKING_OFF, "trigger": T.INTERRUPTED,
     "dest": S.CANCELLED},
)  # fmt: skip
