"""Typed output (``Loop(output=T)``): its rows, guards and effects.

In ``validating``, a final answer the output schema refuses goes back to the
model with what is wrong (``output_retry``, bounded by ``max_output_retries``),
or ends the run ``invalid_output``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import orjson

from agentloop._core.json import kept
from agentloop._core.output_schema import told
from agentloop._core.register import effect, guard
from agentloop._core.rows.basic import reject_reply, reply_is_final
from agentloop._core.table import Effect, Entry, Feature, Guard, State, Trigger

if TYPE_CHECKING:
    from agentloop._core.state import RunState

__all__ = ["FEATURE", "ROWS"]

FEATURE: Final = Feature.OUTPUT

S, T, G, E = State, Trigger, Guard, Effect


@guard(G.OUTPUT_RETRY)
def output_retry(run: RunState) -> bool:
    """The schema refuses the final, and an output retry is left (never in the wrap-up step)."""
    return (
        run.wrapping is None
        and run.output_retries < run.budget.max_output_retries
        and bool(final_problems(run))
    )


@guard(G.OUTPUT_INVALID)
def output_invalid(run: RunState) -> bool:
    """The schema refuses the final."""
    return bool(final_problems(run))


@effect(E.APPEND_OUTPUT_ERRORS)
def append_output_errors(run: RunState) -> None:
    """Append the refused final and a ``user`` message listing what is wrong; count the retry."""
    problems = final_problems(run)
    message = {"kind": "user", "text": told(problems)}
    run.draft.appended = (run.reply.json, kept(orjson.dumps(message)))
    run.draft.error = "invalid output: " + "; ".join(problems)
    run.output_retries += 1


@effect(E.NOTE_INVALID_OUTPUT)
def note_invalid_output(run: RunState) -> None:
    """``error`` lists what the schema found wrong, after how many retries."""
    problems = final_problems(run)
    retries = run.output_retries
    run.draft.error = (
        f"the final answer does not match the output schema (after {retries} output "
        f"retr{'y' if retries == 1 else 'ies'}): " + "; ".join(problems)
    )


def final_problems(run: RunState) -> list[str]:
    """What the output schema finds wrong with the final in hand (asked once a transition)."""
    draft = run.draft
    if draft.output_problems is None:
        reply, output = run.reply, run.output
        draft.output_problems = (
            output.problems(reply.value["text"]) if output is not None and reply.final else []
        )
    return draft.output_problems


# -- the rows: each names the functions of its guard and effects (above, or imported)

ROWS: Final[tuple[Entry, ...]] = (
    # -- a final the schema refuses goes back to the model, with what is wrong; checked
    #    after the reply's shape, before it is accepted as the run's answer
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [output_retry],
     "dest": S.AWAITING_MODEL, "before": [append_output_errors], "ahead_of": reply_is_final},
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [output_invalid],
     "dest": S.INVALID_OUTPUT, "before": [note_invalid_output, reject_reply],
     "ahead_of": reply_is_final},
)  # fmt: skip
