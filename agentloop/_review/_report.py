"""Reading a run: as lines of plain text for a terminal, and as one HTML page.

The text (``run_lines``, what ``agentloop show`` and the demo print) is safe
to send to a terminal: every piece of the run goes through ``printable``, so a
run file cannot move the cursor, start a line of its own or reorder text.

The report is self-contained: inline CSS, no scripts, no fonts, no links out,
and a Content-Security-Policy that would refuse any load a future edit added.
Every piece of the run (messages, errors, the rejected reply) goes through
``html.escape``; the only markup not written here is the SVG Graphviz renders
from the table's own names.
"""

from __future__ import annotations

import html
import unicodedata
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import orjson

from agentloop._core._messages import NOT_STARTED
from agentloop._core._table import State
from agentloop._core._values import require_result
from agentloop._errors import SVGUnavailableError
from agentloop._review._diagram import path_svg, to_mermaid
from agentloop._review._replay import Answers
from agentloop._review._runshape import FORMAT, VERSION, rejected_record

if TYPE_CHECKING:
    from collections.abc import Iterator

    from agentloop._core._approval import PendingCall
    from agentloop._core._values import RunResult, Usage

__all__ = [
    "HEADERS",
    "LIMIT",
    "describe",
    "input_messages",
    "printable",
    "rejected_text",
    "report_html",
    "run_lines",
]

#: Column headers for ``describe``'s cells.
HEADERS = ("step", "from → to", "trigger [guard]", "steps", "calls", "took", "call", "outcome")

#: How many characters of a value ``describe`` and ``run_lines`` show by default.
LIMIT: Final = 80


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
    return _describe(_Events(result), index, limit)


class _Events:
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
        """Each call a person was asked about before event ``index``: its tool's name, by id."""
        if index < self._named:  # asked out of order: count again from the start
            self._names, self._named = {}, 0
        events = self.result.events
        for at in range(self._named, index):
            self._names.update((call.call_id, call.name) for call in events[at].pending)
        self._named = max(self._named, index)
        return self._names


def _describe(run: _Events, index: int, limit: int | None) -> tuple[str, ...]:
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
    elif transition.pending:
        outcome = "asks a person: " + _short(
            "; ".join(f"{c.name}#{c.call_id} ({c.reason})" for c in transition.pending), limit
        )
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


def _decided(run: _Events, index: int) -> str:
    """What a person decided, call by call: ``approved pay#b; denied pay#c: too much``."""
    names = run.names_before(index)
    return "; ".join(
        f"{'approved' if d.allowed else 'denied'} {names.get(call_id, '?')}#{call_id}"
        + ("" if d.allowed else f": {d.reason}")
        for call_id, d in run.result.events[index].decisions
    )


def _accepted(run: _Events, index: int, limit: int | None) -> str:
    """What a batch's accepting row says: how many calls, and the model's text beside them."""
    closer = run.answers.closer(index)
    batch = (
        run.result.held
        if closer is None
        else orjson.loads(run.result.events[closer].appended_json[0])
    )
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


def _spent(result: RunResult) -> str | None:
    """The tokens a run's replies reported, against its token budget; None if neither."""
    budget, usage = result.budget.max_total_tokens, result.usage
    if not usage.total and budget is None:
        return None
    of = "" if budget is None else f" of {budget}"
    return f"{usage.total}{of}: {_tokens(usage)}"


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


def _groups(messages: list[dict[str, Any]]) -> Iterator[_Group]:
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


def _commentary(batch: dict[str, Any]) -> str:
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
    run = _Events(result)
    rows = [_describe(run, index, limit) for index in range(len(result.events))]
    lines = [title, ""]
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
    spent = _spent(result)
    if spent is not None:
        lines.append(f"tokens   {spent}")
    for name in ("output", "reason", "error"):
        value = getattr(result, name)
        if value is not None:
            lines.append(f"{name:<8} {value}")
    if result.rejected_value is not None:
        shown, note = rejected_text(result.rejected_value, indent=False)
        lines.append(f"rejected {shown}" + (f"  ({note})" if note else ""))
    for call, pending in _held_calls(result):
        arguments = _short(orjson.dumps(call.get("arguments")).decode(), limit)
        waits = f": {pending.reason}" if pending else "  (no person needed)"
        what = "pending " if pending else "held    "
        lines.append(f"{what} {call.get('name')}#{call.get('id')} {arguments}{waits}")
    return [printable(line) for line in lines]


def _input_lines(given: list[dict[str, Any]], limit: int | None) -> list[str]:
    """One line per input message; a call, or each call of a batch, beside its result."""
    lines = []
    for index, message, answered in _groups(given):
        kind = message.get("kind")
        made = [_call_text(call, at, given, limit) for call, at in answered]
        if kind == "calls":
            note = _commentary(message)
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


# -- the HTML report -------------------------------------------------------------

_CSS = """
:root { --ink: #1f2937; --mute: #6b7280; --line: #e5e7eb; --blue: #1d4ed8; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 72rem; padding: 1.5rem; color: var(--ink);
       font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; }
h1 { font-size: 1.5rem; margin: 0 0 .75rem; }
h2 { font-size: 1.15rem; margin: 2rem 0 .75rem; border-bottom: 1px solid var(--line); }
pre, code { font: 13px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; }
pre { margin: .25rem 0 0; padding: .5rem .6rem; background: #f8fafc; border-radius: 6px;
      white-space: pre-wrap; overflow-wrap: anywhere; }
.status { display: inline-block; padding: .1rem .6rem; border-radius: 999px; color: #fff;
          background: #b91c1c; }
.status.finished { background: #15803d; }
.status.cancelled, .status.exhausted { background: #b45309; }
dl.summary { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem; }
dl.summary dt { color: var(--mute); }
dl.summary dd { margin: 0; overflow-wrap: anywhere; }
figure { margin: 0; padding: .5rem; border: 1px solid var(--line); border-radius: 6px; }
/* Drawn at its own size, and shrunk to fit a narrow column (the width and
   height Graphviz writes would hold it at its full size). */
figure svg { display: block; margin: 0 auto; max-width: 100%; height: auto; }
figcaption { margin-top: .5rem; }
.key { display: inline-block; width: 1.5rem; margin: 0 .35rem .2rem 0; vertical-align: middle;
       border-top: 3px solid #1d4ed8; }
.key.other { border-top: 2px dashed #cbd5e1; margin-left: .35rem; }
.note { color: var(--mute); font-size: .9rem; }
ol.timeline { list-style: none; padding: 0; margin: 0; }
ol.timeline > li { margin: 0 0 .75rem; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: .75rem; }
/* A batch: the reply (its text, the model's commentary) over its calls, each beside its result. */
ol.timeline > li.batch { padding: .5rem; border: 1px dashed var(--blue); border-radius: 6px; }
.batch > .pair { margin-top: .75rem; }
/* On a phone a call and its result go one above the other, closer than to the next pair. */
@media (max-width: 40rem) { .pair { grid-template-columns: 1fr; gap: .3rem; } }
.entry { border: 1px solid var(--line); border-left: 4px solid var(--mute); border-radius: 6px;
         padding: .5rem .75rem; min-width: 0; }
.entry .who { font-size: .85rem; color: var(--mute); overflow-wrap: anywhere; }
.entry .text { margin: .25rem 0 0; white-space: pre-wrap; overflow-wrap: anywhere; }
.entry.user { border-left-color: #7c3aed; }
.entry.call, .entry.calls { border-left-color: var(--blue); }
.entry.tool_result { border-left-color: #15803d; }
.entry.tool_result.failed { border-left-color: #b91c1c; }
.entry.final { border-left-color: #0f766e; }
.entry.input { background: #fafafa; }
table { border-collapse: collapse; width: 100%; font-size: .9rem; }
th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid var(--line);
         vertical-align: top; }
/* Headers and the table's own names stay whole ("ste|p" is no header); the
   run's content (the call, the outcome) breaks anywhere to fit what is left. */
th, td:nth-child(-n+6) { white-space: nowrap; }
td { overflow-wrap: anywhere; }
td:nth-child(7) { min-width: 8rem; }  /* room for tool#id before the outcome takes the rest */
th { color: var(--mute); font-weight: 600; }
/* Below about 900px there is no room for eight columns: each transition becomes
   a small card, its cells one per line under their headers' names. */
@media (max-width: 60rem) {
  table, tbody, tr, td { display: block; }
  thead { display: none; }
  tr { padding: .4rem 0; border-bottom: 1px solid var(--line); }
  td, td:nth-child(-n+6) { display: grid; grid-template-columns: 7.5rem 1fr; gap: .5rem;
                           padding: .05rem 0; border: 0; white-space: normal; }
  td::before { content: attr(data-label); color: var(--mute); }
  td:empty { display: none; }
}
"""

# No script, font, image or stylesheet may load: the page needs nothing from outside.
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def _e(value: object) -> str:
    r"""``value`` as HTML text, with controls and bidi or format characters escaped.

    They show as ``\u202e``, so no run's text can reorder or hide what the page
    shows; newlines and tabs stay, for the ``<pre>`` blocks.
    """
    return html.escape(printable(str(value), keep="\n\t"), quote=True)


def _pretty(value: object) -> str:
    """JSON, indented, escaped for a ``<pre>``."""
    return _e(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


def report_html(result: RunResult, *, svg: bool | None = None) -> str:
    """The run as one self-contained HTML page.

    ``svg=None`` inlines the trace diagram as SVG when pygraphviz is installed
    and falls back to its Mermaid source; ``True`` requires SVG, ``False``
    always shows the Mermaid source.
    """
    status = require_result(result, "report_html()").status.value
    budget = result.budget
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>agentloop run: {_e(status)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        f'<h1>agentloop run <span id="status" class="status {_e(status)}">{_e(status)}</span></h1>',
        '<dl class="summary">',
    ]
    summary: list[tuple[str, object]] = [
        ("status", status),
        ("output", result.output),
        ("reason", result.reason),
        ("error", result.error),
        ("steps", f"{result.steps} of {budget.max_steps}"),
        ("calls", f"{result.calls} of {budget.max_calls}"),
        ("tokens", _spent(result)),
        ("transitions", len(result.events)),
    ]
    for name, value in summary:
        if value is not None:
            parts.append(f'<dt>{name}</dt><dd id="summary-{name}">{_e(value)}</dd>')
    parts.append("</dl>")
    parts.extend(_diagram(result, svg))
    parts.extend(_timeline(result))
    parts.extend(_rejected(result))
    parts.extend(_pending(result))
    parts.extend(_transitions(result))
    parts.append(
        f'<p class="note">Run file format {_e(FORMAT)} version {VERSION}. '
        "Made by agentloop; this page loads nothing from anywhere.</p>"
    )
    parts.extend(["</body>", "</html>"])
    return "\n".join(parts) + "\n"


def _diagram(result: RunResult, svg: bool | None) -> list[str]:
    parts = ['<h2 id="path">Path</h2>']
    rendered = None
    if svg is not False:
        try:
            rendered = path_svg(result)
        except SVGUnavailableError:
            if svg:
                raise
    if rendered is not None:
        # Graphviz's SVG from the table's own names: inlined as markup, minus the
        # XML prolog and doctype that only a standalone file needs.
        parts.append(
            f'<figure id="diagram">{rendered[rendered.index("<svg") :]}'
            '<figcaption class="note"><span class="key taken"></span>'
            "what the run did: each row of the state table it took, as "
            "<code>trigger (times taken) [guard]</code>; "
            '<span class="key other"></span>'
            "where else it could have gone from the states it was in. "
            "<code>agentloop diagram --run</code> draws every row, labelled.</figcaption></figure>"
        )
    else:
        parts.append(
            '<p class="note">The trace diagram in Mermaid (install agentloop-fsm[svg] '
            "to see it drawn here; any Mermaid viewer draws this text):</p>"
        )
        parts.append(f'<pre id="diagram" class="mermaid-source">{_e(to_mermaid(result))}</pre>')
    return parts


def _timeline(result: RunResult) -> list[str]:
    """The transcript in order; each call sits beside its result, a batch's calls in one group."""
    transcript = result.transcript
    appended = sum(len(event.appended_json) for event in result.events)
    first_of_run = len(transcript) - appended

    def entry(index: int) -> str:
        return _entry(index, transcript[index], input_=index < first_of_run)

    parts = ['<h2 id="transcript">Transcript</h2>', '<ol class="timeline">']
    for index, message, answered in _groups(transcript):
        if message.get("kind") == "calls":
            parts.append(f'<li class="batch">{entry(index)}')
            for call, at in answered:
                element = _entry(None, call, input_=index < first_of_run)
                parts.append(f'<div class="pair">{element}{"" if at is None else entry(at)}</div>')
            parts.append("</li>")
        elif answered and answered[0][1] is not None:  # a lone call and its result
            parts.append(f'<li class="pair">{entry(index)}{entry(answered[0][1])}</li>')
        else:
            parts.append(f"<li>{entry(index)}</li>")
    parts.append("</ol>")
    return parts


def _entry(index: int | None, message: dict[str, Any], *, input_: bool) -> str:
    """A message of the transcript at ``index``, or (``None``) one call of a batch."""
    kind = str(message.get("kind"))
    origin = " · input" if input_ else ""
    classes = f"entry {_e(kind)}" + (" input" if input_ else "")
    if kind == "call":
        who = f"call {_e(message.get('name'))} · id {_e(message.get('id'))}"
        body = f"<pre>{_pretty(message.get('arguments'))}</pre>"
    elif kind == "calls":
        who = f"batch of {len(message['calls'])} calls"
        note = _commentary(message)
        body = f'<p class="text">{_e(note)}</p>' if note else ""
    elif kind == "tool_result":
        status = str(message.get("status"))
        classes += "" if status == "ok" else " failed"
        who = f"result of {_e(message.get('name'))} · id {_e(message.get('id'))} · {_e(status)}"
        body = f"<pre>{_pretty(message.get('content'))}</pre>"
    elif set(message) == {"kind", "text"} and isinstance(message["text"], str):
        who = _e(kind)
        body = f'<p class="text">{_e(message["text"])}</p>'
    else:
        who = _e(kind)
        body = f"<pre>{_pretty(message)}</pre>"
    mark, number = (
        (f'data-call="{_e(message.get("id"))}"', "")
        if index is None
        else (f'data-entry="{index}"', f"#{index} ")
    )
    return f'<div class="{classes}" {mark}><div class="who">{number}{who}{origin}</div>{body}</div>'


def rejected_text(value: object, *, indent: bool = True) -> tuple[str, str]:
    """A rejected reply as the run file keeps it, and a note when that is its repr."""
    record = rejected_record(value)
    assert record is not None, "only called for a reply"
    if "json" in record:
        option = orjson.OPT_INDENT_2 if indent else 0
        return orjson.dumps(record["json"], option=option).decode(), ""
    return record["repr"], "not JSON; shown by its repr"


def _rejected(result: RunResult) -> list[str]:
    if result.rejected_value is None:
        return []
    shown, note = rejected_text(result.rejected_value)
    return [
        '<h2 id="rejected">Rejected reply</h2>',
        '<p class="note">The reply the run was handling when it ended.'
        + (f" ({_e(note)})" if note else "")
        + "</p>",
        f'<pre id="rejected-reply">{_e(shown)}</pre>',
    ]


def _held_calls(result: RunResult) -> list[tuple[dict[str, Any], PendingCall | None]]:
    """Each call of the batch a paused run holds, with its pending entry if a person decides it."""
    asked = {call.call_id: call for call in result.pending}
    held = result.held or {}
    calls = held.get("calls") or ([held] if held.get("kind") == "call" else [])
    return [(call, asked.get(call.get("id"))) for call in calls]


def _pending(result: RunResult) -> list[str]:
    if not result.pending:
        return []
    parts = [
        '<h2 id="pending">Pending approval</h2>',
        '<p class="note">The run waits for a person to decide the calls marked pending '
        "(<code>loop.resume(result, decisions=...)</code>); the others of the batch need no "
        "person and run with them. No call of the batch has run.</p>",
        "<table><thead><tr><th>call</th><th>tool</th><th>arguments</th><th>waits for</th>"
        "<th>fingerprint</th></tr></thead><tbody>",
    ]
    for call, pending in _held_calls(result):
        if pending is None:
            arguments = orjson.dumps(call.get("arguments")).decode()
            cells = (str(call.get("id")), str(call.get("name")), arguments)
            waits, fingerprint = "no person needed", ""
        else:
            cells = (pending.call_id, pending.name, pending.arguments_json.decode())
            waits, fingerprint = f"pending: {pending.reason}", f"{pending.fingerprint[:16]}…"
        parts.append(
            f'<tr class="{"held" if pending is None else "pending"}">'
            + "".join(f"<td>{_e(cell)}</td>" for cell in (*cells, waits))
            + f"<td><code>{_e(fingerprint)}</code></td></tr>"
        )
    parts.append("</tbody></table>")
    return parts


def _transitions(result: RunResult) -> list[str]:
    parts = ['<h2 id="transitions">Transitions</h2>', "<table>", "<thead><tr>"]
    parts.extend(f"<th>{_e(header)}</th>" for header in HEADERS)
    parts.append("</tr></thead><tbody>")
    run = _Events(result)
    for index in range(len(result.events)):
        cells = _describe(run, index, LIMIT)
        parts.append(
            "<tr>"
            + "".join(
                f'<td data-label="{_e(header)}">{_e(cell)}</td>'
                for header, cell in zip(HEADERS, cells, strict=True)
            )
            + "</tr>"
        )
    parts.append("</tbody></table>")
    return parts
