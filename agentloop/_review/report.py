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
from typing import Any

import orjson

from agentloop._core.values import RunResult, require_result
from agentloop._errors import SVGUnavailableError
from agentloop._review.diagram import path_svg, to_mermaid
from agentloop._review.held import held_calls, waits_for
from agentloop._review.runshape import FORMAT, VERSION
from agentloop._review.text import (
    HEADERS,
    LIMIT,
    Events,
    agents_line,
    commentary,
    conversation_line,
    event_cells,
    groups,
    printable,
    rejected_text,
    tokens_line,
)

__all__ = ["report_html"]


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
details.child { margin: .5rem 0 .5rem .5rem; padding-left: .75rem;
                border-left: 2px solid var(--line); }
details.child > summary { cursor: pointer; }
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
    ]
    parts.extend(_summary(result, ""))
    parts.extend(_diagram(result, svg))
    parts.extend(_run(result, ""))
    parts.append(
        f'<p class="note">Run file format {_e(FORMAT)} version {VERSION}. '
        "Made by agentloop; this page loads nothing from anywhere.</p>"
    )
    parts.extend(["</body>", "</html>"])
    return "\n".join(parts) + "\n"


def _run(result: RunResult, prefix: str) -> list[str]:
    """What the page shows of a run, below its summary and diagram: each id begins ``prefix``."""
    return [
        *_timeline(result, prefix),
        *_rejected(result, prefix),
        *_pending(result, prefix),
        *_transitions(result, prefix),
        *_children(result, prefix),
    ]


def _children(result: RunResult, prefix: str) -> list[str]:
    """Each agent tool's child run, under its call, in the order the calls were made.

    A ``<details>`` element each, closed: its summary names the call, the
    tool and how the child ended; inside, the child's own summary, transcript,
    transitions and children, every id prefixed with the path of call ids.
    """
    if not result.children:
        return []
    tools: dict[str, str | None] = {}  # each call's tool, in the order the calls were made
    for event in result.events:
        if event.call_id is not None:
            tools.setdefault(event.call_id, event.tool)
    parts = [f'<h2 id="{_e(prefix)}children">Child runs</h2>']
    for call_id in sorted(result.children, key=list(tools).index):
        child, tool, inner = result.children[call_id], tools[call_id], f"{prefix}{call_id}-"
        parts.append(
            f'<details class="child" id="{_e(inner)}run"><summary>call {_e(call_id)}'
            f"{'' if tool is None else f' · {_e(tool)}'} · "
            f'<span class="status {_e(child.status.value)}">{_e(child.status.value)}</span> · '
            f"{child.steps} steps, {child.calls} calls</summary>"
        )
        parts.extend(_summary(child, inner))
        parts.extend(_run(child, inner))
        parts.append("</details>")
    return parts


def _summary(result: RunResult, prefix: str) -> list[str]:
    budget = result.budget
    status = result.status.value
    parts = ['<dl class="summary">']
    summary: list[tuple[str, object]] = [
        ("status", status),
        ("output", result.output_text),  # a typed output's JSON, as its run file keeps it
        ("reason", result.reason),
        ("error", result.error),
        ("steps", f"{result.steps} of {budget.max_steps}"),
        ("calls", f"{result.calls} of {budget.max_calls}"),
        ("tokens", tokens_line(result)),
        ("transitions", len(result.events)),
        # A conversation's turn, and the turn before; else the run continue_run went on from.
        ("conversation", conversation_line(result)),
        ("agents", agents_line(result)),
        ("continues", None if result.conversation_id else result.continues),
    ]
    for name, value in summary:
        if value is not None:
            parts.append(f'<dt>{name}</dt><dd id="{_e(prefix)}summary-{name}">{_e(value)}</dd>')
    parts.append("</dl>")
    return parts


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
            "<code>agentloop diagram RUN.json</code> draws every row, labelled."
            "</figcaption></figure>"
        )
    else:
        parts.append(
            '<p class="note">The trace diagram in Mermaid (install agentloop-fsm[svg] '
            "to see it drawn here; any Mermaid viewer draws this text):</p>"
        )
        parts.append(f'<pre id="diagram" class="mermaid-source">{_e(to_mermaid(result))}</pre>')
    return parts


def _timeline(result: RunResult, prefix: str) -> list[str]:
    """The transcript in order; each call sits beside its result, a batch's calls in one group."""
    transcript = result.transcript
    appended = sum(len(event.appended_json) for event in result.events)
    first_of_run = len(transcript) - appended

    def entry(index: int) -> str:
        return _entry(index, transcript[index], input_=index < first_of_run)

    parts = [f'<h2 id="{_e(prefix)}transcript">Transcript</h2>', '<ol class="timeline">']
    for index, message, answered in groups(transcript):
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
        note = commentary(message)
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


def _rejected(result: RunResult, prefix: str) -> list[str]:
    if result.rejected_value is None:
        return []
    shown, note = rejected_text(result.rejected_value)
    return [
        f'<h2 id="{_e(prefix)}rejected">Rejected reply</h2>',
        '<p class="note">The reply the run was handling when it ended.'
        + (f" ({_e(note)})" if note else "")
        + "</p>",
        f'<pre id="{_e(prefix)}rejected-reply">{_e(shown)}</pre>',
    ]


def _pending(result: RunResult, prefix: str) -> list[str]:
    if not result.pending:
        return []
    parts = [
        f'<h2 id="{_e(prefix)}pending">Pending approval</h2>',
        '<p class="note">The run waits for a person to decide the calls marked pending '
        "(<code>loop.resume(result, decisions=...)</code>); the others of the batch need no "
        "person and run with them. No call of the batch has run.</p>",
        "<table><thead><tr><th>call</th><th>tool</th><th>arguments</th><th>waits for</th>"
        "<th>fingerprint</th></tr></thead><tbody>",
    ]
    for call, pending in held_calls(result):
        arguments = orjson.dumps(call.get("arguments")).decode()
        cells = (str(call.get("id")), str(call.get("name")), arguments)
        waits, fingerprint = "no person needed", ""
        if len(pending) == 1 and not pending[0].path:  # the call's own: as a person sees it
            own = pending[0]
            cells = (own.call_id, own.name, own.arguments_json.decode())
            fingerprint = f"{own.fingerprint[:16]}…"
        if pending:
            waits = f"pending: {waits_for(pending)}"
        parts.append(
            f'<tr class="{"pending" if pending else "held"}">'
            + "".join(f"<td>{_e(cell)}</td>" for cell in (*cells, waits))
            + f"<td><code>{_e(fingerprint)}</code></td></tr>"
        )
    parts.append("</tbody></table>")
    return parts


def _transitions(result: RunResult, prefix: str) -> list[str]:
    parts = [f'<h2 id="{_e(prefix)}transitions">Transitions</h2>', "<table>", "<thead><tr>"]
    parts.extend(f"<th>{_e(header)}</th>" for header in HEADERS)
    parts.append("</tr></thead><tbody>")
    run = Events(result)
    for index in range(len(result.events)):
        cells = event_cells(run, index, LIMIT)
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
