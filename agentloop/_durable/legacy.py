"""Version 1 ledgers (the first release's): their records, fed to a fresh engine as then.

A version 1 run recorded the reports, not the events: each reply by step,
each call's outcome by call id, a person's asks and decisions, and its end.
This reader feeds them to the engine as that release did, letting the engine
make the events, and stops where they stop; a run that went on in a later
agentloop goes on in version 2 records after them (``records.py``).

A batch's finished calls are all reported, in the order they were recorded
(the order the run reported them), before anything goes live: calls are
handed out in emission order, so a call that finished while an earlier one
still ran needs that one handed out first, unfinished. The driver is given
those first (``DurableEngine.handed``). A run that ended is replayed to its
recorded ``end``, and the transition the engine makes there must be the one
recorded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import orjson

from agentloop._core.approval import Decision, approve, ask
from agentloop._core.engine import Engine
from agentloop._core.json import exception_content
from agentloop._core.replay import Mismatch, row_text
from agentloop._core.table import Guard, State, Trigger
from agentloop._core.values import AskModel, RecordedException, RunTool, Transition, Usage
from agentloop._durable.bodies import recorded_answer, recorded_outcome
from agentloop._durable.protocol import ASKED, DECISION, END, FINISHED, REPLY, STARTED
from agentloop._errors import InvalidStateError, LedgerError
from agentloop._review.legacy_events import start_calls

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop._core.values import CancelToken
    from agentloop._durable.protocol import LedgerRecord
    from agentloop._durable.recording import DurableEngine

__all__ = ["Legacy", "diverged", "end_body", "replay_legacy"]

_CANCELS: Final = (Guard.CANCEL_REQUESTED, Guard.CANCEL_REQUESTED_MID_BATCH)
_APPROVED: Final = approve()
_INTERRUPTIONS: Final = (Trigger.MODEL_INTERRUPTED, Trigger.TOOL_INTERRUPTED, Trigger.INTERRUPTED)
_WHILE_THE_MODEL_WORKED: Final = (Trigger.MODEL_REPLIED, Trigger.MODEL_RAISED)


# -- reading the records ----------------------------------------------------------------


class Legacy:
    """A version 1 run's records, checked and decoded; ``LedgerError`` on anything else."""

    def __init__(self, run_id: str, records: list[LedgerRecord]) -> None:
        self.run_id = run_id
        self.replies: dict[int, tuple[str, Any]] = {}
        self.started: set[str] = set()
        self.finished: dict[str, dict[str, Any]] = {}
        self.order: dict[str, int] = {}  # each finished call's place among the records
        # Each ask, in record order: {call id: why a policy asked a person}. A batch may
        # have more than one (after a restart, policies ask about the calls not decided).
        self.asked: list[dict[str, str]] = []
        self.decisions: dict[str, Decision] = {}
        self.end: tuple[int, Transition] | None = None
        for index, record in enumerate(records):
            where = f"record {index} ({record.kind} {record.key!r})"
            if self.end is not None:
                raise LedgerError(f"run {run_id!r}: {where} comes after the run's end")
            body = self._json(record.body, where)
            if type(body) is not dict:
                raise self._bad(where, "an object", body)
            if record.kind == REPLY:
                self._reply(record.key, body, where)
            elif record.kind == STARTED:
                self.started.add(record.key)
            elif record.kind == FINISHED:
                self._finished(record.key, body, where)
                self.order[record.key] = index
            elif record.kind == ASKED:
                reasons = body.get("reasons")
                if (
                    body.keys() != {"reasons"}
                    or type(reasons) is not dict
                    or not reasons
                    or not all(type(reason) is str for reason in reasons.values())
                ):
                    raise self._bad(where, "{'reasons': {call id: str}}, one reason or more", body)
                self.asked.append(reasons)
            elif record.kind == DECISION:
                decisions = body.get("decisions")
                if body.keys() != {"decisions"} or type(decisions) is not dict:
                    raise self._bad(where, "{'decisions': {call id: decision}}", body)
                for call_id, decision in decisions.items():
                    self.decisions[call_id] = self._decision(decision, where)
            elif record.kind == END:
                self.end = self._end(body, where)
            else:
                raise LedgerError(
                    f"run {run_id!r}: {where}: unknown record kind {record.kind!r} "
                    "(written by a newer agentloop?)"
                )

    def _json(self, data: bytes, where: str) -> Any:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise LedgerError(f"run {self.run_id!r}: {where} is not JSON: {exc}") from None

    def _bad(self, where: str, expected: str, found: object) -> LedgerError:
        return LedgerError(f"run {self.run_id!r}: {where}: expected {expected}, got {found!r:.80}")

    def _reply(self, key: str, body: dict[str, Any], where: str) -> None:
        if not (key.isascii() and key.isdigit()) or key != str(int(key)) or int(key) < 1:
            raise self._bad(where, "a step number as its key", key)
        answer = recorded_answer(body)
        if answer is None:
            raise self._bad(where, "one of 'reply', 'not_json', 'raised'", body)
        self.replies[int(key)] = answer

    def _decision(self, body: object, where: str) -> Decision:
        try:
            if type(body) is not dict or body.keys() != {"allowed", "reason", "fingerprint"}:
                raise TypeError("other keys")
            return Decision(**body)
        except (TypeError, ValueError):  # its reason or fingerprint refused, as Decision does
            expected = "a decision {'allowed': bool, 'reason': str, 'fingerprint': str | None}"
            raise self._bad(where, expected, body) from None

    def _finished(self, key: str, body: dict[str, Any], where: str) -> None:
        outcome = recorded_outcome(body)
        if outcome is None:
            raise self._bad(where, "an outcome {'status', 'content', 'exception'}", body)
        self.finished[key] = outcome

    def _end(self, body: dict[str, Any], where: str) -> tuple[int, Transition]:
        at, event = body.get("at"), body.get("event")
        try:
            if type(at) is not int or type(event) is not dict:
                raise TypeError("no 'at' or 'event'")
            exception, guard, usage = event["exception"], event["guard"], event["usage"]
            transition = Transition(
                source=State(event["source"]),
                dest=State(event["dest"]),
                trigger=Trigger(event["trigger"]),
                guard=None if guard is None else Guard(guard),
                steps=event["steps"],
                calls=event["calls"],
                call_id=event["call_id"],
                tool=event["tool"],
                result_status=event["result_status"],
                reason=event["reason"],
                error=event["error"],
                exception=(
                    None if exception is None else RecordedException.from_content(exception)
                ),
                appended_json=tuple(orjson.dumps(message) for message in event["appended"]),
                usage=None if usage is None else Usage(**usage),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise self._bad(where, f"the run's terminal transition ({exc})", body) from None
        return at, transition


# -- feeding them to the engine ---------------------------------------------------------------


def replay_legacy(engine: DurableEngine, recorded: Legacy, token: CancelToken) -> None:
    """Feed the records to ``engine`` until the run ends or the next need is not recorded."""
    replies, finished, end = recorded.replies, recorded.finished, recorded.end
    made = 0  # events so far
    batch: tuple[str, ...] = ()
    order: list[tuple[str, int]] = []  # the batch's reports: (call id, calls to hand out first)
    asks: list[dict[str, str]] = []  # the batch's asks still to replay
    position = 0
    handed: list[RunTool] = []
    try:
        while not engine.done:
            if end is not None and made == end[0] and _end(engine, end[1], token, replies):
                made += 1
                break
            state = engine.state
            if state is State.AWAITING_MODEL:
                answer = replies.get(engine.steps + 1)
                if answer is None:
                    if end is None:
                        break  # the model is asked live
                    made += type(Engine.next(engine)) is Transition  # the run ran out of steps
                    continue
                if type(Engine.next(engine)) is not AskModel:
                    raise diverged(
                        recorded.run_id, f"a reply is recorded for step {engine.steps + 1}"
                    )
                kind, value = answer
                if kind == "raised":
                    Engine.raised(engine, value)
                else:
                    Engine.replied(engine, value)
                    batch = _ids(value)
                made += 1
            elif state is State.VALIDATING:
                Engine.next(engine)
                made += 1
                if engine.state is State.DISPATCHING:
                    # A call a person denied is answered by the engine, never handed out.
                    denied = recorded.decisions
                    handed_out = tuple(i for i in batch if denied.get(i, _APPROVED).allowed)
                    order, position, handed = _reports(handed_out, finished, recorded.order), 0, []
                    # The batch's asks, each made before any of it ran, in record order.
                    asks = [asked for asked in recorded.asked if next(iter(asked)) in batch]
                    if asks:  # the batch waited for a person
                        _approval(recorded, _asked, engine, asks.pop(0))
                        made += 1
            elif state is State.AWAITING_APPROVAL:
                ids = [call.call_id for call in engine.pending]
                if not all(call_id in recorded.decisions for call_id in ids):
                    break  # still waiting: decisions come live
                decided = {i: recorded.decisions[i] for i in ids}
                _approval(recorded, Engine.decided, engine, decided)
                made += 1
                if asks and engine.state is State.DISPATCHING:
                    # Asked again after a restart, about calls no person had decided: each
                    # ask waits for its own decisions, so a batch is never asked twice at once.
                    _approval(recorded, _asked, engine, asks.pop(0))
                    made += 1
            else:
                if position == len(order):
                    break
                call_id, hand_out = order[position]
                position += 1
                for _ in range(hand_out):
                    need = Engine.next(engine)
                    if type(need) is not RunTool:
                        raise diverged(recorded.run_id, f"call {call_id!r} is recorded as finished")
                    handed.append(need)
                Engine.returned(engine, finished[call_id], call_id)
                made += 1
    except (InvalidStateError, Mismatch) as exc:
        raise diverged(recorded.run_id, str(exc)) from None
    if end is None:
        if not engine.done:  # the calls handed out here that no process finished
            engine.handed = [need for need in handed if need.call["id"] in engine.running]
        return
    at, event = end
    events = engine.events()
    if not engine.done or made != at + 1 or events[-1] != event:
        found = (
            "no end" if not engine.done else f"{row_text(events[-1])} as event {len(events) - 1}"
        )
        raise diverged(
            recorded.run_id, f"its end is {row_text(event)} as event {at}; replayed, {found}"
        )


def _asked(engine: Engine, reasons: dict[str, str]) -> object:
    """Feed a recorded ask: the review that asked a person about these calls."""
    return Engine.reviewed(engine, {call_id: ask(reason) for call_id, reason in reasons.items()})


def _approval(
    recorded: Legacy, report: Callable[[Engine, Any], object], engine: Engine, value: object
) -> None:
    """Feed an approval record to the engine: one it refuses is damage, not the caller's mistake."""
    try:
        report(engine, value)
    except (TypeError, ValueError) as exc:  # an empty reason, a decision of another fingerprint
        raise diverged(recorded.run_id, str(exc)) from None


def _end(
    engine: Engine, event: Transition, token: CancelToken, replies: dict[int, tuple[str, Any]]
) -> bool:
    """Make the recorded terminal transition where no record says what came from outside.

    Cancellation and interruptions are not inputs the records hold: the end
    says where they came. Any other end follows from the records: ``False``.
    """
    trigger, guard = event.trigger, event.guard
    if trigger not in _INTERRUPTIONS and guard not in _CANCELS:
        return False
    exception = event.exception or RecordedException("BaseException", "")
    if engine.state is State.DISPATCHING:
        start_calls(engine, event, "the run's end")  # the calls that were running
    if trigger is Trigger.MODEL_INTERRUPTED:
        Engine.next(engine)
        Engine.interrupted(engine, exception)
    elif trigger in _INTERRUPTIONS:
        Engine.interrupted(engine, exception)
    elif trigger in _WHILE_THE_MODEL_WORKED:
        Engine.next(engine)
        token.cancel()
        kind, value = replies.get(engine.steps) or ("raised", RecordedException("Missing", ""))
        if kind == "raised":
            Engine.raised(engine, value)
        else:
            Engine.replied(engine, value)
    else:
        token.cancel()
        Engine.next(engine)
    return True


def _ids(reply: object) -> tuple[str, ...]:
    """The call ids of a reply's batch, in emission order (none for anything else)."""
    if type(reply) is not dict:
        return ()
    if reply.get("kind") == "call":
        return (reply.get("id"),)  # type: ignore[return-value]
    calls = reply.get("calls")
    if reply.get("kind") == "calls" and type(calls) is list:
        return tuple(str(call.get("id")) for call in calls if type(call) is dict)
    return ()


def _reports(
    batch: tuple[str, ...], finished: dict[str, dict[str, Any]], order: dict[str, int]
) -> list[tuple[str, int]]:
    """The batch's recorded outcomes in recorded order, each with the calls to hand out first.

    Calls are handed out in emission order, so a report may need calls handed
    out before it that finish later, or never (the live driver runs those).
    """
    ranked = sorted((order[call_id], call_id) for call_id in batch if call_id in finished)
    place = {call_id: index for index, call_id in enumerate(batch)}
    reports, handed_out = [], 0
    for _, call_id in ranked:
        index = place[call_id]
        reports.append((call_id, max(0, index + 1 - handed_out)))
        handed_out = max(handed_out, index + 1)
    return reports


def diverged(run_id: str, detail: str) -> LedgerError:
    """The error for records that are not a run this engine makes."""
    return LedgerError(
        f"run {run_id!r}: its records do not replay through this engine ({detail}); "
        "the ledger was changed, or written by another agentloop"
    )


def end_body(transition: Transition, at: int) -> bytes:
    """A version 1 ``end`` record: the terminal transition, every field, and its place."""
    event = {
        "source": transition.source.value,
        "dest": transition.dest.value,
        "trigger": transition.trigger.value,
        "guard": None if transition.guard is None else transition.guard.value,
        "steps": transition.steps,
        "calls": transition.calls,
        "call_id": transition.call_id,
        "tool": transition.tool,
        "result_status": transition.result_status,
        "reason": transition.reason,
        "error": transition.error,
        "exception": (
            None if transition.exception is None else exception_content(transition.exception)
        ),
        "appended": [orjson.Fragment(data) for data in transition.appended_json],
        "usage": None if transition.usage is None else transition.usage._asdict(),
    }
    return orjson.dumps({"at": at, "event": event})
