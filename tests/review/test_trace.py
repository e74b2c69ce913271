"""Run-trace diagrams: the machine's diagram with one run's path and counts marked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import CancelToken, Loop, RunResult, State
from agentloop._cli.demo import QUESTION, demo_loop
from agentloop._review.diagram import (
    edges,
    path_dot,
    path_svg,
    taken,
    untaken,
    visited,
)
from agentloop.engine import Trigger
from agentloop.review import SVGUnavailableError, to_dot, to_mermaid, to_svg
from agentloop.testing import ScriptedModel, batch
from tests.review.test_runfile import REPLIES, random_run
from tests.support.helpers import call, final


@pytest.fixture(scope="module")
def demo() -> RunResult:
    """The demo's run: ask, call weather twice in one reply, ask, call convert, ask, finish."""
    return demo_loop().run(QUESTION)


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
    assert len(re.findall(r" \(\d+x\)(?:<br>|$)", mermaid, re.MULTILINE)) == sum(
        map(bool, counts.values())
    )
    assert dot.count('penwidth="2.5"') == sum(map(bool, counts.values()))
    # The report's path diagram: the same counts, on the states the run was in.
    path = path_dot(result)
    labels = re.findall(r'(?:label="|\\n)(\w+) \((\d+)x\)', path)  # rows may share an arrow
    assert sorted((name, int(n)) for name, n in labels) == sorted(
        (row.trigger.value, count) for row, count in counts.items() if count
    )


def test_untraced_diagrams_have_no_marks() -> None:
    """Without a run the diagrams are the plain machine (what diagrams/ holds)."""
    assert to_mermaid() == to_mermaid(None)
    assert "classDef" not in to_mermaid()
    assert "(1x)" not in to_mermaid()
    assert "penwidth" not in to_dot()
    assert "fillcolor" not in to_dot()


def test_mermaid_marks_the_demo_path(demo: RunResult) -> None:
    """Visited states get the visited class, taken rows their count, others stay plain."""
    mermaid = to_mermaid(demo)

    assert mermaid.startswith(
        '---\ntitle: "agentloop run: finished (steps 3/5, calls 3/3)"\n---\nstateDiagram-v2\n'
    )
    assert "    awaiting_model --> validating: model_replied (3x)\n" in mermaid
    # The wrap-up's and the fallback's rows share the edge; untaken, they have no count.
    assert (
        "    awaiting_model --> awaiting_model: ask_model [wrapping_up]<br>"
        "ask_model [wrap_up_due]<br>ask_model (3x)<br>model_raised [fallback_left]\n" in mermaid
    )
    assert (
        "    validating --> dispatching: validate [identical_calls_some]<br>"
        "validate [handoff_in_batch]<br>validate (2x)\n" in mermaid
    )
    assert (
        "    dispatching --> dispatching: start_tool [batch_unreviewed]<br>start_tool "
        "[call_resumes]<br>start_tool (3x)<br>tool_returned [batch_open] (1x)<br>approval_asked "
        "[review_denies]<br>approval_asked [nobody_asked]<br>call_waits [calls_running]\n"
        in mermaid
    )
    assert (
        "    dispatching --> awaiting_model: tool_returned (2x)<br>approval_asked "
        "[review_denies_all]\n" in mermaid
    )
    assert (
        "    validating --> finished: validate [wrap_up_answered]<br>"
        "validate [reply_is_final] (1x)\n" in mermaid
    )
    assert "    awaiting_model --> failed: model_raised\n" in mermaid
    assert "    class awaiting_model, validating, dispatching, finished visited\n" in mermaid
    assert (
        "    class awaiting_approval, summarising, backing_off, handing_off, cancelled, "
        "exhausted, repeated_call, malformed, failed, invalid_output unvisited\n" in mermaid
    )
    assert not any(line != line.rstrip() for line in mermaid.splitlines())


def test_mermaid_keeps_every_plain_line(demo: RunResult) -> None:
    """The traced Mermaid is the plain one with counts added and classes appended."""
    plain = to_mermaid().splitlines()[4:]
    traced = [re.sub(r" \(\d+x\)", "", line) for line in to_mermaid(demo).splitlines()[4:]]

    assert traced[: len(plain)] == plain
    assert all(line.startswith(("    classDef ", "    class ")) for line in traced[len(plain) :])


def test_mermaid_counts_each_row_of_a_shared_arrow() -> None:
    """Rows between the same two states share an arrow; the count follows the row taken."""
    token = CancelToken()

    def model(history: list[dict[str, object]]) -> dict[str, object]:
        token.cancel()  # while the model works: model_replied [cancel_requested]
        return {"kind": "final", "text": "late"}

    mermaid = to_mermaid(Loop(model).run("go", cancel=token))
    assert (
        "    awaiting_model --> cancelled: ask_model [cancel_requested]"
        "<br>model_replied [cancel_requested] (1x)<br>model_raised [cancel_requested]"
        "<br>model_interrupted<br>interrupted\n"
    ) in mermaid


def test_dot_draws_the_path_bold_and_the_rest_faint(demo: RunResult) -> None:
    """Visited nodes are filled, taken edges bold with counts, the rest grey."""
    dot = to_dot(demo)

    assert '    label="agentloop run: finished (steps 3/5, calls 3/3)"; labelloc="t";\n' in dot
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
        '    "dispatching" -> "dispatching" [label="start_tool / start_call (3x)", style="dashed", '
        'color="#1d4ed8", fontcolor="#1d4ed8", penwidth="2.5"];\n'
    ) in dot
    assert (
        '    "awaiting_model" -> "failed" [label="model_raised / note_model_error", '
        'color="#cbd5e1", fontcolor="#94a3b8"];\n'
    ) in dot


def test_a_failed_run_marks_its_own_path() -> None:
    """A model that raises on its first step: one ask, one model_raised, failed visited."""
    result = Loop(ScriptedModel([ValueError("no")])).run("go")
    mermaid = to_mermaid(result)

    assert "    awaiting_model --> failed: model_raised (1x)\n" in mermaid
    assert (
        "    awaiting_model --> awaiting_model: ask_model [wrapping_up]<br>"
        "ask_model [wrap_up_due]<br>ask_model (1x)<br>model_raised [fallback_left]\n" in mermaid
    )
    assert "    class awaiting_model, failed visited\n" in mermaid
    assert "validating" in mermaid.splitlines()[-1]  # among the unvisited


# -- the report's path diagram -------------------------------------------------------


def test_path_diagram_draws_only_where_the_run_was(demo: RunResult) -> None:
    """Only visited states are nodes; the rows taken are bold and counted, guard below."""
    dot = path_dot(demo)
    nodes = set(re.findall(r'^    "(\w+)" \[label="\1"', dot, re.MULTILINE))

    assert nodes == {state.value for state in visited(demo)}
    assert '"finished" [label="finished", peripheries="2"];' in dot  # a terminal state
    assert (
        '    "validating" -> "finished" [label="validate (1x)\\n[reply_is_final]", penwidth="2"];\n'
    ) in dot
    assert '    "awaiting_model" -> "validating" [label="model_replied (3x)", penwidth="2"];' in dot
    assert 'label="", width="0.12"' in dot  # the start point
    assert 'rankdir="TB"' in dot  # tall, not wide: it sits in a page column


def test_path_diagram_draws_rows_between_two_states_as_one_arrow() -> None:
    """A batch takes both self-loops on dispatching: one arrow, a row a line (not two loops)."""
    reply = batch(call("c1", a=1, b=2), call("c2", a=3, b=4))
    dot = path_dot(
        Loop(ScriptedModel([reply, final()]), tools={"add": lambda a, b: a + b}).run("go")
    )

    assert re.findall(r'^    "dispatching" -> "dispatching" \[label=.*$', dot, re.MULTILINE) == [
        '    "dispatching" -> "dispatching" '
        '[label="start_tool (2x)\\ntool_returned (1x)\\n[batch_open]", penwidth="2"];'
    ]


def test_path_diagram_lists_where_else_each_state_leads(demo: RunResult) -> None:
    """Untaken rows are faint: to visited states as arrows, to the others as one list each."""
    dot = path_dot(demo)
    lists = dict(re.findall(r'^    "(\w+) elsewhere" \[.*label="([^"]*)"', dot, re.MULTILINE))

    assert lists == {
        "awaiting_model": "cancelled\\nexhausted\\nsummarising\\nbacking_off\\nfailed",
        "validating": (
            "malformed\\ninvalid_output\\nexhausted\\nrepeated_call\\ncancelled\\nhanding_off"
        ),
        "dispatching": "cancelled\\nawaiting_approval",
    }
    # Each list is what the table allows and the run did not do, from a visited state.
    for source, names in lists.items():
        expected = {
            (row.dest or row.source).value
            for row, count in taken(demo).items()
            if row.source.value == source and not count
        }
        assert set(names.split("\\n")) == expected - {s.value for s in visited(demo)}


def test_path_diagram_draws_untaken_rows_between_visited_states_faint() -> None:
    """Cancelled at validation: awaiting_model -> cancelled was possible, and is a faint arrow."""
    result = random_run([call("c1", a=1, b=2)], max_steps=3, max_calls=3, cancel_after=1)
    assert [event.trigger for event in result.events] == [Trigger.MODEL_REPLIED, Trigger.VALIDATE]
    dot = path_dot(result)

    assert '    "awaiting_model" -> "cancelled" [color="#cbd5e1", arrowsize="0.5"];\n' in dot
    assert '    "validating" -> "cancelled" [label="validate (1x)\\n[cancel_requested]"' in dot
    assert "cancelled\\n" not in dot  # a visited state is a node, never in a list


def test_path_diagram_draws_a_run_as_far_as_it_has_gone(demo: RunResult) -> None:
    """A run that goes on (no result yet) is drawn by its events so far; its end, as its result."""
    run = demo_loop().start(QUESTION)
    run.step()
    with pytest.raises(agentloop.InvalidStateError):
        run.result()
    so_far = path_dot(run)
    nodes = set(re.findall(r'^    "(\w+)" \[label="\1"', so_far, re.MULTILINE))

    assert nodes == {"awaiting_model", "validating"}
    assert '"awaiting_model" -> "validating" [label="model_replied (1x)", penwidth="2"]' in so_far
    run.finish()
    assert path_dot(run) == path_dot(run.result()) == path_dot(demo)


def test_path_diagram_takes_a_run_or_a_result_only() -> None:
    """Anything else is a TypeError that says what it expected."""
    with pytest.raises(TypeError, match=r"path_dot\(\) expected a RunResult .*got dict"):
        path_dot({"events": []})  # type: ignore[arg-type]


def test_untaken_groups_the_rows_a_run_skipped(demo: RunResult) -> None:
    """untaken() maps each pair of states to the rows between them the run did not take."""
    pairs = untaken(demo)

    assert sum(map(len, pairs.values())) == sum(not count for count in taken(demo).values())
    assert [row.trigger for row in pairs[State.AWAITING_MODEL, State.CANCELLED]] == [
        Trigger.ASK_MODEL,
        Trigger.MODEL_REPLIED,
        Trigger.MODEL_RAISED,
        Trigger.MODEL_INTERRUPTED,
        Trigger.INTERRUPTED,
    ]
    assert (State.AWAITING_MODEL, State.VALIDATING) not in pairs  # taken 3 times


@pytest.mark.usefixtures("renderer")
def test_path_svg_renders_it(demo: RunResult) -> None:
    """path_svg is path_dot drawn by Graphviz: visited states and counted rows."""
    svg = path_svg(demo)

    for state in visited(demo):
        assert f">{state.value}</text>" in svg
    assert ">failed</text>" in svg  # in awaiting_model's list
    assert ">model_replied (3x)</text>" in svg


def test_a_saved_run_draws_the_same_trace(demo: RunResult) -> None:
    """A run loaded from its file gives the same diagrams as the live result."""
    loaded = agentloop.review.run_from_json(agentloop.review.run_to_json(demo))

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
        message = "pygraphviz is not installed (pip install 'agentloop-fsm[svg]'; make does)"
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
    assert "agentloop run: finished (steps 3/5, calls 3/3)" in svg


@pytest.mark.usefixtures("renderer")
def test_svg_renders_the_plain_machine() -> None:
    """Without a run, the SVG is the plain machine: no counts."""
    svg = to_svg()

    assert ">awaiting_model</text>" in svg
    assert "x)</text>" not in svg


def test_missing_renderer_says_what_to_install(no_pygraphviz: None) -> None:
    """Without pygraphviz, to_svg raises SVGUnavailableError naming the extra to install."""
    with pytest.raises(SVGUnavailableError, match=r"pip install 'agentloop-fsm\[svg\]'") as caught:
        to_svg()

    assert isinstance(caught.value, RuntimeError)
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)


# -- rendering writes nothing to stderr ----------------------------------------------------


@pytest.mark.usefixtures("renderer")
@pytest.mark.parametrize(
    "code",
    [
        "import agentloop; agentloop.review.to_svg()",
        "from agentloop._review.diagram import path_svg; "
        "from agentloop._cli.demo import demo_loop; path_svg(demo_loop().run('go'))",
        "import agentloop; from agentloop._cli.demo import demo_loop; "
        "agentloop.review.report_html(demo_loop().run('go'), svg=True)",
    ],
    ids=["to_svg", "path_svg", "report"],
)
def test_the_first_render_in_a_process_is_silent(code: str) -> None:
    """Graphviz's bundled fontconfig warns on its first render (Debian 12); none of it shows."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


@pytest.mark.usefixtures("renderer")
def test_rendering_writes_nothing_to_stderr(
    demo: RunResult, capfd: pytest.CaptureFixture[str]
) -> None:
    """In this process too: an SVG render leaves file descriptor 2 untouched."""
    to_svg(demo)
    path_svg(demo)

    assert capfd.readouterr().err == ""


@pytest.mark.usefixtures("renderer")
def test_only_fontconfig_warnings_are_dropped(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Whatever else the render writes to stderr is passed on, in order, after it."""
    import pygraphviz

    real_draw = pygraphviz.AGraph.draw

    def noisy_draw(self: object, *args: object, **kwargs: object) -> object:
        os.write(2, b'Fontconfig warning: "/etc/fonts/x.conf", line 6: unknown element "a"\n')
        os.write(2, b"Error: something Graphviz wants you to see\n")
        os.write(2, b"Fontconfig warning: another\nand a last line\n")
        return real_draw(self, *args, **kwargs)

    monkeypatch.setattr(pygraphviz.AGraph, "draw", noisy_draw)
    svg = to_svg()

    assert "<svg" in svg
    assert capfd.readouterr().err == (
        "Error: something Graphviz wants you to see\nand a last line\n"
    )
