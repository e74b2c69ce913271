"""A run file's encoding (version 6): a result's document, and its text.

An event keeps only what it adds: its row (``on`` the trigger, ``if`` the
guard), its times, and what came from outside, written only where the
transcript does not hold it where the replay looks (``Look``). Everything
else the one replay makes again (``runstory.py``).
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from agentloop._core.json import exception_content
from agentloop._core.messages import tool_result_json
from agentloop._core.output_schema import OutputSchema
from agentloop._core.replay import output_refusals
from agentloop._core.table import Guard, Trigger
from agentloop._core.values import Budget, NotJSON, RunResult, Transition, Usage
from agentloop._review.runshape import FORMAT, VERSION, dumps

__all__ = [
    "Look",
    "budget_record",
    "document_of",
    "event_fields",
    "held",
    "output_of",
    "run_text",
]


def output_of(result: RunResult) -> OutputSchema | None:
    """The output schema a run was made with (``Loop(output=T)``), from its result."""
    schema = result.output_schema_json
    return None if schema is None else OutputSchema(orjson.loads(schema))


def budget_record(budget: Budget) -> dict[str, Any]:
    """The budget as a run file keeps it: the other limits only when they are not the default."""
    record: dict[str, Any] = {"max_steps": budget.max_steps, "max_calls": budget.max_calls}
    for name in ("max_total_tokens", "max_output_retries", "max_identical_calls", "on_exhausted"):
        value = getattr(budget, name)
        if value != _DEFAULT_BUDGET_VALUES[name]:
            record[name] = value
    return record


_DEFAULT_BUDGET_VALUES: Final = {
    "max_total_tokens": Budget().max_total_tokens,
    "max_output_retries": Budget().max_output_retries,
    "max_identical_calls": Budget().max_identical_calls,
    "on_exhausted": Budget().on_exhausted,
}


def document_of(result: RunResult) -> dict[str, Any]:
    """``result`` as a run file's document (version 6): each event only what it adds."""
    transcript = orjson.loads(result.transcript_json)
    document: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "status": result.status.value,
        "output": result.output_text,
        **({} if result.reason is None else {"reason": result.reason}),
        **({} if result.error is None else {"error": result.error}),
        "steps": result.steps,
        "calls": result.calls,
        "budget": budget_record(result.budget),
        **({} if result.usage == Usage() else {"usage": list(result.usage)}),
        "input": len(transcript) - sum(len(event.appended_json) for event in result.events),
        "transcript": transcript,
        "events": _Events(result, transcript).records(),
    }
    if result.context is not None:
        document["context"] = result.context.record()
    if result.continues is not None:
        document["continues"] = result.continues
    if result.run_id is not None:
        document["run_id"] = result.run_id
    if result.conversation_id is not None:  # a conversation's turn
        document["conversation_id"], document["turn"] = result.conversation_id, result.turn
    if result.summary is not None:  # carried in from the turn before
        document["summary"] = {"fold": result.summary[0], "text": result.summary[1]}
    if result.agents is not None:  # a run with handoffs: the team
        document["agents"] = result.agents.as_json()
    if result.output_schema_json is not None:  # a run with a typed output
        document["output_schema"] = orjson.loads(result.output_schema_json)
    if result.children:  # its agent tools' child runs, by call id: run files of their own
        document["children"] = {
            call_id: document_of(child) for call_id, child in result.children.items()
        }
    return document


def event_fields(event: Transition, record: dict[str, Any]) -> dict[str, Any]:
    """``record`` (an event's row, and its times) with the rest of what ``event`` adds.

    Its inputs aside: what the run file and the ledger both keep of an event.
    Each writes the inputs it does not find elsewhere.
    """
    if event.started:
        record["started"] = list(event.started)
    if event.exception is not None:
        record["exception"] = exception_content(event.exception)
    if event.usage is not None:
        record["usage"] = list(event.usage)
    if event.trigger is Trigger.CALL_WAITS:  # the call whose child waits: no outcome names it
        record["call"] = event.call_id
    if event.pending and event.pending[0].path:  # a child run's calls: whole, with paths
        record["waits"] = [call.record() for call in event.pending]
    elif event.pending:
        record["asked"] = {call.call_id: call.reason for call in event.pending}
    if event.decisions and type(event.decisions[0][0]) is tuple:  # about a child's calls
        record["decided_paths"] = [
            {"key": list(key), **made.record()} for key, made in event.decisions
        ]
    elif event.decisions:
        record["decided"] = {call_id: made.record() for call_id, made in event.decisions}
    if event.wait is not None:
        record["wait"] = event.wait
    if event.model is not None:
        record["model"] = event.model
    if event.partial_text is not None:
        record["partial_text"] = event.partial_text
    return record


_REPLIES: Final = (Trigger.MODEL_REPLIED, Trigger.SUMMARY_WRITTEN)
_REFUSED: Final = (Guard.OUTPUT_RETRY, Guard.OUTPUT_INVALID)


class _Events:
    """A result's events as a run file keeps them, walking the transcript beside them.

    An input is left out where the replay finds it in the transcript (``look``):
    a reply at the history's length, a call's outcome at its batch's reply's
    place + 1 + its place in the batch. Each is compared byte for byte first.
    """

    def __init__(self, result: RunResult, transcript: list[Any]) -> None:
        self.result = result
        self.messages = [dumps(message) for message in transcript]
        self.refusals = (
            output_refusals(result.events, result.rejected_value)
            if result.output_schema_json is not None
            else {}
        )

    def records(self) -> list[dict[str, Any]]:
        events = self.result.events
        position = len(self.messages) - sum(len(event.appended_json) for event in events)
        look = Look()
        origin = _origin(events[0]) if events else 0.0
        records = []
        for index, event in enumerate(events):
            record = self.record(event, origin, index == 0)
            self.inputs(event, record, look, position)
            records.append(record)
            position += len(event.appended_json)
        return records

    def record(self, event: Transition, origin: float, first: bool) -> dict[str, Any]:
        record: dict[str, Any] = {"on": event.trigger.value}
        if event.guard is not None:
            record["if"] = event.guard.value
        if event.at is not None:  # seconds since the run began, to the microsecond
            took = event.took if first else None  # the first event began the run
            record["at"] = round(event.at - origin if took is None else took, 6)
        if event.took is not None:
            record["took"] = round(event.took, 6)
        return event_fields(event, record)

    def inputs(self, event: Transition, record: dict[str, Any], look: Look, at: int) -> None:
        """What came from outside with ``event``, where the transcript does not hold it."""
        data, trigger, messages = event.input_json, event.trigger, self.messages
        if trigger in _REPLIES:
            if trigger is Trigger.MODEL_REPLIED:
                look.replied(at, data)
            if data is None:  # not JSON: what the engine kept of it
                rejected = self.result.rejected_value
                if isinstance(rejected, NotJSON):
                    record["not_json"] = {"repr": rejected.text, "problem": rejected.problem}
            elif trigger is Trigger.SUMMARY_WRITTEN or held(messages, at) != data:
                record["input"] = orjson.loads(data)  # a summary: never in the transcript
        elif trigger is Trigger.TOOL_RETURNED:
            call_id, tool, status = event.call_id or "", event.tool or "", event.result_status
            if event.started != (call_id,):
                record["call"] = call_id
            if (
                data is None
                or status is None
                or held(messages, look.outcome(call_id))
                != tool_result_json(call_id, tool, status, data)
            ):
                record["status"] = status
                record["input"] = None if data is None else orjson.loads(data)
        elif data is not None:  # a handoff's view
            record["input"] = orjson.loads(data)
        if event.guard in _REFUSED and look.text in self.refusals:
            record["problems"] = self.refusals[look.text]


class Look:
    """Where the replay looks for an event's input in the transcript: writer and reader share it.

    A reply is at the history's length: a reply is appended whole, and
    nothing enters the history between taking it and appending it. A call's
    outcome is at its batch's reply's place + 1 + the call's place in the batch.
    """

    __slots__ = ("ids", "place", "text")

    def __init__(self) -> None:
        self.place = 0
        self.ids: list[object] = []
        self.text: str | None = None  # the reply's text: what an output check refused

    def replied(self, place: int, data: bytes | None) -> None:
        """The model replied ``data`` (None: not JSON) when the history held ``place`` messages."""
        reply = None if data is None else orjson.loads(data)
        self.place, self.ids, self.text = place, [], None
        if type(reply) is not dict:
            return
        self.text = str(reply.get("text"))
        calls = reply.get("calls")
        if reply.get("kind") == "call":
            self.ids = [reply.get("id")]
        elif reply.get("kind") == "calls" and type(calls) is list:
            self.ids = [call.get("id") if type(call) is dict else None for call in calls]

    def outcome(self, call_id: str) -> int | None:
        """Where the transcript holds the outcome of ``call_id``, by its batch."""
        if call_id not in self.ids:
            return None
        return self.place + 1 + self.ids.index(call_id)


def held(messages: list[bytes], place: int | None) -> bytes | None:
    """The message at ``place``, if the transcript has one there."""
    return messages[place] if place is not None and 0 <= place < len(messages) else None


def _origin(first: Transition) -> float:
    """When the run began, on its clock: before the first event's request, if it answered one."""
    if first.at is None:
        return 0.0
    return first.at - (first.took or 0.0)


def run_text(document: dict[str, Any]) -> bytes:
    """A document as a run file: indented, each message and each event on a line of its own.

    orjson's ``OPT_INDENT_2`` would spread a message over many lines. The lines
    of messages and events start at column 0: indenting them would cost
    about 1.5% of a long run's file.
    """
    return _text(document, "").encode()


def _text(document: dict[str, Any], indent: str) -> str:
    inner = indent + "  "
    lines = []
    for key, value in document.items():
        name = orjson.dumps(key).decode()
        if key in ("transcript", "events") and value:
            items = ",\n".join(dumps(item).decode() for item in value)  # at column 0: bytes
            lines.append(f"{inner}{name}: [\n{items}\n{inner}]")
        elif key == "children":
            children = ",\n".join(
                f"{inner}  {orjson.dumps(call_id).decode()}: {_text(child, inner + '  ')}"
                for call_id, child in value.items()
            )
            lines.append(f"{inner}{name}: {{\n{children}\n{inner}}}")
        else:
            lines.append(f"{inner}{name}: {dumps(value).decode()}")
    return "{\n" + ",\n".join(lines) + f"\n{indent}}}"
