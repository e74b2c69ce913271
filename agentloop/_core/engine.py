"""The engine: one run's state machine, with no I/O, on the table of its configuration.

A plain interpreter (``Engine``): ``_choose`` takes the first row of a
(state, trigger) group whose guard holds and calls the row's effects, each a
function of the run's state (``state.py``) registered in its feature's
module (``rows/``); ``RunState.commit`` commits the row by appending its
event to the log, from which everything else is made again if an
interruption lands half-way. What a report brings is checked first (``checks.py``) and taken
in by ``intake.py``; what a transition is making is a fresh ``Draft``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from agentloop._core.agents import Agents
from agentloop._core.approval import Decision, DecisionKey, Decisions, PendingCall
from agentloop._core.build import Row, Table, features_of, table_for
from agentloop._core.checks import (
    answering,
    checked_decisions,
    checked_interruption,
    checked_problems,
    checked_raised,
    checked_review,
    refused,
)
from agentloop._core.context_policy import ContextPolicy
from agentloop._core.drafts import (
    Draft,
    aside_draft,
    exception_draft,
    interruption_draft,
    next_draft,
    outcome_draft,
    reply_draft,
)
from agentloop._core.intake import raised_outcome, take_outcome
from agentloop._core.output_schema import OutputSchema
from agentloop._core.requests import Need
from agentloop._core.retry_policy import RetryPolicy
from agentloop._core.rows.context import summary_in_force
from agentloop._core.rows.nested_approval import delegated, waits_draft
from agentloop._core.rows.retry import ASK_POLICY, Ask, model_index
from agentloop._core.state import RunState
from agentloop._core.table import TERMINAL, Feature, State, Trigger
from agentloop._core.values import Budget, CancelToken, NotJSON, RunResult, Transition, Usage

__all__ = ["Engine"]

_ASK_MODEL, _START_TOOL = Trigger.ASK_MODEL, Trigger.START_TOOL
_SUMMARISE: Final = Trigger.SUMMARISE
_BACK_OFF, _HAND_OFF = Trigger.BACK_OFF, Trigger.HAND_OFF
_REPLIED: Final = Trigger.MODEL_REPLIED
_DEFAULT_BUDGET: Final = Budget()


class Engine:
    """One run's state machine, with no I/O: the core every driver wraps.

    ``Engine(messages, budget=..., cancel=...)`` checks and copies the input
    (a ``str`` or a list of message dicts) and starts in ``awaiting_model``.
    Its other parts: ``output`` (an ``OutputSchema`` a final's text must
    match), ``context``, ``retry`` and ``models`` (a context policy, a retry
    policy, the fallback models' names), ``run_id`` and ``continues``
    (what its result says), and ``commit``: called with each transition
    before the engine commits it (and the reply it took, when not JSON); if
    it raises, the transition is not made (a durable run's recording).

    A driver asks ``next()`` what the run needs; it answers one of:

    * ``AskModel``: call the model with ``need.history``, then report
      ``replied(reply)`` or ``raised(exc)``;
    * ``Summarise``: call the context policy's summariser, reported the same way;
    * ``RunTool``: run ``need.call``, then report ``returned(outcome, call_id)``
      or ``raised(exc, call_id)`` (or ``call_waits(pending, call_id)``: its child waits);
    * ``ReviewCalls``: review the batch's calls, then report ``reviewed(answers)``;
    * ``AwaitApproval``: a person decides the pending calls: ``decided(decisions)``;
    * ``Wait``: wait before a retry, then report ``waited()``;
    * ``CheckOutput``: ``need.check(need.value)``, then ``output_checked(problems)``;
    * ``Transition``: the transition the engine just made by itself.

    ``interrupted(exc)`` reports a ``BaseException`` anywhere in a step. Every
    report returns the transition it made (``reviewed``: ``None`` when nothing
    is recorded). Its public members are the driver protocol: ``next``, the
    reports, and what a driver reads (``state``, ``done``, ``steps``, ``calls``,
    ``usage``, ``budget``, ``context``, ``outstanding``, ``running``,
    ``unstarted``, ``pending``, ``reviews``, ``output_check``, ``run_id``, ``continues``,
    ``conversation``, ``summary``, ``model_index``, ``agent``, ``delegated``,
    ``history()``, ``events()``, ``result()``). A report out of order raises
    ``InvalidStateError`` and changes nothing. See the docs' "Writing a driver" page, whose
    loop a driver follows.
    """

    __slots__ = ("_bound", "_commit", "_run", "_table")

    def __init__(
        self,
        messages: str | list[dict[str, Any]],
        *,
        budget: Budget = _DEFAULT_BUDGET,
        cancel: CancelToken | None = None,
        clock: Callable[[], float] = time.monotonic,
        context: ContextPolicy | None = None,
        retry: RetryPolicy | None = None,
        models: tuple[str, ...] = (),
        output: OutputSchema | None = None,
        run_id: str | None = None,
        continues: str | None = None,
        commit: Callable[[Transition, NotJSON | None], object] | None = None,
        conversation: tuple[str, int] | None = None,
        summary: tuple[int, str] | None = None,
        agents: Agents | None = None,
    ) -> None:
        run = RunState(
            messages,
            budget,
            cancel,
            clock,
            context,
            retry,
            models,
            output,
            run_id,
            continues,
            conversation,
            summary,
            agents,
        )
        if commit is not None and not callable(commit):
            raise TypeError(f"expected commit to be a callable or None, got {commit!r:.80}")
        self._run, self._commit = run, commit
        table = table_for(features_of(budget, output, context, retry, models, agents))
        self._table, self._bound = table, table.bound

    def __repr__(self) -> str:
        run = self._run
        return f"<Engine state={run.state.value!r} steps={run.steps} calls={run.calls}>"

    def _use(self, table: Table) -> None:
        """Consult ``table`` from now on."""
        self._table, self._bound = table, table.bound

    def _turn_on(self, *features: Feature) -> None:
        """Add ``features``' rows to the table consulted: a report only they take came."""
        if not self._table.features.issuperset(features):
            self._use(table_for(self._table.features | set(features)))

    # -- what drivers and callers read ----------------------------------------

    @property
    def state(self) -> State:
        """The current state."""
        return self._run.state

    @property
    def done(self) -> bool:
        """Whether the run is in a terminal state."""
        return self._run.state in TERMINAL

    @property
    def steps(self) -> int:
        """Model callback invocations so far (failed and malformed ones too)."""
        return self._run.steps

    @property
    def calls(self) -> int:
        """Accepted tool attempts so far (denied and invalid ones too)."""
        return self._run.calls

    @property
    def budget(self) -> Budget:
        """The run's budget."""
        return self._run.budget

    @property
    def context(self) -> ContextPolicy | None:
        """The run's context policy (``agentloop.context``), if it has one."""
        return self._run.policy

    @property
    def run_id(self) -> str | None:
        """The run's id, when it is durable (a ledger's, or DBOS's workflow id)."""
        return self._run.run_id

    @property
    def continues(self) -> str | None:
        """The id of the run this one continues (``Loop.continue_run``, a fork), if any."""
        return self._run.continues

    @property
    def conversation(self) -> tuple[str, int] | None:
        """The conversation this run is a turn of, and the turn (from 1), if any."""
        return self._run.conversation

    @property
    def summary(self) -> tuple[int, str] | None:
        """The summary in force under ``summarise`` (turns folded, text), or None.

        What a conversation's next turn begins with (``Engine(summary=...)``).
        """
        return summary_in_force(self._run)

    @property
    def model_index(self) -> int:
        """Which of the fallback models is asked now (0 with one model)."""
        return model_index(self._run.log.rows)

    @property
    def agent(self) -> str | None:
        """With handoffs (``agents=``): the agent in force, whose model is asked next."""
        return self._run.agent

    @property
    def reviews(self) -> bool:
        """Whether ``next()`` hands each accepted batch to the driver's review first.

        A driver whose tools have policies sets it before its first step.
        """
        return self._run.reviews

    @reviews.setter
    def reviews(self, value: bool) -> None:
        if type(value) is not bool:
            raise TypeError(f"expected reviews to be a bool, got {type(value).__name__}")
        self._run.reviews = value
        if value:
            self._turn_on(Feature.REVIEW)

    @property
    def output_check(self) -> Callable[[Any], object] | None:
        """What checks a final the schema accepts (``CheckOutput``): a driver's validators."""
        return self._run.output_check

    @output_check.setter
    def output_check(self, check: Callable[[Any], object] | None) -> None:
        if check is not None and not callable(check):
            raise TypeError(f"expected output_check to be a callable or None, got {check!r:.80}")
        self._run.output_check = check
        if check is not None:
            self._turn_on(Feature.OUTPUT)

    @property
    def outstanding(self) -> Trigger | None:
        """The request handed out and not yet answered (``ask_model``, ``start_tool``), if any."""
        return self._run.outstanding

    @property
    def running(self) -> tuple[str, ...]:
        """The ids of the batch's calls handed out to run and not yet answered."""
        batch = self._run.batch
        return () if batch is None else tuple(batch.running)

    @property
    def unstarted(self) -> int:
        """How many calls of the accepted batch are still to be handed out."""
        run = self._run
        if run.state is not State.DISPATCHING or run.batch is None:
            return 0
        return run.batch.unstarted

    @property
    def usage(self) -> Usage:
        """The tokens the model's replies reported so far, summed."""
        return self._run.spent

    @property
    def pending(self) -> tuple[PendingCall, ...]:
        """The calls waiting for a person's decision (in ``awaiting_approval``)."""
        run = self._run
        if run.state is not State.AWAITING_APPROVAL or run.batch is None:
            return ()
        return run.batch.pending

    def history(self) -> list[dict[str, Any]]:
        """A fresh copy of the history."""
        return self._run.history.copy()

    def events(self) -> Sequence[Transition]:
        """Every transition so far, in order (made on demand from the run's record)."""
        return self._run.events

    def result(self) -> RunResult:
        """The run's result: once it is done, or while it waits for a person's decisions."""
        return self._run.result()

    # -- the driver protocol --------------------------------------------------

    def next(self) -> Need | Transition:
        """What the run needs now: a request to perform, or the transition made by itself."""
        run = self._run
        trigger, draft = next_draft(run)
        row = self._choose(trigger, draft)
        if row.dest is None:
            assert draft.request is not None, "an internal row hands the driver a request"
            return draft.request
        return run.commit(row, draft, self._commit)

    def replied(self, reply: object) -> Transition:
        """The model returned ``reply``; it is copied in before anything else.

        A ``usage`` key is the provider's bill for the step, not part of the
        reply: it goes on the event, never into the history.
        """
        run = self._run
        if run.outstanding is _SUMMARISE or run.outstanding is _HAND_OFF:  # a summary, a view
            trigger, draft = aside_draft(run, reply)
            return run.commit(self._choose(trigger, draft), draft, self._commit)
        if run.outstanding is not _ASK_MODEL:
            raise refused(run, "a model reply")
        draft = reply_draft(run, reply)
        return run.commit(self._choose(_REPLIED, draft), draft, self._commit)

    def returned(self, outcome: object, call_id: str | None = None) -> Transition:
        """The dispatcher returned ``outcome``: ``{'status', 'content'}`` (and ``'exception'``).

        ``call_id`` says which running call it answers; it may be left out
        while only one is running.
        """
        run = self._run
        if run.outstanding is not _START_TOOL:
            raise refused(run, "a tool outcome")
        draft = outcome_draft(run, answering(run, call_id), take_outcome(outcome, run.spent))
        return run.commit(self._choose(Trigger.TOOL_RETURNED, draft), draft, self._commit)

    def raised(
        self, exc: Exception, call_id: str | None = None, *, wait: float | Ask | None = ASK_POLICY
    ) -> Transition:
        """The model or the tool raised ``exc``: what that means is the table's.

        For a tool, ``call_id`` says which running call raised; it may be left
        out while only one is running. For the model, the retry policy is
        asked how long to wait before a retry, unless ``wait`` is given (what
        a replay or a journal recorded; ``None``: not retried).
        """
        run = self._run
        trigger = checked_raised(run, exc)
        if trigger is Trigger.TOOL_RETURNED:
            draft = outcome_draft(run, answering(run, call_id), raised_outcome(exc))
        else:
            draft = exception_draft(run, exc, wait)
            if draft.wait_in is not None and not isinstance(draft.wait_in, Ask):
                # A wait given to take (a replay's, DBOS's): the retry rows take it.
                self._turn_on(Feature.RETRY)
        return run.commit(self._choose(trigger, draft), draft, self._commit)

    def waited(self) -> Transition:
        """The wait the engine asked for (``Wait``) ended, its time passed or cut short."""
        run = self._run
        if run.outstanding is not _BACK_OFF:
            raise refused(run, "the end of a wait")
        draft = Draft(None, run.since.get(None))
        return run.commit(self._choose(Trigger.WAITED, draft), draft, self._commit)

    def reviewed(self, answers: Mapping[str, object]) -> Transition | None:
        """The review answered about the batch's calls: ``{call_id: answer}`` (see ``ReviewCalls``).

        Only before the batch's first call starts, once. A denial (an answer
        that is or carries ``deny(reason)``) is answered ``denied`` here, by the
        engine: that call is never handed out. An answer whose ``asks`` is true
        makes the batch wait for a person in ``awaiting_approval`` until
        ``decided``. Either is recorded: the ``approval_asked`` transition is
        returned. Else nothing is recorded, the answers are kept and ``None``
        is returned: ``next()`` hands out the calls, each with its answer. A
        bad report raises and changes nothing.
        """
        run = self._run
        draft = Draft(run.reply.lone)
        draft.asked, draft.denied, draft.review = checked_review(run, answers)
        self._turn_on(Feature.REVIEW)
        row = self._choose(Trigger.APPROVAL_ASKED, draft)
        return None if row.dest is None else run.commit(row, draft, self._commit)

    def call_waits(
        self, pending: tuple[PendingCall, ...], call_id: str | None = None
    ) -> Transition:
        """A running call's child run (an agent tool's) waits for a person on its ``pending``."""
        run, draft = self._run, waits_draft(self._run, pending, call_id)
        self._turn_on(Feature.NESTED_APPROVAL, Feature.REVIEW)  # the run may wait for a person
        return run.commit(self._choose(Trigger.CALL_WAITS, draft), draft, self._commit)

    def delegated(self, call_id: str) -> dict[DecisionKey, Decision] | None:
        """The decisions about its child's calls a waiting call was handed out again with."""
        return delegated(self._run, call_id)

    def output_checked(self, problems: list[str]) -> Transition:
        """The output check (``CheckOutput``) answered what is wrong with the final (recorded).

        No problems: the final is taken; else it goes back as the schema's problems do.
        """
        run = self._run
        draft = Draft(None, run.since.get(None))
        draft.input_json = checked_problems(run, problems)
        return run.commit(self._choose(Trigger.OUTPUT_CHECKED, draft), draft, self._commit)

    def decided(self, decisions: Decisions) -> Transition:
        """A person decided every pending call: ``{call.key: approve() | deny(reason)}``.

        A missing or extra id, a decision bound to another fingerprint, or
        anything that is not an ``approve``/``deny`` raises and changes nothing.
        """
        run = self._run
        draft = Draft(run.reply.lone)
        draft.decisions_in = checked_decisions(run, decisions)
        return run.commit(self._choose(Trigger.APPROVAL_DECIDED, draft), draft, self._commit)

    def interrupted(
        self, exc: BaseException, *, partial_text: str | None = None
    ) -> Transition | None:
        """The driver was interrupted (``KeyboardInterrupt``, a cancelled task): end cancelled.

        Safe at any point of a step: a transition the interruption cut short is
        completed from the log first. If a tool was running, its call is
        recorded with a ``cancelled`` result. Returns the transition, or None
        when the run was already over (or ``commit`` refused the end: the run
        is as its record says, and the interruption, not that, propagates).
        ``partial_text`` is what a streaming reply had delivered: kept on a
        ``model_interrupted`` event for review.
        """
        checked_interruption(exc)
        run = self._run
        run.settle()
        if run.state in TERMINAL:
            return None
        trigger, draft = interruption_draft(run, exc)
        if trigger is Trigger.MODEL_INTERRUPTED:
            # A record field only: the reply never arrived, so nothing else changes.
            draft.partial_text = partial_text or None
        row = self._choose(trigger, draft)
        try:
            return run.commit(row, draft, self._commit)
        except Exception:
            if self._commit is None:
                raise
            return None  # refused: the run is as its record says; the interruption propagates

    # -- the interpreter ----------------------------------------------------------

    def _choose(self, trigger: Trigger, draft: Draft) -> Row:
        """Take the first row of (state, ``trigger``) whose guard holds; run its effects."""
        run = self._run
        run.draft = draft
        for row, guard, effects in self._bound[run.state, trigger]:
            if guard is None or guard(run):
                for effect in effects:
                    effect(run)
                return row
        raise AssertionError("unreachable: build_table ends each group with an unguarded row")
