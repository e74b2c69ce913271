"""The replay: a fresh engine fed, event by event, what the run's record says it was given.

Each event a run makes keeps what came from outside to make it: the calls
handed out to run before it (``started``), the model's reply or the tool's
content (``input_json``), the usage, the exception, the reasons a policy
asked with and a person's decisions; a cancel guard says the token was found
set there. ``replay`` hands each of these back, in order, through the
engine's own protocol (``next()`` for what the engine did by itself), and
checks that every event it makes is the one recorded. So nothing is
inferred: a record that is not a run this engine makes, with this budget, is
refused with ``Mismatch`` naming the event.

It serves everything that continues or checks a run from its events:
reading a run file, ``Loop.resume(result)`` and ``Loop.fork(result, at=k)``.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

import orjson

from agentloop._core.approval import Decision, DecisionKey, ask
from agentloop._core.context_policy import FilterHistory, Summarise
from agentloop._core.engine import Engine
from agentloop._core.json import exception_content
from agentloop._core.output_schema import told_problems
from agentloop._core.requests import CheckOutput, uncalled_check
from agentloop._core.retry_policy import checked_retry
from agentloop._core.table import NEXT, Feature, Guard, Trigger
from agentloop._core.values import (
    AskModel,
    CancelToken,
    RecordedException,
    RunTool,
    Transition,
    Wait,
)
from agentloop._errors import InvalidStateError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from agentloop._core.agents import Agents
    from agentloop._core.output_schema import OutputSchema
    from agentloop._core.retry_policy import RetryPolicy
    from agentloop._core.values import Budget

__all__ = [
    "Mismatch",
    "asked",
    "feed",
    "feed_row",
    "go_on",
    "models_named",
    "output_refusals",
    "refusals_standing",
    "replay",
    "row_text",
]

_CANCELS: Final = (Guard.CANCEL_REQUESTED, Guard.CANCEL_REQUESTED_MID_BATCH)
# The reports that answer a model request: the ask that spent the step comes first.
_ASKED: Final = (Trigger.MODEL_REPLIED, Trigger.MODEL_RAISED, Trigger.MODEL_INTERRUPTED)
_INTERRUPTIONS: Final = (
    Trigger.FILTER_INTERRUPTED,
    Trigger.MODEL_INTERRUPTED,
    Trigger.TOOL_INTERRUPTED,
    Trigger.INTERRUPTED,
    Trigger.SUMMARY_INTERRUPTED,
    Trigger.WAIT_INTERRUPTED,
    Trigger.CHECK_INTERRUPTED,
)
# The reports that answer the summariser (a context policy's): its ask spent the step.
_SUMMARISED: Final = (Trigger.SUMMARY_WRITTEN, Trigger.SUMMARY_RAISED, Trigger.SUMMARY_INTERRUPTED)
# The reports that answer a handoff's filter: the engine hands out its request first.
_FILTERED: Final = (Trigger.HANDED_OFF, Trigger.FILTER_RAISED, Trigger.FILTER_INTERRUPTED)
# The reports that answer the output validators: the engine hands out the check first.
_CHECKED: Final = (Trigger.OUTPUT_CHECKED, Trigger.CHECK_INTERRUPTED)
# The reports that end a wait: the engine hands out the wait first.
_WAITED: Final = (Trigger.WAITED, Trigger.WAIT_INTERRUPTED)
_BY_ITSELF: Final = frozenset(NEXT.values())
# The request each of these reports answers, and what a replay that finds another says.
_HANDED: Final[dict[Trigger, tuple[type, str]]] = {
    **dict.fromkeys(_ASKED, (AskModel, "the model asked here")),
    **dict.fromkeys(_SUMMARISED, (Summarise, "the summariser asked here")),
    **dict.fromkeys(_WAITED, (Wait, "a wait before a retry here")),
    **dict.fromkeys(_FILTERED, (FilterHistory, "the handoff's filter asked here")),
    **dict.fromkeys(_CHECKED, (CheckOutput, "the output validators asked here")),
}


class Mismatch(Exception):
    """The record says ``found`` at ``where``; replaying the run gives ``expected``."""

    def __init__(self, where: str, expected: str, found: str) -> None:
        super().__init__(where, expected, found)
        self.where, self.expected, self.found = where, expected, found


def replay(
    messages: list[dict[str, Any]],
    budget: Budget,
    events: Sequence[Transition],
    *,
    rejected: object = None,
    token: CancelToken | None = None,
    engine: Engine | None = None,
    compare: Callable[[Transition, Transition, str], None] | None = None,
    models: tuple[str, ...] | None = None,
    output: OutputSchema | None = None,
    agents: Agents | None = None,
) -> Engine:
    """A fresh engine that has made ``events`` again, from ``messages`` and ``budget``.

    ``rejected`` is the reply that ended the run unrecorded, when it was not
    JSON (a ``NotJSON``). ``token`` (a fresh one by default) is the engine's,
    to go on with. ``engine``, when given, is the fresh engine to feed (a
    durable one records what it is fed); it must watch ``token``.
    ``compare(made, recorded, where)`` checks each event the engine makes (by
    default, equality; a run file compares as its JSON). ``models`` names the
    fallback models (by default, those the events name, in order). A model
    that raised gets back the wait its event recorded: the retry policy is
    not asked again. ``output`` is the run's output schema
    (``Loop(output=T)``), if it had one; ``agents`` its team, if it had
    handoffs. Raises ``Mismatch`` where the engine does something else.
    """
    token = CancelToken() if token is None else token
    if engine is None:
        if models is None:
            models = models_named(events)
        engine = Engine(
            messages, budget=budget, cancel=token, models=models, output=output, agents=agents
        )
    with refusals_standing(engine, output_refusals(events, rejected)):
        _fed(engine, events, rejected, token, budget, compare)
    return engine


@contextmanager
def refusals_standing(engine: Engine, refused: dict[str, list[str]]) -> Iterator[None]:
    """While replaying, the record's refusals of final answers stand, in its own words.

    ``refused`` (final answer to the problems listed) may grow while it stands.
    The output check ``feed`` sets, where the record answers a check, is taken
    back after: the engine goes on with its driver's own, or none.
    """
    run = engine._run  # the replay is the core's own
    typed, check = run.output, run.output_check
    if typed is not None:
        run.output = typed.replaying(refused)
    try:
        yield
    finally:
        run.output, run.output_check = typed, check


def go_on(engine: Engine, *, retry: RetryPolicy | None, models: tuple[str, ...]) -> None:
    """A replayed ``engine`` goes on live: asking ``retry`` for waits, and the ``models``.

    Its replay fed back the waits and the model names its record has (a
    model moved on to and never asked is named by its place); from here on,
    the retry policy chooses each wait and the fallback models are these.
    """
    checked_retry(retry)
    if type(models) is not tuple or not all(type(name) is str for name in models):
        raise TypeError(f"expected models to be a tuple of names (str), got {models!r:.80}")
    run = engine._run  # the core's own: the engine takes its new parts here only
    run.retry, run.models = retry, models
    if retry is not None or len(models) > 1:
        engine._turn_on(Feature.RETRY)


def _fed(
    engine: Engine,
    events: Sequence[Transition],
    rejected: object,
    token: CancelToken,
    budget: Budget,
    compare: Callable[[Transition, Transition, str], None] | None,
) -> None:
    """Feed ``engine`` each event's report; ``Mismatch`` where it makes another event."""
    for index, event in enumerate(events):
        where = f"$.events[{index}]"
        try:
            made = feed(engine, event, rejected, token, where)
        except InvalidStateError:
            raise Mismatch(
                where, f"a report the engine takes in state {engine.state.value!r}", row_text(event)
            ) from None
        if made[:4] != event[:4]:
            raise Mismatch(where, _described(made, budget), row_text(event))
        if compare is not None:
            compare(made, event, where)
        elif made != event:
            if made[:4] == event[:4]:  # the same row: name the first field that differs
                field = next(
                    name
                    for name, mine, theirs in zip(Transition._fields, made, event, strict=True)
                    if mine != theirs and name not in ("at", "took", "exception")
                )
                raise Mismatch(
                    f"{where}.{field}",
                    repr(getattr(made, field))[:200],
                    repr(getattr(event, field))[:200],
                )
            raise Mismatch(where, _described(made, budget), row_text(event))


def feed(
    engine: Engine, event: Transition, rejected: object, token: CancelToken, where: str
) -> Transition:
    """Give the engine what ``event`` says it was given; the transition it makes."""
    for call_id in event.started:
        need = engine.next()
        if type(need) is Transition:
            return need  # the engine moved by itself instead: the caller names the row
        if type(need) is not RunTool or need.call["id"] != call_id:
            raise Mismatch(
                f"{where}.started", f"call {call_id!r} handed out here", repr(need)[:200]
            )
    trigger = event.trigger
    if trigger in _CHECKED and engine.output_check is None:
        engine.output_check = uncalled_check  # the record answers each check: none is called
    handed = _HANDED.get(trigger)
    if handed is not None:  # the request this report answers is handed out first
        need = engine.next()
        if type(need) is Transition:
            return need  # the engine moved by itself (a budget ran out, say)
        request, expected = handed
        if type(need) is not request:
            raise Mismatch(where, expected, row_text(event))
    if event.guard in _CANCELS:
        token.cancel()  # found set here: the token was cancelled before
    if trigger in _BY_ITSELF:
        made = engine.next()
        if type(made) is not Transition:
            raise Mismatch(where, "a transition the engine makes by itself", row_text(event))
        return made
    if trigger in _INTERRUPTIONS:
        exc = _exception(event, where)
        exc.usage = None if event.usage is None else event.usage._asdict()  # cut children's
        interrupted = engine.interrupted(exc, partial_text=event.partial_text)
        assert interrupted is not None, "a run that is not over is interrupted"
        return interrupted
    if trigger is Trigger.HANDED_OFF:  # the view the filter answered, not asked again
        return engine.replied(None if event.input_json is None else orjson.loads(event.input_json))
    if trigger is Trigger.MODEL_REPLIED or trigger is Trigger.SUMMARY_WRITTEN:
        reply: object = rejected if event.input_json is None else orjson.loads(event.input_json)
        if event.usage is not None and type(reply) is dict:
            reply = {**reply, "usage": event.usage._asdict()}  # what the reply reported
        return engine.replied(reply)
    if trigger in (Trigger.MODEL_RAISED, Trigger.SUMMARY_RAISED, Trigger.FILTER_RAISED):
        exc = _exception(event, where)
        exc.usage = None if event.usage is None else event.usage._asdict()
        return engine.raised(exc, wait=event.wait)
    if trigger is Trigger.WAITED:
        return engine.waited()
    if trigger is Trigger.TOOL_RETURNED:
        if event.call_id not in engine.running:
            raise Mismatch(where, "a call of the batch that is running", row_text(event))
        content = None if event.input_json is None else orjson.loads(event.input_json)
        outcome: dict[str, Any] = {"status": event.result_status, "content": content}
        if event.exception is not None:
            outcome["exception"] = event.exception
        if event.usage is not None:  # an agent tool's: its child run's tokens
            outcome["usage"] = event.usage._asdict()
        return engine.returned(outcome, event.call_id)
    try:
        if trigger is Trigger.CALL_WAITS:  # the child's pending calls, as its run listed them
            call_id = event.call_id or ""
            under = (call_id,)
            own = tuple(p._replace(path=p.path[1:]) for p in event.pending if p.path[:1] == under)
            return engine.call_waits(own, call_id)
        if trigger is Trigger.OUTPUT_CHECKED:  # what the validators answered, not asked again
            return engine.output_checked(orjson.loads(event.input_json or b"null"))
        if trigger is Trigger.APPROVAL_ASKED:
            return asked(engine, event)
        return engine.decided(dict[DecisionKey, Decision](event.decisions))
    except (TypeError, ValueError) as refused:
        raise Mismatch(where, "a report the engine takes", str(refused)) from None


def feed_row(
    engine: Engine,
    event: Transition,
    rejected: object,
    token: CancelToken,
    where: str,
    named: Callable[[], str],
) -> Transition:
    """``feed``, where the record gives only each event's row: the engine must make that row.

    ``named()`` is the row as the record writes it, for the ``Mismatch`` that says otherwise.
    """
    try:
        made = feed(engine, event, rejected, token, where)
    except InvalidStateError:
        expected = f"a report the engine takes in state {engine.state.value!r}"
        raise Mismatch(where, expected, named()) from None
    if made.trigger is not event.trigger or made.guard is not event.guard:
        raise Mismatch(where, f"{row_text(made)}, which the table takes here", named())
    return made


def output_refusals(events: Sequence[Transition], rejected: object) -> dict[str, list[str]]:
    """Each final answer the record refused, with the problems the record lists.

    What ``OutputSchema.replaying`` takes: a record keeps the output's schema,
    not its type, and its words are the check's of the day it was made. A
    retry's are read from what the model was told, one a line; an end's
    ``error`` is all the record says of them.
    """
    refused: dict[str, list[str]] = {}
    reply: object = None
    for event in events:
        if event.trigger is Trigger.MODEL_REPLIED:
            reply = rejected if event.input_json is None else orjson.loads(event.input_json)
        elif event.trigger is Trigger.OUTPUT_CHECKED:
            reply = None  # the validators refused it, not the schema: their event says so
        elif event.guard in _OUTPUT_REFUSED and event.error and type(reply) is dict:
            # After "invalid output: " or "...(after N output retries): ".
            mark = ": " if event.guard is Guard.OUTPUT_RETRY else "): "
            listed = event.error.partition(mark)[2]
            problems = None
            if event.guard is Guard.OUTPUT_RETRY and len(event.appended_json) == 2:
                message = orjson.loads(event.appended_json[1])
                problems = told_problems(str(message.get("text")), listed)
            text = str(reply.get("text"))
            if problems is not None:
                refused[text] = problems  # exact: one a line, as the model was told
            elif "; ".join(refused.get(text, ())) != listed:  # not what an earlier retry listed
                refused[text] = [listed]
    return refused


_OUTPUT_REFUSED: Final = (Guard.OUTPUT_RETRY, Guard.OUTPUT_INVALID)


def asked(engine: Engine, event: Transition) -> Transition:
    """Feed the review an ``approval_asked`` event records: its asks, and its denials.

    The review's other answers were not recorded (they moved nothing): the
    dispatcher asks those calls' policies again when they run.
    """
    answers: dict[str, object] = {key: d for key, d in event.decisions if type(key) is str}
    answers.update({call.call_id: ask(call.reason) for call in event.pending})
    made = engine.reviewed(answers)
    if made is None:
        raise ValueError("the recorded review asked nobody")
    return made


def models_named(events: Sequence[Transition]) -> tuple[str, ...]:
    """The fallback models the events name, in the order they were asked.

    A run moves on to the next model only, so each first appears after the one
    before; a model moved on to and never asked (the run ended first) is named
    by its place, as no event can need its name.
    """
    named = tuple(dict.fromkeys(e.model for e in events if e.model is not None))
    moved = sum(e.guard is Guard.FALLBACK_LEFT for e in events)
    if not moved:
        return named
    return named + tuple(f"#{index + 1}" for index in range(len(named), moved + 1))


def _exception(event: Transition, where: str) -> RecordedException:
    """The exception the event records, as a record (never a user's live object)."""
    exc = event.exception
    if exc is None:
        raise Mismatch(f"{where}.exception", "the exception raised here", "null")
    if isinstance(exc, RecordedException):
        return RecordedException(exc.type_name, exc.message)  # its own: usage is set on it
    return RecordedException.from_content(exception_content(exc))


def _described(made: Transition, budget: Budget) -> str:
    """The row the engine took, and where the budgets stood."""
    return (
        f"{row_text(made)}, which the table takes here (at steps {made.steps} of "
        f"{budget.max_steps}, calls {made.calls} of {budget.max_calls})"
    )


def row_text(event: Transition) -> str:
    """``source --trigger [guard]--> dest``: the row an event took, for messages."""
    guard = f" [{event.guard.value}]" if event.guard else ""
    return f"{event.source.value} --{event.trigger.value}{guard}--> {event.dest.value}"
