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
run: a driver that runs calls at once asks again. Which row fires, and what
it does, is decided only by the table in ``_table.py``.

A transition is committed by appending its event to the log; everything else
it changes (the state, the history, the counters) is derived from that log
again if an interruption lands half-way, so a run is never half-changed.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import time
import types
from typing import TYPE_CHECKING, Any, Final

import orjson

from agentloop._core._approval import Decision, PendingCall, call_fingerprint
from agentloop._core._json import exception_content, intake
from agentloop._core._messages import (
    CUT_OFF,
    DISPATCH_STATUSES,
    NOT_STARTED,
    History,
    batch_of,
    input_messages,
    reply_problem,
    tool_result_json,
)
from agentloop._core._table import (
    NEXT,
    REPORTS,
    TABLE,
    TERMINAL,
    Effect,
    Guard,
    Report,
    Row,
    State,
    Trigger,
)
from agentloop._core._values import (
    AskModel,
    AwaitApproval,
    Budget,
    CancelToken,
    NotJSON,
    RunResult,
    RunTool,
    Transition,
    Usage,
)
from agentloop._errors import InvalidStateError, JSONError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["Engine", "check_decisions", "checked_outcome", "checked_usage", "not_json"]

_NO_REPLY: Final = object()
# tuple.__new__ makes a NamedTuple from its fields without the Python-level __new__.
_new: Final = tuple.__new__
_NO_CALL: Final = (None, None)
_OUTCOME_KEYS_AT_MOST: Final = frozenset({"status", "content", "exception"})
_DEFAULT_BUDGET: Final = Budget()
_NOT_STARTED: Final = orjson.dumps(NOT_STARTED)
_CUT_OFF: Final = orjson.dumps(CUT_OFF)
_ASK_MODEL, _START_TOOL = Trigger.ASK_MODEL, Trigger.START_TOOL
_MODEL_REPLIED, _TOOL_RETURNED = Trigger.MODEL_REPLIED, Trigger.TOOL_RETURNED
_AWAIT_APPROVAL, _AWAITING_APPROVAL = Trigger.AWAIT_APPROVAL, State.AWAITING_APPROVAL
# An enum member read off its class costs about as much as a call: read once, here.
_AWAITING_MODEL, _FINISHED = State.AWAITING_MODEL, State.FINISHED
_NO_IDS: Final[frozenset[str]] = frozenset()
_NO_USAGE: Final = Usage()


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
    changes nothing. See the README's "Writing a driver".
    """

    __slots__ = (
        "_applied",
        "_batch",
        "_budget",
        "_call_id",
        "_cancelled",
        "_choosers",
        "_clock",
        "_cut",
        "_decided",
        "_decisions_in",
        "_ev_appended",
        "_ev_call",
        "_ev_decisions",
        "_ev_error",
        "_ev_exception",
        "_ev_pending",
        "_ev_reason",
        "_ev_since",
        "_ev_status",
        "_ev_usage",
        "_events",
        "_handed",
        "_history",
        "_input",
        "_input_ids",
        "_outcome",
        "_outstanding",
        "_pending",
        "_problem",
        "_rejected",
        "_reply",
        "_reply_json",
        "_reserved",
        "_results",
        "_running",
        "_since",
        "_started",
        "_state",
        "_tool",
        "calls",
        "steps",
        "tokens",
    )
    # What the engine holds between reports, and the fields of the event being made.
    _reply: Any
    _reply_json: bytes
    _problem: str | None
    # The batch in hand: each call's (id, name) in emission order, the results kept so
    # far (by index), the calls handed out and not yet answered (id -> index), how far
    # the calls were handed out or answered by a person's denial, how many were handed
    # out, and the content for calls an interruption cuts off.
    _batch: tuple[tuple[str, str], ...]
    _results: dict[int, bytes]
    _running: dict[str, int]
    _started: int
    _handed: int
    _cut: bytes
    # Approval: the calls of the batch waiting for a person, and each decision taken
    # (by id), and the decisions of the report in hand.
    _pending: tuple[PendingCall, ...]
    _decided: dict[str, Decision]
    _decisions_in: tuple[tuple[str, Decision], ...]
    # The call in hand: the one being checked, started, or reported.
    _call_id: str | None
    _tool: str | None
    _outcome: tuple[str, bytes]
    _ev_call: tuple[str | None, str | None]
    _ev_status: str | None
    _ev_reason: str | None
    _ev_error: str | None
    _ev_exception: BaseException | None
    _ev_appended: tuple[bytes, ...]
    _ev_usage: Usage | None
    _ev_since: float | None
    _ev_pending: tuple[PendingCall, ...]
    _ev_decisions: tuple[tuple[str, Decision], ...]

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
        # For each (state, trigger): take the first row whose guard holds, run its
        # effects, return it. The one seam between the engine and its table.
        self._choosers: Mapping[tuple[State, Trigger], Callable[[Engine], _Compiled]] = _CHOOSE
        # Without a token, nothing can cancel: ``bool()`` is False, and a C call.
        self._cancelled = bool if cancel is None else cancel.check()
        self._state = _AWAITING_MODEL
        #: Model callback invocations so far.
        self.steps = 0
        #: Accepted tool attempts so far.
        self.calls = 0
        #: Tokens the model's replies reported so far (input plus output).
        self.tokens = 0
        # Times are read, never slept on: a clock is the only outside thing the engine reads.
        self._clock = clock
        # When the model was asked, and when each running call was handed out.
        self._since: dict[str | None, float] = {}
        self._events: list[Transition] = []
        self._applied = 0
        self._outstanding: Trigger | None = None
        self._rejected: object = None
        self._reply, self._reply_json, self._problem = _NO_REPLY, b"", None
        self._call_id = self._tool = None
        self._batch, self._results, self._running, self._started, self._handed = (), {}, {}, 0, 0
        self._cut = _CUT_OFF
        self._pending, self._decided, self._decisions_in = (), {}, ()
        self._outcome = ("error", b"null")
        self._ev_call = _NO_CALL
        self._ev_status = self._ev_reason = self._ev_error = self._ev_exception = None
        self._ev_appended = self._ev_pending = self._ev_decisions = ()
        self._ev_usage = self._ev_since = None

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
        return tuple(self._running)

    @property
    def unstarted(self) -> int:
        """How many calls of the accepted batch are still to be handed out."""
        if self._state is not State.DISPATCHING:
            return 0
        results = self._results
        return sum(i not in results for i in range(self._started, len(self._batch)))

    @property
    def usage(self) -> Usage:
        """The tokens the model's replies reported so far, summed."""
        return self._usage() if self.tokens else _NO_USAGE

    @property
    def pending(self) -> tuple[PendingCall, ...]:
        """The calls waiting for a person's decision (in ``awaiting_approval``)."""
        return self._pending if self._state is State.AWAITING_APPROVAL else ()

    @property
    def decisions(self) -> dict[str, Decision]:
        """A person's decisions about calls of the batch in hand, by call id (a copy)."""
        return dict(self._decided) if self._state is State.DISPATCHING else {}

    def unstarted_batch(self) -> list[dict[str, Any]]:
        """Fresh copies of the accepted batch's calls while none has started (else none).

        What a driver shows its policies before the batch's first call starts.
        """
        if self._state is not State.DISPATCHING or self._handed:
            return []
        return [self._call_at(index) for index in range(len(self._batch))]

    def history(self) -> list[dict[str, Any]]:
        """A fresh copy of the history."""
        return self._history.copy()

    def events(self) -> tuple[Transition, ...]:
        """Every transition so far, in order."""
        return tuple(self._events)

    def result(self) -> RunResult:
        """The run's result: once it is done, or while it waits for a person's decisions."""
        if self._state not in TERMINAL and self._state is not State.AWAITING_APPROVAL:
            raise InvalidStateError(
                f"result() needs a finished run, but the run is still in state "
                f"{self._state.value!r}; step it until it is done",
                state=self._state,
            )
        last = self._events[-1]
        output = None
        if last.dest is _FINISHED:
            final = last.appended_json[-1]
            # The reply in hand is the decoded copy of the final it appended: no decoding again.
            output = (self._reply if final is self._reply_json else orjson.loads(final))["text"]
        return _new(
            RunResult,
            (
                self._state,
                output,
                self.steps,
                self.calls,
                self._budget,
                last.reason,
                last.error,
                tuple(self._events),
                self._history.to_json(),
                self._rejected,
                self._usage() if self.tokens else _NO_USAGE,
                self._reply_json if self._state is _AWAITING_APPROVAL else None,
            ),
        )

    def _usage(self) -> Usage:
        """The usage every reply reported, summed from the log.

        Where ``tokens`` is settled, none counted means every usage reported was
        zero (cached tokens are part of the input): callers skip the sum then.
        """
        reported = [event.usage for event in self._events if event.usage is not None]
        return Usage(*map(sum, zip(*reported, strict=True))) if reported else _NO_USAGE

    # -- the driver protocol --------------------------------------------------

    def next(self) -> AskModel | RunTool | AwaitApproval | Transition:
        """What the run needs now: the model's reply, a tool's outcome, or nothing.

        Nothing means the engine made a transition by itself; it is returned.
        """
        state = self._state
        key = _NEXT_KEYS.get(state)
        if key is None:
            raise InvalidStateError(
                f"the run ended in state {state.value!r}: there is nothing next; read its result()",
                state=state,
            )
        trigger = key[1]
        if trigger is _START_TOOL:
            batch, started, results = self._batch, self._started, self._results
            while started in results:  # answered by a person's denial: never handed out
                started += 1
            self._started = started
            if started == len(batch):
                raise InvalidStateError(
                    f"cannot go on in state {state.value!r}: every call of the batch was "
                    f"handed out, and the answers for {list(self._running)} are outstanding",
                    state=state,
                )
            self._call_id, self._tool = batch[started]
        elif self._outstanding is not None:
            raise InvalidStateError(
                f"cannot go on in state {state.value!r}: the answer to "
                f"{self._outstanding.value} is outstanding (one step at a time)",
                state=state,
            )
        row = self._choosers[key](self)
        if row.dest is not None:
            return self._record(row)
        if trigger is _AWAIT_APPROVAL:
            return _new(AwaitApproval, (self._pending,))
        self._outstanding = trigger
        self._since[self._call_id if trigger is _START_TOOL else None] = self._clock()
        if trigger is _ASK_MODEL:
            return AskModel(*self._history.request())
        if len(self._batch) == 1 and self._reply["kind"] == "call":  # the common case, inline
            return _new(RunTool, (orjson.loads(self._reply_json),))
        return _new(RunTool, (self._call_at(self._started - 1),))

    def replied(self, reply: object) -> Transition:
        """The model returned ``reply``; it is copied in before anything else.

        What is wrong with it, if anything, is noted for the guards. A ``usage``
        key is the provider's bill for the step, not part of the reply: it goes
        on the event, never into the history.
        """
        if self._outstanding is not _ASK_MODEL:
            raise self._refused("a model reply")
        problem: str | None = None
        if type(reply) is dict and "usage" in reply:
            usage = checked_usage(reply["usage"])
            if isinstance(usage, Usage):
                self._ev_usage = usage
                reply = {key: value for key, value in reply.items() if key != "usage"}
            else:  # kept in the reply, which is malformed: a reviewer sees what came
                problem = usage
        plain: Any
        if type(reply) is NotJSON:  # replayed: a reply that was not JSON when it came
            plain, problem = reply, reply.problem
        else:
            try:
                self._reply_json, plain = intake(reply, "reply")
            except JSONError as exc:
                plain = not_json(reply, str(exc))
                problem = plain.problem
            else:
                problem = problem or reply_problem(plain)
        self._reply, self._problem = plain, problem
        if problem is None and plain["kind"] != "final":
            self._batch = batch = (
                ((plain["id"], plain["name"]),) if plain["kind"] == "call" else batch_of(plain)
            )
            # A batch of one names its call from the start; a longer one, call by call.
            self._call_id, self._tool = batch[0] if len(batch) == 1 else (None, None)
            self._results, self._running, self._started, self._handed = {}, {}, 0, 0
            self._cut = _CUT_OFF
            self._pending, self._decided = (), {}
        else:
            self._batch, self._call_id, self._tool = (), None, None
        self._ev_since = self._since.get(None)
        return self._record(self._choosers[_REPLIED_KEYS[self._state]](self))

    def returned(self, outcome: object, call_id: str | None = None) -> Transition:
        """The dispatcher returned ``outcome``: ``{'status', 'content'}`` (and ``'exception'``).

        ``call_id`` says which running call it answers; it may be left out
        while only one is running.
        """
        if self._outstanding is not _START_TOOL:
            raise self._refused("a tool outcome")
        running = self._running
        if call_id is not None or len(running) != 1 or self._call_id not in running:
            self._answering(call_id)  # else the one call running is the one in hand
        self._ev_since = self._since.pop(self._call_id, None)
        self._outcome = checked_outcome(outcome)
        if type(outcome) is dict and "exception" in outcome:
            exception = outcome["exception"]
            if isinstance(exception, BaseException):
                self._ev_exception = exception
        return self._record(self._choosers[_RETURNED_KEYS[self._state]](self))

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
        if trigger is _TOOL_RETURNED:
            self._answering(call_id)
            self._ev_since = self._since.pop(self._call_id, None)
            self._outcome = ("error", orjson.dumps(exception_content(exc)))
        else:
            self._ev_since = self._since.get(None)
            # A failed call can still have cost tokens (IncompleteReply says how many);
            # only the instance's own dict is read, so no user code runs.
            spent = checked_usage(vars(exc).get("usage"))
            if isinstance(spent, Usage):
                self._ev_usage = spent
        self._ev_exception = exc
        return self._fire(trigger)

    def asked_approval(self, reasons: Mapping[str, str]) -> Transition:
        """A policy asked a person about these calls of the batch: ``{call_id: reason}``.

        Only before the batch's first call starts. The run waits in
        ``awaiting_approval`` until ``decided``; a bad report raises and changes nothing.
        """
        self._pending = self.checked_reasons(reasons)
        return self._fire(Trigger.APPROVAL_ASKED)

    def checked_reasons(self, reasons: object) -> tuple[PendingCall, ...]:
        """The pending calls ``asked_approval(reasons)`` would hold; raises if it would refuse."""
        if self._state is not State.DISPATCHING or self._handed:
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
        ids = [call_id for call_id, _ in self._batch]
        # Read once: what is checked is what is kept (a dict subclass may answer twice).
        taken = dict(list(reasons.items()))
        for call_id, reason in taken.items():
            if call_id not in ids or call_id in self._decided:
                where = "was decided already" if call_id in self._decided else "is not in it"
                raise ValueError(
                    f"expected the id of a call of the batch that waits (its calls: {ids}) "
                    f"that no person decided, got {not_json(call_id).text:.80}, which {where}"
                )
            if type(reason) is not str or not reason:
                raise TypeError(
                    f"expected the reason for call {call_id!r} to be a non-empty str, "
                    f"got {not_json(reason).text:.80}"
                    + (f" (a {type(reason).__name__})" if isinstance(reason, str) else "")
                )
            try:  # the one rule of an ask's reason: text the record can take
                Decision(allowed=False, reason=reason, asks=True)
            except ValueError as exc:
                raise ValueError(f"call {call_id!r}: {exc}") from None
        pending: list[PendingCall] = []
        for index, (call_id, name) in enumerate(self._batch):
            if call_id in taken:
                arguments = self._call_at(index)["arguments"]
                pending.append(
                    PendingCall(
                        call_id,
                        name,
                        orjson.dumps(arguments),
                        taken[call_id],
                        call_fingerprint(name, arguments),
                    )
                )
        return tuple(pending)

    def decided(self, decisions: Mapping[str, Decision]) -> Transition:
        """A person decided every pending call: ``{call_id: approve() | deny(reason)}``.

        A missing or extra id, a decision bound to another fingerprint, or
        anything that is not an ``approve``/``deny`` raises and changes nothing.
        """
        self._decisions_in = self.checked_decisions(decisions)
        return self._fire(Trigger.APPROVAL_DECIDED)

    def checked_decisions(self, decisions: object) -> tuple[tuple[str, Decision], ...]:
        """The decisions ``decided`` would keep, in pending order; raises if it would refuse."""
        if self._state is not State.AWAITING_APPROVAL:
            taken = "; this batch's decisions were taken already" if self._decided else ""
            raise InvalidStateError(
                f"cannot take decisions in state {self._state.value!r}: "
                f"the run is not awaiting approval{taken}",
                state=self._state,
            )
        return check_decisions(self._pending, decisions)

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
            self._cut = orjson.dumps(exception_content(exc))
            self._call_id, self._tool = self._batch[min(self._running.values())]
            self._ev_since = self._since.get(self._call_id)
        else:
            self._call_id = self._tool = None
            if trigger is Trigger.MODEL_INTERRUPTED:
                self._ev_since = self._since.get(None)
        self._ev_exception = exc
        return self._fire(trigger)

    # -- guards (named in the table) ---------------------------------------------

    def _cancel_requested(self) -> bool:
        return self._cancelled()

    def _steps_exhausted(self) -> bool:
        return self.steps >= self._budget.max_steps

    def _tokens_exhausted(self) -> bool:
        limit = self._budget.max_total_tokens
        return limit is not None and self.tokens >= limit

    def _reply_malformed(self) -> bool:
        return self._problem is not None

    def _reply_is_final(self) -> bool:
        return self._reply["kind"] == "final"  # type: ignore[no-any-return]

    def _call_id_reserved(self) -> bool:
        batch = self._batch
        return batch[0][0] in self._reserved if len(batch) == 1 else self._repeated_id() is not None

    def _calls_exhausted(self) -> bool:
        return self.calls + len(self._batch) > self._budget.max_calls

    def _cancel_requested_mid_batch(self) -> bool:
        return bool(self._results or self._running) and self._cancelled()

    def _batch_underway(self) -> bool:
        return bool(self._results or self._running)

    def _batch_open(self) -> bool:
        return len(self._results) + 1 < len(self._batch)

    def _denials_answer_batch(self) -> bool:
        denied = {call_id for call_id, decision in self._decisions_in if not decision.allowed}
        results = self._results
        return all(
            index in results or call_id in denied for index, (call_id, _) in enumerate(self._batch)
        )

    # -- effects (named in the table) -------------------------------------------

    def _count_step(self) -> None:
        self.steps += 1

    def _name_call(self) -> None:
        if self._call_id is not None:
            self._ev_call = (self._call_id, self._tool)

    def _reserve_calls(self) -> None:
        batch = self._batch
        if len(batch) == 1:
            self._reserved.add(batch[0][0])
        else:
            self._reserved.update(call_id for call_id, _ in batch)
        self.calls += len(batch)

    def _start_call(self) -> None:
        self._running[self._call_id] = self._started  # type: ignore[index]
        self._started += 1
        self._handed += 1

    def _keep_result(self) -> None:
        status, content_json = self._outcome
        self._ev_status = status
        index = self._running.pop(self._call_id)  # type: ignore[arg-type]
        self._results[index] = tool_result_json(self._call_id, self._tool, status, content_json)  # type: ignore[arg-type]

    def _answer_rest(self) -> None:
        results, running = self._results, self._running
        for index, (call_id, name) in enumerate(self._batch):
            if index not in results:
                content = self._cut if call_id in running else _NOT_STARTED
                results[index] = tool_result_json(call_id, name, "cancelled", content)
                if call_id == self._call_id:
                    self._ev_status = "cancelled"
        running.clear()

    def _append_batch(self) -> None:
        results, n = self._results, len(self._batch)
        if n == 1:
            self._ev_appended = (self._reply_json, results[0])
        else:
            self._ev_appended = (self._reply_json, *map(results.__getitem__, range(n)))

    def _hold_calls(self) -> None:
        self._ev_pending = self._pending

    def _keep_decisions(self) -> None:
        decisions, batch, status = self._decisions_in, self._batch, self._ev_status
        # A denied call is answered here, by the engine: no driver is handed it to run.
        # Every result is made before anything is kept, so none is kept half-way.
        place = {call_id: index for index, (call_id, _) in enumerate(batch)}
        answers = {}
        for call_id, decision in decisions:
            if not decision.allowed:
                index = place[call_id]
                reason = orjson.dumps(decision.reason)
                answers[index] = tool_result_json(call_id, batch[index][1], "denied", reason)
                if call_id == self._call_id:
                    status = "denied"
        self._ev_decisions = decisions
        self._decided.update(decisions)
        self._results.update(answers)
        self._ev_status = status

    def _append_final(self) -> None:
        self._ev_appended = (self._reply_json,)

    def _reject_reply(self) -> None:
        if self._reply is not _NO_REPLY:
            self._rejected = self._reply

    def _note_max_steps(self) -> None:
        self._ev_reason = "max_steps"

    def _note_max_calls(self) -> None:
        self._ev_reason = "max_calls"

    def _note_max_total_tokens(self) -> None:
        self._ev_reason = "max_total_tokens"

    def _note_model_error(self) -> None:
        content = exception_content(self._ev_exception)  # type: ignore[arg-type]
        said = f"{content['type']}: {content['message']}" if content["message"] else content["type"]
        self._ev_error = f"the model raised {said}"

    def _note_malformed(self) -> None:
        self._ev_error = f"malformed reply: {self._problem}"

    def _note_repeated_call(self) -> None:
        call_id = self._repeated_id()
        # The event names the reused id, in a batch too (name_call names only a lone call).
        self._ev_call = (call_id, dict(self._batch)[call_id])  # type: ignore[index]
        if len(self._batch) > 1 and call_id not in self._reserved:
            self._ev_error = (
                f"call id {call_id!r} appears twice in the batch; no call of it was run"
            )
        else:
            self._ev_error = (
                f"call id {call_id!r} was already used in this run; the call was not run again"
            )

    def _repeated_id(self) -> str | None:
        """The first id of the batch that is reserved already or used twice in it."""
        batch, reserved = self._batch, self._reserved
        if len(batch) == 1:
            return batch[0][0] if batch[0][0] in reserved else None
        seen: set[str] = set()
        for call_id, _ in batch:
            if call_id in reserved or call_id in seen:
                return call_id
            seen.add(call_id)
        return None

    # -- the one place a row is chosen and applied ----------------------------------

    def _call_at(self, index: int) -> dict[str, Any]:
        """A fresh copy of the batch's call ``index``, as a ``call`` message."""
        if len(self._batch) == 1 and self._reply["kind"] == "call":
            return orjson.loads(self._reply_json)  # type: ignore[no-any-return]
        element = self._reply["calls"][index]
        return {"kind": "call", **orjson.loads(orjson.dumps(element))}

    def _refused(self, what: str) -> InvalidStateError:
        """A report that answers nothing outstanding is refused, before any intake."""
        asked = self._outstanding.value if self._outstanding else "nothing"
        return InvalidStateError(
            f"cannot take {what} in state {self._state.value!r}: "
            f"the outstanding request is {asked}",
            state=self._state,
        )

    def _answering(self, call_id: str | None) -> None:
        """Put the running call a tool report answers in hand, or refuse the report."""
        running = self._running
        if call_id is None:
            if len(running) == 1 and self._call_id in running:
                return  # one call at a time: the one in hand is the one running
            if len(running) != 1:
                raise InvalidStateError(
                    f"calls {list(running)} are running: say which one this report answers "
                    "(call_id=)",
                    state=self._state,
                )
            call_id = next(iter(running))
        elif call_id not in running:
            raise InvalidStateError(
                f"cannot take a report for call {call_id!r}: it is not running "
                f"(running: {list(running)})",
                state=self._state,
            )
        self._call_id, self._tool = call_id, self._batch[running[call_id]][1]

    def _fire(self, trigger: Trigger) -> Transition:
        return self._record(self._choosers[self._state, trigger](self))

    def _record(self, compiled: _Compiled) -> Transition:
        """Commit the chosen row: its event first, then what follows from it."""
        call, appended, usage = self._ev_call, self._ev_appended, self._ev_usage
        at = self._clock()
        since = self._ev_since
        transition = _new(
            Transition,
            (
                compiled.source,
                compiled.dest,
                compiled.trigger,
                compiled.guard,
                self.steps,
                self.calls,
                call[0],
                call[1],
                self._ev_status,
                self._ev_reason,
                self._ev_error,
                self._ev_exception,
                appended,
                usage,
                at,
                None if since is None else at - since,
                self._ev_pending,
                self._ev_decisions,
            ),
        )
        self._events.append(transition)  # the commit: _settle() redoes the rest
        if appended:
            self._history.extend(appended)
        if usage is not None:
            self.tokens += usage[0] + usage[1]
        self._state = compiled.dest  # type: ignore[assignment]
        self._outstanding = _START_TOOL if self._running else None
        self._applied += 1
        self._ev_call = _NO_CALL
        self._ev_status = self._ev_reason = self._ev_error = self._ev_exception = None
        self._ev_appended = self._ev_pending = self._ev_decisions = ()
        self._ev_usage = self._ev_since = None
        return transition

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
        self.tokens = self._usage().total
        self._reserved = set(self._input_ids) | _appended_ids(events)
        if self._state is State.DISPATCHING:
            # The batch in hand was accepted: keep only the results its events committed.
            self._reserved.update(call_id for call_id, _ in self._batch)
            accepted = max(i for i, event in enumerate(events) if event.source is State.VALIDATING)
            answered = {event.call_id for event in events[accepted + 1 :]} | {
                call_id
                for event in events[accepted + 1 :]
                for call_id, decision in event.decisions
                if not decision.allowed
            }
            ids = [call_id for call_id, _ in self._batch]
            self._results = {i: r for i, r in self._results.items() if ids[i] in answered}
            self._running = {ids[i]: i for i in range(self._started) if ids[i] not in answered}
            self._outstanding = _START_TOOL if self._running else None
        if self._state in (State.DISPATCHING, State.AWAITING_APPROVAL):
            self._pending, self._decided = _approvals(events)
        self.steps = (last.steps if last else 0) + (self._outstanding is _ASK_MODEL)
        self._rejected = None  # only a terminal row rejects a reply
        self._ev_call = _NO_CALL
        self._ev_status = self._ev_reason = self._ev_error = self._ev_exception = None
        self._ev_appended = self._ev_pending = self._ev_decisions = ()
        self._ev_usage = self._ev_since = None


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
    checked: list[tuple[str, Decision]] = []
    for call in pending:
        # Read once: what is checked is what is kept (a dict subclass may answer twice).
        decision = decisions[call.call_id]
        if type(decision) is not Decision or decision.asks:
            raise TypeError(
                f"expected the decision for call {call.call_id!r} to be approve() or "
                f"deny(reason), got {not_json(decision).text:.80}"
            )
        # Made again, so the one rule of a Decision holds even for one changed after it was
        # made (object.__setattr__): what is kept below can be recorded, and nothing fails later.
        Decision(decision.allowed, decision.reason, decision.asks, decision.fingerprint)
        if decision.fingerprint not in (None, call.fingerprint):
            raise ValueError(
                f"expected the decision for call {call.call_id!r} to be bound to that call or "
                f"to none, got one that is bound to fingerprint "
                f"{decision.fingerprint[:80]!r}, not to the pending call's "
                f"{call.fingerprint!r}: {call.name}({call.arguments_json.decode()[:80]})"
            )
        checked.append((call.call_id, decision))
    return tuple(checked)


def not_json(reply: object, problem: str = "") -> NotJSON:
    """A reply that is not JSON, kept for review as text that cannot fail to save."""
    if inspect.iscoroutine(reply):
        reply.close()  # never awaited: say so once, here
        problem = (
            "the model returned a coroutine: an async model needs the asyncio driver "
            "(loop.arun or loop.astart)"
        )
    try:
        text = repr(reply)
        if type(text) is not str:
            raise TypeError("__repr__ returned a non-str")
        text.encode()
    except Exception as exc:  # noqa: BLE001 - any failure of a user's __repr__
        text = f"<unprintable: {type(exc).__name__}>"
    return NotJSON(text[:2000], problem)


_USAGE_KEYS: Final = frozenset(Usage._fields)


def checked_usage(usage: object) -> Usage | str:
    """A reply's ``usage`` as a ``Usage``, or what is wrong with it."""
    if type(usage) is dict and usage.keys() == _USAGE_KEYS:
        counts = [usage[name] for name in Usage._fields]
        # Cached tokens are part of the input tokens.
        if all(type(n) is int and 0 <= n <= 2**63 - 1 for n in counts) and counts[2] <= counts[0]:
            return Usage(*counts)
    return (
        "expected 'usage' to be {'input_tokens', 'output_tokens', 'cached_tokens'}, each a "
        f"non-negative int, cached_tokens at most input_tokens, got {not_json(usage).text:.200}"
    )


def checked_outcome(outcome: object) -> tuple[str, bytes]:
    """A dispatcher's outcome as (status, content JSON); a bad one becomes ``error``."""
    if type(outcome) is dict:
        status = outcome.get("status")
        if (
            type(status) is str
            and status in DISPATCH_STATUSES
            and "content" in outcome
            and (len(outcome) == 2 or outcome.keys() <= _OUTCOME_KEYS_AT_MOST)
        ):
            try:
                return status, intake(outcome["content"], "content")[0]
            except JSONError as exc:
                return "error", orjson.dumps(f"the tool returned a value that is not JSON: {exc}")
    problem = (
        "the dispatcher's outcome was not valid: expected {'status': one of "
        f"{sorted(DISPATCH_STATUSES)}, 'content': JSON, optionally 'exception': "
        f"the exception behind an error}}, got {not_json(outcome).text:.200}"
    )
    return "error", orjson.dumps(problem)


class _Compiled:
    """A row's fields, as the engine records them on its events."""

    __slots__ = ("dest", "guard", "source", "trigger")

    def __init__(self, row: Row) -> None:
        self.source, self.trigger, self.guard, self.dest = (
            row.source,
            row.trigger,
            row.guard,
            row.dest,
        )


def _chooser(rows: tuple[Row, ...]) -> Callable[[Engine], _Compiled]:
    """One (state, trigger) group as straight-line code: the fast path.

    Like attrs writing ``__init__``, the table is compiled at import into
    what a hand-written loop would say: try each row's guard in order, run
    the first match's effects, return its row. The source is made only from
    the table's enum values (identifiers) and the bodies of the engine methods
    they name, so it says exactly what the rows say; ``transitions`` runs the
    same rows, calling those methods, in a property test.
    """
    lines: list[str] = []
    for index, row in enumerate(rows):
        body: list[str] = []
        for effect in row.effects:
            body.extend(_inlined(effect)[0])
        body.append(f"return compiled[{index}]")
        if row.guard is None:
            lines.extend(body)
            break  # build_table checked that an unguarded row ends its group
        before, condition = _inlined(row.guard)
        lines.extend(before)
        lines.append(f"if {condition}:")
        lines.extend(f"    {line}" for line in body)
    source = "def make(compiled):\n def choose(engine):\n"
    source += "".join(f"  {line}\n" for line in lines) + " return choose\n"
    key = f"{rows[0].source.value}, {rows[0].trigger.value}"
    code = compile(source, f"<chooser for {key}>", "exec")  # the table's, as above
    (factory,) = (const for const in code.co_consts if isinstance(const, types.CodeType))
    make = types.FunctionType(factory, globals())  # the module's names, as the methods see them
    return make(tuple(_Compiled(row) for row in rows))  # type: ignore[no-any-return]


def _method_source(name: str) -> str | None:
    """The source of the engine's method ``name`` (only its own lines are read)."""
    try:
        return textwrap.dedent(inspect.getsource(getattr(Engine, name)))
    except (OSError, TypeError):  # no source to read (a frozen build)
        return None


@functools.cache
def _inlined(name: Guard | Effect) -> tuple[tuple[str, ...], str]:
    """``Engine._<name>`` for a chooser: lines to run, then (for a guard) the condition.

    A call costs more than most guards and effects do, so a method whose body
    is plain statements (then, for a guard, one ``return``) is pasted in,
    ``self`` read as ``engine`` and each local prefixed with the method's name
    (a local is always set before it is read, so a body pasted twice is safe);
    any other is called. Either way what runs is ``Engine``'s own method body: a
    subclass that overrides a guard or effect replaces ``_choosers`` too.
    """
    call = f"engine._{name.value}()"
    as_call = ((call,) if isinstance(name, Effect) else ()), call
    source = _method_source(f"_{name.value}")
    if source is None:
        return as_call
    function = ast.parse(source).body[0]  # parsed afresh: the renaming below changes it
    assert isinstance(function, ast.FunctionDef)
    local = {
        node.id
        for node in ast.walk(function)
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)
    }
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and node.id == "self":
            node.id = "engine"
        elif isinstance(node, ast.Name) and node.id in local:
            node.id = f"_{name.value}_{node.id}"
    body, condition = function.body, call
    if isinstance(name, Guard):
        result = body.pop()
        if not isinstance(result, ast.Return) or result.value is None:
            return as_call
        condition = f"({ast.unparse(result.value)})"
    jumps = ast.Return | ast.Yield | ast.Global | ast.Nonlocal | ast.Lambda
    if any(isinstance(node, jumps) for statement in body for node in ast.walk(statement)):
        return as_call
    lines = (line for statement in body for line in ast.unparse(statement).splitlines())
    return tuple(lines), condition


# Every guard and effect the table names is an engine method (checked at import).
assert all(
    name.value.isidentifier() and hasattr(Engine, f"_{name.value}") for name in (*Guard, *Effect)
)
_CHOOSE: Final = {key: _chooser(rows) for key, rows in TABLE.groups.items()}
# Each working state's (state, trigger) key of the trigger it fires itself: the very
# tuple the choosers are keyed by, so next() neither builds nor compares one.
_NEXT_KEYS: Final = {key[0]: key for key in TABLE.groups if NEXT.get(key[0]) is key[1]}
# The same for the reports a driver makes on every step.
_REPLIED_KEYS: Final = {key[0]: key for key in TABLE.groups if key[1] is _MODEL_REPLIED}
_RETURNED_KEYS: Final = {key[0]: key for key in TABLE.groups if key[1] is _TOOL_RETURNED}


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
