"""A context policy (``agentloop.context``): its rows, guards and effects, and their state.

What a policy adds to a run: the window of its messages, the summary in
force, and the plan for the request about to be made
(``window.context_plan``, read by ``context_overflows``, the
``summarising`` rows, and ``fit_context``: the effect of every run's ask
row, in ``basic.py``, which does nothing without a policy). It changes only
what a request carries, never the history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import orjson

from agentloop._core.context_policy import OVERFLOW, Summarise
from agentloop._core.json import exception_said
from agentloop._core.register import effect, guard
from agentloop._core.rows.basic import (
    cancel_requested,
    count_step,
    note_max_steps,
    note_max_total_tokens,
    steps_exhausted,
    tokens_exhausted,
)
from agentloop._core.table import Effect, Entry, Feature, Guard, State, Trigger
from agentloop._core.window import Window, context_plan

if TYPE_CHECKING:
    from agentloop._core.context_policy import ContextPolicy
    from agentloop._core.state import RunState
    from agentloop._core.window import Summary

__all__ = ["FEATURE", "ROWS", "init_context", "rebuild_context", "summary_in_force"]

FEATURE: Final = Feature.CONTEXT

S, T, G, E = State, Trigger, Guard, Effect

_SUMMARISE: Final = Trigger.SUMMARISE
_WRITTEN: Final = Trigger.SUMMARY_WRITTEN


def init_context(run: RunState, policy: ContextPolicy | None, encoded: list[bytes]) -> None:
    """The policy's state, fresh: its window over ``encoded``, no summary, no plan."""
    run.policy = policy
    #: The messages as the policy reads them (None: no policy), and how many it read.
    run.context = None if policy is None else (Window(policy.counter, encoded), [len(encoded)])
    run.summary = None  # the summary in force
    if run.carried is not None:  # carried from the turn before (a conversation's)
        run.summary = _carried(policy, run.context, run.carried)
    run.plan = None  # the plan for the request about to be made
    run.seen = None  # what the request outstanding was sent
    run.view = None  # the request's messages, when not the history


def rebuild_context(run: RunState) -> None:
    """The window and the summary in force again, from the input and the events."""
    policy, seen = run.policy, run.seen
    assert policy is not None, "a context policy is set"
    init_context(run, policy, list(run.input))
    run.seen = seen  # what a request still outstanding was sent
    assert run.context is not None, "just made"
    window, read = run.context
    for event in run.events:
        if event.trigger is Trigger.SUMMARY_WRITTEN and event.dest is State.AWAITING_MODEL:
            # The plan as it was when this summary was asked for.
            plan = window.plan(policy.tokens, run.summary, True, policy.keep_tokens)
            assert not isinstance(plan, str), "a summary was asked for a plan"
            assert event.input_json is not None, "a summary is a final answer"
            run.summary = window.summary(plan.fold, orjson.loads(event.input_json)["text"])
        for data in event.appended_json:
            window.add(data)
    read[0] = len(run.history)


def summary_in_force(run: RunState) -> tuple[int, str] | None:
    """The summary in force (the turns it folds, its text): what a next turn carries."""
    summary = run.summary
    return None if summary is None else (summary.turns, summary.text)


def _carried(
    policy: ContextPolicy | None, context: tuple[Window, list[int]] | None, carried: object
) -> Summary:
    """The summary a turn begins with, checked against its policy and its input's turns."""
    if policy is None or policy.summariser is None or context is None:
        raise ValueError(
            "a summary is carried into a run under summarise(...) only, and this run has "
            f"{'no context policy' if policy is None else 'keep_last'}"
        )
    window = context[0]
    if (
        type(carried) is not tuple
        or len(carried) != 2
        or type(carried[0]) is not int
        or type(carried[1]) is not str
        or not 1 <= carried[0] <= len(window.turns)
    ):
        raise ValueError(
            "expected summary to be (turns, text): the number of the input's turns it "
            f"folds (1 to {len(window.turns)}) and its text, got {carried!r:.80}"
        )
    return window.summary(*carried)


@guard(G.CONTEXT_OVERFLOWS)
def context_overflows(run: RunState) -> bool:
    """Under a policy, even the newest turn (with the head) exceeds its ``tokens``."""
    return run.policy is not None and isinstance(context_plan(run), str)


@guard(G.SUMMARY_DUE)
def summary_due(run: RunState) -> bool:
    """Under ``summarise``, turns not yet summarised would be left out of the request."""
    if run.policy is None or run.policy.summariser is None:
        return False
    rows = run.log.rows
    if rows and rows[-1].trigger is _WRITTEN:
        return False  # a summary was just written: the request goes next, with or without it
    plan = context_plan(run)
    return not isinstance(plan, str) and plan.fold > plan.folded


@guard(G.SUMMARY_MALFORMED)
def summary_malformed(run: RunState) -> bool:
    """The summariser's reply is not a well-formed final answer."""
    reply = run.draft.summary_in
    return reply is None or reply.problem is not None or not reply.final


@effect(E.NOTE_CONTEXT_OVERFLOW)
def note_context_overflow(run: RunState) -> None:
    """``reason = 'context'``; ``error`` says how far over the newest turn is."""
    plan = context_plan(run)
    assert isinstance(plan, str), "context_overflows said so"
    run.draft.reason, run.draft.error = OVERFLOW, plan


@effect(E.ASK_FOR_SUMMARY)
def ask_for_summary(run: RunState) -> None:
    """Hand the driver ``Summarise``: the summariser, and the oldest turns to fold."""
    policy, context = run.policy, run.context
    assert policy is not None, "a context policy is set"
    assert policy.summariser is not None, "summary_due holds only under summarise"
    assert context is not None, "a policy has its window"
    plan = context_plan(run)
    assert not isinstance(plan, str), "summary_due was checked first"
    request, run.seen = context[0].fold_request(plan.folded, plan.fold, run.summary)
    run.outstanding = _SUMMARISE
    run.since[None] = run.clock()
    run.draft.request = Summarise(policy.summariser, request)


@effect(E.KEEP_SUMMARY)
def keep_summary(run: RunState) -> None:
    """The reply's text is the summary in force, standing for the turns it folded."""
    context, reply = run.context, run.draft.summary_in
    assert context is not None, "a policy has its window"
    assert reply is not None, "a summary was written"
    plan = context_plan(run)
    assert not isinstance(plan, str), "a summary was asked for a plan"
    run.summary = context[0].summary(plan.fold, reply.value["text"])


@effect(E.NOTE_SUMMARY_ERROR)
def note_summary_error(run: RunState) -> None:
    """``error`` says what the summariser raised."""
    draft = run.draft
    assert draft.exception is not None, "the summariser raised"
    draft.error = f"the summariser raised {exception_said(draft.exception)}"


@effect(E.NOTE_MALFORMED_SUMMARY)
def note_malformed_summary(run: RunState) -> None:
    """``error`` says what is wrong with the summariser's reply; it is kept as ``rejected``."""
    reply = run.draft.summary_in
    assert reply is not None, "the summariser replied"
    problem = reply.problem or f"expected a final answer, got a {reply.value['kind']!r} reply"
    run.draft.error = f"malformed summary: {problem}"
    run.rejected = reply.value  # kept for review (and a replay), as a rejected reply is


# -- the rows: each names the functions of its guard and effects (above, or imported)

ROWS: Final[tuple[Entry, ...]] = (
    # -- the newest turn cannot fit: nothing is sent; or a summary is due
    {"source": S.AWAITING_MODEL, "trigger": T.ASK_MODEL, "conditions": [context_overflows],
     "dest": S.EXHAUSTED, "before": [note_context_overflow]},
    {"source": S.AWAITING_MODEL, "trigger": T.ASK_MODEL, "conditions": [summary_due],
     "dest": S.SUMMARISING},
    # -- (summarise) the oldest turns are folded into one summary by a model call of its
    #    own: a step, under max_steps and max_total_tokens, failing, cancelled and
    #    interrupted as the model's own. The history is not changed: only what is sent.
    {"source": S.SUMMARISING, "trigger": T.SUMMARISE, "conditions": [cancel_requested],
     "dest": S.CANCELLED},
    {"source": S.SUMMARISING, "trigger": T.SUMMARISE, "conditions": [steps_exhausted],
     "dest": S.EXHAUSTED, "before": [note_max_steps]},
    {"source": S.SUMMARISING, "trigger": T.SUMMARISE, "conditions": [tokens_exhausted],
     "dest": S.EXHAUSTED, "before": [note_max_total_tokens]},
    {"source": S.SUMMARISING, "trigger": T.SUMMARISE,
     "dest": None, "before": [count_step, ask_for_summary]},
    {"source": S.SUMMARISING, "trigger": T.SUMMARY_WRITTEN, "conditions": [cancel_requested],
     "dest": S.CANCELLED},
    {"source": S.SUMMARISING, "trigger": T.SUMMARY_WRITTEN, "conditions": [summary_malformed],
     "dest": S.MALFORMED, "before": [note_malformed_summary]},
    {"source": S.SUMMARISING, "trigger": T.SUMMARY_WRITTEN,
     "dest": S.AWAITING_MODEL, "before": [keep_summary]},
    {"source": S.SUMMARISING, "trigger": T.SUMMARY_RAISED, "conditions": [cancel_requested],
     "dest": S.CANCELLED},
    {"source": S.SUMMARISING, "trigger": T.SUMMARY_RAISED,
     "dest": S.FAILED, "before": [note_summary_error]},
    {"source": S.SUMMARISING, "trigger": T.SUMMARY_INTERRUPTED,
     "dest": S.CANCELLED},
    {"source": S.SUMMARISING, "trigger": T.INTERRUPTED,
     "dest": S.CANCELLED},
)  # fmt: skip
