"""Reading the events of older run files, which do not say what each was given.

Before run file version 5 (and in a version 1 ledger's records) an event did
not keep the calls handed out before it nor what came with its report. This
replay infers them from what the events appended (each reply, what the model
raised, each tool's outcome, where cancellation came and where the run was
interrupted) and feeds them to a fresh engine, whose events, which keep them,
must come out as the document says. Everything newer is read by the one
replay, ``_core/replay.py``, which infers nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from agentloop._core.engine import Engine
from agentloop._core.json import exception_content
from agentloop._core.messages import NOT_STARTED
from agentloop._core.replay import Mismatch, asked, row_text
from agentloop._core.table import NEXT, Guard, State, Trigger
from agentloop._core.values import AskModel, CancelToken, RecordedException, RunTool, Transition
from agentloop._errors import InvalidStateError
from agentloop._review.answers import Answers
from agentloop._review.runshape import output_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop._core.values import RunResult

__all__ = ["Mismatch", "replay", "row_text", "start_calls"]

_INTERRUPTIONS = (Trigger.MODEL_INTERRUPTED, Trigger.TOOL_INTERRUPTED, Trigger.INTERRUPTED)
_CANCELS = (Guard.CANCEL_REQUESTED, Guard.CANCEL_REQUESTED_MID_BATCH)
# The triggers the engine fires itself; a cancel on any other row came while the model worked.
_CHECKPOINTS = frozenset(NEXT.values())


def replay(
    result: RunResult,
    input_count: int,
    compare: Callable[[Transition, Transition, str], None],
    token: CancelToken | None = None,
) -> Engine:
    """Drive a fresh engine with ``result``'s inputs; ``compare`` each event it makes.

    ``input_count`` messages of the transcript are the input. Raises
    ``Mismatch`` where the engine takes another row than the document says.
    A run that waits for a person ends the replay in ``awaiting_approval``;
    ``token`` (a fresh one by default) is the engine's, to go on with.
    """
    transcript = orjson.loads(result.transcript_json)
    token = CancelToken() if token is None else token
    engine = Engine(
        transcript[:input_count], budget=result.budget, cancel=token, output=output_of(result)
    )
    events = result.events
    answers = Answers(events)
    # The last reply, when no event appended it: rejected, or held for a person.
    unrecorded = result.rejected_value if result.held_json is None else result.held
    index = 0
    while not engine.done:
        if index >= len(events):
            if engine.state is State.AWAITING_APPROVAL:
                break  # a paused run: its record ends here
            raise Mismatch(
                f"$.events[{index}]", "another event (the run is not over here)", "the end"
            )
        event = events[index]
        where = f"$.events[{index}]"
        try:
            if engine.state is State.DISPATCHING:
                start_calls(engine, event, where)
            if event.guard in _CANCELS and event.trigger in _CHECKPOINTS:
                token.cancel()  # cancellation came before this checkpoint the engine fires
            made = _step(engine, event, events, answers, index, unrecorded, token)
        except InvalidStateError:
            raise Mismatch(
                where,
                f"a report the engine can take in state {engine.state.value!r}",
                row_text(event),
            ) from None
        if made[:4] != event[:4]:  # source, dest, trigger, guard: another row
            raise Mismatch(
                where,
                f"{row_text(made)}, which the table takes here (at steps {made.steps} of "
                f"{result.budget.max_steps}, calls {made.calls} of {result.budget.max_calls})",
                row_text(event),
            )
        compare(made, event, where)
        index += 1
    if index != len(events):
        raise Mismatch(f"$.events[{index}]", "no more events (the run is over)", "more")
    return engine


def _step(
    engine: Engine,
    event: Transition,
    events: tuple[Transition, ...],
    answers: Answers,
    index: int,
    rejected: object,
    token: CancelToken,
) -> Transition:
    """One step of the run, fed what the document says came from outside."""
    if event.trigger is Trigger.INTERRUPTED:  # between checkpoints: nothing was asked
        return _interrupt(engine, event, index)
    try:
        if event.trigger is Trigger.APPROVAL_ASKED:
            return asked(engine, event)
        if event.trigger is Trigger.APPROVAL_DECIDED:
            return engine.decided(dict(event.decisions))
    except (TypeError, ValueError) as refused:
        raise Mismatch(f"$.events[{index}]", "a report the engine takes", str(refused)) from None
    if engine.state is State.DISPATCHING:  # the calls it needs were started already
        if event.trigger is Trigger.TOOL_RETURNED:
            return engine.returned(_outcome(event, answers, index), event.call_id)
        if event.trigger is Trigger.TOOL_INTERRUPTED:
            return _interrupt(engine, event, index)
    need = engine.next()
    if type(need) is Transition:
        return need
    if event.trigger in _INTERRUPTIONS:
        return _interrupt(engine, event, index)
    if type(need) is AskModel:
        if event.guard in _CANCELS:
            token.cancel()  # cancelled while the model worked: seen right after it answered
        if event.trigger is Trigger.MODEL_REPLIED:
            reply = _reply(events, index, rejected)
            if event.usage is not None and type(reply) is dict:
                reply = {**reply, "usage": event.usage._asdict()}  # what the reply reported
            return engine.replied(reply)
        exc = _exception(event, index)
        if event.usage is not None:
            exc.usage = event.usage._asdict()  # what the failed call still cost
        return engine.raised(exc)
    return engine.returned(_outcome(event, answers, index))


def start_calls(engine: Engine, event: Transition, where: str) -> None:
    """Hand out the calls that were running when ``event`` happened, in emission order.

    Starting is no event: which calls had started shows in what the event
    reports (the call that returned) or answers (a call cut off while it ran
    gets ``cancelled`` with content other than ``NOT_STARTED``).
    """
    needed = {event.call_id} if event.trigger is Trigger.TOOL_RETURNED else set()
    for data in event.appended_json[1:]:
        message = orjson.loads(data)
        if message.get("status") == "cancelled" and message.get("content") != NOT_STARTED:
            needed.add(message.get("id"))
    # A needed call is running or still to start: none was answered before (a call is
    # reported once, and one cut off was running when the cut came).
    while not needed <= set(engine.running):
        if not engine.unstarted:
            raise Mismatch(where, "a call of the batch that is running", row_text(event))
        if type(engine.next()) is not RunTool:
            raise Mismatch(where, "a call the engine starts here", row_text(event))


def _interrupt(engine: Engine, event: Transition, index: int) -> Transition:
    made = engine.interrupted(_exception(event, index), partial_text=event.partial_text)
    assert made is not None, "replay() steps only a run that is not over"
    return made


def _reply(events: tuple[Transition, ...], index: int, rejected: object) -> object:
    """The reply a ``model_replied`` event received: what it appended, else what was rejected."""
    # By position, never itertools.islice: it walks from event 0 to get to ``index``.
    for at in range(index + 1, len(events)):
        later = events[at]
        if later.appended_json:
            return orjson.loads(later.appended_json[0])
        if later.source is State.AWAITING_MODEL:
            break
    return rejected


def _exception(event: Transition, index: int) -> RecordedException:
    exc = event.exception
    if exc is None:
        raise Mismatch(f"$.events[{index}].exception", "the exception raised here", "null")
    if not isinstance(exc, RecordedException):
        # A result never saved holds the live exception: the engine gets its record, as
        # replay from a run file would give it, and never the user's object.
        return RecordedException.from_content(exception_content(exc))
    return exc


def _outcome(event: Transition, answers: Answers, index: int) -> dict[str, Any]:
    """The dispatcher's outcome, from the call's tool_result."""
    message = answers(index) or {}
    outcome: dict[str, Any] = {"status": message.get("status"), "content": message.get("content")}
    if event.exception is not None:
        outcome["exception"] = event.exception
    return outcome
