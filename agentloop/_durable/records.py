"""Reading a run's records: its header, then its events, checked, decoded and fed back.

A run's records are its events (``journal.py`` says how they are kept), each
only what it adds, as a run file keeps an event, with every input written
out. Every event is checked against the run file's schema of an event and
made the report it records (``_review/runread.report_of``): one encoding.
The one replay (``_core/replay.feed_row``) makes the rest again, and each record's
kind and key are checked against the events it ends. What is damaged is a
``LedgerError`` naming the record; what does not replay, a ``Mismatch``.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Final

import jsonschema_rs
import orjson

from agentloop._core.replay import Mismatch, feed_row
from agentloop._core.table import MODEL_ANSWERS, Trigger
from agentloop._durable.journal import FORMAT, READS, VERSION, record_of
from agentloop._durable.protocol import END, KINDS, REPLY, STARTED
from agentloop._errors import LedgerError
from agentloop._review.runencode import Look
from agentloop._review.runfile_schema import EVENT
from agentloop._review.runread import not_json_of, report_of
from agentloop._review.runshape import explain, json_path

if TYPE_CHECKING:
    from agentloop._core.engine import Engine
    from agentloop._core.values import CancelToken, NotJSON, Transition
    from agentloop._durable.protocol import LedgerRecord

__all__ = ["Recorded", "bad", "json_of"]

_EVENT: Final = jsonschema_rs.Draft202012Validator(EVENT)
# A whole body at once, in one call (the fast path); what fails is then named piece by piece.
_WHOLE: Final = jsonschema_rs.Draft202012Validator({"type": "array", "items": EVENT})
_BODY: Final = "an array of its events"
_REPLIES: Final = (Trigger.MODEL_REPLIED, Trigger.SUMMARY_WRITTEN)


def json_of(run_id: str, data: bytes, where: str) -> Any:
    """``data`` decoded; ``LedgerError`` if it is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise LedgerError(f"run {run_id!r}: {where} is not JSON: {exc}") from None


def bad(run_id: str, where: str, expected: str, found: object) -> LedgerError:
    """The error for a damaged part of run ``run_id``'s record."""
    return LedgerError(f"run {run_id!r}: {where}: expected {expected}, got {found!r:.80}")


class Recorded:
    """A run's header and records, checked and decoded; ``LedgerError`` on anything else.

    ``reports`` are what the run's events were given (``feed`` gives them to
    an engine); ``started`` every call whose ``tool_started`` is recorded;
    ``ended`` whether the run's end is recorded.
    """

    def __init__(self, run_id: str, head: bytes, records: list[LedgerRecord]) -> None:
        self.run_id = run_id
        document = json_of(run_id, head, "its header")
        if type(document) is not dict or document.get("format") != FORMAT:
            raise bad(run_id, "its header", "an agentloop ledger header", document)
        version = document.get("version")
        if version not in READS or type(version) is not int:
            newer = type(version) is int and version > VERSION
            raise LedgerError(
                f"run {run_id!r} was recorded in ledger format version {version!r}, but this "
                f"agentloop reads versions {', '.join(map(str, READS))}"
                + ("; upgrade agentloop to resume it" if newer else "")
            )
        if document.get("run_id") != run_id:
            raise bad(run_id, "its header", f"the run id {run_id!r}", document.get("run_id"))
        messages, configuration = document.get("input"), document.get("fingerprint")
        if type(messages) is not list:
            raise bad(run_id, "its header's input", "a list of messages", messages)
        if type(configuration) is not dict:
            raise bad(run_id, "its header's fingerprint", "an object", configuration)
        self.input: list[dict[str, Any]] = messages
        self.fingerprint: dict[str, Any] = configuration
        parent = document.get("continues")
        if parent is not None and type(parent) is not str:
            raise bad(run_id, "its header's continues", "the id of the run it goes on from", parent)
        #: The run this one continues (``Loop.continue_run``), if any.
        self.continues: str | None = parent
        conversation_id, turn = document.get("conversation_id"), document.get("turn")
        #: The conversation the run is a turn of, and which turn, if any.
        self.conversation: tuple[str, int] | None = None
        if conversation_id is not None or turn is not None:
            if type(conversation_id) is not str or type(turn) is not int or turn < 1:
                raise bad(
                    run_id,
                    "its header's conversation_id and turn",
                    "a conversation's id and a turn from 1, or neither",
                    (conversation_id, turn),
                )
            self.conversation = (conversation_id, turn)
        summary = document.get("summary")
        if summary is not None and (
            type(summary) is not dict
            or set(summary) != {"fold", "text"}
            or type(summary["fold"]) is not int
            or summary["fold"] < 1
            or type(summary["text"]) is not str
        ):
            raise bad(run_id, "its header's summary", "{'fold': a count from 1, 'text'}", summary)
        #: The summary carried in from the turn before: (turns folded, text), if any.
        self.summary: tuple[int, str] | None = (
            None if summary is None else (summary["fold"], summary["text"])
        )
        caller = document.get("caller")
        if caller is not None and (
            type(caller) is not dict
            or set(caller) != {"run_id", "call_id"}
            or type(caller["run_id"]) is not str
            or type(caller["call_id"]) is not str
        ):
            raise bad(run_id, "its header's caller", "{'run_id', 'call_id'} of a call", caller)
        #: The run and call an agent tool's child run answers, if it is one.
        self.caller: tuple[str, str] | None = (
            None if caller is None else (caller["run_id"], caller["call_id"])
        )
        models = document.get("models", [])
        if type(models) is not list or not all(type(name) is str for name in models):
            raise bad(run_id, "its header's models", "a list of model names", models)
        #: The fallback models its replay needs, by name, in order.
        self.models: tuple[str, ...] = tuple(models)
        self.started: set[str] = set()
        #: The events' reports, in order: what each was given (``report_of``).
        self.reports: list[Transition] = []
        #: Each record but a call's start, by the index of its last event: its kind, its key,
        #: and its name.
        self.marks: list[tuple[int, str, str, str]] = []
        #: The final answers an output check refused, with the problems the record lists.
        self.refused: dict[str, list[str]] = {}
        #: What the engine kept of each reply that was not JSON, by its report's index.
        self.rejected: list[NotJSON | None] = []
        self.ended = False
        self._reply = Look()  # the last reply: its calls, and its text (what a check refused)
        for index, record in enumerate(records):
            self._read(index, record)

    def _read(self, index: int, record: LedgerRecord) -> None:
        run_id = self.run_id
        where = f"record {index} ({record.kind} {record.key!r})"
        if self.ended:
            raise LedgerError(f"run {run_id!r}: {where} comes after the run's end")
        if record.kind not in KINDS:
            raise LedgerError(
                f"run {run_id!r}: {where}: unknown record kind {record.kind!r} "
                "(written by a newer agentloop?)"
            )
        body = json_of(run_id, record.body, where)
        whole = _WHOLE.is_valid(body)
        if not whole and type(body) is not list:
            raise bad(run_id, where, _BODY, body)
        events, at = body, len(self.reports)
        if not events and record.kind != STARTED:  # only a call's start may follow no event
            raise bad(run_id, where, "an array of one event or more", events)
        for offset, event in enumerate(events):
            report = self._report(where, at + offset, event, checked=whole)
            rejected = not_json_of(event)
            if report.trigger in _REPLIES and report.input_json is None and rejected is None:
                path = f"{where}: $.events[{at + offset}].input"
                raise bad(run_id, path, "the reply (a ledger keeps every input)", None)
            self.reports.append(report)
            self.rejected.append(rejected)
        if record.kind == REPLY and not any(
            report.trigger in MODEL_ANSWERS for report in self.reports[at:]
        ):
            raise bad(run_id, where, "an array of events with a model's answer", events)
        if record.kind == STARTED:
            if record.key not in self._reply.ids:
                expected = "the start of a call the reply before it asked for"
                raise bad(run_id, where, expected, record.key)
            self.started.add(record.key)
        else:
            self.marks.append((len(self.reports) - 1, record.kind, record.key, where))
        self.ended = record.kind == END

    def _report(self, where: str, index: int, event: object, *, checked: bool) -> Transition:
        """An event of the record, checked as a run file's ``$.events[index]``; its report."""
        error = None if checked else next(iter(_EVENT.iter_errors(event)), None)
        if error is not None:
            path = json_path(["events", index, *error.instance_path])
            expected, found = explain(error)
            raise LedgerError(
                f"run {self.run_id!r}: {where}: {path}: expected {expected}, got {found}"
            )
        assert type(event) is dict, "checked by the schema"
        try:
            report = report_of(index, event)
        except Mismatch as found:
            raise bad(self.run_id, f"{where}: {found.where}", found.expected, found.found) from None
        path = f"$.events[{index}]"
        if report.trigger is Trigger.TOOL_RETURNED:
            if "status" not in event:
                raise bad(self.run_id, f"{where}: {path}.status", "the outcome's status", None)
            if report.call_id is None:  # the call it started just before, unless it names one
                if len(report.started) != 1:
                    expected = "the call it answers, as it did not start just that call"
                    raise bad(self.run_id, f"{where}: {path}.call", expected, None)
                report = report._replace(call_id=report.started[0])
        elif report.trigger is Trigger.MODEL_REPLIED:
            self._reply.replied(0, report.input_json)
        if "problems" in event and self._reply.text is not None:
            self.refused[self._reply.text] = event["problems"]
        return report

    def feed(self, engine: Engine, token: CancelToken) -> None:
        """Feed ``engine`` the reports, as the run was fed them.

        ``Mismatch`` where the engine makes another row, or where a record's
        kind or key is not what its last event ends.
        """
        marks = iter(self.marks)
        mark = next(marks, None)
        for index, report in enumerate(self.reports):
            where = f"$.events[{index}]"
            rejected = self.rejected[index]
            made = feed_row(engine, report, rejected, token, where, partial(_row, report))
            while mark is not None and mark[0] == index:
                _check_mark(made, mark)
                mark = next(marks, None)


def _check_mark(made: Transition, mark: tuple[int, str, str, str]) -> None:
    """A record's kind and key are what its last event (``made``) ends."""
    _, kind, key, where = mark
    if kind == REPLY:  # the model's answers, kept before the run waited on it again
        if key != str(made.steps):
            expected = f"reply {str(made.steps)!r}, the step of the answers it holds"
            raise Mismatch(where, expected, f"{kind} {key!r}")
        return
    ends = record_of(made)
    if ends is None:
        expected = "a record that ends where the run acts (a reply goes with what acts on it)"
        raise Mismatch(where, expected, f"one that ends at {made.trigger.value}")
    if ends != (kind, key):
        expected = f"{ends[0]} {ends[1]!r}, the record its last event ends"
        raise Mismatch(where, expected, f"{kind} {key!r}")


def _row(report: Transition) -> str:
    """A report's row as the record names it: its trigger, and its guard."""
    guard = "" if report.guard is None else f" if {report.guard.value}"
    return f"{report.trigger.value}{guard}"
