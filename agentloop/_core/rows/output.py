"""Typed output (``Loop(output=T)``) and output validators: their rows, guards and effects.

In ``validating``, a final answer the output schema refuses goes back to the
model with what is wrong (``output_retry``, bounded by ``max_output_retries``),
or ends the run ``invalid_output``. With output validators (a driver that
checks outputs: ``run.output_check``), a final the schema accepts is handed
out first (``CheckOutput``); their problems come back on ``output_checked``,
whose event keeps them as its input, and the same two rows read them. The
validators are the driver's to run: never here, never in a replay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import orjson

from agentloop._core.json import kept
from agentloop._core.output_schema import told
from agentloop._core.register import effect, guard
from agentloop._core.requests import CheckOutput
from agentloop._core.rows.basic import reject_reply, reply_is_final
from agentloop._core.table import Effect, Entry, Feature, Guard, State, Trigger

if TYPE_CHECKING:
    from agentloop._core.state import RunState

__all__ = ["FEATURE", "ROWS"]

FEATURE: Final = Feature.OUTPUT

S, T, G, E = State, Trigger, Guard, Effect
_VALIDATE: Final = T.VALIDATE


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


@guard(G.OUTPUT_CHECK_DUE)
def output_check_due(run: RunState) -> bool:
    """The driver checks outputs, and the final the schema accepts is not checked yet."""
    return (
        run.output_check is not None
        and run.reply.final
        and kept_check(run) is None
        and not final_problems(run)
    )


@effect(E.ASK_FOR_OUTPUT_CHECK)
def ask_for_output_check(run: RunState) -> None:
    """Hand the driver ``CheckOutput``: the final's value, and its check to run it through."""
    check = run.output_check
    assert check is not None, "only a driver that checks outputs is asked to"
    run.outstanding = _VALIDATE
    run.since[None] = run.clock()
    run.draft.request = CheckOutput(final_value(run), check)


@effect(E.APPEND_OUTPUT_ERRORS)
def append_output_errors(run: RunState) -> None:
    """Append the refused final and a ``user`` message listing what is wrong; count the retry."""
    problems = final_problems(run)
    said = told(problems) if kept_check(run) is None else told_refused(problems)
    message = {"kind": "user", "text": said}
    run.draft.appended = (run.reply.json, kept(orjson.dumps(message)))
    run.draft.error = "invalid output: " + "; ".join(problems)
    run.output_retries += 1


@effect(E.NOTE_INVALID_OUTPUT)
def note_invalid_output(run: RunState) -> None:
    """``error`` lists what the schema found wrong, after how many retries.

    In the wrap-up step (``on_exhausted='answer'``) there is no retry to give:
    ``reason`` keeps the budget that ran out, as the step's other ends do.
    """
    problems = final_problems(run)
    retries = run.output_retries
    what = "does not match the output schema" if kept_check(run) is None else "was refused"
    if run.wrapping is None:
        when = f"after {retries} output retr{'y' if retries == 1 else 'ies'}"
    else:
        run.draft.reason = run.wrapping
        when = f"in the wrap-up step, {run.wrapping} spent: no retry left"
    run.draft.error = f"the final answer {what} ({when}): " + "; ".join(problems)


def final_problems(run: RunState) -> list[str]:
    """What is wrong with the final in hand: the schema's finds, else the validators' kept ones.

    Asked once a transition. The validators see only a final the schema
    accepts, so the two never both have something to say.
    """
    draft = run.draft
    if draft.output_problems is None:
        reply, output = run.reply, run.output
        found = output.problems(reply.value["text"]) if output is not None and reply.final else []
        draft.output_problems = found or kept_check(run) or []
    return draft.output_problems


def kept_check(run: RunState) -> list[str] | None:
    """The problems the output validators answered about the final in hand; None: not asked."""
    events = run.events
    if not events or events[-1].trigger is not T.OUTPUT_CHECKED:
        return None  # in validating, the check's event is the last one until validate fires
    return orjson.loads(events[-1].input_json or b"[]")  # type: ignore[no-any-return]


def final_value(run: RunState) -> object:
    """The final in hand as the run's output: its text, converted when the output is typed."""
    text = run.reply.value["text"]
    return text if run.output is None else run.output.value(text)


def told_refused(problems: list[str]) -> str:
    """What the model is told of a final the output validators refused: why, one a line."""
    listed = "\n".join(f"- {problem}" for problem in problems)
    return f"Your final answer was not accepted:\n{listed}\nReply again with a final answer."


# -- the rows: each names the functions of its guard and effects (above, or imported)

ROWS: Final[tuple[Entry, ...]] = (
    # -- a final the schema refuses goes back to the model, with what is wrong; checked
    #    after the reply's shape, before it is accepted as the run's answer
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [output_retry],
     "dest": S.AWAITING_MODEL, "before": [append_output_errors], "ahead_of": reply_is_final},
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [output_invalid],
     "dest": S.INVALID_OUTPUT, "before": [note_invalid_output, reject_reply],
     "ahead_of": reply_is_final},
    # -- a final the schema accepts goes to the driver's output validators first (never a
    #    cancel checkpoint: the final is in hand); their answer is recorded, and the rows
    #    above read it when validate fires again
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [output_check_due],
     "dest": None, "before": [ask_for_output_check], "ahead_of": reply_is_final},
    {"source": S.VALIDATING, "trigger": T.OUTPUT_CHECKED,
     "dest": S.VALIDATING},
    {"source": S.VALIDATING, "trigger": T.CHECK_INTERRUPTED,
     "dest": S.CANCELLED, "before": [reject_reply]},
)  # fmt: skip
