"""The engine: one run's counters, reserved ids and record, with no I/O.

A driver asks ``next()`` what the run needs and gets one of three answers:
``AskModel`` (call the model with ``need.history``, a fresh copy of the history),
``RunTool(call)`` (run this fresh copy of the accepted batch's next call), or
the ``Transition`` the engine just made by itself. It then reports what
happened to the request: ``replied(reply)``, ``returned(outcome, call_id)``,
``raised(exc, call_id)`` (the id may be left out while one call runs); and
``interrupted(exc)`` when a ``BaseException`` stops it anywhere in a step.
Every report returns the transition it made. A driver whose tools have
policies may also report ``asked_approval(reasons)`` before a batch's first
call; ``next()`` then answers ``AwaitApproval`` until ``decided(decisions)``.
In ``dispatching``, ``next()`` may hand out a batch's next call while others
run: a driver that runs calls at once asks again.

The engine is a plain interpreter of the table in ``_table.py``: ``_choose``
takes the first row of a (state, trigger) group whose guard holds and calls
the row's effects, each an ordinary method of this class named after it.
What a report brings is taken in by ``_intake.py`` first, and what a
transition is making is a fresh ``_Draft``; the batch in hand is a ``Batch``.

A transition is committed by appending its event to the log; everything else
it changes (the state, the history, the counters) is derived from that log
again if an interruption lands half-way, so a run is never half-changed.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final

import orjson

from agentloop._core._approval import Decision, PendingCall, call_fingerprint
from agentloop._core._batch import Batch
from agentloop._core._intake import (
    NO_REPLY,
    Outcome,
    not_json,
    raised_outcome,
    raised_usage,
    take_outcome,
    take_reply,
)
from agentloop._core._json import exception_content
from agentloop._core._messages import CUT_OFF, History, input_messages
from agentloop._core._table import NEXT, REPORTS, TABLE, TERMINAL, Report, Row, State, Trigger
from agentloop._core._values import (
    AskModel,
    AwaitApproval,
    Budget,
    CancelToken,
    RunResult,
    RunTool,
    Transition,
    Usage,
)
from agentloop._errors import InvalidStateError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from agentloop._core._intake import Reply

__all__ = ["Engine", "check_decisions"]

# tuple.__new__ makes a NamedTuple from its fields without the Python-level __new__.
_new: Final = tuple.__new__
_DEFAULT_BUDGET: Final = Budget()
_CUT_OFF: Final = orjson.dumps(CUT_OFF)
_NO_IDS: Final[frozenset[str]] = frozenset()
_NO_USAGE: Final = Usage()
_ASK_MODEL, _START_TOOL = Trigger.ASK_MODEL, Trigger.START_TOOL

# Each (state, trigger) group as the engine runs it: every row with the names of the
# methods its guard and effects are (``_<name>``), looked up on the engine at each call,
# so that a subclass or a patched method is what runs.
_GROUPS: Final = {
    key: tuple(
        (
            row,
            None if row.guard is None else f"_{row.guard.value}",
            tuple(f"_{effect.value}" for effect in row.effects),
        )
        for row in rows
    )
    for key, rows in TABLE.groups.items()
}


class _Draft:
    """The transition being made: what its report brought, and the event's fields so far.

    A fresh one for every transition, so nothing of one transition leaks into
    the next. The class attributes are the defaults: an effect sets what its
    row records, and the rest is read from here.
    """

    #: The event's call: its id and tool name (``name_call`` sets it).
    named: tuple[str | None, str | None] = (None, None)
    status: str | None = None
    reason: str | None = None
    error: str | None = None
    exception: BaseException | None = None
    appended: tuple[bytes, ...] = ()
    usage: Usage | None = None
    pending: tuple[PendingCall, ...] = ()
    decisions: tuple[tuple[str, Decision], ...] = ()
    # What the report brought, for the effects.
    outcome: Outcome | None = None
    asked: tuple[PendingCall, ...] = ()
    decisions_in: tuple[tuple[str, Decision], ...] = ()
    cut: bytes = _CUT_OFF
    # What an internal row hands the driver.
    request: AskModel | RunTool | AwaitApproval | None = None

    def __init__(self, call: tuple[str, str] | None, since: float | None = None) -> None:
        #: The call in hand: being checked, handed out or reported (None: none is).
        self.call = call
        #: When the request this transition answers was handed out.
        self.since = since


class Engine:
    """One run's state machine, with no I/O: the core every driver wraps.

    ``Engine(messages, budget=..., cancel=...)`` checks and copies the input
    (a ``str`` or a list of message dicts) and starts in ``awaiting_model``.
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

    __slots__ = (
        "_applied",
        "_batch",
        "_budget",
        "_cancelled",
        "_clock",
        "_draft",
        "_events",
        "_history",
        "_input",
        "_input_ids",
        "_outstanding",
        "_rejected",
        "_reply",
        "_reserved",
        "_since",
        "_spent",
        "_state",
        "calls",
        "steps",
        "tokens",
    )

    def __init__(
        self,
        messages: str | list[dict[str, Any]],
        *,
        budget: Budget = _DEFAULT_BUDGET,
        cancel: CancelToken | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if type(budget) is not Budget:
            raise TypeError(f"expected budget to be a Budget, got {type(budget).__name__}")
        if cancel is not None and type(cancel) is not CancelToken:
            raise TypeError(
                f"expected cancel to be a CancelToken or None, got {type(cancel).__name__}"
            )
        encoded, input_ids = input_messages(messages)
        self._input_ids = frozenset(input_ids) if input_ids else _NO_IDS
        self._reserved = input_ids
        self._input = tuple(encoded)
        self._history = History(encoded)
        self._budget = budget
        # Without a token, nothing can cancel: ``bool()`` is False, and a C call.
        self._cancelled = bool if cancel is None else cancel.check()
        self._state = State.AWAITING_MODEL
        #: Model callback invocations so far.
        self.steps = 0
        #: Accepted tool attempts so far.
        self.calls = 0
        #: Tokens the model's replies reported so far (input plus output).
        self.tokens = 0
        self._spent = _NO_USAGE  # what the replies reported, summed
        # Times are read, never slept on: a clock is the only outside thing the engine reads.
        self._clock = clock
        # When the model was asked, and when each running call was handed out.
        self._since: dict[str | None, float] = {}
        self._events: list[Transition] = []
        self._applied = 0  # events whose effects on the state are done
        self._outstanding: Trigger | None = None
        self._rejected: object = None
        self._reply: Reply = NO_REPLY  # the reply in hand
        self._batch: Batch | None = None  # the accepted batch in hand
        self._draft = _Draft(None)  # the transition being made

    def __repr__(self) -> str:
        return f"<Engine state={self._state.value!r} steps={self.steps} calls={self.calls}>"

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

    @property
    def decisions(self) -> dict[str, Decision]:
        """A person's decisions about calls of the batch in hand, by call id (a copy)."""
        if self._state is not State.DISPATCHING or self._batch is None:
            return {}
        return dict(self._batch.decided)

    def unstarted_batch(self) -> list[dict[str, Any]]:
        """Fresh copies of the accepted batch's calls while none has started (else none).

        What a driver shows its policies before the batch's first call starts.
        """
        batch = self._batch
        if self._state is not State.DISPATCHING or batch is None or batch.handed:
            return []
        return [batch.call(index) for index in range(len(batch.calls))]

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
            ),
        )

    # -- the driver protocol --------------------------------------------------

    def next(self) -> AskModel | RunTool | AwaitApproval | Transition:
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
        if self._outstanding is not _ASK_MODEL:
            raise self._refused("a model reply")
        self._reply = taken = take_reply(reply, self._spent)
        draft = _Draft(self._reply.lone, self._since.get(None))
        draft.usage = taken.usage
        return self._record(self._choose(Trigger.MODEL_REPLIED, draft), draft)

    def returned(self, outcome: object, call_id: str | None = None) -> Transition:
        """The dispatcher returned ``outcome``: ``{'status', 'content'}`` (and ``'exception'``).

        ``call_id`` says which running call it answers; it may be left out
        while only one is running.
        """
        if self._outstanding is not _START_TOOL:
            raise self._refused("a tool outcome")
        return self._tool_returned(self._answering(call_id), take_outcome(outcome))

    def raised(self, exc: Exception, call_id: str | None = None) -> Transition:
        """The model or the tool raised ``exc``: what that means is the table's.

        For a tool, ``call_id`` says which running call raised; it may be left
        out while only one is running.
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
        return self._record(self._choose(trigger, draft), draft)

    def asked_approval(self, reasons: Mapping[str, str]) -> Transition:
        """A policy asked a person about these calls of the batch: ``{call_id: reason}``.

        Only before the batch's first call starts. The run waits in
        ``awaiting_approval`` until ``decided``; a bad report raises and changes nothing.
        """
        draft = _Draft(self._reply.lone)
        draft.asked = self.checked_reasons(reasons)
        return self._record(self._choose(Trigger.APPROVAL_ASKED, draft), draft)

    def checked_reasons(self, reasons: object) -> tuple[PendingCall, ...]:
        """The pending calls ``asked_approval(reasons)`` would hold; raises if it would refuse."""
        batch = self._batch
        if self._state is not State.DISPATCHING or batch is None or batch.handed:
            raise InvalidStateError(
                f"cannot ask for approval in state {self._state.value!r}: only an accepted "
                "batch none of whose calls has started can wait for a person",
                state=self._state,
            )
        if not isinstance(reasons, dict) or not reasons:
            raise TypeError(
                "expected reasons to be a non-empty dict of call id -> reason, "
                f"got {not_json(reasons).text:.80}"
            )
        ids = [call_id for call_id, _ in batch.calls]
        for call_id, reason in reasons.items():
            if call_id not in ids or call_id in batch.decided:
                where = "was decided already" if call_id in batch.decided else "is not"
                raise ValueError(
                    f"call {call_id!r} {where} in the batch that waits (its calls: {ids})"
                )
            if type(reason) is not str or not reason:
                raise TypeError(
                    f"expected the reason for call {call_id!r} to be a non-empty str, "
                    f"got {not_json(reason).text:.80}"
                )
        pending: list[PendingCall] = []
        for index, (call_id, name) in enumerate(batch.calls):
            if call_id in reasons:
                arguments = batch.call(index)["arguments"]
                pending.append(
                    PendingCall(
                        call_id,
                        name,
                        orjson.dumps(arguments),
                        reasons[call_id],
                        call_fingerprint(name, arguments),
                    )
                )
        return tuple(pending)

    def decided(self, decisions: Mapping[str, Decision]) -> Transition:
        """A person decided every pending call: ``{call_id: approve() | deny(reason)}``.

        A missing or extra id, a decision bound to another fingerprint, or
        anything that is not an ``approve``/``deny`` raises and changes nothing.
        """
        draft = _Draft(self._reply.lone)
        draft.decisions_in = self.checked_decisions(decisions)
        return self._record(self._choose(Trigger.APPROVAL_DECIDED, draft), draft)

    def checked_decisions(self, decisions: object) -> tuple[tuple[str, Decision], ...]:
        """The decisions ``decided`` would keep, in pending order; raises if it would refuse."""
        if self._state is not State.AWAITING_APPROVAL or self._batch is None:
            taken = "; this batch's decisions were taken already" if self._batch else ""
            raise InvalidStateError(
                f"cannot take decisions in state {self._state.value!r}: "
                f"the run is not awaiting approval{taken}",
                state=self._state,
            )
        return check_decisions(self._batch.pending, decisions)

    def interrupted(self, exc: BaseException) -> Transition | None:
        """The driver was interrupted (``KeyboardInterrupt``, a cancelled task): end cancelled.

        Safe at any point of a step: a transition the interruption cut short is
        completed from the log first. If a tool was running, its call is
        recorded with a ``cancelled`` result. Returns the transition, or None
        when the run was already over.
        """
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
            draft.cut = orjson.dumps(exception_content(exc))
        else:
            model = trigger is Trigger.MODEL_INTERRUPTED
            draft = _Draft(None, self._since.get(None) if model else None)
        draft.exception = exc
        return self._record(self._choose(trigger, draft), draft)

    # -- guards (named in the table) ---------------------------------------------

    def _cancel_requested(self) -> bool:
        return self._cancelled()

    def _steps_exhausted(self) -> bool:
        return self.steps >= self._budget.max_steps

    def _tokens_exhausted(self) -> bool:
        limit = self._budget.max_total_tokens
        return limit is not None and self.tokens >= limit

    def _reply_malformed(self) -> bool:
        return self._reply.problem is not None

    def _reply_is_final(self) -> bool:
        return self._reply.final

    def _call_id_reserved(self) -> bool:
        return self._repeated_id() is not None

    def _calls_exhausted(self) -> bool:
        return self.calls + len(self._reply.calls) > self._budget.max_calls

    def _cancel_requested_mid_batch(self) -> bool:
        return self._batch_underway() and self._cancelled()

    def _batch_underway(self) -> bool:
        return self._batch is not None and self._batch.underway

    def _batch_open(self) -> bool:
        batch = self._batch
        assert batch is not None, "a tool returns in a batch"
        return len(batch.results) + 1 < len(batch.calls)

    def _denials_answer_batch(self) -> bool:
        batch = self._batch
        assert batch is not None, "a person decides about a batch"
        denied = {call_id for call_id, d in self._draft.decisions_in if not d.allowed}
        return all(
            index in batch.results or call_id in denied
            for index, (call_id, _) in enumerate(batch.calls)
        )

    # -- effects (named in the table) -------------------------------------------

    def _count_step(self) -> None:
        self.steps += 1

    def _ask_for_reply(self) -> None:
        self._outstanding = _ASK_MODEL
        self._since[None] = self._clock()
        self._draft.request = AskModel(*self._history.request())

    def _name_call(self) -> None:
        draft = self._draft
        if draft.call is not None:
            draft.named = draft.call

    def _reserve_calls(self) -> None:
        calls, reserved = self._reply.calls, self._reserved
        for call_id, _ in calls:
            reserved.add(call_id)
        self.calls += len(calls)
        self._batch = Batch(self._reply)

    def _start_call(self) -> None:
        batch, draft = self._batch, self._draft
        assert batch is not None, "a call is handed out of a batch"
        assert draft.call is not None, "next() put the call to hand out in hand"
        call_id = draft.call[0]
        index = batch.next_index()
        assert index is not None, "next() found the call to hand out"
        batch.running[call_id] = index
        batch.started = index + 1
        batch.handed += 1
        self._outstanding = _START_TOOL
        self._since[call_id] = self._clock()
        draft.request = RunTool(batch.call(index))

    def _keep_result(self) -> None:
        batch, draft = self._batch, self._draft
        assert batch is not None, "a tool returns in a batch"
        assert draft.call is not None, "the reported call is in hand"
        assert draft.outcome is not None, "a tool report brings its outcome"
        draft.status = draft.outcome.status
        batch.answer(batch.running.pop(draft.call[0]), draft.status, draft.outcome.content_json)

    def _answer_rest(self) -> None:
        batch, draft = self._batch, self._draft
        assert batch is not None, "a batch is answered"
        if draft.call is not None and batch.calls.index(draft.call) not in batch.results:
            draft.status = "cancelled"  # the call in hand is among those answered here
        batch.answer_rest(draft.cut)

    def _append_batch(self) -> None:
        assert self._batch is not None, "a batch is appended"
        self._draft.appended = self._batch.messages()

    def _hold_calls(self) -> None:
        assert self._batch is not None, "a batch waits"
        self._batch.pending = self._draft.pending = self._draft.asked

    def _keep_decisions(self) -> None:
        batch, draft = self._batch, self._draft
        assert batch is not None, "a person decides about a batch"
        draft.decisions = decisions = draft.decisions_in
        batch.decided.update(decisions)
        # A denied call is answered here, by the engine: no driver is handed it to run.
        place = {call_id: index for index, (call_id, _) in enumerate(batch.calls)}
        for call_id, decision in decisions:
            if not decision.allowed:
                batch.answer(place[call_id], "denied", orjson.dumps(decision.reason))
                if draft.call is not None and call_id == draft.call[0]:
                    draft.status = "denied"

    def _ask_for_decisions(self) -> None:
        assert self._batch is not None, "a batch waits"
        self._draft.request = AwaitApproval(self._batch.pending)

    def _append_final(self) -> None:
        self._draft.appended = (self._reply.json,)

    def _reject_reply(self) -> None:
        if self._reply is not NO_REPLY:
            self._rejected = self._reply.value

    def _note_max_steps(self) -> None:
        self._draft.reason = "max_steps"

    def _note_max_calls(self) -> None:
        self._draft.reason = "max_calls"

    def _note_max_total_tokens(self) -> None:
        self._draft.reason = "max_total_tokens"

    def _note_model_error(self) -> None:
        draft = self._draft
        assert draft.exception is not None, "the model raised"
        content = exception_content(draft.exception)
        said = f"{content['type']}: {content['message']}" if content["message"] else content["type"]
        draft.error = f"the model raised {said}"

    def _note_malformed(self) -> None:
        self._draft.error = f"malformed reply: {self._reply.problem}"

    def _note_repeated_call(self) -> None:
        call_id = self._repeated_id()
        assert call_id is not None, "a call id is reserved"
        calls = self._reply.calls
        # The event names the reused id, in a batch too (name_call names only a lone call).
        self._draft.named = (call_id, dict(calls)[call_id])
        if len(calls) > 1 and call_id not in self._reserved:
            self._draft.error = (
                f"call id {call_id!r} appears twice in the batch; no call of it was run"
            )
        else:
            self._draft.error = (
                f"call id {call_id!r} was already used in this run; the call was not run again"
            )

    # -- the one place a row is chosen, and the one place it is committed ------------

    def _choose(self, trigger: Trigger, draft: _Draft) -> Row:
        """Take the first row of (state, ``trigger``) whose guard holds; run its effects."""
        self._draft = draft
        for row, guard, effects in _GROUPS[self._state, trigger]:
            if guard is None or getattr(self, guard)():
                for effect in effects:
                    getattr(self, effect)()
                return row
        raise AssertionError("unreachable: build_table ends each group with an unguarded row")

    def _record(self, row: Row, draft: _Draft) -> Transition:
        """Commit the chosen row: its event first, then what follows from it."""
        appended, usage, since = draft.appended, draft.usage, draft.since
        at = self._clock()
        transition = _new(
            Transition,
            (
                row.source,
                row.dest,
                row.trigger,
                row.guard,
                self.steps,
                self.calls,
                *draft.named,
                draft.status,
                draft.reason,
                draft.error,
                draft.exception,
                appended,
                usage,
                at,
                None if since is None else at - since,
                draft.pending,
                draft.decisions,
            ),
        )
        self._events.append(transition)  # the commit: _settle() redoes the rest
        if appended:
            self._history.extend(appended)
        if usage is not None:
            self._spent = Usage(*(a + b for a, b in zip(self._spent, usage, strict=True)))
            self.tokens = self._spent.total
        self._state = row.dest  # type: ignore[assignment]  # a recorded row moves
        batch = self._batch
        self._outstanding = _START_TOOL if batch is not None and batch.running else None
        self._applied += 1
        return transition

    # -- helpers ------------------------------------------------------------------

    def _repeated_id(self) -> str | None:
        """The first id of the reply's batch that is reserved already or used twice in it."""
        reserved, seen = self._reserved, set[str]()
        for call_id, _ in self._reply.calls:
            if call_id in reserved or call_id in seen:
                return call_id
            seen.add(call_id)
        return None

    def _tool_returned(self, index: int, outcome: Outcome) -> Transition:
        """A running call's outcome, reported or raised: one transition."""
        assert self._batch is not None, "a tool returns in a batch"
        call = self._batch.calls[index]
        draft = _Draft(call, self._since.pop(call[0], None))
        draft.outcome, draft.exception = outcome, outcome.exception
        return self._record(self._choose(Trigger.TOOL_RETURNED, draft), draft)

    def _refused(self, what: str) -> InvalidStateError:
        """A report that answers nothing outstanding is refused, before any intake."""
        asked = self._outstanding.value if self._outstanding else "nothing"
        return InvalidStateError(
            f"cannot take {what} in state {self._state.value!r}: "
            f"the outstanding request is {asked}",
            state=self._state,
        )

    def _answering(self, call_id: str | None) -> int:
        """The index of the running call a tool report answers; else the report is refused."""
        batch = self._batch
        running = {} if batch is None else batch.running
        if call_id is None:
            if len(running) != 1:
                raise InvalidStateError(
                    f"calls {list(running)} are running: say which one this report answers "
                    "(call_id=)",
                    state=self._state,
                )
            return next(iter(running.values()))
        if call_id not in running:
            raise InvalidStateError(
                f"cannot take a report for call {call_id!r}: it is not running "
                f"(running: {list(running)})",
                state=self._state,
            )
        return running[call_id]

    def _settle(self) -> None:
        """Make the state, counters, ids, history and batch again from the log of events.

        Only an interruption needs this (and pays for it): it may have landed
        between an effect and the commit (undone here) or after the commit
        (completed here). Steps are the last event's, plus the one an
        outstanding model request has spent.
        """
        events = self._events
        if self._applied != len(events):  # the last event was committed: its request is answered
            self._outstanding = None
        history = History(list(self._input))
        for event in events:
            history.extend(event.appended_json)
        self._history, self._applied = history, len(events)
        last = events[-1] if events else None
        self._state = last.dest if last else State.AWAITING_MODEL
        self.calls = last.calls if last else 0
        reported = [event.usage for event in events if event.usage is not None]
        self._spent = Usage(*map(sum, zip(*reported, strict=True))) if reported else _NO_USAGE
        self.tokens = self._spent.total
        self._reserved = set(self._input_ids) | _appended_ids(events)
        batch = self._batch
        if self._state is State.DISPATCHING and batch is not None:
            # The batch in hand was accepted: keep only the results its events committed.
            self._reserved.update(call_id for call_id, _ in batch.calls)
            accepted = max(i for i, event in enumerate(events) if event.source is State.VALIDATING)
            answered = {event.call_id for event in events[accepted + 1 :]} | {
                call_id
                for event in events[accepted + 1 :]
                for call_id, decision in event.decisions
                if not decision.allowed
            }
            ids = [call_id for call_id, _ in batch.calls]
            batch.results = {i: r for i, r in batch.results.items() if ids[i] in answered}
            batch.running = {ids[i]: i for i in range(batch.started) if ids[i] not in answered}
            self._outstanding = _START_TOOL if batch.running else None
        if self._state in (State.DISPATCHING, State.AWAITING_APPROVAL) and batch is not None:
            pending, decided = _approvals(events)
            batch.pending, batch.decided = pending, decided
        self.steps = (last.steps if last else 0) + (self._outstanding is _ASK_MODEL)
        self._rejected = None  # only a terminal row rejects a reply


def check_decisions(
    pending: tuple[PendingCall, ...], decisions: object
) -> tuple[tuple[str, Decision], ...]:
    """A person's decisions, one per pending call in its order; else what is wrong, raised."""
    ids = [call.call_id for call in pending]
    if not isinstance(decisions, dict):
        raise TypeError(
            "expected decisions to be a dict of call id -> approve() or deny(reason), "
            f"got {not_json(decisions).text:.80}"
        )
    missing = [call_id for call_id in ids if call_id not in decisions]
    extra = [call_id for call_id in decisions if call_id not in ids]
    if missing or extra:
        raise ValueError(
            f"expected a decision for each pending call {ids}, and for no other"
            + (f"; missing: {missing}" if missing else "")
            + (f"; not pending: {extra}" if extra else "")
        )
    for call in pending:
        decision = decisions[call.call_id]
        if type(decision) is not Decision or decision.asks:
            raise TypeError(
                f"expected the decision for call {call.call_id!r} to be approve() or "
                f"deny(reason), got {not_json(decision).text:.80}"
            )
        if decision.fingerprint not in (None, call.fingerprint):
            raise ValueError(
                f"the decision for call {call.call_id!r} is bound to fingerprint "
                f"{decision.fingerprint[:80]!r}, not to the pending call's "
                f"{call.fingerprint!r}: {call.name}({call.arguments_json.decode()[:80]})"
            )
    return tuple((call.call_id, decisions[call.call_id]) for call in pending)


def _approvals(events: list[Transition]) -> tuple[tuple[PendingCall, ...], dict[str, Decision]]:
    """The batch in hand's pending calls and decisions, from the events since it was accepted."""
    pending: tuple[PendingCall, ...] = ()
    decided: dict[str, Decision] = {}
    for event in reversed(events):
        if event.source is State.VALIDATING:
            break
        if event.pending and not pending:
            pending = event.pending
        decided.update(event.decisions)
    return pending, decided


def _appended_ids(events: list[Transition]) -> set[str]:
    """The ids of every call the events appended: what _settle() reserves again."""
    ids = set()
    for event in events:
        for data in event.appended_json:
            message = orjson.loads(data)
            if message["kind"] == "call":
                ids.add(message["id"])
            elif message["kind"] == "calls":
                ids.update(call["id"] for call in message["calls"])
    return ids
