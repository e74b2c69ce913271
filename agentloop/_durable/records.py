"""Reading a run's records: its header, then its events, checked and decoded.

A run's records are its events (``journal.py`` says how they are kept) and
the ``tool_started`` marks. Every event
is checked against the run file's schema of an event and decoded by the run
file's event record (``_review/eventrecord.py``): one encoding. What is
damaged is a ``LedgerError`` naming the record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import jsonschema_rs
import orjson

from agentloop._core.replay import Mismatch
from agentloop._core.table import NEXT, TERMINAL
from agentloop._durable.journal import FORMAT, READS, VERSION, record_of
from agentloop._durable.protocol import END, KINDS, STARTED
from agentloop._errors import LedgerError
from agentloop._review.eventrecord import load_event, rejected_value
from agentloop._review.runfile_schema import EVENT_RECORD, REJECTED
from agentloop._review.runshape import explain, json_path

if TYPE_CHECKING:
    from agentloop._core.values import Transition
    from agentloop._durable.protocol import LedgerRecord

__all__ = ["Recorded", "bad", "json_of"]

_EVENT: Final = jsonschema_rs.Draft202012Validator(EVENT_RECORD)
_REJECTED: Final = jsonschema_rs.Draft202012Validator(REJECTED)
# A whole body at once, in one call (the fast path); what fails is then named piece by piece.
_WHOLE: Final = jsonschema_rs.Draft202012Validator(
    {
        "type": "object",
        "properties": {
            "at": {"type": "integer", "minimum": 0},
            "events": {"type": "array", "items": EVENT_RECORD, "minItems": 1},
            "rejected": REJECTED,
        },
        "required": ["at", "events"],
        "additionalProperties": False,
    }
)
_BY_ITSELF: Final = frozenset(NEXT.values())
_BODY: Final = "{'at': the index of its first event, 'events': [one event or more]}"


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

    ``events`` are the run's events, the ``at``-th first; ``started``
    every call whose ``tool_started`` is recorded; ``rejected`` the reply
    taken that was not JSON; ``ended`` whether the run's end is recorded.
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
        self.events: list[Transition] = []
        self.at = 0
        self.rejected: object = None
        self.ended = False
        for index, record in enumerate(records):
            self._read(index, record)

    def _read(self, index: int, record: LedgerRecord) -> None:
        run_id = self.run_id
        where = f"record {index} ({record.kind} {record.key!r})"
        if self.ended:
            raise LedgerError(f"run {run_id!r}: {where} comes after the run's end")
        body = json_of(run_id, record.body, where)
        if record.kind == STARTED:
            if type(body) is not dict or body.keys() != {"name"} or type(body["name"]) is not str:
                raise bad(run_id, where, "{'name': the tool's name}", body)
            self.started.add(record.key)
            return
        if record.kind not in _KINDS:
            raise LedgerError(
                f"run {run_id!r}: {where}: unknown record kind {record.kind!r} "
                "(written by a newer agentloop?)"
            )
        whole = _WHOLE.is_valid(body)
        if not whole and (
            type(body) is not dict
            or not {"at", "events"} <= body.keys() <= {"at", "events", "rejected"}
            or type(body["at"]) is not int
            or type(body["events"]) is not list
            or not body["events"]
        ):
            raise bad(run_id, where, _BODY, body)
        at, events = body["at"], body["events"]
        if self.events and at != self.at + len(self.events):
            expected = f"its first event's index {self.at + len(self.events)} (the next one)"
            raise bad(run_id, f"{where}.at", expected, at)
        if not self.events:
            self.at = at  # checked by the resume: a run's records begin at event 0
        if "rejected" in body:
            error = None if whole else next(iter(_REJECTED.iter_errors(body["rejected"])), None)
            if error is not None:
                raise bad(
                    run_id, f"{where}.rejected", explain(error, "rejected")[0], body["rejected"]
                )
            self.rejected = rejected_value(body["rejected"])
        made = [
            self._event(where, at + offset, event, checked=whole)
            for offset, event in enumerate(events)
        ]
        last = made[-1]
        if last.trigger in _BY_ITSELF and last.dest not in TERMINAL:
            raise bad(run_id, where, "a report's transition last", last.trigger.value)
        kind, key = record_of(last)
        if key is None:
            path = f"$.events[{at + len(made) - 1}]"
            expected = "an event naming its call (the record's key)"
            raise LedgerError(f"run {run_id!r}: {where}: {path}: expected {expected}, got none")
        if (kind, key) != (record.kind, record.key):
            expected = "the kind and key of its last event's record"
            raise bad(run_id, where, expected, f"{kind} {key!r}")
        self.events.extend(made)
        self.ended = record.kind == END

    def _event(self, where: str, index: int, event: object, *, checked: bool) -> Transition:
        """An event of the record, checked as a run file's ``$.events[index]`` and decoded."""
        error = None if checked else next(iter(_EVENT.iter_errors(event)), None)
        if error is not None:
            path = json_path(["events", index, *error.instance_path])
            expected, found = explain(error)
            raise LedgerError(
                f"run {self.run_id!r}: {where}: {path}: expected {expected}, got {found}"
            )
        assert type(event) is dict, "checked by the schema"
        try:
            return load_event(index, event)
        except Mismatch as found:
            raise bad(self.run_id, f"{where}: {found.where}", found.expected, found.found) from None
        except (TypeError, ValueError) as exc:
            raise bad(self.run_id, f"{where}: $.events[{index}]", "an event", str(exc)) from None


_KINDS: Final = frozenset(KINDS) - {STARTED}
