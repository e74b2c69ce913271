"""The engine: one run's counters, reserved ids and record, with no I/O.

A driver asks ``next()`` what the run needs and gets one of three answers:
``AskModel`` (call the model with ``need.history``, a fresh copy of the history),
``RunTool(call)`` (run this fresh copy of the accepted batch's next call), or
the ``Transition`` the engine just made by itself. It then reports what
happened to the request: ``replied(reply)``, ``returned(outcome, call_id)``,
``raised(exc, call_id)`` (the id may be left out while one call runs); and
``interrupted(exc)`` when a ``BaseException`` stops it anywhere in a step.
Every report returns the transition it made. A driver whose tools have
policies sets ``reviews``: ``next()`` then hands it each accepted batch as
``ReviewCalls`` before its first call, and it reports ``reviewed(answers)``;
if an answer asks a person, ``next()`` answers ``AwaitApproval`` until
``decided(decisions)``.
In ``dispatching``, ``next()`` may hand out a batch's next call while others
run: a driver that runs calls at once asks again.

The engine is a plain interpreter of the table in ``table.py``: ``_choose``
(``interpreter.py``) takes the first row of a (state, trigger) group whose
guard holds and calls the row's effects, each an ordinary method of this
class named after it. What a report brings is checked first (``checks.py``).
What a report brings is taken in by ``intake.py`` first, and what a
transition is making is a fresh ``_Draft``; the batch in hand is a ``Batch``.

A transition is committed by appending its event to the log; everything else
it changes (the state, the history, the counters) is derived from that log
again if an interruption lands half-way, so a run is never half-changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import orjson

from agentloop._core.batch import check_decisions
from agentloop._core.checks import ReportChecks
from agentloop._core.intake import (
    Outcome,
    raised_outcome,
    raised_usage,
    take_outcome,
    take_reply,
)
from agentloop._core.interpreter import Interpreter, _new
from agentloop._core.json import exception_content, kept
from agentloop._core.rows.state import _Draft
from agentloop._core.table import NEXT, REPORTS, TERMINAL, Report, State, Trigger
from agentloop._core.values import (
    AskModel,
    AwaitApproval,
    RecordedException,
    ReviewCalls,
    RunResult,
    RunTool,
    Transition,
    Usage,
    Wait,
)
from agentloop._errors import InvalidStateError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from agentloop._core.approval import Decision, PendingCall
    from agentloop._core.context_policy import Summarise
    from agentloop._core.values import Budget

__all__ = ["Engine", "check_decisions"]

_ASK_MODEL, _START_TOOL = Trigger.ASK_MODEL, Trigger.START_TOOL
_SUMMARISE: Final = Trigger.SUMMARISE
_BACK_OFF: Final = Trigger.BACK_OFF


class _Ask:
    """Not given: ``raised`` asks the retry policy (a replay gives the recorded wait)."""


_ASK_POLICY: Final = _Ask()


class Engine(Interpreter, ReportChecks):
    """One run's state machine, with no I/O: the core every driver wraps.

    ``Engine(messages, budget=..., cancel=..., output=...)`` checks and copies
    the input (a ``str`` or a list of message dicts) and starts in
    ``awaiting_model``; ``output``, an ``OutputSchema``, is what a final
    answer's text must match (``Loop(output=T)`` makes one).
    Then, until ``done``::

        need = engine.next()
        if isinstance(need, AskModel):
            transition = engine.replied(model(need.history))   # or raised(exc)
        elif isinstance(need, RunTool):
            transition = engine.returned(tool(need.call))      # or raised(exc)
        else:
            transition = need                                  # made by the engine

    A report out of order (a second ``next()`` while a request is
    outstanding, a reply nobody asked for) raises ``InvalidStateError`` and
    changes nothing. See the docs' "Writing a driver" page.
    """

    __slots__ = ()

    # -- what drivers and callers read ----------------------------------------

    @property
    def state(self) -> State:
        """The current state."""
        return self._state

    @property
    def done(self) -> bool:
        """Whether the run is in a terminal state."""
        return self._state in TERMINAL

    @property
    def budget(self) -> Budget:
        """The run's budget."""
        return self._budget

    @property
    def reviews(self) -> bool:
        """Whether ``next()`` hands each accepted batch to the driver's review first.

        A driver whose tools have policies sets it before its first step.
        """
        return self._reviews

    @reviews.setter
    def reviews(self, value: bool) -> None:
        if type(value) is not bool:
            raise TypeError(f"expected reviews to be a bool, got {type(value).__name__}")
        self._reviews = value

    @property
    def outstanding(self) -> Trigger | None:
        """The request handed out and not yet answered (``ask_model``, ``start_tool``), if any."""
        return self._outstanding

    @property
    def running(self) -> tuple[str, ...]:
        """The ids of the batch's calls handed out to run and not yet answered."""
        return () if self._batch is None else tuple(self._batch.running)

    @property
    def unstarted(self) -> int:
        """How many calls of the accepted batch are still to be handed out."""
        if self._state is not State.DISPATCHING or self._batch is None:
            return 0
        return self._batch.unstarted

    @property
    def usage(self) -> Usage:
        """The tokens the model's replies reported so far, summed."""
        return self._spent

    @property
    def pending(self) -> tuple[PendingCall, ...]:
        """The calls waiting for a person's decision (in ``awaiting_approval``)."""
        if self._state is not State.AWAITING_APPROVAL or self._batch is None:
            return ()
        return self._batch.pending

    def history(self) -> list[dict[str, Any]]:
        """A fresh copy of the history."""
        return self._history.copy()

    def events(self) -> tuple[Transition, ...]:
        """Every transition so far, in order."""
        return tuple(self._events)

    def result(self) -> RunResult:
        """The run's result: once it is done, or while it waits for a person's decisions."""
        state = self._state
        if state not in TERMINAL and state is not State.AWAITING_APPROVAL:
            raise InvalidStateError(
                f"result() needs a finished run, but the run is still in state "
                f"{state.value!r}; step it until it is done",
                state=state,
            )
        last = self._events[-1]
        output = None
        if last.dest is State.FINISHED:
            final, reply = last.appended_json[-1], self._reply
            # The reply in hand is the decoded copy of the final it appended: no decoding again.
            output = (reply.value if final is reply.json else orjson.loads(final))["text"]
            if self._output is not None:  # typed: converted as tool arguments are
                output = self._output.value(output)
        return _new(
            RunResult,
            (
                state,
                output,
                self.steps,
                self.calls,
                self._budget,
                last.reason,
                last.error,
                tuple(self._events),
                self._history.to_json(),
                self._rejected,
                self._spent,
                self._reply.json if state is State.AWAITING_APPROVAL else None,
                self._policy,
                self._parent_run_id,
                None if self._output is None else self._output.schema_json,
                self._run_id,
            ),
        )

    # -- the driver protocol --------------------------------------------------

    def next(
        self,
    ) -> AskModel | RunTool | ReviewCalls | AwaitApproval | Summarise | Wait | Transition:
        """What the run needs now: the model's reply, a tool's outcome, or nothing.

        Nothing means the engine made a transition by itself; it is returned.
        """
        state = self._state
        trigger = NEXT.get(state)
        if trigger is None:
            raise InvalidStateError(
                f"the run ended in state {state.value!r}: there is nothing next; read its result()",
                state=state,
            )
        if trigger is _START_TOOL:
            batch = self._batch
            assert batch is not None, "a run dispatches an accepted batch"
            index = batch.next_index()
            if index is None:
                raise InvalidStateError(
                    f"cannot go on in state {state.value!r}: every call of the batch was "
                    f"handed out, and the answers for {list(batch.running)} are outstanding",
                    state=state,
                )
            draft = _Draft(batch.calls[index])
        elif self._outstanding is not None:
            raise InvalidStateError(
                f"cannot go on in state {state.value!r}: the answer to "
                f"{self._outstanding.value} is outstanding (one step at a time)",
                state=state,
            )
        else:
            draft = _Draft(self._reply.lone)
        row = self._choose(trigger, draft)
        if row.dest is None:
            assert draft.request is not None, "an internal row hands the driver a request"
            return draft.request
        return self._record(row, draft)

    def replied(self, reply: object) -> Transition:
        """The model returned ``reply``; it is copied in before anything else.

        A ``usage`` key is the provider's bill for the step, not part of the
        reply: it goes on the event, never into the history.
        """
        if self._outstanding is _SUMMARISE:
            return self._summarised(reply)
        if self._outstanding is not _ASK_MODEL:
            raise self._refused("a model reply")
        self._reply = taken = take_reply(reply, self._spent)
        draft = _Draft(self._reply.lone, self._since.get(None))
        draft.model = self._model_name()
        draft.usage = taken.usage
        draft.input_json = taken.json or None  # b"": not JSON (the rejected reply keeps it)
        return self._record(self._choose(Trigger.MODEL_REPLIED, draft), draft)

    def returned(self, outcome: object, call_id: str | None = None) -> Transition:
        """The dispatcher returned ``outcome``: ``{'status', 'content'}`` (and ``'exception'``).

        ``call_id`` says which running call it answers; it may be left out
        while only one is running.
        """
        if self._outstanding is not _START_TOOL:
            raise self._refused("a tool outcome")
        return self._tool_returned(self._answering(call_id), take_outcome(outcome))

    def raised(
        self, exc: Exception, call_id: str | None = None, *, wait: float | _Ask | None = _ASK_POLICY
    ) -> Transition:
        """The model or the tool raised ``exc``: what that means is the table's.

        For a tool, ``call_id`` says which running call raised; it may be left
        out while only one is running. For the model, the retry policy is
        asked how long to wait before a retry, unless ``wait`` is given (what
        a replay or a journal recorded; ``None``: not retried).
        """
        if not isinstance(exc, Exception):
            raise TypeError(
                f"raised() takes an Exception, got {type(exc).__name__}; "
                "report an interruption with interrupted()"
            )
        trigger = REPORTS.get((self._outstanding, Report.EXCEPTION))
        if trigger is None:
            raise InvalidStateError(
                f"cannot report an exception in state {self._state.value!r}: "
                "neither the model nor a tool is outstanding",
                state=self._state,
            )
        if trigger is Trigger.TOOL_RETURNED:
            return self._tool_returned(self._answering(call_id), raised_outcome(exc))
        draft = _Draft(self._reply.lone, self._since.get(None))
        # A failed call can still have cost tokens (IncompleteReply says how many).
        draft.usage = raised_usage(exc, self._spent)
        draft.exception = exc
        draft.model = self._model_name()
        if isinstance(wait, _Ask):  # a recorded exception brings the wait recorded with it
            wait = exc.wait if isinstance(exc, RecordedException) else self._planned_wait(exc)
        draft.wait_in = wait
        return self._record(self._choose(trigger, draft), draft)

    def waited(self) -> Transition:
        """The wait the engine asked for (``Wait``) ended, its time passed or cut short."""
        if self._outstanding is not _BACK_OFF:
            raise self._refused("the end of a wait")
        draft = _Draft(None, self._since.get(None))
        return self._record(self._choose(Trigger.WAITED, draft), draft)

    def reviewed(self, answers: Mapping[str, object]) -> Transition | None:
        """The review answered about the batch's calls: ``{call_id: answer}`` (see ``ReviewCalls``).

        Only before the batch's first call starts, once. An answer whose
        ``asks`` is true makes the batch wait for a person: the
        ``approval_asked`` transition is returned, and the run waits in
        ``awaiting_approval`` until ``decided``. Else nothing is recorded, the
        answers are kept and ``None`` is returned: ``next()`` hands out the
        calls, each with its answer. A bad report raises and changes nothing.
        """
        draft = _Draft(self._reply.lone)
        draft.asked, draft.review = self._checked_review(answers)
        row = self._choose(Trigger.APPROVAL_ASKED, draft)
        return None if row.dest is None else self._record(row, draft)

    def decided(self, decisions: Mapping[str, Decision]) -> Transition:
        """A person decided every pending call: ``{call_id: approve() | deny(reason)}``.

        A missing or extra id, a decision bound to another fingerprint, or
        anything that is not an ``approve``/``deny`` raises and changes nothing.
        """
        draft = _Draft(self._reply.lone)
        draft.decisions_in = self._checked_decisions(decisions)
        return self._record(self._choose(Trigger.APPROVAL_DECIDED, draft), draft)

    def interrupted(
        self, exc: BaseException, *, partial_text: str | None = None
    ) -> Transition | None:
        """The driver was interrupted (``KeyboardInterrupt``, a cancelled task): end cancelled.

        Safe at any point of a step: a transition the interruption cut short is
        completed from the log first. If a tool was running, its call is
        recorded with a ``cancelled`` result. Returns the transition, or None
        when the run was already over. ``partial_text`` is what a streaming
        reply had delivered: kept on a ``model_interrupted`` event for review.
        """
        if not isinstance(exc, BaseException):
            raise TypeError(
                "interrupted() takes what interrupted the driver (KeyboardInterrupt, a "
                f"CancelledError), got {type(exc).__name__}"
            )
        self._settle()
        if self._state in TERMINAL:
            return None
        trigger = REPORTS[self._outstanding, Report.INTERRUPTION]
        if trigger is Trigger.TOOL_INTERRUPTED:
            # The running calls are cut off by this interruption; the first is in hand.
            batch = self._batch
            assert batch is not None, "a tool runs in a batch"
            call = batch.calls[min(batch.running.values())]
            draft = _Draft(call, self._since.get(call[0]))
            draft.cut = kept(orjson.dumps(exception_content(exc)))
        else:
            timed = trigger in (
                Trigger.MODEL_INTERRUPTED,
                Trigger.SUMMARY_INTERRUPTED,
                Trigger.WAIT_INTERRUPTED,
            )
            draft = _Draft(None, self._since.get(None) if timed else None)
        draft.exception = exc
        transition = self._record(self._choose(trigger, draft), draft)
        if partial_text and trigger is Trigger.MODEL_INTERRUPTED:
            # A record field only: the reply never arrived, so nothing else changes.
            transition = self._events[-1] = transition._replace(partial_text=partial_text)
        return transition

    # -- helpers ------------------------------------------------------------------

    def _tool_returned(self, index: int, outcome: Outcome) -> Transition:
        """A running call's outcome, reported or raised: one transition."""
        assert self._batch is not None, "a tool returns in a batch"
        call = self._batch.calls[index]
        draft = _Draft(call, self._since.pop(call[0], None))
        draft.outcome, draft.exception = outcome, outcome.exception
        draft.input_json = outcome.content_json
        return self._record(self._choose(Trigger.TOOL_RETURNED, draft), draft)

    def _summarised(self, reply: object) -> Transition:
        """The summariser returned ``reply``: taken in as a model's reply is, usage and all."""
        taken = take_reply(reply, self._spent)
        draft = _Draft(None, self._since.get(None))
        draft.summary_in, draft.usage = taken, taken.usage
        draft.input_json = taken.json or None
        return self._record(self._choose(Trigger.SUMMARY_WRITTEN, draft), draft)
