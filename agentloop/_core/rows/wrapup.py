"""The wrap-up step (``on_exhausted='answer'``): its rows, guards and effects.

Where the steps or the tokens would end the run ``exhausted``, the model is
told and asked once more, tools disabled (``wrap_up_due``, then
``wrapping_up``); a batch past ``max_calls`` does the same from
``validating``. The final of that step ends the run ``finished``, its reason
the budget. The step is one past the budget, whatever it meets: no retry, no
fallback model, no output retry (those guards read ``run.wrapping``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import orjson

from agentloop._core.json import kept
from agentloop._core.register import effect, guard
from agentloop._core.requests import AskModel
from agentloop._core.rows.basic import (
    append_final,
    ask_for_reply,
    call_id_reserved,
    calls_exhausted,
    count_step,
    fit_context,
    name_call,
    note_max_calls,
    reject_reply,
    reply_is_final,
    steps_exhausted,
    tokens_exhausted,
)
from agentloop._core.rows.context import context_overflows, note_context_overflow
from agentloop._core.table import Effect, Entry, Feature, Guard, State, Trigger

if TYPE_CHECKING:
    from agentloop._core.state import RunState

__all__ = ["FEATURE", "ROWS", "WRAP_UP_BEGUN"]

FEATURE: Final = Feature.WRAP_UP

S, T, G, E = State, Trigger, Guard, Effect

#: The guards of the rows that begin the wrap-up: their events name the budget that ran out.
WRAP_UP_BEGUN: Final = (Guard.WRAP_UP_DUE, Guard.CALLS_EXHAUSTED_WRAP_UP)


@guard(G.WRAP_UP_DUE)
def wrap_up_due(run: RunState) -> bool:
    """``on_exhausted='answer'``, and the steps or the tokens ran out."""
    return run.budget.on_exhausted == "answer" and (steps_exhausted(run) or tokens_exhausted(run))


@guard(G.WRAPPING_UP)
def wrapping_up(run: RunState) -> bool:
    """The run is in its wrap-up step."""
    return run.wrapping is not None


@guard(G.WRAP_UP_OVERFLOWS)
def wrap_up_overflows(run: RunState) -> bool:
    """In the wrap-up step, and its request exceeds the context policy's ``tokens``."""
    return run.wrapping is not None and context_overflows(run)


@guard(G.WRAP_UP_ANSWERED)
def wrap_up_answered(run: RunState) -> bool:
    """In the wrap-up step, and the reply is a final answer."""
    return run.wrapping is not None and run.reply.final


@guard(G.CALLS_EXHAUSTED_WRAP_UP)
def calls_exhausted_wrap_up(run: RunState) -> bool:
    """``calls_exhausted``, with ``on_exhausted='answer'``."""
    return run.budget.on_exhausted == "answer" and calls_exhausted(run)


@effect(E.BEGIN_WRAP_UP)
def begin_wrap_up(run: RunState) -> None:
    """Note the budget that ran out, and append a ``user`` message asking for an answer."""
    draft = run.draft
    if draft.reason is None:
        draft.reason = "max_steps" if steps_exhausted(run) else "max_total_tokens"
    run.wrapping = draft.reason
    note = {
        "kind": "user",
        "text": f"The run's budget ran out ({draft.reason}): tools are disabled. "
        "Give your final answer now, from what you have.",
    }
    draft.appended = (kept(orjson.dumps(note)),)


@effect(E.ASK_FOR_ANSWER)
def ask_for_answer(run: RunState) -> None:
    """Hand the driver ``AskModel`` with tools disabled."""
    ask_for_reply(run)
    request = run.draft.request
    assert type(request) is AskModel, "a model request was made"
    request.tools_disabled = True


@effect(E.NOTE_WRAP_UP)
def note_wrap_up(run: RunState) -> None:
    """``reason`` = the budget that ran out."""
    run.draft.reason = run.wrapping


# -- the rows: each names the functions of its guard and effects (above, or imported)

ROWS: Final[tuple[Entry, ...]] = (
    # -- a budget ran out: the model is told, then asked once more with tools disabled;
    #    that step is counted past max_steps. A request the context policy cannot fit is
    #    not sent
    {"source": S.AWAITING_MODEL, "trigger": T.ASK_MODEL, "conditions": [wrap_up_overflows],
     "dest": S.EXHAUSTED, "before": [note_context_overflow], "ahead_of": steps_exhausted},
    {"source": S.AWAITING_MODEL, "trigger": T.ASK_MODEL, "conditions": [wrapping_up],
     "dest": None, "before": [count_step, fit_context, ask_for_answer],
     "ahead_of": steps_exhausted},
    {"source": S.AWAITING_MODEL, "trigger": T.ASK_MODEL, "conditions": [wrap_up_due],
     "dest": S.AWAITING_MODEL, "before": [begin_wrap_up], "ahead_of": steps_exhausted},
    # -- the last step's final ends the run finished, its reason the budget; any other
    #    reply ends it exhausted
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [wrap_up_answered],
     "dest": S.FINISHED, "before": [append_final, note_wrap_up], "ahead_of": reply_is_final},
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [wrapping_up],
     "dest": S.EXHAUSTED, "before": [name_call, note_wrap_up, reject_reply],
     "ahead_of": call_id_reserved},
    # -- a batch past max_calls is not run; the model is asked for an answer
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [calls_exhausted_wrap_up],
     "dest": S.AWAITING_MODEL, "before": [name_call, note_max_calls, begin_wrap_up],
     "ahead_of": calls_exhausted},
)  # fmt: skip
