"""The basic rows, every run's: ask, check, dispatch, the budgets, cancellation, interruption.

Each guard reads the run (and the report in hand, ``run.draft``) and answers a
bool; each effect changes the run or fills in the draft of the transition
being made. The other features' rows join these groups (``build.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import orjson

from agentloop._core.batch import Batch
from agentloop._core.intake import NO_REPLY
from agentloop._core.json import exception_said
from agentloop._core.messages import ids_of
from agentloop._core.register import effect, guard
from agentloop._core.requests import AskModel, RunTool
from agentloop._core.table import Effect, Entry, Feature, Guard, State, Trigger
from agentloop._core.window import context_plan

if TYPE_CHECKING:
    from agentloop._core.state import RunState

__all__ = ["FEATURE", "ROWS"]

FEATURE: Final = Feature.BASIC

S, T, G, E = State, Trigger, Guard, Effect

_ASK_MODEL, _START_TOOL = Trigger.ASK_MODEL, Trigger.START_TOOL


# -- guards --------------------------------------------------------------------------


@guard(G.CANCEL_REQUESTED)
def cancel_requested(run: RunState) -> bool:
    """The cancel token is set (read at this checkpoint)."""
    return run.cancelled()


@guard(G.STEPS_EXHAUSTED)
def steps_exhausted(run: RunState) -> bool:
    """Every step of ``max_steps`` is spent."""
    return run.steps >= run.budget.max_steps


@guard(G.TOKENS_EXHAUSTED)
def tokens_exhausted(run: RunState) -> bool:
    """The replies' tokens reach ``max_total_tokens``, when it is set."""
    limit = run.budget.max_total_tokens
    return limit is not None and run.tokens >= limit


@guard(G.REPLY_MALFORMED)
def reply_malformed(run: RunState) -> bool:
    """Intake found something wrong with the reply in hand."""
    return run.reply.problem is not None


@guard(G.REPLY_IS_FINAL)
def reply_is_final(run: RunState) -> bool:
    """The reply in hand is a well-formed final answer."""
    return run.reply.final


@guard(G.CALL_ID_RESERVED)
def call_id_reserved(run: RunState) -> bool:
    """A call of the batch reuses an id, or two of its calls share one."""
    return repeated_id(run) is not None


@guard(G.CALLS_EXHAUSTED)
def calls_exhausted(run: RunState) -> bool:
    """The batch would take the run past ``max_calls`` (a final has no calls, so it never does)."""
    return run.calls + len(run.reply.calls) > run.budget.max_calls


@guard(G.CANCEL_REQUESTED_MID_BATCH)
def cancel_requested_mid_batch(run: RunState) -> bool:
    """The cancel token is set, and the record shows a call of the batch (``batch_underway``)."""
    return batch_underway(run) and run.cancelled()


@guard(G.BATCH_UNDERWAY)
def batch_underway(run: RunState) -> bool:
    """A call of the batch has started or been answered, or was held for a person."""
    return run.batch is not None and run.batch.underway


@guard(G.BATCH_OPEN)
def batch_open(run: RunState) -> bool:
    """A call of the batch besides the one reported is still to start or to finish."""
    batch = run.batch
    assert batch is not None, "a tool returns in a batch"
    return len(batch.results) + 1 < len(batch.calls)


# -- effects -------------------------------------------------------------------------


@effect(E.COUNT_STEP)
def count_step(run: RunState) -> None:
    """``steps += 1``, before the model is called."""
    run.steps += 1


@effect(E.ASK_FOR_REPLY)
def ask_for_reply(run: RunState) -> None:
    """Hand the driver ``AskModel``: the history, or the view a context policy fitted."""
    run.outstanding = _ASK_MODEL
    run.since[None] = run.clock()
    view = run.view  # fit_context's, under a context policy
    if view is None and run.team_view is not None:  # a handoff filter's, and what followed
        view = filtered_view(run)
    run.draft.request = AskModel(*(run.history.request() if view is None else (view, len(view))))


def filtered_view(run: RunState) -> bytearray:
    """A handoff filter's view (its messages), then every message appended after the handoff."""
    assert run.team_view is not None, "a filter's view is in force"
    given, after = run.team_view
    history = run.history
    shown = [orjson.dumps(message) for message in orjson.loads(given)]
    later = [history.message_json(i) for i in range(after, len(history))]
    return bytearray(b"[" + b",".join([*shown, *later]) + b"]")


@effect(E.NAME_CALL)
def name_call(run: RunState) -> None:
    """The event names the call in hand (its id and tool), if there is one."""
    draft = run.draft
    if draft.call is not None:
        draft.named = draft.call


@effect(E.RESERVE_CALLS)
def reserve_calls(run: RunState) -> None:
    """Reserve every id of the batch, count its calls, and hold it as the batch in hand."""
    calls, reserved = run.reply.calls, run.reserved
    for call_id, _ in calls:
        reserved.add(call_id)
    run.calls += len(calls)
    run.batch = Batch(run.reply)


@effect(E.START_CALL)
def start_call(run: RunState) -> None:
    """Hand the driver the batch's next call (``RunTool``), with its answers."""
    batch, draft = run.batch, run.draft
    assert batch is not None, "a call is handed out of a batch"
    assert draft.call is not None, "next() put the call to hand out in hand"
    call_id = draft.call[0]
    index = batch.next_index()
    assert index is not None, "next() found the call to hand out"
    batch.running[call_id] = index
    batch.started = index + 1
    batch.handed += 1
    run.handed += (call_id,)
    run.outstanding = _START_TOOL
    run.since[call_id] = run.clock()
    draft.request = RunTool(*batch.handed_out(index))


@effect(E.KEEP_RESULT)
def keep_result(run: RunState) -> None:
    """Keep the reported call's result for the batch (its status from the report)."""
    batch, draft = run.batch, run.draft
    assert batch is not None, "a tool returns in a batch"
    assert draft.call is not None, "the reported call is in hand"
    assert draft.outcome is not None, "a tool report brings its outcome"
    draft.status = draft.outcome.status
    batch.answer(batch.running.pop(draft.call[0]), draft.status, draft.outcome.content_json)


@effect(E.ANSWER_REST)
def answer_rest(run: RunState) -> None:
    """Answer every call still without a result ``cancelled``."""
    batch, draft = run.batch, run.draft
    assert batch is not None, "a batch is answered"
    if draft.call is not None and batch.calls.index(draft.call) not in batch.results:
        draft.status = "cancelled"  # the call in hand is among those answered here
    batch.answer_rest(draft.cut)


@effect(E.APPEND_BATCH)
def append_batch(run: RunState) -> None:
    """Append the batch's message, then its results in emission order, together."""
    assert run.batch is not None, "a batch is appended"
    run.draft.appended = run.batch.messages()


@effect(E.APPEND_FINAL)
def append_final(run: RunState) -> None:
    """Append the final answer."""
    run.draft.appended = (run.reply.json,)


@effect(E.REJECT_REPLY)
def reject_reply(run: RunState) -> None:
    """Keep the reply that ended the run unrecorded as ``rejected``."""
    if run.reply is not NO_REPLY:
        run.rejected = run.reply.value


@effect(E.NOTE_MAX_STEPS)
def note_max_steps(run: RunState) -> None:
    """``reason = 'max_steps'``."""
    run.draft.reason = "max_steps"


@effect(E.NOTE_MAX_CALLS)
def note_max_calls(run: RunState) -> None:
    """``reason = 'max_calls'``."""
    run.draft.reason = "max_calls"


@effect(E.NOTE_MAX_TOTAL_TOKENS)
def note_max_total_tokens(run: RunState) -> None:
    """``reason = 'max_total_tokens'``."""
    run.draft.reason = "max_total_tokens"


@effect(E.NOTE_MODEL_ERROR)
def note_model_error(run: RunState) -> None:
    """``error`` says what the model raised."""
    draft = run.draft
    assert draft.exception is not None, "the model raised"
    draft.error = f"the model raised {exception_said(draft.exception)}"


@effect(E.NOTE_MALFORMED)
def note_malformed(run: RunState) -> None:
    """``error`` says what is wrong with the reply."""
    run.draft.error = f"malformed reply: {run.reply.problem}"


@effect(E.NOTE_REPEATED_CALL)
def note_repeated_call(run: RunState) -> None:
    """The event names the reused id, and ``error`` where it was first used."""
    call_id = repeated_id(run)
    assert call_id is not None, "a call id is reserved"
    calls, draft = run.reply.calls, run.draft
    # The event names the reused id, in a batch too (name_call names only a lone call).
    draft.named = (call_id, dict(calls)[call_id])
    if len(calls) > 1 and call_id not in run.reserved:
        draft.error = f"call id {call_id!r} appears twice in the batch; no call of it was run"
        return
    draft.error = (
        f"call id {call_id!r} was already used in this run, first "
        f"{_first_use(run, call_id)}; the call was not run again"
    )


def repeated_id(run: RunState) -> str | None:
    """The first id of the reply's batch that is reserved already or used twice in it."""
    reserved, seen = run.reserved, set()
    for call_id, _ in run.reply.calls:
        if call_id in reserved or call_id in seen:
            return call_id
        seen.add(call_id)
    return None


def _first_use(run: RunState, call_id: str) -> str:
    """Where a reserved id was first used: ``in the input (transcript[3])``, ``at step 2``."""
    at = 0
    for data in run.input:
        if call_id in ids_of(orjson.loads(data)):
            return f"in the input (transcript[{at}])"
        at += 1
    for event in run.events:
        for data in event.appended_json:
            if call_id in ids_of(orjson.loads(data)):
                return f"at step {event.steps} (transcript[{at}])"
            at += 1
    raise AssertionError("a reserved id is in the input or in what the run appended")


@effect(E.FIT_CONTEXT)
def fit_context(run: RunState) -> None:
    """Under a policy, the request holds what fits; the answering event says which."""
    if run.policy is None:
        return
    plan = context_plan(run)
    # Checked first, by context_overflows (or, in the wrap-up step, wrap_up_overflows).
    assert not isinstance(plan, str), "context_overflows was checked first"
    run.seen = plan.seen
    run.view = None if plan.view is None else bytearray(plan.view)


# -- the rows: each names the functions of its guard and effects (above, or imported)

ROWS: Final[tuple[Entry, ...]] = (
    # -- before the model is asked: nothing is spent by these rows
    {"source": S.AWAITING_MODEL, "trigger": T.ASK_MODEL, "conditions": [cancel_requested],
     "dest": S.CANCELLED},
    {"source": S.AWAITING_MODEL, "trigger": T.ASK_MODEL, "conditions": [steps_exhausted],
     "dest": S.EXHAUSTED, "before": [note_max_steps]},
    {"source": S.AWAITING_MODEL, "trigger": T.ASK_MODEL, "conditions": [tokens_exhausted],
     "dest": S.EXHAUSTED, "before": [note_max_total_tokens]},
    {"source": S.AWAITING_MODEL, "trigger": T.ASK_MODEL,
     "dest": None, "before": [count_step, fit_context, ask_for_reply]},
    # -- the model answered, raised or was interrupted; the step was spent
    {"source": S.AWAITING_MODEL, "trigger": T.MODEL_REPLIED, "conditions": [cancel_requested],
     "dest": S.CANCELLED, "before": [reject_reply]},
    {"source": S.AWAITING_MODEL, "trigger": T.MODEL_REPLIED,
     "dest": S.VALIDATING},
    {"source": S.AWAITING_MODEL, "trigger": T.MODEL_RAISED, "conditions": [cancel_requested],
     "dest": S.CANCELLED},
    {"source": S.AWAITING_MODEL, "trigger": T.MODEL_RAISED,
     "dest": S.FAILED, "before": [note_model_error]},
    {"source": S.AWAITING_MODEL, "trigger": T.MODEL_INTERRUPTED,
     "dest": S.CANCELLED},
    # -- the reply is checked, malformed first; then a final, before any budget. A final at
    #    the call cap is accepted because calls_exhausted counts the calls the reply makes
    #    (a final makes none), not because of where these rows stand
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [reply_malformed],
     "dest": S.MALFORMED, "before": [note_malformed, reject_reply]},
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [reply_is_final],
     "dest": S.FINISHED, "before": [append_final]},
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [call_id_reserved],
     "dest": S.REPEATED_CALL, "before": [name_call, note_repeated_call, reject_reply]},
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [calls_exhausted],
     "dest": S.EXHAUSTED, "before": [name_call, note_max_calls, reject_reply]},
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [cancel_requested],
     "dest": S.CANCELLED, "before": [name_call, reject_reply]},
    {"source": S.VALIDATING, "trigger": T.VALIDATE,
     "dest": S.DISPATCHING, "before": [name_call, reserve_calls]},
    # -- the last checkpoint before each tool runs; the calls stay counted. Once a call
    #    of the batch has started (or the batch was held for a person: the record names its
    #    calls), every call is answered, so the batch is appended.
    {"source": S.DISPATCHING, "trigger": T.START_TOOL, "conditions": [cancel_requested_mid_batch],
     "dest": S.CANCELLED, "before": [name_call, answer_rest, append_batch]},
    {"source": S.DISPATCHING, "trigger": T.START_TOOL, "conditions": [cancel_requested],
     "dest": S.CANCELLED, "before": [name_call, reject_reply]},
    {"source": S.DISPATCHING, "trigger": T.START_TOOL,
     "dest": None, "before": [start_call]},
    # -- a call's result is kept until the batch is done; then the calls and their
    #    results enter the history together
    {"source": S.DISPATCHING, "trigger": T.TOOL_RETURNED, "conditions": [batch_open],
     "dest": S.DISPATCHING, "before": [name_call, keep_result]},
    {"source": S.DISPATCHING, "trigger": T.TOOL_RETURNED,
     "dest": S.AWAITING_MODEL, "before": [name_call, keep_result, append_batch]},
    {"source": S.DISPATCHING, "trigger": T.TOOL_INTERRUPTED,
     "dest": S.CANCELLED, "before": [name_call, answer_rest, append_batch]},
    # -- interrupted between checkpoints: the run ends, nothing is half-recorded
    {"source": S.AWAITING_MODEL, "trigger": T.INTERRUPTED,
     "dest": S.CANCELLED},
    {"source": S.VALIDATING, "trigger": T.INTERRUPTED,
     "dest": S.CANCELLED, "before": [name_call, reject_reply]},
    {"source": S.DISPATCHING, "trigger": T.INTERRUPTED, "conditions": [batch_underway],
     "dest": S.CANCELLED, "before": [answer_rest, append_batch]},
    {"source": S.DISPATCHING, "trigger": T.INTERRUPTED,
     "dest": S.CANCELLED, "before": [name_call, reject_reply]},
)  # fmt: skip
