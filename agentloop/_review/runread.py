"""A run file read back: its document replayed through a fresh engine, and checked.

An event keeps only what it adds (``runencode.py``). Each event's report is
made from it, with what came from outside taken from the transcript where
the file leaves it out (``Look``: where the replay looks), and fed to the
one replay (``_core/replay.py``). The engine makes everything else: each
event's row is compared with the file's, each message it appends with the
transcript's, and the outcome with the top level. An input taken from the
transcript that the replay does not append there is named by its event.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Final

import orjson

from agentloop._core.agents import Agents
from agentloop._core.approval import Decision, DecisionKey, PendingCall
from agentloop._core.children import Children
from agentloop._core.context_policy import ContextPolicy, policy_from_record
from agentloop._core.engine import Engine
from agentloop._core.output_schema import OutputSchema
from agentloop._core.replay import Mismatch, feed_row, models_named, refusals_standing
from agentloop._core.table import TERMINAL, Guard, State, Trigger
from agentloop._core.values import (
    Budget,
    CancelToken,
    NotJSON,
    RecordedException,
    RunResult,
    Transition,
    Usage,
)
from agentloop._review.eventrecord import decision_of
from agentloop._review.runchildren import children_agree
from agentloop._review.runencode import Look, document_of, held
from agentloop._review.runshape import as_found, as_shown, dumps

__all__ = ["check_written", "not_json_of", "report_of", "run_of"]

_TRIGGERS: Final = {trigger.value: trigger for trigger in Trigger}
_GUARDS: Final[dict[str | None, Guard | None]] = {None: None, **{g.value: g for g in Guard}}
_REPLIES: Final = (Trigger.MODEL_REPLIED, Trigger.SUMMARY_WRITTEN)
# Where a saved run can stop: an end, or a wait for a person.
_STOPS: Final = frozenset((*TERMINAL, State.AWAITING_APPROVAL))


def run_of(document: dict[str, Any]) -> RunResult:
    """The run a document (checked in shape) holds; ``Mismatch`` where the replay differs."""
    transcript: list[Any] = document["transcript"]
    given = document["input"]
    if given > len(transcript):
        raise Mismatch(
            "$.input", f"at most the transcript's {len(transcript)} messages", as_found(given)
        )
    records: list[dict[str, Any]] = document["events"]
    feeds = [report_of(index, record) for index, record in enumerate(records)]
    rejected = [not_json_of(record) for record in records]
    output = _output(document.get("output_schema"))
    token = CancelToken()
    summary = document.get("summary")
    try:
        engine = Engine(
            transcript[:given],
            budget=_budget(document["budget"]),
            cancel=token,
            context=_policy(document.get("context")),
            models=models_named(feeds),
            output=output,
            conversation=None
            if "conversation_id" not in document
            else (document["conversation_id"], document["turn"]),
            summary=None if summary is None else (summary["fold"], summary["text"]),
            agents=None if "agents" not in document else _team(document["agents"]),
        )
    except (TypeError, ValueError) as exc:  # the input part is not one a run accepts
        raise Mismatch(
            "$.transcript", "input messages a run accepts, then what was appended", str(exc)
        ) from None
    reader = _Reader([dumps(message) for message in transcript], given)
    refused: dict[str, list[str]] = {}  # the output check's refusals, as the file records them
    events = []
    with refusals_standing(engine, refused):
        for index, (record, report, reply) in enumerate(zip(records, feeds, rejected, strict=True)):
            where = f"$.events[{index}]"
            report = reader.resolved(report, record, index)
            if "problems" in record and reader.look.text is not None:
                refused[reader.look.text] = record["problems"]
            try:
                made = feed_row(engine, report, reply, token, where, partial(_row, record))
            except Mismatch as found:  # named by the file's row, not the report made of it
                if found.where != where:
                    raise
                raise Mismatch(where, found.expected, _row(record)) from None
            reader.appended(made, index)
            events.append(made._replace(at=report.at, took=report.took))
    if engine.state not in _STOPS:
        raise Mismatch(
            f"$.events[{len(records) - 1}]",
            "a terminal state or awaiting_approval (where a saved run can stop)",
            f"a run left {engine.state.value!r}",
        )
    reader.ended()
    result = engine.result()
    children = {
        call_id: _child(call_id, child) for call_id, child in document.get("children", {}).items()
    }
    children_agree(result, events, children)
    return result._replace(
        events=tuple(events),
        continues=document.get("continues"),
        run_id=document.get("run_id"),
        children=Children(children),
    )


def _child(call_id: str, document: dict[str, Any]) -> RunResult:
    """An agent tool's child run, a run file inside its parent's; named by its place there."""
    try:
        return run_of(document)
    except Mismatch as found:
        where = f"$.children.{call_id}{found.where[1:]}"
        raise Mismatch(where, found.expected, found.found) from None


def report_of(index: int, record: dict[str, Any]) -> Transition:
    """The report ``$.events[index]`` records, with what it says it was given.

    A ledger's record reads its events with it too (``_durable/records.py``).
    """
    exception, usage = record.get("exception"), record.get("usage")
    where = f"$.events[{index}].decided"
    return Transition(
        State.AWAITING_MODEL,
        State.AWAITING_MODEL,  # the replay makes the row: source and dest are its
        _TRIGGERS[record["on"]],
        _GUARDS[record.get("if")],
        0,
        0,
        record.get("call"),
        None,
        record.get("status"),
        exception=None if exception is None else RecordedException.from_content(exception),
        usage=None if usage is None else Usage(*usage),
        at=record.get("at"),
        took=record.get("took"),
        pending=tuple(
            PendingCall(call_id, "", b"", reason, "")
            for call_id, reason in record.get("asked", {}).items()
        )
        + tuple(PendingCall.from_record(call) for call in record.get("waits", ())),
        decisions=tuple(
            (call_id, decision_of(decided, where))
            for call_id, decided in record.get("decided", {}).items()
        )
        + tuple(_path_decision(decided, where) for decided in record.get("decided_paths", ())),
        started=tuple(record.get("started", ())),
        input_json=None if "input" not in record else dumps(record["input"]),
        wait=record.get("wait"),
        model=record.get("model"),
        partial_text=record.get("partial_text"),
    )


def _path_decision(record: dict[str, Any], where: str) -> tuple[DecisionKey, Decision]:
    """A decision about a child run's call, under its path (``decided_paths``)."""
    decided = {name: value for name, value in record.items() if name != "key"}
    return tuple(record["key"]), decision_of(decided, where)


def not_json_of(record: dict[str, Any]) -> NotJSON | None:
    """A reply that was not JSON: what the engine kept of it, in place of its input."""
    kept = record.get("not_json")
    return None if kept is None else NotJSON(kept["repr"], kept["problem"])


class _Reader:
    """The transcript beside the replay: inputs taken from it, and each message appended.

    ``claims`` maps a transcript place to the event that took its input from
    there: a message the replay appends otherwise there names that event.
    """

    def __init__(self, messages: list[bytes], given: int) -> None:
        self.messages, self.position = messages, given
        self.look = Look()
        self.claims: dict[int, int] = {}

    def resolved(self, report: Transition, record: dict[str, Any], index: int) -> Transition:
        """``report`` with what the file leaves out taken from the transcript."""
        where, trigger = f"$.events[{index}]", report.trigger
        if trigger in _REPLIES:
            data = report.input_json
            if "input" not in record and "not_json" not in record:
                if trigger is Trigger.SUMMARY_WRITTEN:
                    raise Mismatch(
                        f"{where}.input",
                        "the summariser's reply, which the transcript never holds",
                        "none",
                    )
                data = held(self.messages, self.position)
                if data is None:
                    raise Mismatch(
                        f"{where}.input",
                        "the reply, as the transcript holds no message where the replay looks "
                        f"($.transcript[{self.position}])",
                        "none",
                    )
                self.claims[self.position] = index
                report = report._replace(input_json=data)
            if trigger is Trigger.MODEL_REPLIED:
                self.look.replied(self.position, data)
        elif trigger is Trigger.TOOL_RETURNED:
            call_id = report.call_id
            if call_id is None:
                if len(report.started) != 1:
                    raise Mismatch(
                        f"{where}.call",
                        "the call it answers, as it did not start just that call",
                        "none",
                    )
                call_id = report.started[0]
            report = report._replace(call_id=call_id)
            if "input" not in record:
                place = self.look.outcome(call_id)
                data = held(self.messages, place)
                message = None if data is None else orjson.loads(data)
                if (
                    type(message) is not dict
                    or message.get("kind") != "tool_result"
                    or message.get("id") != call_id
                    or type(message.get("status")) is not str
                    or "content" not in message
                ):
                    looks = (
                        "its batch has no such call" if place is None else f"$.transcript[{place}]"
                    )
                    raise Mismatch(
                        f"{where}.input",
                        f"the outcome of {call_id!r} (input and status), as the transcript does "
                        f"not hold it where the replay looks ({looks})",
                        "none",
                    )
                assert place is not None
                self.claims[place] = index
                report = report._replace(
                    result_status=message["status"], input_json=dumps(message["content"])
                )
            elif "status" not in record:
                raise Mismatch(f"{where}.status", "the outcome's status, with its input", "none")
        return report

    def appended(self, made: Transition, index: int) -> None:
        """Each message ``made`` appended must be the transcript's at its place."""
        for data in made.appended_json:
            place = self.position
            claimed = self.claims.pop(place, None)
            found = held(self.messages, place)
            if found != data:
                wanted = orjson.loads(data)
                if claimed is not None:  # an input taken from the transcript: not there
                    raise Mismatch(
                        f"$.events[{claimed}].input",
                        "the input written out, as the transcript does not hold it where the "
                        f"replay looks ($.transcript[{place}] is {as_shown(wanted)})",
                        "none",
                    )
                raise Mismatch(
                    f"$.transcript[{place}]",
                    f"{as_shown(wanted)}, as $.events[{index}] appended it",
                    "none" if found is None else as_found(orjson.loads(found)),
                )
            self.position += 1

    def ended(self) -> None:
        """Every message is one the replay appended, and every input taken was appended."""
        if self.claims:
            place, claimed = min(self.claims.items())
            raise Mismatch(
                f"$.events[{claimed}].input",
                "the input written out, as the replay appends nothing where it looks "
                f"($.transcript[{place}])",
                "none",
            )
        if self.position != len(self.messages):
            raise Mismatch(
                "$.transcript",
                f"the {self.position} messages of the input and what the events appended",
                f"{len(self.messages)} messages",
            )


def _budget(record: dict[str, Any]) -> Budget:
    try:
        return Budget(**record)
    except (TypeError, ValueError) as exc:
        raise Mismatch("$.budget", "a budget of int counts", str(exc)) from None


def _output(schema: Any) -> OutputSchema | None:
    """A typed output's schema, which the file keeps as JSON."""
    if schema is None:
        return None
    try:
        return OutputSchema(schema)
    except TypeError as exc:
        raise Mismatch("$.output_schema", "a Draft 2020-12 JSON Schema", str(exc)) from None


def _team(document: object) -> Agents:
    """A run file's team of agents (``agents``), or ``Mismatch`` saying what is wrong."""
    try:
        return Agents.from_json(document)
    except ValueError as exc:
        raise Mismatch("$.agents", "the team of a run with handoffs", str(exc)) from None


def _policy(record: dict[str, Any] | None) -> ContextPolicy | None:
    """The run's context policy made again (its summaries are in its events), if it had one."""
    if record is None:
        return None
    try:
        policy = policy_from_record(record)
    except (TypeError, ValueError) as exc:
        raise Mismatch("$.context", "a context policy this agentloop makes", str(exc)) from None
    if policy is None:
        raise Mismatch(
            "$.context.counter",
            "a token counter this agentloop can make again ('approx', or 'tiktoken:<encoding>' "
            "with the tiktoken extra)",
            repr(record["counter"]),
        )
    return policy


def check_written(result: RunResult, document: dict[str, Any]) -> None:
    """The document must be the one this agentloop writes of the run it replayed to.

    So the outcome is the replay's (status, output, counters, words, usage),
    each event holds what it adds and nothing else, and a file that loads is
    saved again as it was. Compared as JSON text: ``1``, ``1.0`` and ``true`` differ.
    """
    _differs(document_of(result), document, "$")


def _differs(made: object, found: object, where: str) -> None:
    """Raise at the first place where ``found`` is not ``made``."""
    if dumps(made, orjson.OPT_SORT_KEYS) == dumps(found, orjson.OPT_SORT_KEYS):
        return
    if type(made) is dict and type(found) is dict:
        for name, value in made.items():
            if name not in found:
                raise Mismatch(f"{where}.{name}", f"{as_shown(value)}, as replaying gives", "none")
        for name, value in found.items():
            if name not in made:
                raise Mismatch(
                    f"{where}.{name}", "no such field, as replaying the run gives", as_found(value)
                )
        for name, value in made.items():
            _differs(value, found[name], f"{where}.{name}")
    if type(made) is list and type(found) is list and len(made) == len(found):
        for index, (mine, theirs) in enumerate(zip(made, found, strict=True)):
            _differs(mine, theirs, f"{where}[{index}]")
    raise Mismatch(where, f"{as_shown(made)}, as replaying the run gives", as_found(found))


def _row(record: dict[str, Any]) -> str:
    guard = f" [{record['if']}]" if "if" in record else ""
    return f"--{record['on']}{guard}-->"
