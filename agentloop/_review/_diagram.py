"""Mermaid, DOT and SVG for the state machine, generated from the table.

The edges are read from the same ``transitions`` machine the engine compiles,
so a diagram cannot show a row the engine does not run. Internal rows (which
keep the state) are drawn as self-loops, dashed in DOT.

Given a run (live or loaded from a run file), the same diagram marks its path:
visited states are filled, and each row's label ends with how many times the
run took it. Rows that leave an event are counted from ``result.events``.
Internal rows leave none, but a driver fires an internal row's trigger first
in its state, so it ran once before each event that leaves that state by
another trigger: the ``ask_model`` self-loop once per model reply or error
(``result.steps`` times: it is what counts a step), the ``start_tool``
self-loop once per tool outcome.

Mermaid's state diagrams can style states (``classDef``/``class``) but not
transitions (``linkStyle`` is for flowcharts), so there the count in the
label is the only mark on an edge; DOT also draws taken edges bold and the
others faint.
"""

from __future__ import annotations

import importlib
from collections import Counter
from typing import TYPE_CHECKING, Any

from agentloop._core._table import ANSWERS, ROWS, TERMINAL, Row, State
from agentloop._errors import SVGUnavailableError

if TYPE_CHECKING:
    from agentloop._core._values import RunResult

__all__ = ["edges", "taken", "to_dot", "to_mermaid", "to_svg", "visited"]

# Colours for a traced diagram: the path in blue, everything else faint grey.
_PATH, _PATH_FILL, _FAINT, _FAINT_TEXT = "#1d4ed8", "#dbeafe", "#cbd5e1", "#94a3b8"


def edges() -> tuple[Row, ...]:
    """Every row of the table, in table order."""
    return ROWS


def taken(result: RunResult) -> dict[Row, int]:
    """How many times ``result`` took each row of the table (0 for rows not taken)."""
    by_event = Counter((e.source, e.trigger, e.guard, e.dest) for e in result.events)
    # An internal row ran once for each event that answers the request it handed out.
    answered = Counter((e.source, ANSWERS.get(e.trigger)) for e in result.events)
    return {
        row: answered[row.source, row.trigger]
        if row.dest is None
        else by_event[row.source, row.trigger, row.guard, row.dest]
        for row in edges()
    }


def visited(result: RunResult) -> set[State]:
    """The states ``result`` was in: the initial one and every event's destination."""
    return {State.AWAITING_MODEL} | {event.dest for event in result.events}


def _title(result: RunResult) -> str:
    budget = result.budget
    return (
        f"agentloop run: {result.status.value} "
        f"(steps {result.steps}/{budget.max_steps}, calls {result.calls}/{budget.max_calls})"
    )


def _counted(label: str, count: int) -> str:
    return f"{label} ({count}x)" if count else label


def to_mermaid(run: RunResult | None = None) -> str:
    """A Mermaid ``stateDiagram-v2`` of the machine, with ``run``'s path marked if given."""
    counts = taken(run) if run is not None else {}
    # The run's title has a colon in it, so it is quoted for the YAML front matter.
    title = f'"{_title(run)}"' if run is not None else "agentloop"
    lines = ["---", f"title: {title}", "---", "stateDiagram-v2"]
    lines.append(f"    [*] --> {State.AWAITING_MODEL.value}")
    for edge in edges():
        label = _counted(edge.label, counts.get(edge, 0))
        lines.append(f"    {edge.source.value} --> {(edge.dest or edge.source).value}: {label}")
    lines.extend(f"    {state.value} --> [*]" for state in State if state in TERMINAL)
    if run is not None:
        seen = visited(run)
        lines.append(f"    classDef visited fill:{_PATH_FILL},stroke:{_PATH},stroke-width:3px")
        lines.append(f"    classDef unvisited fill:#f8fafc,stroke:{_FAINT},color:{_FAINT_TEXT}")
        for name, states in (("visited", seen), ("unvisited", set(State) - seen)):
            if states:
                ordered = [state.value for state in State if state in states]
                lines.append(f"    class {', '.join(ordered)} {name}")
    return "\n".join(lines) + "\n"


def to_dot(run: RunResult | None = None, *, rankdir: str = "TB") -> str:
    """A Graphviz DOT digraph of the machine; terminal states are double circles.

    With ``run``, its path is drawn bold and blue with counts, the rest faint.
    ``rankdir="LR"`` lays it out left to right (the report does: wide pages).
    """
    counts = taken(run) if run is not None else {}
    seen = visited(run) if run is not None else set()
    lines = [
        "digraph agentloop {",
        f'    rankdir="{rankdir}";',
        '    node [shape="box", style="rounded"];',
        '    "__start__" [shape="point", label=""];',
    ]
    for state in State:
        shape = "doublecircle" if state in TERMINAL else "box"
        mark = ""
        # Traced nodes name themselves: with a graph label, Graphviz blanks the default one.
        if run is not None and state in seen:
            mark = (
                f', label="{state.value}", style="rounded,filled,bold", '
                f'fillcolor="{_PATH_FILL}", color="{_PATH}"'
            )
        elif run is not None:
            mark = f', label="{state.value}", color="{_FAINT}", fontcolor="{_FAINT_TEXT}"'
        lines.append(f'    "{state.value}" [shape="{shape}"{mark}];')
    lines.append(f'    "__start__" -> "{State.AWAITING_MODEL.value}";')
    for edge in edges():
        dest = edge.dest if edge.dest is not None else edge.source
        style = ', style="dashed"' if edge.dest is None else ""
        count = counts.get(edge, 0)
        mark = ""
        if count:
            mark = f', color="{_PATH}", fontcolor="{_PATH}", penwidth="2.5"'
        elif run is not None:
            mark = f', color="{_FAINT}", fontcolor="{_FAINT_TEXT}"'
        label = _counted(edge.label, count)
        lines.append(f'    "{edge.source.value}" -> "{dest.value}" [label="{label}"{style}{mark}];')
    if run is not None:
        lines.append(f'    label="{_title(run)}"; labelloc="t";')
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_svg(run: RunResult | None = None, *, rankdir: str = "TB") -> str:
    """The DOT diagram rendered to SVG in-process by Graphviz (the ``svg`` extra).

    Raises ``SVGUnavailableError`` when ``pygraphviz`` is not installed.
    """
    try:
        # Imported by name: pygraphviz ships no type hints, and it is optional.
        pygraphviz: Any = importlib.import_module("pygraphviz")
    except ImportError as exc:
        raise SVGUnavailableError(
            "rendering SVG needs pygraphviz (its wheels bundle Graphviz): "
            "pip install 'agentloop[svg]'; or render the DOT text with Graphviz's "
            "`dot -Tsvg`, or use --format mermaid"
        ) from exc
    graph = pygraphviz.AGraph(string=to_dot(run, rankdir=rankdir))
    svg: bytes = graph.draw(format="svg", prog="dot")
    return svg.decode()
