"""Run-trace diagrams: the machine's diagram with one run's path and counts marked."""

from __future__ import annotations

import os
import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import (
    Loop,
    RunResult,
    State,
    SVGUnavailableError,
    Trigger,
    to_dot,
    to_mermaid,
    to_svg,
)
from agentloop._demo import demo_loop
from agentloop._review._diagram import edges, taken

from .helpers import Script
from .test_runfile import REPLIES, random_run


@pytest.fixture(scope="module")
def demo() -> RunResult:
    """The demo's run: ask, call weather, ask, call convert, ask, finish."""
    return demo_loop().run("What's the weather in Lisbon, in Fahrenheit?")


def event_key(result: RunResult) -> Counter[tuple[str, str, str | None, str]]:
    """The events of ``result`` counted by the row they came from."""
    return Counter(
        (e.source.value, e.trigger.value, e.guard.value if e.guard else None, e.dest.value)
        for e in result.events
    )


@settings(max_examples=150, deadline=None)
@given(
    replies=st.lists(REPLIES, max_size=10),
    max_steps=st.integers(0, 7),
    max_calls=st.integers(0, 4),
    cancel_after=st.none() | st.integers(0, 12),
)
def test_trace_counts_exactly_the_events(
    replies: list[object], max_steps: int, max_calls: int, cancel_after: int | None
) -> None:
    """Rows that leave events count exactly result.events; internal rows count what they do."""
    result = random_run(replies, max_steps, max_calls, cancel_after)
    counts = taken(result)
    events = event_key(result)

    assert set(counts) == set(edges())
    for row, count in counts.items():
        if row.dest is not None:
            assert count == events[(row.source, row.trigger, row.guard, row.dest)], row
    assert sum(count for row, count in counts.items() if row.dest is not None) == len(result.events)
    internal = {row.trigger: count for row, count in counts.items() if row.dest is None}
    assert internal[Trigger.ASK_MODEL] == result.steps
    assert internal[Trigger.START_TOOL] == sum(
        e.source is State.DISPATCHING and e.trigger is not Trigger.START_TOOL for e in result.events
    )
    # Every row taken is labelled with its count in both formats; no other row is.
    mermaid, dot = to_mermaid(result), to_dot(result)
    assert len(re.findall(r" \(\d+x\)$", mermaid, re.MULTILINE)) == sum(map(bool, counts.values()))
    assert dot.count('penwidth="2.5"') == sum(map(bool, counts.values()))


def test_untraced_diagrams_have_no_marks() -> None:
    """Without a run the diagrams are the plain machine (what diagrams/ holds)."""
    assert to_mermaid() == to_mermaid(None)
    assert "classDef" not in to_mermaid()
    assert "(1x)" not in to_mermaid()
    assert "penwidth" not in to_dot()
    assert "fillcolor" not in to_dot()


def test_mermaid_marks_the_demo_path(demo: RunResult) -> None:
    """Visited states get the visited class, taken edges their count, others stay plain."""
    mermaid = to_mermaid(demo)

    assert mermaid.startswith(
        '---\ntitle: "agentloop run: finished (steps 3/5, calls 2/2)"\n---\nstateDiagram-v2\n'
    )
    assert "    awaiting_model --> validating: model_replied (3x)\n" in mermaid
    assert "    awaiting_model --> awaiting_model: ask_model / count_step (3x)\n" in mermaid
    assert "    validating --> dispatching: validate / reserve_call (2x)\n" in mermaid
    assert "    dispatching --> dispatching: start_tool (2x)\n" in mermaid
    assert (
        "    dispatching --> awaiting_model: tool_returned / append_call_and_result (2x)\n"
        in mermaid
    )
    assert "    validating --> finished: validate [reply_is_final] / append_final (1x)\n" in mermaid
    assert "    awaiting_model --> failed: model_raised / note_model_error\n" in mermaid
    assert "    class awaiting_model, validating, dispatching, finished visited\n" in mermaid
    assert "    class cancelled, exhausted, repeated_call, malformed, failed unvisited\n" in mermaid
    assert not any(line != line.rstrip() for line in mermaid.splitlines())


def test_mermaid_keeps_every_plain_line(demo: RunResult) -> None:
    """The traced Mermaid is the plain one with counts appended and classes added."""
    plain = to_mermaid().splitlines()[4:]
    traced = [re.sub(r" \(\d+x\)$", "", line) for line in to_mermaid(demo).splitlines()[4:]]

    assert traced[: len(plain)] == plain
    assert all(line.startswith(("    classDef ", "    class ")) for line in traced[len(plain) :])


def test_dot_draws_the_path_bold_and_the_rest_faint(demo: RunResult) -> None:
    """Visited nodes are filled, taken edges bold with counts, the rest grey."""
    dot = to_dot(demo)

    assert '    label="agentloop run: finished (steps 3/5, calls 2/2)"; labelloc="t";\n' in dot
    assert (
        '    "finished" [shape="doublecircle", label="finished", style="rounded,filled,bold", '
        'fillcolor="#dbeafe", color="#1d4ed8"];\n'
    ) in dot
    assert (
        '    "failed" [shape="doublecircle", label="failed", color="#cbd5e1", '
        'fontcolor="#94a3b8"];\n'
    ) in dot
    assert (
        '    "awaiting_model" -> "validating" [label="model_replied (3x)", '
        'color="#1d4ed8", fontcolor="#1d4ed8", penwidth="2.5"];\n'
    ) in dot
    assert (
        '    "dispatching" -> "dispatching" [label="start_tool (2x)", style="dashed", '
        'color="#1d4ed8", fontcolor="#1d4ed8", penwidth="2.5"];\n'
    ) in dot
    assert (
        '    "awaiting_model" -> "failed" [label="model_raised / note_model_error", '
        'color="#cbd5e1", fontcolor="#94a3b8"];\n'
    ) in dot


def test_a_failed_run_marks_its_own_path() -> None:
    """A model that raises on its first step: one ask, one model_raised, failed visited."""
    result = Loop(Script([ValueError("no")])).run("go")
    mermaid = to_mermaid(result)

    assert "    awaiting_model --> failed: model_raised / note_model_error (1x)\n" in mermaid
    assert "    awaiting_model --> awaiting_model: ask_model / count_step (1x)\n" in mermaid
    assert "    class awaiting_model, failed visited\n" in mermaid
    assert "validating" in mermaid.splitlines()[-1]  # among the unvisited


def test_a_saved_run_draws_the_same_trace(demo: RunResult) -> None:
    """A run loaded from its file gives the same diagrams as the live result."""
    loaded = agentloop.run_from_json(agentloop.run_to_json(demo))

    assert to_mermaid(loaded) == to_mermaid(demo)
    assert to_dot(loaded) == to_dot(demo)


def _has_pygraphviz() -> bool:
    try:
        import pygraphviz  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture
def renderer() -> None:
    """Skip when pygraphviz is genuinely absent, except in CI, which installs it."""
    if not _has_pygraphviz():
        message = "pygraphviz is not installed (pip install 'agentloop[svg]'; make install does)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must render SVG: {message}")
        pytest.skip(message)


@pytest.mark.usefixtures("renderer")
def test_svg_renders_the_traced_diagram(demo: RunResult) -> None:
    """Graphviz renders the traced DOT to SVG with every state and the counts."""
    svg = to_svg(demo)

    assert svg.lstrip().startswith("<?xml")
    assert "<svg" in svg
    assert svg.rstrip().endswith("</svg>")
    for state in State:
        assert f">{state.value}</text>" in svg
    assert ">model_replied (3x)</text>" in svg
    assert "agentloop run: finished (steps 3/5, calls 2/2)" in svg


@pytest.mark.usefixtures("renderer")
def test_svg_renders_the_plain_machine() -> None:
    """Without a run, the SVG is the plain machine: no counts."""
    svg = to_svg()

    assert ">awaiting_model</text>" in svg
    assert "x)</text>" not in svg


def test_missing_renderer_says_what_to_install(no_pygraphviz: None) -> None:
    """Without pygraphviz, to_svg raises SVGUnavailableError naming the extra to install."""
    with pytest.raises(SVGUnavailableError, match=r"pip install 'agentloop\[svg\]'") as caught:
        to_svg()

    assert isinstance(caught.value, RuntimeError)
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)
