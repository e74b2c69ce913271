"""Starting a durable run, and resuming one: a fresh engine fed the ledger's records.

Resume is the run-file replay's idea (``_review/_replay.py``) turned around:
that driver feeds a saved run's *events* to a fresh engine and checks what
comes out; this one feeds a run's recorded *inputs* (each reply by step,
each call's outcome by call id) and lets the engine make the events, then
hands the engine, part-way, to the usual driver with the usual model and
tools. So a recorded reply is never asked for again, and a finished call is
never run again. Where the run was cut short, the driver goes on live:

* a step with no reply recorded asks the model;
* a call with no ``tool_started`` runs;
* a call with ``tool_started`` and no ``tool_finished`` gets an ``error``
  result saying its outcome is unknown, or runs again if its tool is
  idempotent (under the same idempotency key).

A batch's finished calls are all reported, in the order they were recorded
(the order the run reported them), before anything goes live: calls are
handed out in emission order, so a call that finished while an earlier one
still ran needs that one handed out first, unfinished. The driver is given
those first (``DurableEngine.handed``), so every live report comes after
every recorded one, as its record does: reading the ended run back gives
the events the live run made. A run that ended is replayed to its recorded
``end``, and the transition the engine makes there must be the one recorded.
"""

from __future__ import annotations

import re
import weakref
from typing import TYPE_CHECKING, Any, Final
from uuid import uuid4

import orjson

from agentloop._core._approval import Decision, approve
from agentloop._core._engine import Engine
from agentloop._core._replay import Mismatch, row_text
from agentloop._core._table import Guard, State, Trigger
from agentloop._core._values import (
    AskModel,
    CancelToken,
    NotJSON,
    RecordedException,
    RunTool,
    Transition,
    Usage,
)
from agentloop._durable._journal import (
    FORMAT,
    VERSION,
    DurableEngine,
    Journal,
    fingerprint,
    header,
    idempotent_tools,
)
from agentloop._durable._ledger import ASKED, DECISION, END, FINISHED, REPLY, STARTED
from agentloop._errors import (
    ConfigurationMismatchError,
    InvalidStateError,
    LedgerError,
    RunBusyError,
)
from agentloop._review._replay import start_calls

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop._core._output import OutputSchema
    from agentloop._core._values import Budget
    from agentloop._durable._ledger import Ledger, LedgerRecord, LedgerWriter

__all__ = [
    "Recorded",
    "begin",
    "checked_run_id",
    "differences",
    "mismatch",
    "recorded_answer",
    "recorded_outcome",
    "replayed",
    "resume",
]

_CANCELS: Final = (Guard.CANCEL_REQUESTED, Guard.CANCEL_REQUESTED_MID_BATCH)
_APPROVED: Final = approve()
_INTERRUPTIONS: Final = (Trigger.MODEL_INTERRUPTED, Trigger.TOOL_INTERRUPTED, Trigger.INTERRUPTED)
_WHILE_THE_MODEL_WORKED: Final = (Trigger.MODEL_REPLIED, Trigger.MODEL_RAISED)
_ABSENT: Final = object()  # a fingerprint's field that one side does not have
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")  # a key shown as .key, not ['key']


def begin(
    ledger: Ledger,
    run_id: str | None,
    messages: str | list[dict[str, Any]],
    *,
    budget: Budget,
    dispatcher: object,
    cancel: CancelToken | None,
    output: OutputSchema | None = None,
) -> DurableEngine:
    """A new durable run: the input checked, then its header recorded and the run claimed."""
    run_id = uuid4().hex if run_id is None else checked_run_id(run_id, new=True)
    # bad input raises first
    engine = DurableEngine(messages, budget=budget, cancel=cancel, output=output)
    writer = ledger.create(
        run_id, header(run_id, engine.history(), fingerprint(budget, dispatcher, output))
    )
    engine.journal = Journal(writer, run_id, idempotent_tools(dispatcher), ledger=ledger)
    weakref.finalize(engine, engine.journal.release)  # an abandoned run frees its claim
    return engine


def resume(
    ledger: Ledger,
    run_id: str,
    *,
    budget: Budget,
    dispatcher: object,
    cancel: CancelToken | None,
    output: OutputSchema | None = None,
) -> tuple[DurableEngine, CancelToken | None]:
    """The run, replayed from its records: done, or ready for a driver to go on live.

    Also returns the token the driver is to watch (``None`` without ``cancel``).
    A finished run is only read; any other is claimed first, so its records
    cannot change while they are replayed.
    """
    run_id = checked_run_id(run_id)
    writer: LedgerWriter | None
    busy: RunBusyError | None = None
    try:
        writer = ledger.claim(run_id)
    except RunBusyError as exc:
        writer, busy = None, exc  # unless it has ended: then there is nothing to write
    try:
        head, records = ledger.read(run_id)
        recorded = Recorded(run_id, head, records)
        if busy is not None and recorded.end is None:
            raise busy
        differences_found = differences(
            recorded.fingerprint, fingerprint(budget, dispatcher, output)
        )
        if differences_found:
            raise mismatch(run_id, differences_found)
        token = CancelToken()  # cancellation comes from the record until the run goes live
        journal = Journal(
            writer or _NoWriter(run_id),
            run_id,
            idempotent_tools(dispatcher),
            started=set(recorded.started),
            finished=dict(recorded.finished),
            ledger=ledger,
            records=len(records),
        )
        engine = replayed(recorded, budget, journal, token, output)
    except BaseException:
        if writer is not None:
            writer.release()
        raise
    if engine.done:
        if recorded.end is None:  # it ended before its end was written: write it now
            engine.journal.end(engine.events()[-1], len(engine.events()) - 1)
        engine.journal.release()
        return engine, None
    assert writer is not None, "a run that has not ended was claimed"
    weakref.finalize(engine, engine.journal.release)
    if engine.state is State.AWAITING_APPROVAL:
        engine.journal.pause()  # a person may decide in any process
    if cancel is None:
        return engine, None
    engine.journal.link(cancel.on_cancel(token.cancel))  # the caller's token, from now on
    return engine, token


def replayed(
    recorded: Recorded,
    budget: Budget,
    journal: Journal,
    token: CancelToken,
    output: OutputSchema | None = None,
) -> DurableEngine:
    """A fresh engine fed ``recorded``: ended, or stopped where the records stop.

    ``journal`` is the engine's (nothing is written while the records are fed);
    ``token`` is what it watches: the replay cancels it where the run was cancelled.
    """
    try:
        engine = DurableEngine(recorded.input, budget=budget, cancel=token, output=output)
    except (TypeError, ValueError) as exc:
        raise LedgerError(
            f"run {recorded.run_id!r}: the recorded input is not valid: {exc}"
        ) from None
    engine.journal = journal
    _replay(engine, recorded, token)
    return engine


def checked_run_id(run_id: object, *, new: bool = False) -> str:
    """``run_id`` if it is a run id: any non-empty str of text (``'order-42'``, a uuid).

    A ``new`` run's id has no ``':'``: the idempotency key ``f"{run_id}:{call_id}"``
    then names one call of one run (``'a:b'`` + ``'c'`` and ``'a'`` + ``'b:c'`` would
    share a key). Runs recorded before this rule still resume.
    """
    if type(run_id) is not str:
        raise TypeError(
            f"expected run_id to be a non-empty str (say 'order-42'), got {type(run_id).__name__}"
        )
    if not run_id:
        raise ValueError(
            "expected run_id to be a non-empty str (say 'order-42'), got '': leave run_id out "
            "for a fresh one"
        )
    try:
        run_id.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"expected run_id to be text (it is stored as UTF-8), got {run_id!r:.80}: {exc.reason}"
        ) from None
    if new and ":" in run_id:
        raise ValueError(
            f"expected a new run's id without ':', got {run_id!r:.80}: a call's idempotency "
            "key is f'{run_id}:{call_id}', and a ':' in the run id would let calls of two "
            "runs share one"
        )
    return run_id


class _NoWriter:
    """The writer of a run only read (it has ended): writing to it is a bug."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def append(self, record: LedgerRecord) -> None:
        raise LedgerError(f"run {self.run_id!r} has ended; nothing more is recorded")

    def release(self) -> None:
        pass


# -- reading the records ----------------------------------------------------------------


class Recorded:
    """A run's header and records, checked and decoded; ``LedgerError`` on anything else."""

    def __init__(self, run_id: str, head: bytes, records: list[LedgerRecord]) -> None:
        self.run_id = run_id
        document = self._json(head, "its header")
        if type(document) is not dict or document.get("format") != FORMAT:
            raise self._bad("its header", "an agentloop ledger header", document)
        version = document.get("version")
        if version != VERSION:
            newer = type(version) is int and version > VERSION
            raise LedgerError(
                f"run {run_id!r} was recorded in ledger format version {version!r}, but this "
                f"agentloop reads version {VERSION}"
                + ("; upgrade agentloop to resume it" if newer else "")
            )
        if document.get("run_id") != run_id:
            raise self._bad("its header", f"the run id {run_id!r}", document.get("run_id"))
        messages, configuration = document.get("input"), document.get("fingerprint")
        if type(messages) is not list:
            raise self._bad("its header's input", "a list of messages", messages)
        if type(configuration) is not dict:
            raise self._bad("its header's fingerprint", "an object", configuration)
        self.input: list[dict[str, Any]] = messages
        self.fingerprint: dict[str, Any] = configuration
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
        if not key.isdigit() or key != str(int(key)) or int(key) < 1:
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


def recorded_answer(body: dict[str, Any]) -> tuple[str, Any] | None:
    """A recorded model answer as the report to make: ``('reply', r)``, ``('raised', e)``.

    ``None`` if ``body`` is not what ``reply_record`` or ``raised_record`` makes.
    """
    if body.keys() == {"reply"}:
        return "reply", body["reply"]
    if body.keys() == {"not_json"} and _texts(body["not_json"], "repr", "problem"):
        return "reply", NotJSON(body["not_json"]["repr"], body["not_json"]["problem"])
    if body.keys() - {"usage"} == {"raised"} and _texts(body["raised"], "type", "message"):
        raised = RecordedException.from_content(body["raised"])
        raised.usage = body.get("usage")  # what the failed call still cost, if it said
        return "raised", raised
    return None


def recorded_outcome(body: dict[str, Any]) -> dict[str, Any] | None:
    """A recorded outcome (``outcome_record``) as the engine takes it; ``None`` if it is not one."""
    exception = body.get("exception")
    if (
        body.keys() != {"status", "content", "exception"}
        or type(body["status"]) is not str
        or not (exception is None or _texts(exception, "type", "message"))
    ):
        return None
    outcome = {"status": body["status"], "content": body["content"]}
    if exception is not None:
        outcome["exception"] = RecordedException.from_content(exception)
    return outcome


def _texts(value: object, *keys: str) -> bool:
    return (
        type(value) is dict
        and value.keys() == set(keys)
        and all(type(value[key]) is str for key in keys)
    )


def mismatch(run_id: str, found: list[str]) -> ConfigurationMismatchError:
    """The error refusing to go on with run ``run_id`` under another configuration."""
    return ConfigurationMismatchError(
        f"run {run_id!r} was recorded with another configuration than this Loop's: "
        + "; ".join(found),
        found,
    )


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What differs between two fingerprints: each field by its path, recorded and now.

    ``tools.add.parameters.properties.b.type: recorded 'integer', now 'string'``.
    """
    found: list[str] = []
    _compare("", recorded, orjson.loads(orjson.dumps(current)), found)  # both as JSON reads
    return found


def _compare(path: str, was: object, now: object, found: list[str]) -> None:
    if was == now:
        return
    if type(was) is dict and type(now) is dict:
        for key in sorted(was.keys() | now.keys()):
            step = f"{path}.{key}" if _NAME.fullmatch(key) else f"{path}[{key!r}]"
            _compare(step.lstrip("."), was.get(key, _ABSENT), now.get(key, _ABSENT), found)
        return
    if was is _ABSENT:
        before = "not recorded"
    else:
        before = "recorded" if type(was) is dict else f"recorded {_shown(was)}"
    if now is _ABSENT:
        after = "missing now"
    else:
        after = "present now" if type(now) is dict else f"now {_shown(now)}"
    found.append(f"{path}: {before}, {after}")


def _shown(value: object) -> str:
    """``repr(value)``; a long list or number cut short (a str, a type's name, is kept whole)."""
    text = repr(value)
    return text if len(text) <= 100 or type(value) is str else text[:97] + "..."


# -- feeding them to the engine ---------------------------------------------------------------


def _replay(engine: DurableEngine, recorded: Recorded, token: CancelToken) -> None:
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
                need = Engine.next(engine)
                if type(need) is Transition and need.dest is State.AWAITING_MODEL:
                    made += 1  # the wrap-up begins (on_exhausted='answer'): the engine's row
                    continue
                if type(need) is not AskModel:
                    raise _diverged(recorded, f"a reply is recorded for step {engine.steps + 1}")
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
                        _approval(recorded, Engine.asked_approval, engine, asks.pop(0))
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
                    _approval(recorded, Engine.asked_approval, engine, asks.pop(0))
                    made += 1
            else:
                if position == len(order):
                    break
                call_id, hand_out = order[position]
                position += 1
                for _ in range(hand_out):
                    need = Engine.next(engine)
                    if type(need) is not RunTool:
                        raise _diverged(recorded, f"call {call_id!r} is recorded as finished")
                    handed.append(need)
                Engine.returned(engine, finished[call_id], call_id)
                made += 1
    except (InvalidStateError, Mismatch) as exc:
        raise _diverged(recorded, str(exc)) from None
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
        raise _diverged(recorded, f"its end is {row_text(event)} as event {at}; replayed, {found}")


def _approval(
    recorded: Recorded, report: Callable[[Engine, Any], object], engine: Engine, value: object
) -> None:
    """Feed an approval record to the engine: one it refuses is damage, not the caller's mistake."""
    try:
        report(engine, value)
    except (TypeError, ValueError) as exc:  # an empty reason, a decision of another fingerprint
        raise _diverged(recorded, str(exc)) from None


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


def _diverged(recorded: Recorded, detail: str) -> LedgerError:
    return LedgerError(
        f"run {recorded.run_id!r}: its records do not replay through this engine ({detail}); "
        "the ledger was changed, or written by another agentloop"
    )
