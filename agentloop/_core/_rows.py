"""The run's state, and the guards and effects the table's rows name, as its methods.

Each guard reads the state (and the report in hand, in the ``_Draft``) and
answers a bool; each effect changes the state or fills in the ``_Draft`` of
the transition being made. Nothing here chooses a row or commits one: that is
``Engine._choose`` and ``Engine._record``, which call these by name, so a
subclass or a patched method is what runs.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import orjson

from agentloop._core._approval import call_fingerprint
from agentloop._core._batch import Batch
from agentloop._core._context import OVERFLOW, ContextPolicy, Summarise
from agentloop._core._intake import NO_REPLY, Outcome
from agentloop._core._json import exception_content
from agentloop._core._messages import CUT_OFF, History, input_messages
from agentloop._core._table import ANSWERS, Guard, State, Trigger
from agentloop._core._values import (
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
from agentloop._core._window import Plan, Summary, Window

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop._core._approval import Decision, PendingCall
    from agentloop._core._context import Seen
    from agentloop._core._intake import Reply
    from agentloop._core._output import OutputSchema
    from agentloop._core._retry import RetryPolicy

__all__ = ["RunState"]

_DEFAULT_BUDGET: Final = Budget()
_CUT_OFF: Final = orjson.dumps(CUT_OFF)
_NO_IDS: Final[frozenset[str]] = frozenset()
_NO_USAGE: Final = Usage()
_ASK_MODEL, _START_TOOL = Trigger.ASK_MODEL, Trigger.START_TOOL
_SUMMARISE: Final = Trigger.SUMMARISE
_BACK_OFF: Final = Trigger.BACK_OFF


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


class RunState:
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
        "_outstanding",
        "_plan",
        "_policy",
        "_rejected",
        "_reply",
        "_reserved",
        "_retry",
        "_reviews",
        "_seen",
        "_since",
        "_spent",
        "_state",
        "_summary",
        "_tokens",
        "_view",
        "_wrapping",
        "calls",
        "output_retries",
        "parent_run_id",
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
        self.parent_run_id: str | None = None
        #: The schema a final answer must match (``Loop(output=T)``), if any.
        self._output = output
        #: Invalid final answers sent back to the model so far.
        self.output_retries = 0
        #: The budget that ran out, once the run wraps up (``on_exhausted='answer'``).
        self._wrapping: str | None = None
        self._calls_seen: _CallIndex | None = None  # the loop guard's, made when first asked

    def __repr__(self) -> str:
        return f"<Engine state={self._state.value!r} steps={self.steps} calls={self.calls}>"

    def set_resilience(self, retry: RetryPolicy | None, models: tuple[str, ...]) -> None:
        """Retry failed model calls by ``retry``, and fall back through ``models`` (names).

        What ``Loop(retry=..., model=fallback(...))`` sets on each engine of its
        runs, a resumed one too (its replay took the recorded waits instead).
        """
        self._retry, self._models = retry, models

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

    def _retry_planned(self) -> bool:
        return self._draft.wait_in is not None

    def _fallback_left(self) -> bool:
        return self.model_index + 1 < len(self._models)

    def _denials_answer_batch(self) -> bool:
        batch = self._batch
        assert batch is not None, "a person decides about a batch"
        denied = {call_id for call_id, d in self._draft.decisions_in if not d.allowed}
        return all(
            index in batch.results or call_id in denied
            for index, (call_id, _) in enumerate(batch.calls)
        )

    def _batch_unreviewed(self) -> bool:
        batch = self._batch
        return self._reviews and batch is not None and batch.review is None and not batch.handed

    def _nobody_asked(self) -> bool:
        return not self._draft.asked

    # -- guards of typed output, the wrap-up step and the loop guard ----------------

    def _output_retry(self) -> bool:
        return (
            self._wrapping is None
            and self.output_retries < self._budget.max_output_retries
            and bool(self._final_problems())
        )

    def _output_invalid(self) -> bool:
        return bool(self._final_problems())

    def _wrap_up_due(self) -> bool:
        return self._budget.on_exhausted == "answer" and (
            self._steps_exhausted() or self._tokens_exhausted()
        )

    def _wrapping_up(self) -> bool:
        return self._wrapping is not None

    def _wrap_up_answered(self) -> bool:
        return self._wrapping is not None and self._reply.final

    def _calls_exhausted_wrap_up(self) -> bool:
        return self._budget.on_exhausted == "answer" and self._calls_exhausted()

    def _identical_call_persists(self) -> bool:
        return self._identical_found().persists is not None

    def _identical_calls_only(self) -> bool:
        over = self._identical_found().over
        return bool(over) and len(over) == len(self._reply.calls)

    def _identical_calls_some(self) -> bool:
        return bool(self._identical_found().over)

    def _call_index(self) -> _CallIndex:
        """The loop guard's index of the calls so far, brought up to date."""
        index = self._calls_seen
        if index is None:
            index = self._calls_seen = _CallIndex(self._input)
        index.update(self._events)
        return index

    def _final_problems(self) -> list[str]:
        """What the output schema finds wrong with the final in hand (asked once a transition)."""
        draft = self._draft
        if draft.output_problems is None:
            reply, output = self._reply, self._output
            draft.output_problems = (
                output.problems(reply.value["text"]) if output is not None and reply.final else []
            )
        return draft.output_problems

    def _identical_found(self) -> _Identical:
        """The loop guard's look at the batch in hand (once a transition; nothing when off)."""
        draft = self._draft
        if draft.identical is None:
            limit = self._budget.max_identical_calls
            calls = self._reply.calls
            draft.identical = (
                _NOTHING_IDENTICAL
                if limit is None or not calls
                else self._call_index().check(self._reply.value, limit)
            )
        return draft.identical

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

    def _hold_calls(self) -> None:
        assert self._batch is not None, "a batch waits"
        self._batch.pending = self._draft.pending = self._draft.asked

    def _keep_decisions(self) -> None:
        batch, draft = self._batch, self._draft
        assert batch is not None, "a person decides about a batch"
        decisions = draft.decisions_in
        # A denied call is answered here, by the engine: no driver is handed it to run.
        # Every denial is encoded before anything is kept, so none is kept half-way.
        place = {call_id: index for index, (call_id, _) in enumerate(batch.calls)}
        denials = {
            place[call_id]: orjson.dumps(decision.reason)
            for call_id, decision in decisions
            if not decision.allowed
        }
        draft.decisions = decisions
        batch.decided.update(decisions)
        for index, reason in denials.items():
            batch.answer(index, "denied", reason)
            if draft.call is not None and batch.calls[index] == draft.call:
                draft.status = "denied"

    def _ask_for_review(self) -> None:
        assert self._batch is not None, "a batch is reviewed"
        self._draft.request = ReviewCalls(self._batch.to_review())

    def _keep_review(self) -> None:
        assert self._batch is not None, "a batch is reviewed"
        # Fed by a replay (no reviewing driver), only the asks were recorded: none is kept,
        # so the driver that goes on reviews the calls no person decided again.
        self._batch.review = self._draft.review if self._reviews else None

    def _ask_for_decisions(self) -> None:
        assert self._batch is not None, "a batch waits"
        self._draft.request = AwaitApproval(self._batch.pending)

    def _plan_wait(self) -> None:
        self._draft.wait = self._draft.wait_in

    def _ask_for_wait(self) -> None:
        last = self._events[-1]
        assert last.wait is not None, "backing_off is entered by a row that plans the wait"
        self._outstanding = _BACK_OFF
        self._since[None] = self._clock()
        self._draft.request = Wait(last.wait, None if self._retry is None else self._retry.sleep)

    def _next_model(self) -> None:
        pass  # model_index counts the rows that took it: nothing to keep but the event

    # -- what the retry rows read, derived from the log (so nothing needs settling) --

    @property
    def model_index(self) -> int:
        """Which fallback model is asked now: the rows that moved on to the next, counted."""
        return sum(event.guard is Guard.FALLBACK_LEFT for event in self._events)

    def retries(self) -> int:
        """The retries of the ask in hand made so far.

        The ``retry_planned`` rows since the model last replied or a fallback model took over.
        """
        count = 0
        for event in reversed(self._events):
            if event.guard is Guard.RETRY_PLANNED:
                count += 1
            elif event.trigger is not Trigger.WAITED:
                break
        return count

    def planned_wait(self, exc: BaseException) -> float | None:
        """The wait the retry policy chooses after the model raised ``exc`` (None: no retry)."""
        policy = self._retry
        return None if policy is None else policy.wait_for(exc, self.retries())

    def _model_name(self) -> str | None:
        models = self._models
        return models[self.model_index] if models else None

    def _append_output_errors(self) -> None:
        problems = self._final_problems()
        listed = "\n".join(f"- {problem}" for problem in problems)
        told = {
            "kind": "user",
            "text": "Your final answer does not match the output schema:\n"
            f"{listed}\nReply again with a final answer whose text is only JSON that "
            "matches the schema.",
        }
        self._draft.appended = (self._reply.json, orjson.dumps(told))
        self._draft.error = "invalid output: " + "; ".join(problems)
        self.output_retries += 1

    def _note_invalid_output(self) -> None:
        problems = self._final_problems()
        retries = self.output_retries
        self._draft.error = (
            f"the final answer does not match the output schema (after {retries} output "
            f"retr{'y' if retries == 1 else 'ies'}): " + "; ".join(problems)
        )

    def _begin_wrap_up(self) -> None:
        draft = self._draft
        if draft.reason is None:
            draft.reason = "max_steps" if self._steps_exhausted() else "max_total_tokens"
        self._wrapping = draft.reason
        told = {
            "kind": "user",
            "text": f"The run's budget ran out ({draft.reason}): tools are disabled. "
            "Give your final answer now, from what you have.",
        }
        draft.appended = (orjson.dumps(told),)

    def _ask_for_answer(self) -> None:
        self._ask_for_reply()
        request = self._draft.request
        assert type(request) is AskModel, "a model request was made"
        request.tools_disabled = True

    def _note_wrap_up(self) -> None:
        self._draft.reason = self._wrapping

    def _refuse_identical(self) -> None:
        batch, found = self._batch, self._identical_found()
        assert batch is not None, "a batch was accepted"
        limit = self._budget.max_identical_calls
        for index, earlier in found.over:
            name = batch.calls[index][1]
            content = {
                "type": "IdenticalCall",
                "message": f"not run: {name} was already called with these same arguments "
                f"{limit} time{'s' if limit != 1 else ''} in this conversation "
                f"(max_identical_calls={limit}); the result is in the tool_result of call "
                f"{earlier!r} above. Use it, or call with other arguments.",
            }
            batch.answer(index, "error", orjson.dumps(content))
            if self._draft.call is not None and batch.calls[index] == self._draft.call:
                self._draft.status = "error"

    def _note_identical_calls(self) -> None:
        persists = self._identical_found().persists
        assert persists is not None, "a call repeats one the loop guard refused"
        call_id, name, earlier = persists
        self._draft.named = (call_id, name)
        self._draft.reason = "max_identical_calls"
        self._draft.error = (
            f"call {call_id!r} repeats {name} with the same arguments after the loop guard "
            f"refused it (call {earlier!r}, max_identical_calls="
            f"{self._budget.max_identical_calls}); nothing of the batch was run"
        )

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
        self.output_retries = sum(event.guard is Guard.OUTPUT_RETRY for event in events)
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

    # -- the context policy (agentloop.context): guards, effects and their state ------

    def _init_context(self, policy: ContextPolicy | None, encoded: list[bytes]) -> None:
        self._policy = policy
        #: The messages as the policy reads them (None: no policy), and the events read in.
        self._context: tuple[Window, list[int]] | None = (
            None if policy is None else (Window(policy.counter, encoded), [0])
        )
        self._summary: Summary | None = None  # the summary in force
        self._plan: tuple[int, Summary | None, Plan | str] | None = None  # for this request
        self._seen: Seen | None = None  # what the request outstanding was sent
        self._view: bytearray | None = None  # the request's messages, when not the history

    def _context_plan(self) -> Plan | str:
        """The view for the request about to be made (found once a request), or why none fits."""
        policy, context = self._policy, self._context
        assert policy is not None, "a context policy is set"
        assert context is not None, "a policy has its window"
        window, read = context
        events = self._events
        for event in events[read[0] :]:
            for data in event.appended_json:
                window.add(data)
        read[0] = len(events)
        cached, summary = self._plan, self._summary
        if cached is not None and cached[0] == len(window.messages) and cached[1] is summary:
            return cached[2]
        plan = window.plan(
            policy.tokens,
            summary,
            policy.summariser is not None,
            policy.keep_tokens,
            self._history.request()[0],
        )
        self._plan = (len(window.messages), summary, plan)
        return plan

    def _rebuild_context(self) -> None:
        """The window and the summary in force again, from the input and the events."""
        policy, seen = self._policy, self._seen
        assert policy is not None, "a context policy is set"
        self._init_context(policy, list(self._input))
        self._seen = seen  # what a request still outstanding was sent
        window, read = self._context  # type: ignore[misc]  # just made
        for event in self._events:
            if event.trigger is Trigger.SUMMARY_WRITTEN and event.dest is State.AWAITING_MODEL:
                # The plan as it was when this summary was asked for.
                plan = window.plan(policy.tokens, self._summary, True, policy.keep_tokens)
                assert not isinstance(plan, str), "a summary was asked for a plan"
                assert event.input_json is not None, "a summary is a final answer"
                self._summary = window.summary(plan.fold, orjson.loads(event.input_json)["text"])
            for data in event.appended_json:
                window.add(data)
        read[0] = len(self._events)

    def _context_overflows(self) -> bool:
        return self._policy is not None and isinstance(self._context_plan(), str)

    def _summary_due(self) -> bool:
        if self._policy is None or self._policy.summariser is None:
            return False
        plan = self._context_plan()
        return not isinstance(plan, str) and plan.fold > plan.folded

    def _summary_malformed(self) -> bool:
        reply = self._draft.summary_in
        return reply is None or reply.problem is not None or not reply.final

    def _fit_context(self) -> None:
        if self._policy is None:
            return
        plan = self._context_plan()
        # Checked first by context_overflows; the wrap-up step's newest turn is its own short
        # request, which fits wherever the head did.
        assert not isinstance(plan, str), "context_overflows was checked first"
        self._seen = plan.seen
        self._view = None if plan.view is None else bytearray(plan.view)

    def _note_context_overflow(self) -> None:
        plan = self._context_plan()
        assert isinstance(plan, str), "context_overflows said so"
        self._draft.reason, self._draft.error = OVERFLOW, plan

    def _ask_for_summary(self) -> None:
        policy, context = self._policy, self._context
        assert policy is not None, "a context policy is set"
        assert policy.summariser is not None, "summary_due holds only under summarise"
        assert context is not None, "a policy has its window"
        plan = self._context_plan()
        assert not isinstance(plan, str), "summary_due was checked first"
        request, self._seen = context[0].fold_request(plan.folded, plan.fold, self._summary)
        self._outstanding = _SUMMARISE
        self._since[None] = self._clock()
        self._draft.request = Summarise(policy.summariser, request)

    def _keep_summary(self) -> None:
        context, reply = self._context, self._draft.summary_in
        assert context is not None, "a policy has its window"
        assert reply is not None, "a summary was written"
        plan = self._context_plan()
        assert not isinstance(plan, str), "a summary was asked for a plan"
        self._summary = context[0].summary(plan.fold, reply.value["text"])

    def _note_summary_error(self) -> None:
        draft = self._draft
        assert draft.exception is not None, "the summariser raised"
        content = exception_content(draft.exception)
        said = f"{content['type']}: {content['message']}" if content["message"] else content["type"]
        draft.error = f"the summariser raised {said}"

    def _note_malformed_summary(self) -> None:
        reply = self._draft.summary_in
        assert reply is not None, "the summariser replied"
        problem = reply.problem or f"expected a final answer, got a {reply.value['kind']!r} reply"
        self._draft.error = f"malformed summary: {problem}"
        self._rejected = reply.value  # kept for review (and a replay), as a rejected reply is


_WRAP_UP_BEGUN: Final = (Guard.WRAP_UP_DUE, Guard.CALLS_EXHAUSTED_WRAP_UP)


class _Identical(NamedTuple):
    """What the loop guard found in a batch: the calls beyond the limit, and a persisting one."""

    #: ``(index, id of the earlier identical call)`` of each call beyond the limit.
    over: tuple[tuple[int, str], ...] = ()
    #: ``(call id, tool, id of the refused call)`` of a call the guard refused before.
    persists: tuple[str, str, str] | None = None


_NOTHING_IDENTICAL: Final = _Identical()


class _CallIndex:
    """The loop guard's index of the conversation's calls, read from the record as it grows.

    A call is identical to another when its fingerprint (tool name and
    canonical arguments, as approval binds them) is the same. The record is
    the source: the input's messages, then each event's appended ones, read
    once each; a refused call is one whose result the guard wrote (an
    ``IdenticalCall`` error). ``_settle`` drops the index, which is read again.
    """

    __slots__ = ("events", "made", "refused", "seen")

    def __init__(self, input_json: tuple[bytes, ...]) -> None:
        self.seen: dict[str, list[str]] = {}  # fingerprint -> ids of its calls, in order
        self.refused: dict[str, str] = {}  # fingerprint -> id of a call the guard refused
        self.made: dict[str, str] = {}  # call id -> fingerprint
        self.events = 0  # events read so far
        self._read(input_json)

    def update(self, events: list[Transition]) -> None:
        """Read the messages of the events not read yet."""
        for event in events[self.events :]:
            self._read(event.appended_json)
        self.events = len(events)

    def _read(self, messages: tuple[bytes, ...]) -> None:
        for data in messages:
            message = orjson.loads(data)
            kind = message.get("kind")
            if kind == "call" or kind == "calls":
                for call in [message] if kind == "call" else message.get("calls") or ():
                    call_id = str(call.get("id"))
                    fingerprint = call_fingerprint(str(call.get("name")), call.get("arguments"))
                    self.made[call_id] = fingerprint
                    self.seen.setdefault(fingerprint, []).append(call_id)
            elif kind == "tool_result" and message.get("status") == "error":
                content = message.get("content")
                if type(content) is dict and content.get("type") == "IdenticalCall":
                    found = self.made.get(str(message.get("id")))
                    if found is not None:
                        self.refused.setdefault(found, str(message.get("id")))

    def check(self, reply: dict[str, Any], limit: int) -> _Identical:
        """Each call of ``reply`` against the calls before it (the batch's earlier ones too)."""
        over: list[tuple[int, str]] = []
        added: dict[str, list[str]] = {}  # this batch's accepted calls, by fingerprint
        calls = [reply] if reply["kind"] == "call" else reply["calls"]
        for index, call in enumerate(calls):
            fingerprint = call_fingerprint(call["name"], call["arguments"])
            if fingerprint in self.refused:
                return _Identical(persists=(call["id"], call["name"], self.refused[fingerprint]))
            earlier = self.seen.get(fingerprint, [])
            mine = added.setdefault(fingerprint, [])
            if len(earlier) + len(mine) >= limit:
                over.append((index, (mine or earlier)[-1]))
            else:
                mine.append(call["id"])
        return _Identical(over=tuple(over))


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
