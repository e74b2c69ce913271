"""The run's state, and the guards and effects the table's rows name, as its methods.

Each feature's are a mixin of ``RunState`` in a ``_rows_*.py`` module of its
own (context, output, retry, review): still methods of the engine, by name.

Each guard reads the state (and the report in hand, in the ``_Draft``) and
answers a bool; each effect changes the state or fills in the ``_Draft`` of
the transition being made. Nothing here chooses a row or commits one: that is
``_choose`` and ``_record`` (``interpreter.py``), which call these by name, so a
subclass or a patched method is what runs.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final

import orjson

from agentloop._core.batch import Batch
from agentloop._core.context_policy import ContextPolicy, Summarise
from agentloop._core.intake import NO_REPLY, Outcome
from agentloop._core.json import exception_said
from agentloop._core.messages import CUT_OFF, History, input_messages
from agentloop._core.output_schema import OutputSchema
from agentloop._core.retry_policy import checked_retry
from agentloop._core.rows.context import ContextRows
from agentloop._core.rows.output import _WRAP_UP_BEGUN, OutputRows
from agentloop._core.rows.retry import RetryRows
from agentloop._core.rows.review import ReviewRows, _approvals
from agentloop._core.table import ANSWERS, Guard, State, Trigger
from agentloop._core.values import (
    AskModel,
    AwaitApproval,
    Budget,
    CancelToken,
    ReviewCalls,
    RunTool,
    Transition,
    Usage,
    Wait,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop._core.approval import Decision, PendingCall
    from agentloop._core.intake import Reply
    from agentloop._core.retry_policy import RetryPolicy
    from agentloop._core.rows.output import _CallIndex, _Identical

__all__ = ["RunState"]

_DEFAULT_BUDGET: Final = Budget()
_CUT_OFF: Final = orjson.dumps(CUT_OFF)
_NO_IDS: Final[frozenset[str]] = frozenset()
_NO_USAGE: Final = Usage()
_ASK_MODEL, _START_TOOL = Trigger.ASK_MODEL, Trigger.START_TOOL
_SUMMARISE: Final = Trigger.SUMMARISE


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
    review: dict[str, object] | None = None
    decisions_in: tuple[tuple[str, Decision], ...] = ()
    cut: bytes = _CUT_OFF
    # What came from outside with the report (the reply's or the content's JSON).
    input_json: bytes | None = None
    # What an internal row hands the driver.
    request: AskModel | RunTool | AwaitApproval | ReviewCalls | Summarise | Wait | None = None
    # The summariser's reply, taken in (on summary_written).
    summary_in: Reply | None = None
    #: The wait the retry policy chose for a failed model (``None``: no retry), and
    #: the event's copy once ``plan_wait`` keeps it.
    wait_in: float | None = None
    wait: float | None = None
    #: The fallback model that replied or raised, by name (``None`` with one model).
    model: str | None = None
    # What the output schema found wrong with the final in hand (None: not asked yet).
    output_problems: list[str] | None = None
    # The loop guard's findings about the batch in hand (None: not looked yet).
    identical: _Identical | None = None

    def __init__(self, call: tuple[str, str] | None, since: float | None = None) -> None:
        #: The call in hand: being checked, handed out or reported (None: none is).
        self.call = call
        #: When the request this transition answers was handed out.
        self.since = since


class RunState(ContextRows, OutputRows, RetryRows, ReviewRows):
    """One run's counters, reserved ids, history, batch and log: what the rows read and change."""

    __slots__ = (
        "_applied",
        "_batch",
        "_budget",
        "_calls_seen",
        "_cancelled",
        "_clock",
        "_context",
        "_draft",
        "_events",
        "_handed",
        "_history",
        "_input",
        "_input_ids",
        "_models",
        "_output",
        "_output_retries",
        "_outstanding",
        "_parent_run_id",
        "_plan",
        "_policy",
        "_recorded_words",
        "_rejected",
        "_reply",
        "_reserved",
        "_retry",
        "_reviews",
        "_run_id",
        "_seen",
        "_since",
        "_spent",
        "_state",
        "_summary",
        "_tokens",
        "_view",
        "_wrapping",
        "calls",
        "steps",
    )

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
    ) -> None:
        if context is not None and type(context) is not ContextPolicy:
            raise TypeError(
                "expected context to be a policy of agentloop.context (keep_last(tokens=...) "
                f"or summarise(model, tokens=...)) or None, got {type(context).__name__}"
            )
        if type(budget) is not Budget:
            raise TypeError(f"expected budget to be a Budget, got {type(budget).__name__}")
        if cancel is not None and type(cancel) is not CancelToken:
            raise TypeError(
                f"expected cancel to be a CancelToken or None, got {type(cancel).__name__}"
            )
        _check_parts(clock, retry, models, output)
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
        # Tokens the model's replies reported so far (input plus output): usage.total.
        self._tokens = 0
        self._spent = _NO_USAGE  # what the replies reported, summed
        # Times are read, never slept on: a clock is the only outside thing the engine reads.
        self._clock = clock
        # When the model was asked, and when each running call was handed out.
        self._since: dict[str | None, float] = {}
        self._events: list[Transition] = []
        # The calls handed out since the last transition: the next one records them.
        self._handed: list[str] = []
        self._applied = 0  # events whose effects on the state are done
        self._outstanding: Trigger | None = None
        self._rejected: object = None
        self._reply: Reply = NO_REPLY  # the reply in hand
        self._batch: Batch | None = None  # the accepted batch in hand
        self._draft = _Draft(None)  # the transition being made
        self._reviews = False  # whether the driver reviews each batch (ReviewCalls)
        self._init_context(context, encoded)
        # Resilience (retry=, fallback models): off unless the Loop sets them.
        self._retry = retry
        self._models = models
        #: The run this one continues (``Loop.continue_run``), by id.
        self._parent_run_id: str | None = None
        #: This run's id, when it is durable (a ledger's or DBOS's): its result says it.
        self._run_id: str | None = None
        #: The schema a final answer must match (``Loop(output=T)``), if any.
        self._output = output
        #: Invalid final answers sent back to the model so far.
        self._output_retries = 0
        #: The budget that ran out, once the run wraps up (``on_exhausted='answer'``).
        self._wrapping: str | None = None
        self._calls_seen: _CallIndex | None = None  # the loop guard's, made when first asked
        #: The errors of a record being replayed that an older agentloop worded otherwise.
        self._recorded_words: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        return f"<Engine state={self._state.value!r} steps={self.steps} calls={self.calls}>"

    # -- guards (named in the table) ---------------------------------------------

    def _cancel_requested(self) -> bool:
        return self._cancelled()

    def _steps_exhausted(self) -> bool:
        return self.steps >= self._budget.max_steps

    def _tokens_exhausted(self) -> bool:
        limit = self._budget.max_total_tokens
        return limit is not None and self._tokens >= limit

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

    # -- effects (named in the table) -------------------------------------------

    def _count_step(self) -> None:
        self.steps += 1

    def _ask_for_reply(self) -> None:
        self._outstanding = _ASK_MODEL
        self._since[None] = self._clock()
        view = self._view  # fit_context's, under a context policy
        self._draft.request = AskModel(
            *(self._history.request() if view is None else (view, len(view)))
        )

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
        self._handed.append(call_id)
        self._outstanding = _START_TOOL
        self._since[call_id] = self._clock()
        draft.request = RunTool(*batch.handed_out(index))

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
        draft.error = f"the model raised {exception_said(draft.exception)}"

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
            return
        # The words of a record made before the error said where the id was first used.
        older = f"call id {call_id!r} was already used in this run; the call was not run again"
        self._draft.error = (
            older
            if older in self._recorded_words
            else f"call id {call_id!r} was already used in this run, first "
            f"{self._first_use(call_id)}; the call was not run again"
        )

    def _first_use(self, call_id: str) -> str:
        """Where a reserved id was first used: ``in the input (transcript[3])``, ``at step 2``."""
        at = 0
        for data in self._input:
            if call_id in _ids_of(orjson.loads(data)):
                return f"in the input (transcript[{at}])"
            at += 1
        for event in self._events:
            for data in event.appended_json:
                if call_id in _ids_of(orjson.loads(data)):
                    return f"at step {event.steps} (transcript[{at}])"
                at += 1
        raise AssertionError("a reserved id is in the input or in what the run appended")

    def _repeated_id(self) -> str | None:
        """The first id of the reply's batch that is reserved already or used twice in it."""
        reserved, seen = self._reserved, set()
        for call_id, _ in self._reply.calls:
            if call_id in reserved or call_id in seen:
                return call_id
            seen.add(call_id)
        return None

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
        self._tokens = self._spent.total
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
            # Handed out and in no event yet: the next event records them.
            recorded = {call_id for event in events[accepted + 1 :] for call_id in event.started}
            self._handed = [call_id for call_id in batch.running if call_id not in recorded]
        else:
            self._handed = []
        if self._state in (State.DISPATCHING, State.AWAITING_APPROVAL) and batch is not None:
            pending, decided = _approvals(events)
            batch.pending, batch.decided = pending, decided
        self.steps = (last.steps if last else 0) + (
            self._outstanding is _ASK_MODEL or self._outstanding is _SUMMARISE
        )
        if self._policy is not None:
            self._rebuild_context()
        self._rejected = None  # only a terminal row rejects a reply
        self._output_retries = sum(event.guard is Guard.OUTPUT_RETRY for event in events)
        self._calls_seen = None  # read again from the record when next asked
        self._wrapping = next(
            (event.reason for event in events if event.guard in _WRAP_UP_BEGUN), None
        )

    def _retract(self) -> Transition:
        """Take back the last transition: the run is as it was before it, its request out again.

        For a store that could not record an end (a durable driver): the
        caller sees the failure, and the run in memory stays as its record says.
        """
        event = self._events.pop()
        self._applied = len(self._events)
        # Out again: the model or tool request it answered (a decision answers none).
        answered = ANSWERS.get(event.trigger)
        self._outstanding = answered if answered in (_ASK_MODEL, _START_TOOL) else None
        self._settle()
        return event


def _appended_ids(events: list[Transition]) -> set[str]:
    """The ids of every call the events appended: what _settle() reserves again."""
    return {
        call_id
        for event in events
        for data in event.appended_json
        for call_id in _ids_of(orjson.loads(data))
    }


def _ids_of(message: dict[str, Any]) -> list[str]:
    """The ids of the calls a message makes (none unless a ``call`` or ``calls``)."""
    kind = message.get("kind")
    if kind == "call":
        return [message["id"]]
    if kind == "calls":
        return [call["id"] for call in message["calls"]]
    return []


def _check_parts(clock: object, retry: object, models: object, output: object) -> None:
    """``TypeError`` naming an engine part of the wrong kind (a Loop passes checked ones)."""
    if not callable(clock):
        raise TypeError(f"expected clock to be a callable returning seconds, got {clock!r:.80}")
    checked_retry(retry)
    if type(models) is not tuple or not all(type(name) is str for name in models):
        raise TypeError(
            f"expected models to be a tuple of the fallback models' names (str), got {models!r:.80}"
        )
    if output is not None and not isinstance(output, OutputSchema):
        raise TypeError(
            "expected output to be an OutputSchema (a Loop's: loop.output) or None, "
            f"got {output!r:.80}"
        )
