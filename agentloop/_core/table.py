"""The agent loop's state table: its theory of operation, and the rules around its rows.

Rule 1 (after h11): everything that decides a run's states and transitions is
the table's. Its rows are written by feature, each in a module of its own
beside the guards and effects they name (``rows/basic.py``, ``output.py``,
``loopguard.py``, ``wrapup.py``, ``context.py``, ``retry.py``,
``review.py``, ``handoff.py``, ``nested_approval.py``). A row names the
functions of its guard and effects themselves
(``"conditions": [calls_exhausted]``), one go-to-definition from the row;
each is registered against its member, the name the record keeps
(``@guard(Guard.CALLS_EXHAUSTED)``), in the module of its feature. The few
rules that are not rows (what the engine fires itself, which reports answer which request,
what a driver's report means) are small tables at the end of this file. The
whole table is listed, row by row, in ``docs/concepts.md``.

Each row is pinned by a test: a test marked ``@pytest.mark.row("validating
--validate [calls_exhausted]--> exhausted")`` (``Row.name``) pins that row,
and ``tests/core/test_row_map.py`` fails for a row of the table no test is
marked for. Add the mark to the test that shows the row's behaviour.

Theory of operation
===================

A run is a finite-state machine over seven working states and seven terminal
ones. The engine (``engine.py``) holds the counters and the record and does
no I/O; a driver asks it what it needs next and reports what happened:

* In each working state the engine fires one trigger itself (``NEXT``):
  ``ask_model`` in ``awaiting_model``, ``validate`` in ``validating``,
  ``start_tool`` in ``dispatching``, ``await_approval`` in
  ``awaiting_approval``, ``summarise`` in ``summarising``, ``back_off`` in
  ``backing_off``, ``hand_off`` in ``handing_off``. Cancellation and the
  budgets are checked by the guards of those rows.
* When the row it takes is *internal* (``dest`` is ``None``: the state stays),
  the engine hands the driver a request: ``ask_model``'s internal row counts
  the step (``steps += 1`` happens before the call, so a model that raises,
  hangs or is interrupted has still spent its step) and asks for the model's
  reply; ``start_tool``'s hands out the batch's next call and asks for its
  tool's outcome.
* A reply is a final answer, or a batch of one or more calls (a single
  ``call`` is a batch of one). The whole batch is checked before anything is
  reserved; once accepted, its calls run one at a time in emission order (or
  several at once, under the asyncio driver's ``max_concurrency``), each
  result is kept, and the step that answers the last one appends the batch
  and every result together. Cancellation seen after a call of the batch
  started still answers every call, so the history never holds a call
  without its result.
* A final answer is accepted while a step remains even when the calls are
  spent: ``calls_exhausted`` holds when ``calls + n > max_calls`` for a reply
  of ``n`` calls, and a final makes none. That arithmetic decides it, not the
  order of the rows (``reply_is_final`` comes first anyway).
* The driver then reports exactly one answer to that request (``ANSWERS``):
  the model replied, raised or was interrupted; the tool returned (a tool
  that raised returns an ``error`` outcome) or was interrupted. ``REPORTS``
  says which trigger each kind of report is; the engine alone decides.
* Before a batch's first call starts, a driver that reviews (its tools have
  policies) is handed the batch's calls by ``start_tool``'s
  ``batch_unreviewed`` row, and reports its policies' answers
  (``approval_asked``). A denial is the engine's to answer, as a person's
  is: the call is answered ``denied`` with the policy's reason and never
  handed out, and the event keeps the denials (``review_denies``,
  ``review_denies_all``). If any answer asks a person, the run waits in
  ``awaiting_approval`` (not a terminal state: it is where the run stops
  until a person decides); else the answers are kept, nothing is recorded,
  and the batch's calls are handed out, each with its answer. In
  ``awaiting_approval`` ``await_approval``'s internal row hands out the
  pending calls, and ``approval_decided`` (a decision for each) lets the
  batch run as usual, each denied call answered by the engine.
* A model that raised is retried when the Loop has a retry policy that
  retries the error and has attempts left (``retry_planned`` asks it, once,
  unless the report brought the wait a replay recorded): the event keeps the
  wait, and the run waits in ``backing_off``, where ``back_off``'s internal
  row hands the driver ``Wait(seconds)``; ``waited`` then leads back to
  ``awaiting_model``, whose budgets bound the attempts like any step. Out of
  attempts (or for an error not retried), a fallback model, if any is left
  (``fallback_left``), is asked from then on; else the run fails.
* An interruption (``KeyboardInterrupt``, a cancelled asyncio task) that
  lands while nothing is outstanding (in a listener, say) is ``interrupted``.
  Every interruption ends the run ``cancelled``, and a call whose tool was
  running is recorded with a ``cancelled`` result, so it is paired and never
  run again.

The engine consults the table of its configuration: the basic rows, and the
rows of each feature it turns on (``Feature``; ``build.features_of``). A
feature that is off is one whose guards could never hold, so its rows are
left out and the run is the same (a property test runs both side by side):

* typed output (``Loop(output=T)``): in ``validating`` a final the schema
  refuses goes back to the model with what is wrong (``output_retry``,
  counted in ``output_retries`` and bounded by ``max_output_retries``; the
  next ask spends a step like any other), or ends the run ``invalid_output``.
  With output validators (a driver that checks outputs, ``output_check``),
  a final the schema accepts is first handed out (``validate
  [output_check_due]`` hands the driver ``CheckOutput``), and the
  validators' problems come back on ``output_checked``, recorded as its
  event's input (a replay feeds them back, never asking a validator): the
  same two rows send them back or end the run. The check is no cancel
  checkpoint: a final the schema and the validators accept is taken;
* the wrap-up step (``on_exhausted='answer'``): where the steps or the tokens
  would end the run ``exhausted``, ``ask_model [wrap_up_due]`` notes the
  budget and appends a request for an answer, and ``[wrapping_up]`` asks once
  more with ``AskModel.tools_disabled`` (the drivers pass
  ``tool_choice='none'``); a batch past ``max_calls`` does the same from
  ``validating``. Its final ends the run ``finished`` with that reason;
* the loop guard (``max_identical_calls=N``): a call whose fingerprint was
  accepted ``N`` times is answered ``error`` by the engine, never run; one
  the guard refused, made again, ends the run ``repeated_call``;
* handoffs (``Loop(handoffs=...)``, the engine's ``agents``): a call to a
  handoff of the agent in force, alone in its reply, is answered ``ok`` by
  the engine and the other agent is in force from then on
  (``handoff_alone``, whose event names it in ``agent``); beside other calls
  it is answered ``error``, unrun (``handoffs_only``, ``handoff_in_batch``).
  These rows come after the budgets, the reused ids, the loop guard and
  cancellation, so a handoff is a call as any other. A handoff with a filter
  goes through ``handing_off``, where ``hand_off`` hands the driver
  ``FilterHistory`` (cancellation checked first); ``handed_off`` keeps the
  view the filter answered on its event (a replay feeds it back), which the
  next agent's requests start from (``keep_view``);
* a child run that waits (agents as tools, ``Loop.as_tool``; on once a
  driver reports ``call_waits``, with review's rows): a running call whose
  child run stops for a person has no outcome yet; its child's pending calls
  are kept under the call's id (``keep_wait``, ``PendingCall.path``). The
  batch hands out no new call while a wait is undecided; once no call of it
  runs (``call_waits`` alone, or ``tool_returned [waits_kept]`` for the last
  sibling) the run waits in ``awaiting_approval`` with every child's calls
  pending (``hold_waiting``). The decisions are keyed by path; each waiting
  call is handed out again first (``start_tool [call_resumes]``) with its
  child's decisions (``engine.delegated``); a child's denial answers the
  child's call, never this run's. Cancellation keeps its rows: the waiting
  call is answered ``cancelled``, and the driver ends the waiting child
  ``cancelled`` too;
* a context policy, retries and fallback models, and review: below and above.

Put together, a feature's row that joins a group of the basic rows goes just
ahead of the basic row its ``ahead_of`` names (or of the group's unguarded
last row); the features come in ``Feature``'s order. For each (state,
trigger) the rows are then tried top to bottom; the first whose guard holds
wins (``transitions`` resolves them the same way, and a property test runs
both side by side). The last row of each group has no guard, so a report is
never dropped. Effects run in the order listed, *before* the state changes;
the event is then recorded, its messages appended to the history together,
and the state changed. An event keeps the exception its report carried.

A context policy (``agentloop.context``) changes only what a model request
carries, never the history: ``fit_context`` picks the head, the system
messages and the newest whole turns that fit, and the event answering the
request records which (``context``). Under ``summarise``, ``summary_due``
first takes the run to ``summarising``, where a model call of its own (a
step) writes the summary that stands in for the oldest turns. When even the
newest turn cannot fit, ``context_overflows`` ends the run ``exhausted``
(reason ``'context'``) before anything is sent.

Terminal states have no rows, so they absorb: asking anything of a finished
run raises ``InvalidStateError``, never a silent no-op.

WARNING: what is still decided outside the rows
===============================================

The goal is that nothing is. Today these are, and each says where and why:

* Intake (``intake.py``, ``drafts.py``) takes a report in before any guard
  reads it: a reply's JSON copy, its shape problem, its usage and its
  batch's calls; a tool's outcome, where one that is not ``{'status',
  'content'}`` becomes an ``error`` result saying so; a model's error, with
  the wait a replay or DBOS recorded with it (a ``RecordedException``), and
  the fallback model it names. Intake decides what came, never which row
  fires: what came must be known before a guard can read it.
* Which rows the engine consults is its configuration's (``features_of``,
  at construction): the table cannot choose which tables there are. A report
  only a feature takes brings that feature's rows on (a review reported, a
  wait given to take: ``Engine._turn_on``), so a replay's engine takes what
  its record holds; as every feature's guards are false when it is off, this
  changes no run.
* Which fallback model a driver calls is read, not decided, outside the
  rows: ``engine.model_index`` counts the ``fallback_left`` rows taken, and
  the Loop's per-run model (``_loop/fallback.per_run``) calls that one.
* Which agent's model and tools a driver calls is read, not decided, outside
  the rows: ``engine.agent`` is the ``agent`` of the last event that names
  one (``rows/handoff.agent_in_force``), and the Loop's per-run model and
  dispatch (``_loop/team.py``) call that agent's.
* A report that answers nothing outstanding (a reply nobody asked for, a
  second ``next()`` while a request is out) is refused with
  ``InvalidStateError`` before intake, and changes nothing (``checks.py``,
  ``drafts.next_draft``): a refusal is no transition.
* ``reviewed`` is refused once a call of the batch has been handed out, or
  once the batch was reviewed (a raise in ``checks.checked_review``, not a
  guard, for the same reason). Whether a driver reviews at all is its own
  setting (``engine.reviews``), read by ``batch_unreviewed``; an engine fed
  by a replay does not review, and keeps none of the answers it is fed
  (``keep_review``) but the asks and denials its record holds.
* In ``dispatching`` ``next()`` may hand out the batch's next call while
  others still run (a driver that runs calls at once asks again); only when
  every call is out does it refuse (``drafts.next_draft``).
* A resume of a durable run hands the driver again the calls its records
  say were handed out and never answered, before the engine is asked
  (``DurableEngine.next``, ``_durable/recording.py``): the engine fed by
  the replay already holds them as running, and the table hands no call
  out twice.
* An interruption rebuilds the state from the log of events first
  (``RunState.settle``), so that a transition it cut short is undone or
  completed, then takes its row; a transition the engine's ``commit`` hook
  refuses (a durable run's ledger failed) is undone the same way.
* Under a context policy, which turns a request carries is found by
  ``window.Window.plan``, once per request, and read by
  ``context_overflows``, ``summary_due`` and ``fit_context``; the summary in
  force is made again from the events by ``settle`` after an interruption.
* The output schema (``RunState.output``) and the loop guard's index of the
  calls (``rows/loopguard.CallIndex``) are read by guards, not rows: the
  schema is fixed for the run and recorded with it, and the index is read
  from the record (the input and every event's ``appended``), so a replay
  finds the same.
* The drivers differ in one place, by name: the asyncio driver can interrupt
  an awaited model when the token is cancelled (``model_interrupted``); the
  sync driver cannot, and sees the reply first
  (``model_replied [cancel_requested]``). Both end ``cancelled``, with the
  step spent and nothing appended.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Final, Required, TypedDict

from agentloop._core.terms import Effect, Feature, Guard, State, Trigger

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from agentloop._core.state import RunState

__all__ = [
    "ANSWERS",
    "MODEL_ANSWERS",
    "NEXT",
    "REPORTS",
    "TERMINAL",
    "Effect",
    "Entry",
    "Feature",
    "Guard",
    "Report",
    "State",
    "Trigger",
]


TERMINAL: Final = frozenset(
    {
        State.FINISHED,
        State.CANCELLED,
        State.EXHAUSTED,
        State.REPEATED_CALL,
        State.MALFORMED,
        State.FAILED,
        State.INVALID_OUTPUT,
    }
)

S, T = State, Trigger


class Entry(TypedDict, total=False):
    """One row as a feature writes it: the ``transitions`` form, and where it goes.

    ``conditions`` holds the function of the row's guard (at most one),
    ``before`` those of its effects (they run before the state changes), each
    registered against its member (``register.py``); ``dest`` is ``None`` for
    an internal row. ``ahead_of`` places a feature's row in a group of the
    basic rows: just ahead of the basic row with that guard (without it, just
    ahead of the group's unguarded last row).
    """

    source: Required[State]
    trigger: Required[Trigger]
    dest: Required[State | None]
    conditions: list[Callable[[RunState], bool]]
    before: list[Callable[[RunState], None]]
    ahead_of: Callable[[RunState], bool]


#: The trigger the engine fires itself in each working state.
NEXT: Final[Mapping[State, Trigger]] = {
    S.AWAITING_MODEL: T.ASK_MODEL,
    S.VALIDATING: T.VALIDATE,
    S.DISPATCHING: T.START_TOOL,
    S.AWAITING_APPROVAL: T.AWAIT_APPROVAL,
    S.SUMMARISING: T.SUMMARISE,
    S.BACKING_OFF: T.BACK_OFF,
    S.HANDING_OFF: T.HAND_OFF,
}


class Report(enum.Enum):
    """What a driver can report about the request it was handed."""

    #: The model replied, the tool returned an outcome, or a person decided.
    ANSWER = "answer"
    #: The model or the tool raised an ``Exception``.
    EXCEPTION = "exception"
    #: The driver was interrupted (a ``BaseException`` that is not an ``Exception``).
    INTERRUPTION = "interruption"


#: What each report means, given the request outstanding (None: nothing is).
#: A tool that raised is answered like one that returned an ``error`` outcome.
REPORTS: Final[Mapping[tuple[Trigger | None, Report], Trigger]] = {
    (T.ASK_MODEL, Report.ANSWER): T.MODEL_REPLIED,
    (T.ASK_MODEL, Report.EXCEPTION): T.MODEL_RAISED,
    (T.ASK_MODEL, Report.INTERRUPTION): T.MODEL_INTERRUPTED,
    (T.START_TOOL, Report.ANSWER): T.TOOL_RETURNED,
    (T.START_TOOL, Report.EXCEPTION): T.TOOL_RETURNED,
    (T.START_TOOL, Report.INTERRUPTION): T.TOOL_INTERRUPTED,
    (T.AWAIT_APPROVAL, Report.ANSWER): T.APPROVAL_DECIDED,
    (T.BACK_OFF, Report.ANSWER): T.WAITED,
    (T.BACK_OFF, Report.INTERRUPTION): T.WAIT_INTERRUPTED,
    (None, Report.INTERRUPTION): T.INTERRUPTED,
    (T.SUMMARISE, Report.ANSWER): T.SUMMARY_WRITTEN,
    (T.SUMMARISE, Report.EXCEPTION): T.SUMMARY_RAISED,
    (T.SUMMARISE, Report.INTERRUPTION): T.SUMMARY_INTERRUPTED,
    (T.HAND_OFF, Report.ANSWER): T.HANDED_OFF,
    (T.HAND_OFF, Report.EXCEPTION): T.FILTER_RAISED,
    (T.HAND_OFF, Report.INTERRUPTION): T.FILTER_INTERRUPTED,
    (T.VALIDATE, Report.ANSWER): T.OUTPUT_CHECKED,
    (T.VALIDATE, Report.INTERRUPTION): T.CHECK_INTERRUPTED,
}

#: The request each reported trigger answers.
ANSWERS: Final[Mapping[Trigger, Trigger | None]] = {
    trigger: request for (request, _), trigger in REPORTS.items()
}
#: The reports that answer a model call: the run's model's, or a summariser's.
MODEL_ANSWERS: Final = frozenset(
    trigger
    for trigger, request in ANSWERS.items()
    if request in (Trigger.ASK_MODEL, Trigger.SUMMARISE)
)
