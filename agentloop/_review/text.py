"""A run as text for a terminal: its rows, its input and its outcome, every line escaped.

What ``agentloop show`` prints and the report's rows say (``describe``): each
transition's cells, a batch's calls beside their results, and nothing a run
holds can move the cursor, colour the terminal or start a line of its own
(``printable``). Every run is described from one pass over its events.
"""

from __future__ import annotations

import unicodedata
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import orjson

from agentloop._core.approval import key_text
from agentloop._core.messages import NOT_STARTED
from agentloop._core.table import State, Trigger
from agentloop._review.answers import Answers
from agentloop._review.eventrecord import rejected_record
from agentloop._review.held import held_calls, waits_for

if TYPE_CHECKING:
    from collections.abc import Iterator

    from agentloop._core.values import RunResult, Transition, Usage

__all__ = [
    "HEADERS",
    "LIMIT",
    "Events",
    "agents_line",
    "commentary",
    "describe",
    "event_cells",
    "groups",
    "input_messages",
    "printable",
    "rejected_text",
    "run_lines",
    "tokens_line",
]

#: Column headers for ``describe``'s cells.
HEADERS = ("step", "from → to", "trigger [guard]", "steps", "calls", "took", "call", "outcome")

#: How many characters of a value ``describe`` and ``run_lines`` show by default.
LIMIT: Final = 80
_HANDED: Final = (Trigger.VALIDATE, Trigger.HANDED_OFF)  # a handoff's: the agent handed to


# -- text for a terminal -----------------------------------------------------------

# Characters that would act on a terminal instead of being shown: controls (C0,
# DEL, C1: cursor moves, colours, titles), format characters (bidi overrides and
# isolates, zero-width joiners, soft hyphen), line and paragraph separators,
# and lone surrogates. Python's str.isprintable() is False for every one of them.
_UNSAFE: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_NAMED: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: str, keep: str = "") -> str:
    r"""``text`` as it can be shown on one terminal line, as Python escapes a string.

    Newlines, tabs and carriage returns become ``\n``, ``\t``, ``\r``; other
    controls ``\x1b``; bidi and other format characters and line separators
    ``\u202e``. Everything else, backslashes included, is left as it is, and so
    are the characters in ``keep``.
    """
    if text.isprintable():  # the common case: nothing to escape
        return text
    return "".join(
        _escaped(char) if char not in keep and unicodedata.category(char) in _UNSAFE else char
        for char in text
    )


def _short(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def _compact(value: object) -> str:
    return orjson.dumps(value).decode()


def describe(result: RunResult, index: int, *, limit: int | None = LIMIT) -> tuple[str, ...]:
    """Event ``index`` of ``result`` as cells under ``HEADERS``: what moved, why, what came of it.

    A call's outcome is its tool_result, which the batch's closing event
    appended (``result_of``). An error, a tool result's content, a final
    answer and the call are cut to ``limit`` characters (``None``: whole). The
    cells hold the run's text as it is: ``run_lines`` escapes them for a
    terminal, the report for HTML.
    """
    return event_cells(Events(result), index, limit)


class Events:
    """What describing one event needs from the others, each found once for a whole run.

    Describing every event is linear in the events: each one is scanned once
    for the batch that closes it (``Answers``) and once for the calls it asks
    a person about, never from the first event again.
    """

    __slots__ = ("_named", "_names", "answers", "result")

    def __init__(self, result: RunResult) -> None:
        self.result = result
        self.answers = Answers(result.events)
        self._names: dict[str, str] = {}
        self._named = 0  # the events whose pending calls are in ``_names``

    def names_before(self, index: int) -> dict[str, str]:
        """Each call a person was asked about before event ``index``: its tool's name, by key."""
        if index < self._named:  # asked out of order: count again from the start
            self._names, self._named = {}, 0
        events = self.result.events
        for at in range(self._named, index):
            self._names.update((key_text(call.key), call.name) for call in events[at].pending)
        self._named = max(self._named, index)
        return self._names


def event_cells(run: Events, index: int, limit: int | None) -> tuple[str, ...]:
    result = run.result
    transition = result.events[index]
    guard = f" [{transition.guard.value}]" if transition.guard else ""
    call = f"{transition.tool}#{transition.call_id}" if transition.call_id else ""
    appended = transition.appended
    answer = run.answers(index) if transition.result_status else None
    # A cancellation answers every call it cut off or that never started, not only the one
    # it names: the others are listed after it.
    cut = [
        f"{m.get('name')}#{m.get('id')} "
        + ("never started" if m.get("content") == NOT_STARTED else "cancelled")
        for m in appended
        if m.get("kind") == "tool_result"
        and m.get("status") == "cancelled"
        and m.get("id") != transition.call_id
    ]
    if transition.error:
        outcome = _short(transition.error, limit)
    elif transition.reason:
        outcome = f"budget spent: {transition.reason}"
    elif transition.source is State.VALIDATING and transition.dest is State.DISPATCHING:
        outcome = _accepted(run, index, limit)
    elif transition.trigger is Trigger.OUTPUT_CHECKED:  # what the output validators found
        found = orjson.loads(transition.input_json or b"[]")
        outcome = "refused: " + _short("; ".join(found), limit) if found else "accepted"
    elif transition.pending:
        asks = "; ".join(f"{c.name}#{key_text(c.key)} ({c.reason})" for c in transition.pending)
        outcome = "asks a person: " + _short(asks, limit)
    elif transition.decisions:
        outcome = _short(_decided(run, index), limit)
    elif answer is not None:
        outcome = _answer(answer, limit)
        if cut:
            outcome += "; also " + _short(", ".join(cut), limit)
    elif appended and appended[-1].get("kind") == "final":
        outcome = f"final: {_short(str(appended[-1].get('text')), limit)}"
    elif transition.dest is State.CANCELLED:
        outcome = "cancelled" + (f": {_short(', '.join(cut), limit)}" if cut else "")
    elif transition.usage is not None:
        outcome = f"tokens: {_tokens(transition.usage)}"
    else:
        outcome = transition.result_status or ""
    if transition.wait is not None:  # retry=: the wait the policy chose before the next ask
        outcome += f"; retry after {_seconds(transition.wait)}"
    if transition.model is not None:  # fallback models: which one this was
        outcome = f"{transition.model}: {outcome}" if outcome else transition.model
    if (agent := transition.agent) is not None:  # handoffs: the agent asked, or handed to
        named = f"{agent}: {outcome}" if outcome else agent
        outcome = f"handed off to {agent}" if transition.trigger in _HANDED else named
    outcome = _context_text(transition, outcome, limit)
    if transition.partial_text:  # a streaming reply cut off: what had arrived, never recorded
        outcome += f"; streamed before the cut: {_short(transition.partial_text, limit)!r}"
    budget = result.budget
    return (
        str(index + 1),
        f"{transition.source.value} → {transition.dest.value}",
        transition.trigger.value + guard,
        f"{transition.steps}/{budget.max_steps}",
        f"{transition.calls}/{budget.max_calls}",
        _seconds(transition.took),
        _short(call, limit),
        outcome,
    )


def _context_text(transition: Transition, outcome: str, limit: int | None) -> str:
    """(context) A summary's text, and what a model request was sent, after the outcome."""
    if transition.context is None:
        return outcome
    if transition.trigger is Trigger.SUMMARY_WRITTEN and transition.input_json:
        written = orjson.loads(transition.input_json)
        if type(written) is dict and type(written.get("text")) is str and not outcome:
            outcome = "summary: " + _short(written["text"], limit)
    sent = "sent " + transition.context.describe()
    return f"{outcome}; {sent}" if outcome else sent


def _decided(run: Events, index: int) -> str:
    """What a person decided, call by call: ``approved pay#b; denied pay#c: too much``."""
    names = run.names_before(index)
    return "; ".join(
        f"{'approved' if d.allowed else 'denied'} {names.get(key_text(key), '?')}#{key_text(key)}"
        + ("" if d.allowed else f": {d.reason}")
        for key, d in run.result.events[index].decisions
    )


def _accepted(run: Events, index: int, limit: int | None) -> str:
    """What a batch's accepting row says: how many calls, and the model's text beside them."""
    closer, events = run.answers.closer(index), run.result.events
    batch = run.result.held if closer is None else orjson.loads(events[closer].appended_json[0])
    if type(batch) is not dict or batch.get("kind") != "calls":
        return ""  # a lone call: the call cell names it
    text = batch.get("text")
    said = f": {_short(str(text), limit)}" if text else ""
    return f"batch of {len(batch.get('calls') or ())}{said}"


def _seconds(took: float | None) -> str:
    """How long a model call or a tool took: ``850 µs``, ``12 ms``, ``3.4 s``."""
    if took is None:
        return ""
    if took < 0.001:
        return f"{took * 1e6:.0f} µs"
    return f"{took * 1000:.0f} ms" if took < 1 else f"{took:.1f} s"


def tokens_line(result: RunResult) -> str | None:
    """The tokens a run's replies reported, against its token budget; None if neither."""
    budget, usage = result.budget.max_total_tokens, result.usage
    if not usage.total and budget is None:
        return None
    of = "" if budget is None else f" of {budget}"
    return f"{usage.total}{of}: {_tokens(usage)}"


def conversation_line(result: RunResult) -> str | None:
    """``conversation c, turn 3 (continues c::2)`` for a conversation's turn; else None."""
    if result.conversation_id is None:
        return None
    before = "" if result.continues is None else f" (continues {result.continues})"
    return f"conversation {result.conversation_id}, turn {result.turn}{before}"


def agents_line(result: RunResult) -> str | None:
    """``triage → billing``: the agents in force, in turn, for a run with handoffs; else None."""
    return None if result.agents is None else " → ".join(result.agents.in_turn(result.events))


def _tokens(usage: Usage) -> str:
    return f"{usage.input_tokens} in ({usage.cached_tokens} cached), {usage.output_tokens} out"


def input_messages(result: RunResult) -> list[dict[str, Any]]:
    """The messages the run was given: the transcript before anything it appended."""
    transcript = result.transcript
    appended = sum(len(event.appended_json) for event in result.events)
    return transcript[: len(transcript) - appended]


def _message_text(message: dict[str, Any]) -> str:
    """A message on one line: a text message's text, or the other fields as JSON."""
    if set(message) == {"kind", "text"} and isinstance(message["text"], str):
        return str(message["text"])
    return _compact({key: value for key, value in message.items() if key != "kind"})


def _answer(result: dict[str, Any], limit: int | None) -> str:
    """A tool_result on one line: its status and its content, cut to ``limit``."""
    return f"{result.get('status')}: {_short(_compact(result.get('content')), limit)}"


class _Group(NamedTuple):
    """A message of the transcript (at ``at``) and, for a call or a batch, each call's result."""

    at: int
    message: dict[str, Any]
    #: Each call the message made (a lone call is the message itself), with the
    #: index of its tool_result when that follows the message (else ``None``).
    answered: list[tuple[dict[str, Any], int | None]]


def groups(messages: list[dict[str, Any]]) -> Iterator[_Group]:
    """The messages in order; a call or a batch takes the results that follow it at once.

    A run appends a batch and its results together. Input history may answer
    a call further on: that result stays a message of its own.
    """
    index = 0
    while index < len(messages):
        message = messages[index]
        made = _calls(message)
        waiting = {call.get("id") for call in made}
        found: dict[object, int] = {}
        after = index + 1
        while (
            after < len(messages)
            and messages[after].get("kind") == "tool_result"
            and messages[after].get("id") in waiting
        ):
            waiting.remove(messages[after]["id"])
            found[messages[after]["id"]] = after
            after += 1
        yield _Group(index, message, [(call, found.get(call.get("id"))) for call in made])
        index = after


def _calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The calls a message made, each as a ``call`` message: none, itself, or a batch's."""
    if message.get("kind") == "call":
        return [message]
    batch = message.get("calls") if message.get("kind") == "calls" else None
    return [{"kind": "call", **call} for call in batch] if isinstance(batch, list) else []


def commentary(batch: dict[str, Any]) -> str:
    """A batch's text (the model's commentary), or its other fields as JSON; '' if none."""
    rest = {key: value for key, value in batch.items() if key != "calls"}
    return _message_text(rest) if len(rest) > 1 else ""


def _width(text: str) -> int:
    """Terminal columns ``text`` takes: wide East Asian characters take two, combining none."""
    return sum(
        0 if unicodedata.combining(char) else 2 if unicodedata.east_asian_width(char) in "WF" else 1
        for char in text
    )


def _columns(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows aligned in columns two spaces apart; no padding after a row's last cell."""
    widths = [max(_width(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = []
    for row in rows:
        last = max((column for column, cell in enumerate(row) if cell), default=0)
        padded = [cell + " " * (widths[column] - _width(cell)) for column, cell in enumerate(row)]
        lines.append("  ".join([*padded[:last], row[last]]))
    return lines


def run_lines(
    result: RunResult,
    *,
    title: str,
    limit: int | None = LIMIT,
) -> list[str]:
    """The run as lines of text: the input, one row per transition, then how it ended.

    Input messages and cells are cut to ``limit`` characters (``None``: whole);
    the closing lines are always whole. Every line is ``printable``.
    """
    run = Events(result)
    rows = [event_cells(run, index, limit) for index in range(len(result.events))]
    turn = conversation_line(result)
    lines = [title, ""] if turn is None else [title, turn, ""]
    given = input_messages(result)
    if given:
        lines.extend(["input", *_input_lines(given, limit), ""])
    lines.extend(_columns([tuple(map(printable, row)) for row in [HEADERS, *rows]]))
    lines.append("")
    budget = result.budget
    lines.extend(
        [
            f"status   {result.status.value}",
            f"steps    {result.steps} of {budget.max_steps}",
            f"calls    {result.calls} of {budget.max_calls}",
        ]
    )
    tokens = tokens_line(result)
    if tokens is not None:
        lines.append(f"tokens   {tokens}")
    if (agents := agents_line(result)) is not None:
        lines.append(f"agents   {agents}")
    if result.continues is not None and turn is None:  # a turn's first lines name it
        lines.append(f"continues run {result.continues}")
    for name in ("output", "reason", "error"):
        # A typed output is shown as its JSON, as its run file keeps it.
        value = result.output_text if name == "output" else getattr(result, name)
        if value is not None:
            lines.append(f"{name:<8} {value}")
    if result.rejected_value is not None:
        shown, note = rejected_text(result.rejected_value, indent=False)
        lines.append(f"rejected {shown}" + (f"  ({note})" if note else ""))
    for call, pending in held_calls(result):
        arguments = _short(orjson.dumps(call.get("arguments")).decode(), limit)
        waits = f": {waits_for(pending)}" if pending else "  (no person needed)"
        what = "pending " if pending else "held    "
        lines.append(f"{what} {call.get('name')}#{call.get('id')} {arguments}{waits}")
    return [printable(line) for line in lines]


def _input_lines(given: list[dict[str, Any]], limit: int | None) -> list[str]:
    """One line per input message; a call, or each call of a batch, beside its result."""
    lines = []
    for index, message, answered in groups(given):
        kind = message.get("kind")
        made = [_call_text(call, at, given, limit) for call, at in answered]
        if kind == "calls":
            note = commentary(message)
            lines.append(f"  #{index}  calls" + (f"  {_short(note, limit)}" if note else ""))
            lines.extend(f"        {text}" for text in made)
        elif kind == "call":
            lines.append(f"  #{index}  call  {made[0]}")
        else:
            lines.append(f"  #{index}  {kind}  {_short(_message_text(message), limit)}")
    return lines


def _call_text(
    call: dict[str, Any], at: int | None, messages: list[dict[str, Any]], limit: int | None
) -> str:
    """``tool#id arguments``, then ``→ #n status: content`` when its result is message n."""
    made = _short(f"{call.get('name')}#{call.get('id')} {_compact(call.get('arguments'))}", limit)
    return made if at is None else f"{made}  →  #{at} {_answer(messages[at], limit)}"


def rejected_text(value: object, *, indent: bool = True) -> tuple[str, str]:
    """A rejected reply as the run file keeps it, and a note when that is its repr."""
    record = rejected_record(value)
    assert record is not None, "only called for a reply"
    if "json" in record:
        option = orjson.OPT_INDENT_2 if indent else 0
        return orjson.dumps(record["json"], option=option).decode(), ""
    return record["repr"], "not JSON; shown by its repr"
