"""The names the state table is written in: its states, triggers, guards, effects and features.

Each member's comment says what it means. The rows that use them are each
feature's (``rows/``), where each guard and effect is the function registered
against its member; the rules around them are in ``table.py`` (which
re-exports these names).
"""

from __future__ import annotations

import enum

__all__ = ["Effect", "Feature", "Guard", "State", "Trigger"]


class State(enum.StrEnum):
    """Where a run is. Working states are gerunds or ``awaiting_x``; outcomes are participles."""

    #: Waiting to ask the model for its next reply (the initial state).
    AWAITING_MODEL = "awaiting_model"
    #: A reply has been copied in and is about to be checked.
    VALIDATING = "validating"
    #: An accepted batch of calls (one or more) is reserved and counted; its tools run.
    DISPATCHING = "dispatching"
    #: A policy asked a person about a call of the accepted batch; none of it has run.
    AWAITING_APPROVAL = "awaiting_approval"
    #: The history does not fit the context budget: its oldest turns are being summarised.
    SUMMARISING = "summarising"
    #: The model failed with an error the retry policy retries: the run waits, then asks again.
    BACKING_OFF = "backing_off"
    #: A handoff with a filter was accepted: the filter is asked what the next agent sees.
    HANDING_OFF = "handing_off"
    #: The model gave a final answer; it is the run's output.
    FINISHED = "finished"
    #: Cancellation was requested (or the run interrupted) and seen at a checkpoint.
    CANCELLED = "cancelled"
    #: A budget ran out (``RunResult.reason`` says which).
    EXHAUSTED = "exhausted"
    #: The model reused a call id; nothing ran a second time.
    REPEATED_CALL = "repeated_call"
    #: The reply was neither a well-formed call nor a final answer.
    MALFORMED = "malformed"
    #: The model callback raised an exception.
    FAILED = "failed"
    #: The final answer did not match the output schema, and no output retry was left.
    INVALID_OUTPUT = "invalid_output"


class Trigger(enum.StrEnum):
    """What happened: fired by the engine itself, or reported by the driver."""

    #: (engine) The model is to be asked; the internal row counts the step.
    ASK_MODEL = "ask_model"
    #: (driver) The model returned a reply.
    MODEL_REPLIED = "model_replied"
    #: (driver) The model raised an ``Exception``.
    MODEL_RAISED = "model_raised"
    #: (driver) The run was interrupted while the model worked.
    MODEL_INTERRUPTED = "model_interrupted"
    #: (engine) The copied reply is to be checked.
    VALIDATE = "validate"
    #: (engine) The accepted call's tool is to run.
    START_TOOL = "start_tool"
    #: (driver) The tool's outcome arrived (a tool that raised has an ``error`` outcome).
    TOOL_RETURNED = "tool_returned"
    #: (driver) The run was interrupted while the tool ran.
    TOOL_INTERRUPTED = "tool_interrupted"
    #: (driver) The run was interrupted while nothing was outstanding.
    INTERRUPTED = "interrupted"
    #: (driver) The review answered about the batch's calls, before any of it ran; it is
    #: recorded when an answer asks a person or denies a call.
    APPROVAL_ASKED = "approval_asked"
    #: (engine) The batch waits for a person's decisions; cancellation is checked.
    AWAIT_APPROVAL = "await_approval"
    #: (driver) A person decided every pending call.
    APPROVAL_DECIDED = "approval_decided"
    #: (engine) The summariser is to be asked; the internal row counts the step.
    SUMMARISE = "summarise"
    #: (driver) The summariser returned a reply.
    SUMMARY_WRITTEN = "summary_written"
    #: (driver) The summariser raised an ``Exception``.
    SUMMARY_RAISED = "summary_raised"
    #: (driver) The run was interrupted while the summariser worked.
    SUMMARY_INTERRUPTED = "summary_interrupted"
    #: (engine) The wait before a retry is to start; cancellation is checked.
    BACK_OFF = "back_off"
    #: (driver) The wait ended: its time passed, or the cancel token cut it short.
    WAITED = "waited"
    #: (driver) The run was interrupted during the wait.
    WAIT_INTERRUPTED = "wait_interrupted"
    #: (engine) A handoff's filter is to be asked; cancellation is checked.
    HAND_OFF = "hand_off"
    #: (driver) The handoff's filter answered the view the next agent is sent.
    HANDED_OFF = "handed_off"
    #: (driver) The handoff's filter raised, or answered a view that is not a history.
    FILTER_RAISED = "filter_raised"
    #: (driver) The run was interrupted while the handoff's filter worked.
    FILTER_INTERRUPTED = "filter_interrupted"
    #: (driver) A running call's child run (an agent tool's) waits for a person's decisions:
    #: the call has no outcome yet, and its child's pending calls are pending here too.
    CALL_WAITS = "call_waits"
    #: (driver) The output validators answered about the final the schema accepted: their
    #: problems (none: the final stands), recorded.
    OUTPUT_CHECKED = "output_checked"
    #: (driver) The run was interrupted while the output validators ran.
    CHECK_INTERRUPTED = "check_interrupted"


class Guard(enum.StrEnum):
    """Conditions a row can require; each is the function registered against it (``@guard``)."""

    #: The cancel token is set.
    CANCEL_REQUESTED = "cancel_requested"
    #: ``steps >= max_steps``.
    STEPS_EXHAUSTED = "steps_exhausted"
    #: The tokens the replies reported reach ``max_total_tokens`` (when set).
    TOKENS_EXHAUSTED = "tokens_exhausted"
    #: The reply is not plain JSON, or not a well-formed call or final.
    REPLY_MALFORMED = "reply_malformed"
    #: The reply is a final answer.
    REPLY_IS_FINAL = "reply_is_final"
    #: A call's id is already reserved (in this run or in the input history), or two
    #: calls of the batch share one.
    CALL_ID_RESERVED = "call_id_reserved"
    #: ``calls + n > max_calls``, for a batch of ``n`` calls (1 for a single call).
    CALLS_EXHAUSTED = "calls_exhausted"
    #: The cancel token is set, and a call of the batch has already started.
    CANCEL_REQUESTED_MID_BATCH = "cancel_requested_mid_batch"
    #: A call of the batch has started.
    BATCH_UNDERWAY = "batch_underway"
    #: A call of the batch besides the one reported is still to start or to finish.
    BATCH_OPEN = "batch_open"
    #: The person denied every call of the batch that has no result yet.
    DENIALS_ANSWER_BATCH = "denials_answer_batch"
    #: The driver reviews, and the batch in hand has not been reviewed nor started.
    BATCH_UNREVIEWED = "batch_unreviewed"
    #: No answer of the review asks a person (tried after the denials' rows: none denies).
    NOBODY_ASKED = "nobody_asked"
    #: No answer asks a person, and the review denies every call still without a result.
    REVIEW_DENIES_ALL = "review_denies_all"
    #: No answer asks a person, and the review denies a call of the batch.
    REVIEW_DENIES = "review_denies"
    #: Under a context policy, even the newest turn (with the head) exceeds its ``tokens``.
    CONTEXT_OVERFLOWS = "context_overflows"
    #: Under ``summarise``, turns not yet summarised would be left out of the request, and
    #: the model was asked since the last summary (a summary is followed by a request).
    SUMMARY_DUE = "summary_due"
    #: The summariser's reply is not a well-formed final answer.
    SUMMARY_MALFORMED = "summary_malformed"
    #: The retry policy chose a wait: the error is one it retries, and attempts are left
    #: (never in the wrap-up step).
    RETRY_PLANNED = "retry_planned"
    #: A fallback model comes after the one that failed (``agentloop.models.fallback``;
    #: never in the wrap-up step).
    FALLBACK_LEFT = "fallback_left"
    # -- typed output (``Loop(output=T)``)
    #: The reply is a final answer the output schema (or the output validators) refuses, and
    #: an output retry is left
    #: (``output_retries < max_output_retries``; never in the wrap-up step).
    OUTPUT_RETRY = "output_retry"
    #: The reply is a final answer the output schema refuses (or the output validators did).
    OUTPUT_INVALID = "output_invalid"
    #: The driver checks outputs (``output_validators=``), the reply is a final answer the
    #: schema accepts, and the validators have not answered about it yet.
    OUTPUT_CHECK_DUE = "output_check_due"
    # -- the wrap-up step (``on_exhausted='answer'``)
    #: ``on_exhausted='answer'``, and the steps or the tokens ran out.
    WRAP_UP_DUE = "wrap_up_due"
    #: The run is in its wrap-up step (the last model step, tools disabled).
    WRAPPING_UP = "wrapping_up"
    #: ``wrapping_up``, and under a context policy its request (the head and the newest
    #: turn, the budget's note in it) exceeds the policy's ``tokens``.
    WRAP_UP_OVERFLOWS = "wrap_up_overflows"
    #: The run is in its wrap-up step, and the reply is a final answer.
    WRAP_UP_ANSWERED = "wrap_up_answered"
    #: ``calls_exhausted``, with ``on_exhausted='answer'``.
    CALLS_EXHAUSTED_WRAP_UP = "calls_exhausted_wrap_up"
    # -- the loop guard (``max_identical_calls=N``)
    #: A call of the batch repeats a tool and arguments the loop guard refused before.
    IDENTICAL_CALL_PERSISTS = "identical_call_persists"
    #: Every call of the batch repeats a tool and arguments accepted ``N`` times already.
    IDENTICAL_CALLS_ONLY = "identical_calls_only"
    #: Some call of the batch repeats a tool and arguments accepted ``N`` times already.
    IDENTICAL_CALLS_SOME = "identical_calls_some"
    # -- handoffs (``Loop(handoffs=...)``)
    #: The reply is one call, to a handoff of the agent in force that has a filter.
    HANDOFF_FILTERED = "handoff_filtered"
    #: The reply is one call, to a handoff of the agent in force.
    HANDOFF_ALONE = "handoff_alone"
    #: Every call of the batch (two or more) is to a handoff of the agent in force.
    HANDOFFS_ONLY = "handoffs_only"
    #: Some call of the batch, beside others, is to a handoff of the agent in force.
    HANDOFF_IN_BATCH = "handoff_in_batch"
    # -- agents as tools (``Loop.as_tool``): a child run that waits for a person
    #: A call of the batch besides the one reported is still running.
    CALLS_RUNNING = "calls_running"
    #: A call of the batch waits on its child, and no call besides the one reported runs.
    WAITS_KEPT = "waits_kept"
    #: The call in hand waited on its child, and a person decided its child's pending calls.
    CALL_RESUMES = "call_resumes"


class Effect(enum.StrEnum):
    """What a row does besides moving; each is the function registered against it (``@effect``)."""

    #: ``steps += 1``, before the model is called.
    COUNT_STEP = "count_step"
    #: The driver is handed ``AskModel``: call the model with a fresh copy of the history.
    ASK_FOR_REPLY = "ask_for_reply"
    #: The event names the call in hand (its id and tool), if there is one.
    NAME_CALL = "name_call"
    #: Reserve every id of the batch and ``calls += n``.
    RESERVE_CALLS = "reserve_calls"
    #: The next call of the batch (in emission order) is handed to the driver to run
    #: (``RunTool``); a call a person denied is skipped, answered already.
    START_CALL = "start_call"
    #: Keep the reported call's result for the batch (status from the report).
    KEEP_RESULT = "keep_result"
    #: Answer every call of the batch still without a result ``cancelled``: a running
    #: call with the interruption, one that never started with ``NOT_STARTED``.
    ANSWER_REST = "answer_rest"
    #: Append the batch's message, then its results in emission order, together.
    APPEND_BATCH = "append_batch"
    #: Append the final answer; it is the run's output.
    APPEND_FINAL = "append_final"
    #: The reply ended the run unrecorded: keep it as ``rejected`` for review.
    REJECT_REPLY = "reject_reply"
    #: ``reason = 'max_steps'``.
    NOTE_MAX_STEPS = "note_max_steps"
    #: ``reason = 'max_calls'``.
    NOTE_MAX_CALLS = "note_max_calls"
    #: ``reason = 'max_total_tokens'``.
    NOTE_MAX_TOTAL_TOKENS = "note_max_total_tokens"
    #: ``error`` says what the model raised.
    NOTE_MODEL_ERROR = "note_model_error"
    #: ``error`` says what is wrong with the reply.
    NOTE_MALFORMED = "note_malformed"
    #: ``error`` names the reused id.
    NOTE_REPEATED_CALL = "note_repeated_call"
    #: The event lists the calls a policy asked about (``pending``), each with its reason.
    HOLD_CALLS = "hold_calls"
    #: The event keeps a person's decision for every pending call (``decisions``); a
    #: denied call is answered ``denied`` with the person's reason, and never handed out.
    KEEP_DECISIONS = "keep_decisions"
    #: The driver is handed ``AwaitApproval``: the calls that wait for a person.
    ASK_FOR_DECISIONS = "ask_for_decisions"
    #: The driver is handed ``ReviewCalls``: the batch's calls no person decided.
    ASK_FOR_REVIEW = "ask_for_review"
    #: Keep the review's answers, each handed out with its call (``RunTool.review``);
    #: an engine whose driver does not review (a replay's) keeps none.
    KEEP_REVIEW = "keep_review"
    #: Answer each call the review denied ``denied``, with the policy's reason; the event
    #: keeps the denials (``decisions``), and none of those calls is handed out.
    ANSWER_DENIALS = "answer_denials"
    #: Under a context policy, the request holds the head, the system messages and the
    #: newest whole turns that fit (with the summary in force); the answering event says which.
    FIT_CONTEXT = "fit_context"
    #: ``reason = 'context'``; ``error`` says how far over the newest turn is.
    NOTE_CONTEXT_OVERFLOW = "note_context_overflow"
    #: The driver is handed ``Summarise``: the summariser, and the oldest turns to fold.
    ASK_FOR_SUMMARY = "ask_for_summary"
    #: The reply's text is the summary in force, standing for the turns it folded.
    KEEP_SUMMARY = "keep_summary"
    #: ``error`` says what the summariser raised.
    NOTE_SUMMARY_ERROR = "note_summary_error"
    #: ``error`` says what is wrong with the summariser's reply; it is kept as ``rejected``.
    NOTE_MALFORMED_SUMMARY = "note_malformed_summary"
    #: The event keeps the wait the retry policy chose (``wait``); the retry is counted.
    PLAN_WAIT = "plan_wait"
    #: The driver is handed ``Wait(seconds)``: wait, unless cancelled first.
    ASK_FOR_WAIT = "ask_for_wait"
    #: The next fallback model is the one asked from now on, with its attempts afresh.
    NEXT_MODEL = "next_model"
    # -- typed output
    #: Append the refused final and a ``user`` message listing what the schema found
    #: wrong, so the model sees it; ``output_retries += 1``.
    APPEND_OUTPUT_ERRORS = "append_output_errors"
    #: ``error`` says what the output schema found wrong with the final answer.
    NOTE_INVALID_OUTPUT = "note_invalid_output"
    #: The driver is handed ``CheckOutput``: the final's value, for the output validators.
    ASK_FOR_OUTPUT_CHECK = "ask_for_output_check"
    # -- the wrap-up step
    #: The run wraps up: ``reason`` = the budget that ran out (``max_steps``,
    #: ``max_total_tokens``, or ``max_calls`` noted already), and a ``user`` message
    #: saying so and asking for a final answer is appended.
    BEGIN_WRAP_UP = "begin_wrap_up"
    #: The driver is handed ``AskModel`` with tools disabled (``tools_disabled``).
    ASK_FOR_ANSWER = "ask_for_answer"
    #: ``reason`` = the budget that ran out: the wrap-up step's events say so.
    NOTE_WRAP_UP = "note_wrap_up"
    # -- the loop guard
    #: Answer each call beyond ``max_identical_calls`` ``error``, pointing at the result
    #: of the same call accepted before; it never runs.
    REFUSE_IDENTICAL = "refuse_identical"
    #: ``reason = 'max_identical_calls'``; ``error`` names the call the model repeated.
    NOTE_IDENTICAL_CALLS = "note_identical_calls"
    # -- handoffs
    #: Answer the handoff call ``ok`` with ``{"handed_off_to": name}``, unrun.
    ANSWER_HANDOFF = "answer_handoff"
    #: The agent the call hands to is the one in force from now on; the event names it.
    SWITCH_AGENT = "switch_agent"
    #: Answer each handoff call of the batch ``error`` (a handoff is taken only alone),
    #: unrun; the batch's other calls run.
    REFUSE_HANDOFF = "refuse_handoff"
    #: The driver is handed ``FilterHistory``: the handoff's filter, and a copy of the history.
    ASK_FOR_FILTER = "ask_for_filter"
    #: The filter's view is what the next agent is sent, followed by what comes after it.
    KEEP_VIEW = "keep_view"
    #: Answer the handoff call ``error``: its filter failed; the agent does not change.
    ANSWER_HANDOFF_FAILED = "answer_handoff_failed"
    # -- agents as tools
    #: Keep the reported call waiting on its child: its child's pending calls, each under
    #: the call's id (``PendingCall.path``); the event lists them. No call is handed out
    #: while a wait is kept.
    KEEP_WAIT = "keep_wait"
    #: The run waits for a person: ``pending`` lists every waiting call's child's pending calls.
    HOLD_WAITING = "hold_waiting"
    #: The waiting call in hand is handed to the driver again (``RunTool``), its child's
    #: decisions with it (``engine.delegated``), before any call not yet handed out.
    RESUME_CALL = "resume_call"


class Feature(enum.StrEnum):
    """A group of rows, with its guards and effects, in a module of its own (``rows/``).

    The engine consults the table of its configuration: the basic rows, and
    the rows of each feature its configuration turns on. In this order they
    are put together (``build.py``): a feature's row that joins a group of
    the basic rows goes just ahead of the basic row it names.
    """

    #: Asking, checking, dispatching, the budgets, cancellation and interruption: every run.
    BASIC = "basic"
    #: Typed output: an ``output`` schema (``Loop(output=T)``), or a driver that checks
    #: outputs (``output_validators=``), or an output check reported.
    OUTPUT = "output"
    #: The loop guard: a budget's ``max_identical_calls``.
    LOOP_GUARD = "loop_guard"
    #: The wrap-up step: a budget's ``on_exhausted='answer'``.
    WRAP_UP = "wrap_up"
    #: A context policy (``agentloop.context``): requests fitted, turns summarised.
    CONTEXT = "context"
    #: Retries (a retry policy) and fallback models; or a model error with a wait to take.
    RETRY = "retry"
    #: Review and approval: a driver that reviews (``reviews``), or a review reported.
    REVIEW = "review"
    #: Handoffs: a team of agents (``Loop(handoffs=...)``), one in force at a time.
    HANDOFF = "handoff"
    #: Agents as tools (``Loop.as_tool``): a call that waits on its child run's person.
    NESTED_APPROVAL = "nested_approval"
