"""Mermaid, DOT and SVG for the state machine, generated from the table.

The edges are the table's own rows, the ones the engine runs, so a diagram
cannot show a row the engine does not run: by default the whole table
(``ROWS``), or with ``features=`` the table of one configuration (the basic
rows and those of the features named, ``agentloop.engine.Feature``). Internal
rows (which keep the state) are drawn as self-loops, dashed in DOT.

Given a run (live or loaded from a run file), the same diagram marks its path:
visited states are filled, and each row's label ends with how many times the
run took it. Rows that leave an event are counted from ``result.events``.
Internal rows leave none, but each hands out a request that exactly one later
event answers (``ANSWERS`` in the table): the ``ask_model`` self-loop ran once
per model reply, error or interruption (``result.steps`` times: it is what
counts a step), the ``start_tool`` self-loop once per tool outcome.

Mermaid's state diagrams can style states (``classDef``/``class``) but not
transitions (``linkStyle`` is for flowcharts), so there the count in the
label is the only mark on an edge; DOT also draws taken edges bold and the
others faint. ``path_dot`` is the compact drawing of one run the report
shows: only the states it was in, the rows it took, and where else it could
have gone.

Every render goes through ``_render``, which keeps the warnings of the
fontconfig bundled in pygraphviz's wheels off stderr.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from agentloop._core.build import ROWS, Row, table_for
from agentloop._core.table import ANSWERS, TERMINAL, Feature, Guard, State, Trigger
from agentloop._core.values import RunResult, require_result
from agentloop._drivers.transition import RunView
from agentloop._errors import SVGUnavailableError

__all__ = [
    "edges",
    "path_dot",
    "path_svg",
    "taken",
    "to_dot",
    "to_mermaid",
    "to_svg",
    "untaken",
    "visited",
]

# Colours for a traced diagram: the path in blue, everything else faint grey.
_PATH, _PATH_FILL, _FAINT, _FAINT_TEXT = "#1d4ed8", "#dbeafe", "#cbd5e1", "#94a3b8"


def edges(features: Iterable[Feature | str] | None = None) -> tuple[Row, ...]:
    """The rows of the table, in table order: all of them, or one configuration's.

    ``features`` names the features a configuration turns on (``Feature``
    members or their values, ``'output'``, ``'wrap_up'``...): its table is
    the basic rows and theirs.
    """
    if features is None:
        return ROWS
    return table_for(_features(features)).rows


def _features(features: Iterable[Feature | str]) -> frozenset[Feature]:
    """``features`` as members; else a ``TypeError``/``ValueError`` naming the known ones."""
    known = ", ".join(repr(feature.value) for feature in Feature)
    if isinstance(features, str) or not hasattr(features, "__iter__"):
        raise TypeError(
            f"expected features to be an iterable of features ({known}), "
            f"got {type(features).__name__}"
        )
    on = {Feature.BASIC}
    for feature in features:
        try:
            on.add(Feature(feature))
        except ValueError:
            raise ValueError(f"expected features among {known}, got {feature!r:.40}") from None
    return frozenset(on)


def taken(result: RunResult | RunView) -> dict[Row, int]:
    """How many times ``result`` took each row of the table (0 for rows not taken)."""
    by_event = Counter((e.source, e.trigger, e.guard, e.dest) for e in result.events)
    # An internal row ran once for each event that answers the request it handed out;
    # once the run wraps up (on_exhausted='answer'), the ask is the wrapping_up row's. A
    # review is answered by approval_asked, and one that asked nobody is not recorded.
    answered: Counter[tuple[State, object, Guard | None]] = Counter()
    wrapping = False
    for event in result.events:
        wrapping = wrapping or event.guard in _WRAP_UP_BEGUN
        answers = ANSWERS.get(event.trigger)
        guard = Guard.WRAPPING_UP if wrapping and answers is Trigger.ASK_MODEL else None
        if answers is Trigger.VALIDATE:  # the output validators' check: its own row hands it out
            guard = Guard.OUTPUT_CHECK_DUE
        answered[event.source, answers, guard] += 1
    reviews = Counter(e.source for e in result.events if e.trigger is Trigger.APPROVAL_ASKED)

    def internal(row: Row) -> int:
        if row.guard is Guard.BATCH_UNREVIEWED:
            return reviews[row.source]
        if row.trigger is Trigger.APPROVAL_ASKED:
            return 0
        return answered[row.source, row.trigger, row.guard]

    return {
        row: internal(row)
        if row.dest is None
        else by_event[row.source, row.trigger, row.guard, row.dest]
        for row in edges()
    }


_WRAP_UP_BEGUN = (Guard.WRAP_UP_DUE, Guard.CALLS_EXHAUSTED_WRAP_UP)


def visited(result: RunResult | RunView) -> set[State]:
    """The states ``result`` was in: the initial one and every event's destination."""
    return {State.AWAITING_MODEL} | {event.dest for event in result.events}


def _title(result: RunResult) -> str:
    budget = result.budget
    return (
        f"agentloop run: {result.status.value} "
        f"(steps {result.steps}/{budget.max_steps}, calls {result.calls}/{budget.max_calls})"
    )


def _machine(features: Iterable[Feature | str] | None) -> str:
    """The title of the machine's diagram: its configuration's features, when one is drawn."""
    if features is None:
        return "agentloop"
    on = _features(features)
    # Quoted: the colon would end the YAML front matter's value.
    return '"agentloop: ' + ", ".join(feature.value for feature in Feature if feature in on) + '"'


def _states(rows: tuple[Row, ...]) -> list[State]:
    """The states ``rows`` join, and the initial one, in ``State``'s order."""
    joined = {State.AWAITING_MODEL} | {row.source for row in rows} | {row.dest for row in rows}
    return [state for state in State if state in joined]


def _counted(label: str, count: int) -> str:
    return f"{label} ({count}x)" if count else label


def _trigger_guard(row: Row) -> str:
    return row.trigger.value + (f" [{row.guard.value}]" if row.guard else "")


def to_mermaid(
    run: RunResult | None = None, *, features: Iterable[Feature | str] | None = None
) -> str:
    """A Mermaid ``stateDiagram-v2`` of the machine, with ``run``'s path marked if given.

    Laid out left to right, with one arrow per pair of states: the rows
    between them are its label, one ``trigger [guard]`` a line in table order
    (effects are left out: Mermaid's layout puts long labels over each other;
    DOT shows them). ``features``: draw one configuration's table (see ``edges``).
    """
    counts = taken(require_result(run, "to_mermaid()")) if run is not None else {}
    rows = edges(features)
    # The run's title has a colon in it, so it is quoted for the YAML front matter.
    title = f'"{_title(run)}"' if run is not None else _machine(features)
    lines = ["---", f"title: {title}", "---", "stateDiagram-v2", "    direction LR"]
    lines.append(f"    [*] --> {State.AWAITING_MODEL.value}")
    pairs: dict[tuple[State, State], list[str]] = {}
    for edge in rows:
        label = _counted(_trigger_guard(edge), counts.get(edge, 0))
        pairs.setdefault((edge.source, edge.dest or edge.source), []).append(label)
    for (source, dest), labels in pairs.items():
        lines.append(f"    {source.value} --> {dest.value}: {'<br>'.join(labels)}")
    drawn = _states(rows)
    lines.extend(f"    {state.value} --> [*]" for state in drawn if state in TERMINAL)
    if run is not None:
        seen = visited(run)
        lines.append(f"    classDef visited fill:{_PATH_FILL},stroke:{_PATH},stroke-width:3px")
        lines.append(f"    classDef unvisited fill:#f8fafc,stroke:{_FAINT},color:{_FAINT_TEXT}")
        for name, states in (("visited", seen & set(drawn)), ("unvisited", set(drawn) - seen)):
            if states:
                ordered = [state.value for state in drawn if state in states]
                lines.append(f"    class {', '.join(ordered)} {name}")
    return "\n".join(lines) + "\n"


def to_dot(
    run: RunResult | None = None,
    *,
    rankdir: str = "TB",
    features: Iterable[Feature | str] | None = None,
) -> str:
    """A Graphviz DOT digraph of the machine; terminal states are double circles.

    With ``run``, its path is drawn bold and blue with counts, the rest faint.
    ``rankdir="LR"`` lays it out left to right (the report does: wide pages).
    ``features``: draw one configuration's table (see ``edges``).
    """
    counts = taken(require_result(run, "to_dot()")) if run is not None else {}
    rows = edges(features)
    seen = visited(run) if run is not None else set()
    lines = [
        "digraph agentloop {",
        f'    rankdir="{rankdir}";',
        '    node [shape="box", style="rounded"];',
        '    "__start__" [shape="point", label=""];',
    ]
    for state in _states(rows):
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
    for edge in rows:
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


def untaken(result: RunResult | RunView) -> dict[tuple[State, State], list[Row]]:
    """The rows ``result`` never took, by the pair of states each would have joined."""
    pairs: dict[tuple[State, State], list[Row]] = {}
    for row, count in taken(result).items():
        if not count:
            pairs.setdefault((row.source, row.dest or row.source), []).append(row)
    return pairs


def path_dot(run: RunResult | RunView) -> str:
    """A compact DOT digraph of ``run``'s path, for a page column (the report's).

    Only the states the run was in are drawn, top to bottom, so that it is tall
    rather than wide. The rows it took are bold, labelled ``trigger (Nx)
    [guard]`` (effects left out: the full diagram has them), one arrow per pair
    of states. The rows it did not take are faint and unlabelled: one arrow per
    pair of visited states, and, beside each state, one arrow to the list of the
    states it could also have gone to. Rows out of states the run was never in
    are left out. ``run`` is a run's result (or a loaded run), or a run
    itself (``Run``, ``AsyncRun``), drawn as far as it has gone: a live page
    redraws it after each transition.
    """
    result = run if isinstance(run, RunView) else require_result(run, "path_dot()")
    seen = visited(result)
    lines = [
        "digraph agentloop {",
        '    rankdir="TB"; nodesep="0.2"; ranksep="0.35";',
        f'    node [shape="box", style="rounded,filled,bold", fillcolor="{_PATH_FILL}", '
        f'color="{_PATH}", fontname="Helvetica,Arial,sans-serif", fontsize="13", height="0.35"];',
        f'    edge [color="{_PATH}", fontcolor="{_PATH}", fontname="Helvetica,Arial,sans-serif", '
        'fontsize="11", arrowsize="0.7"];',
        f'    "__start__" [shape="point", label="", width="0.12", color="{_PATH}"];',
    ]
    for state in State:
        if state in seen:
            double = ', peripheries="2"' if state in TERMINAL else ""
            lines.append(f'    "{state.value}" [label="{state.value}"{double}];')
    lines.append(f'    "__start__" -> "{State.AWAITING_MODEL.value}";')
    # Rows between the same two states share one arrow, a row under another, and a
    # guard goes on a line of its own: this keeps the labels, and so the diagram, narrow
    # (a batch's two self-loops on dispatching, side by side, doubled its width).
    labels: dict[tuple[State, State], list[str]] = {}
    for row, count in taken(result).items():
        if count:
            guard = f"\\n[{row.guard.value}]" if row.guard else ""
            pair = (row.source, row.dest or row.source)
            labels.setdefault(pair, []).append(f"{row.trigger.value} ({count}x){guard}")
    for (source, dest), texts in labels.items():
        label = "\\n".join(texts)
        lines.append(f'    "{source.value}" -> "{dest.value}" [label="{label}", penwidth="2"];')
    faint = f'color="{_FAINT}", arrowsize="0.5"'
    elsewhere: dict[State, list[State]] = {}
    for source, dest in untaken(result):
        if source not in seen:
            continue
        if dest in seen:
            lines.append(f'    "{source.value}" -> "{dest.value}" [{faint}];')
        elif dest not in elsewhere.setdefault(source, []):
            elsewhere[source].append(dest)
    for source, dests in elsewhere.items():
        names = "\\n".join(dest.value for dest in dests)
        lines.append(
            f'    "{source.value} elsewhere" [shape="none", style="", label="{names}", '
            f'fontsize="10", fontcolor="{_FAINT_TEXT}", height="0"];'
        )
        lines.append(
            f'    "{source.value}" -> "{source.value} elsewhere" [{faint}, style="dashed"];'
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


def path_svg(run: RunResult | RunView) -> str:
    """``path_dot`` rendered to SVG by Graphviz (the ``svg`` extra).

    Raises ``SVGUnavailableError`` when ``pygraphviz`` is not installed.
    """
    return _render(path_dot(run))


def to_svg(
    run: RunResult | None = None,
    *,
    rankdir: str = "TB",
    features: Iterable[Feature | str] | None = None,
) -> str:
    """The DOT diagram rendered to SVG in-process by Graphviz (the ``svg`` extra).

    Raises ``SVGUnavailableError`` when ``pygraphviz`` is not installed.
    """
    if run is not None:
        require_result(run, "to_svg()")
    return _render(to_dot(run, rankdir=rankdir, features=features))


def _render(dot: str) -> str:
    try:
        # Imported by name: pygraphviz ships no type hints, and it is optional.
        pygraphviz: Any = importlib.import_module("pygraphviz")
    except ImportError as exc:
        raise SVGUnavailableError(
            "rendering SVG needs pygraphviz (its wheels bundle Graphviz): "
            "pip install 'agentloop-fsm[svg]'; or render the DOT text with Graphviz's "
            "`dot -Tsvg`, or use --format mermaid"
        ) from exc
    with _RENDERING, _fontconfig_warnings_dropped():
        svg: bytes = pygraphviz.AGraph(string=dot).draw(format="svg", prog="dot")
    return svg.decode()


# Graphviz is not thread-safe, and the stderr redirection below is process-wide.
_RENDERING = threading.Lock()


@contextlib.contextmanager
def _fontconfig_warnings_dropped() -> Iterator[None]:
    """Drop the ``Fontconfig warning:`` lines the render writes to stderr; keep the rest.

    pygraphviz's wheels bundle fontconfig 2.13, which reads the system's font
    configuration when the first render starts and warns, on the C-level
    stderr, about every element a newer system uses (Debian 12:
    ``unknown element "reset-dirs"``). Nothing in them concerns agentloop's
    caller, and no setting avoids them: 2.13 also reads the system's
    ``conf.avail`` folder, whatever ``FONTCONFIG_FILE`` says. So file
    descriptor 2 points at a temporary file while Graphviz runs, and what was
    written there is passed on afterwards, less those lines.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no stderr to guard
        yield
        return
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            kept = [
                line
                for line in caught.read().splitlines(keepends=True)
                if not line.startswith(b"Fontconfig warning: ")
            ]
            if kept:
                with open(2, "wb", closefd=False) as stderr:
                    stderr.write(b"".join(kept))
