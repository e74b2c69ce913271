"""The command line: demo, diagram, show and report; errors exit 2 in one line."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import tempfile
import unicodedata
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import Loop, RunResult, State
from agentloop.__main__ import main
from agentloop._cli.demo import QUESTION, demo_loop
from agentloop._review.runshape import MAX_BYTES
from agentloop._review.text import input_messages
from agentloop.review import path_dot, path_svg, to_dot, to_mermaid
from agentloop.testing import ScriptedModel, batch
from tests.review.test_trace import renderer  # noqa: F401 - a fixture
from tests.support import ROOT
from tests.support.helpers import call, final

SCRIPT = Path(sys.executable).parent / "agentloop"
# What a terminal would act on instead of showing: controls, format characters
# (bidi among them), line and paragraph separators, surrogates.
UNSAFE = {"Cc", "Cf", "Zl", "Zp", "Cs"}


@pytest.fixture
def saved(tmp_path: Path) -> tuple[RunResult, Path]:
    """The demo's run, saved as tmp_path/run.json."""
    result = demo_loop().run(QUESTION)
    path = tmp_path / "run.json"
    agentloop.review.save_run(result, path)
    return result, path


def save(result: RunResult, folder: Path) -> Path:
    path = folder / "run.json"
    agentloop.review.save_run(result, path)
    return path


def show(path: Path, *options: str) -> str:
    """What ``agentloop show`` prints for ``path``; it must succeed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["show", str(path), *options]) == 0
    return out.getvalue()


def run(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), capture_output=True, text=True, check=False, timeout=60, cwd=cwd
    )


# -- demo --------------------------------------------------------------------------


def test_demo_saves_its_run_trace_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """demo --out writes run.json, trace.mmd and report.html, and says where."""
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0

    printed = capsys.readouterr().out
    loaded = agentloop.review.load_run(out / "run.json")
    assert loaded.status == "finished"
    assert (
        loaded.output
        == "Lisbon is warmer: 21.5 °C (70.7 °F) and clear; Porto is 18.0 °C and cloudy."
    )
    assert (out / "trace.mmd").read_text(encoding="utf-8") == to_mermaid(loaded)
    assert 'id="status" class="status finished"' in (out / "report.html").read_text("utf-8")
    assert f"saved the run to {out / 'run.json'}" in printed
    assert str(out / "trace.mmd") in printed
    assert re.search(r"^9 +validating → finished ", printed, re.MULTILINE)  # the table


@pytest.mark.parametrize("on_path", [False, True], ids=["bare-path", "venv-on-path"])
@pytest.mark.parametrize(
    "command", [[str(SCRIPT)], [sys.executable, "-m", "agentloop"]], ids=["script", "python-m"]
)
def test_demo_hint_works_as_printed(tmp_path: Path, command: list[str], on_path: bool) -> None:
    """The demo's last line is a command that works when typed where the demo ran."""
    # The same shell for both: with or without the venv's bin folder on PATH.
    path = f"{SCRIPT.parent}:/usr/bin:/bin" if on_path else "/usr/bin:/bin"
    env = {**os.environ, "PATH": path}
    demo = subprocess.run(
        [*command, "demo", "--out", "demo-output"],
        capture_output=True, text=True, check=False, timeout=60, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stderr
    assert demo.stderr == ""
    last = demo.stdout.splitlines()[-1]
    assert last.startswith("next: ")

    hint = shlex.split(last.removeprefix("next: "))
    assert hint[-2:] == ["show", "demo-output/run.json"]
    if on_path and command == [str(SCRIPT)]:
        assert hint[0] == "agentloop"  # the script the shell finds is the one that ran
    shown = subprocess.run(
        hint, capture_output=True, text=True, check=False, timeout=60, cwd=tmp_path, env=env
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("agentloop run: finished\n")


def test_demo_hint_from_the_makefiles_venv() -> None:
    """make demo runs .venv/bin/agentloop from the repo root, so that is what it suggests."""
    root = ROOT
    if not (root / ".venv" / "bin" / "agentloop").exists():
        pytest.skip("no .venv/bin/agentloop here (make demo creates it)")
    with tempfile.TemporaryDirectory() as out:
        demo = run(".venv/bin/agentloop", "demo", "--out", out, cwd=root)
    assert demo.returncode == 0, demo.stderr
    assert demo.stdout.splitlines()[-1] == f"next: .venv/bin/agentloop show {out}/run.json"


# -- conventions ---------------------------------------------------------------------


def test_version_names_the_distribution(capsys: pytest.CaptureFixture[str]) -> None:
    """--version prints the name agentloop is installed under, and its version."""
    with pytest.raises(SystemExit) as caught:
        main(["--version"])

    assert caught.value.code == 0
    assert capsys.readouterr().out == f"agentloop-fsm {metadata.version('agentloop-fsm')}\n"


@pytest.mark.parametrize(
    "command", ["demo", "diagram", "show", "report", "runs", "pending", "decide"]
)
def test_each_command_describes_itself_with_examples(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """COMMAND --help: a one-line description, then examples that use the command."""
    with pytest.raises(SystemExit) as caught:
        main([command, "--help"])

    assert caught.value.code == 0
    text = capsys.readouterr().out
    description = text.split("\n\n")[1]
    assert "\n" not in description
    assert description.endswith(".")
    examples = text.split("examples:\n")[1].splitlines()
    assert examples
    # The ledger commands' examples name a ledger, as the ones for run files name a file.
    given = " runs.db" if command in ("runs", "pending", "decide") else ""
    assert all(line.startswith(f"  agentloop {command}{given}") for line in examples)


def test_the_command_list_has_a_line_per_command(capsys: pytest.CaptureFixture[str]) -> None:
    """agentloop --help lists every command with its one-line description."""
    with pytest.raises(SystemExit):
        main(["--help"])

    text = capsys.readouterr().out
    for command in ("demo", "diagram", "show", "report", "runs", "pending", "decide"):
        assert re.search(rf"^    {command} +\w", text, re.MULTILINE), command


def test_format_help_says_what_each_format_is_and_the_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """diagram --help explains --format and shows its default."""
    with pytest.raises(SystemExit):
        main(["diagram", "--help"])

    text = " ".join(capsys.readouterr().out.split())
    assert "--format {mermaid,dot,svg} mermaid (stateDiagram-v2), dot (Graphviz)" in text
    assert "default: mermaid" in text


# -- diagram -------------------------------------------------------------------------


def test_diagram_prints_the_machine(capsys: pytest.CaptureFixture[str]) -> None:
    """diagram prints the plain machine in Mermaid by default, or DOT."""
    assert main(["diagram"]) == 0
    assert capsys.readouterr().out == to_mermaid()
    assert main(["diagram", "--format", "dot"]) == 0
    assert capsys.readouterr().out == to_dot()


def test_diagram_marks_a_saved_runs_path(
    saved: tuple[RunResult, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """--run marks the path the saved run took, in either format."""
    result, path = saved
    assert main(["diagram", "--run", str(path)]) == 0
    assert capsys.readouterr().out == to_mermaid(result)
    assert main(["diagram", "--run", str(path), "--format", "dot"]) == 0
    assert capsys.readouterr().out == to_dot(result)


def test_diagram_writes_to_a_file(
    saved: tuple[RunResult, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-o writes the diagram to a file and says so."""
    result, path = saved
    out = tmp_path / "trace.dot"
    assert main(["diagram", "--run", str(path), "--format", "dot", "-o", str(out)]) == 0

    assert out.read_text(encoding="utf-8") == to_dot(result)
    assert capsys.readouterr().out == f"wrote {out}\n"


@pytest.mark.usefixtures("renderer")
def test_diagram_renders_svg(saved: tuple[RunResult, Path], tmp_path: Path) -> None:
    """--format svg writes an SVG of the traced diagram."""
    _, path = saved
    out = tmp_path / "trace.svg"
    assert main(["diagram", "--run", str(path), "--format", "svg", "-o", str(out)]) == 0

    svg = out.read_text(encoding="utf-8")
    assert "<svg" in svg
    assert ">model_replied (3x)</text>" in svg


@pytest.mark.usefixtures("renderer")
def test_diagram_path_draws_only_what_the_run_did(
    saved: tuple[RunResult, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--path draws the report's compact view: the states the run was in, in DOT or SVG."""
    result, path = saved
    assert main(["diagram", str(path), "--format", "dot", "--path"]) == 0
    assert capsys.readouterr().out == path_dot(result)
    out = tmp_path / "path.svg"
    assert main(["diagram", str(path), "--format", "svg", "--path", "-o", str(out)]) == 0

    svg = out.read_text(encoding="utf-8")
    assert svg == path_svg(result)
    assert "<title>finished</title>" in svg
    assert "<title>cancelled</title>" not in svg  # a state the run was never in
    width = float(re.findall(r'<svg width="([\d.]+)pt"', svg)[0])
    whole = float(re.findall(r'<svg width="([\d.]+)pt"', agentloop.review.to_svg(result))[0])
    assert width * 5 < whole


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["--path"], "--path draws a run's path: expected RUN.json or LEDGER RUN_ID"),
        (["RUN", "--path"], "--path is drawn by Graphviz: expected --format dot or svg"),
    ],
)
def test_diagram_path_needs_a_run_and_graphviz(
    arguments: list[str],
    expected: str,
    saved: tuple[RunResult, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--path without a run, or in Mermaid, says what it needs, in one line, exit 2."""
    given = [str(saved[1]) if argument == "RUN" else argument for argument in arguments]
    assert main(["diagram", *given]) == 2
    assert capsys.readouterr().err == f"agentloop: error: {expected}\n"


def test_diagram_svg_without_renderer_exits_2(
    no_pygraphviz: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without pygraphviz, --format svg says what to install, in one line, exit 2."""
    assert main(["diagram", "--format", "svg"]) == 2

    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("agentloop: error: rendering SVG needs pygraphviz")
    assert "pip install 'agentloop-fsm[svg]'" in captured.err
    assert captured.err.count("\n") == 1


# -- show ----------------------------------------------------------------------------


def test_show_prints_the_input_each_transition_and_the_end(
    saved: tuple[RunResult, Path],
) -> None:
    """show: the title, the input, a header and one row per transition, then the outcome."""
    result, path = saved
    lines = show(path).splitlines()

    assert lines[:5] == [
        "agentloop run: finished",
        "",
        "input",
        f"  #0  user  {QUESTION}",
        "",
    ]
    assert lines[5].split() == [
        "step", "from", "→", "to", "trigger", "[guard]", "steps", "calls", "took", "call",
        "outcome",
    ]  # fmt: skip
    rows = lines[6 : 6 + len(result.events)]
    for number, (line, event) in enumerate(zip(rows, result.events, strict=True), 1):
        assert line.startswith(f"{number:<4}  {event.source.value} → {event.dest.value} "), line
    # The batch: each call's row shows its own result, the first while the batch is open.
    assert rows[2].endswith('weather#c1  ok: {"city":"Lisbon","celsius":21.5,"sky":"clear"}')
    assert rows[3].endswith('weather#c2  ok: {"city":"Porto","celsius":18.0,"sky":"cloudy"}')
    assert rows[6].endswith("convert#c3  ok: 70.7")
    output = "Lisbon is warmer: 21.5 °C (70.7 °F) and clear; Porto is 18.0 °C and cloudy."
    assert rows[-1].endswith(f"  final: {output}")
    assert re.search(r"  \d+ (µs|ms)  ", rows[2])  # the took column: how long c1 ran
    assert lines[6 + len(result.events) :] == [
        "",
        "status   finished",
        "steps    3 of 5",
        "calls    3 of 3",
        f"output   {output}",
    ]


def test_show_aligns_the_columns(saved: tuple[RunResult, Path]) -> None:
    """Every row's cells start where the header's do."""
    result, path = saved
    lines = show(path).splitlines()
    header = lines[5]
    starts = [header.index(name) for name in ("from", "trigger", "steps", "calls")]
    for line in lines[6 : 6 + len(result.events)]:
        for start in starts:
            assert line[start - 2 : start] == "  ", (line, start)
            # A row without a call ends before that column (no trailing spaces).
            assert line[start] != " " or start + 1 == len(line.rstrip()), (line, start)
        assert line == line.rstrip()


def test_show_prints_input_history_as_given(tmp_path: Path) -> None:
    """Every input message is shown: a text message's text, any other as its JSON; a call,
    and each call of a batch, beside the result that follows it (one answered later is not)."""
    history = [
        {"kind": "system", "text": "be brief"},
        call("old", a=1, b=1),
        {"kind": "tool_result", "id": "old", "name": "add", "status": "ok", "content": 2},
        batch(call("b1", a=2, b=2), call("b2", a=3, b=3), text="two at once"),
        {"kind": "tool_result", "id": "b2", "name": "add", "status": "ok", "content": 6},
        {"kind": "tool_result", "id": "b1", "name": "add", "status": "error", "content": "no"},
        call("late", a=0, b=0),
        {"kind": "user", "text": "in between"},
        {"kind": "tool_result", "id": "late", "name": "add", "status": "ok", "content": 0},
        batch(call("b3", a=4, b=4)),
        {"kind": "tool_result", "id": "b3", "name": "add", "status": "ok", "content": 8},
    ]
    path = save(Loop(ScriptedModel([final("done")])).run(history), tmp_path)
    lines = show(path).splitlines()

    assert lines[2:14] == [
        "input",
        "  #0  system  be brief",
        '  #1  call  add#old {"a":1,"b":1}  →  #2 ok: 2',
        "  #3  calls  two at once",
        '        add#b1 {"a":2,"b":2}  →  #5 error: "no"',
        '        add#b2 {"a":3,"b":3}  →  #4 ok: 6',
        '  #6  call  add#late {"a":0,"b":0}',
        "  #7  user  in between",
        '  #8  tool_result  {"id":"late","name":"add","status":"ok","content":0}',
        "  #9  calls",
        '        add#b3 {"a":4,"b":4}  →  #10 ok: 8',
        "",
    ]
    assert lines[14].startswith("step  ")
    # --width cuts the call and the result's content each, so the result always shows.
    assert '        add#b1 {"…  →  #5 error: "no"' in show(path, "--width", "10").splitlines()


def test_show_gives_each_call_of_a_batch_its_result(tmp_path: Path) -> None:
    """The row of every call of a batch shows that call's result, read from the saved run."""
    reply = batch(call("c1", name="echo", text="one"), call("c2", name="echo", text="two"))
    result = Loop(ScriptedModel([reply, final()]), tools={"echo": lambda text: text.upper()}).run(
        "go"
    )
    rows = show(save(result, tmp_path)).splitlines()[6:10]

    # Columns are padded to their widest cell, and "took" varies from run to run.
    assert [re.split(r" {2,}", row)[-2:] for row in rows[2:]] == [
        ["echo#c1", 'ok: "ONE"'],
        ["echo#c2", 'ok: "TWO"'],
    ]
    assert "tool_returned [batch_open]" in rows[2]
    assert "dispatching → awaiting_model" in rows[3]


def test_show_cuts_long_values_unless_asked(tmp_path: Path) -> None:
    """Outcomes and input are cut to 80 characters; --width N cuts at N, --full not at all."""
    long = "word " * 60
    model = ScriptedModel([call("c1", name="echo", text=long), final(long)])
    result = Loop(model, tools={"echo": lambda text: text}).run(long)
    path = save(result, tmp_path)

    cut = show(path)
    assert f"  #0  user  {long[:79]}…\n" in cut
    assert f'ok: "{long[:78]}…\n' in cut
    assert f"final: {long[:79]}…\n" in cut
    assert f"output   {long}\n" in cut  # how the run ended is never cut

    narrow = show(path, "--width", "20")
    assert f"  #0  user  {long[:19]}…\n" in narrow
    assert f"final: {long[:19]}…\n" in narrow

    whole = show(path, "--full")
    assert "…" not in whole
    assert f"  #0  user  {long}\n" in whole
    assert f'ok: "{long}"\n' in whole
    assert f"final: {long}\n" in whole


def test_full_and_width_exclude_each_other(
    saved: tuple[RunResult, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """--full and --width N say opposite things: a usage error, exit 2."""
    _, path = saved
    with pytest.raises(SystemExit) as caught:
        main(["show", str(path), "--full", "--width", "40"])
    assert caught.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("width", ["1", "0", "-5", "wide"])
def test_width_must_leave_room(
    saved: tuple[RunResult, Path], width: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--width below 2 (or not a number) is a usage error that says what it expected."""
    _, path = saved
    with pytest.raises(SystemExit) as caught:
        main(["show", str(path), "--width", width])
    assert caught.value.code == 2
    assert f"expected a number of characters >= 2, got '{width}'" in capsys.readouterr().err


def test_show_prints_run_text_literally(tmp_path: Path) -> None:
    """Text from the run that looks like markup is printed as is, rejected reply too."""
    reply = {"kind": "final", "text": "[bold]no[/bold]", "extra": "[red]x"}
    out = show(save(Loop(ScriptedModel([reply])).run("go"), tmp_path))

    assert 'rejected {"kind":"final","text":"[bold]no[/bold]","extra":"[red]x"}\n' in out
    assert "status   malformed\n" in out


def test_final_only_run_shows_its_answer(tmp_path: Path) -> None:
    """A one-step run: show prints the final answer as the last outcome."""
    out = show(save(Loop(ScriptedModel([final("42")])).run("question"), tmp_path))
    assert re.search(r"^2 .* final: 42$", out, re.MULTILINE)


def test_show_and_demo_need_nothing_but_agentloop(
    saved: tuple[RunResult, Path], tmp_path: Path
) -> None:
    """The installed command works without optional packages: rich is not used at all."""
    _, path = saved
    code = (
        "import sys\n"
        "sys.modules['rich'] = None  # as if it were not installed\n"
        "from agentloop.__main__ import main\n"
        f"assert main(['show', {str(path)!r}]) == 0\n"
        f"assert main(['demo', '--out', {str(tmp_path / 'demo')!r}]) == 0\n"
    )
    done = run(sys.executable, "-c", code)
    assert done.returncode == 0, done.stderr
    assert "agentloop run: finished" in done.stdout
    assert "agentloop demo: one transition per step" in done.stdout


# -- what a terminal shows cannot be forged ----------------------------------------------


def test_an_error_message_cannot_print_a_fake_line(tmp_path: Path) -> None:
    """Newlines and bidi controls in a failed run's error are shown escaped, on its own line."""
    message = "boom\nstatus   finished\r\x1b[2K\u202eevil\u2066x\u2069\u200f\u061c\u2028end"
    path = save(Loop(ScriptedModel([ValueError(message)])).run("go"), tmp_path)
    out = show(path)

    lines = out.splitlines()
    assert [line for line in lines if line.startswith("status")] == ["status   failed"]
    escaped = (
        "boom\\nstatus   finished\\r\\x1b[2K\\u202eevil\\u2066x\\u2069\\u200f\\u061c\\u2028end"
    )
    assert lines[-1] == f"error    the model raised ValueError: {escaped}"
    assert lines[6].endswith(f"the model raised ValueError: {escaped}")  # the row, too
    assert not any(unicodedata.category(char) in UNSAFE for char in out.replace("\n", ""))


def test_input_and_tool_output_are_escaped_too(tmp_path: Path) -> None:
    """Escaping covers every field: input text, call ids, tool results, finals, rejected."""
    evil = "a\u202eb\nc\x9bd\u200de\ufefff\U000e0041g"
    shown = "a\\u202eb\\nc\\x9bd\\u200de\\ufefff\\U000e0041g"
    model = ScriptedModel(
        [call(f"id{evil}", name="echo", text=evil), {"kind": "final", "text": evil, "x": 1}]
    )
    path = save(Loop(model, tools={"echo": lambda text: text}).run(evil), tmp_path)  # fmt: skip
    out = show(path, "--full")

    assert f"  #0  user  {shown}\n" in out
    assert f"echo#id{shown}" in out
    assert f'ok: "{shown}"\n' in out
    assert f'"text":"{shown}"' in out  # the rejected reply
    assert not any(unicodedata.category(char) in UNSAFE for char in out.replace("\n", ""))


def test_an_input_batch_is_escaped_line_by_line(tmp_path: Path) -> None:
    """A batch in the input: its text, each call and each result, escaped, one line each."""
    evil = "a\u202eb\nc\x1b[2Kd"
    shown = "a\\u202eb\\nc\\x1b[2Kd"
    in_json = "a\\u202eb\\nc\\u001b[2Kd"  # JSON escapes the controls itself
    history = [
        batch(call(f"b{evil}", name=evil, text=evil), text=evil),
        {"kind": "tool_result", "id": f"b{evil}", "name": evil, "status": "ok", "content": evil},
    ]
    out = show(save(Loop(ScriptedModel([final()])).run(history), tmp_path), "--full")

    assert out.splitlines()[2:6] == [
        "input",
        f"  #0  calls  {shown}",
        f'        {shown}#b{shown} {{"text":"{in_json}"}}  →  #1 ok: "{in_json}"',
        "",
    ]
    assert not any(unicodedata.category(char) in UNSAFE for char in out.replace("\n", ""))


# Text that mixes everything a terminal might act on with anything else.
DANGEROUS = "\n\r\t\x00\x07\x08\x1b\x7f\x85\x9b\xad\u061c\u200b\u200d\u200e\u200f\u2028\u2029"
DANGEROUS += "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\ufeff\U000e0001"
TEXT = st.text(st.one_of(st.characters(exclude_categories=["Cs"]), st.sampled_from(DANGEROUS)))
KEYS = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=5)


def _reply(draw: st.DrawFn) -> object:
    kind = draw(st.sampled_from(["call", "call", "calls", "final", "raise", "malformed"]))
    if kind == "call":
        name = draw(st.sampled_from(["echo", "boom"]) | TEXT)
        return call(draw(TEXT), name=name, text=draw(TEXT))
    if kind == "calls":
        made = [
            call(draw(TEXT), name=draw(st.sampled_from(["echo", "boom"]) | TEXT), text=draw(TEXT))
            for _ in range(draw(st.integers(1, 3)))
        ]
        return batch(*made, text=draw(TEXT))
    if kind == "final":
        return final(draw(TEXT))
    if kind == "raise":
        return ValueError(draw(TEXT))
    return {"kind": draw(TEXT), draw(KEYS): draw(TEXT)}


@st.composite
def runs_full_of_text(draw: st.DrawFn) -> RunResult:
    """A run whose every field that holds text holds arbitrary text."""
    replies = [_reply(draw) for _ in range(draw(st.integers(0, 4)))]

    def boom(text: str) -> None:
        raise RuntimeError(text)

    tools: dict[str, Any] = {"echo": lambda text: text, "boom": boom}
    # Any kind but those whose other fields the input check reads (a call's id, say).
    kinds = TEXT.filter(lambda kind: kind not in ("call", "calls", "tool_result"))
    # Not blank where a user's message is: a run refuses those.
    message = st.fixed_dictionaries({"kind": kinds, "text": TEXT}).filter(
        lambda made: made["kind"] != "user" or made["text"].strip()
    )
    given_input = draw(TEXT.filter(str.strip) | st.lists(message, min_size=1, max_size=3))
    return Loop(ScriptedModel([*replies, final("end")]), tools=tools, max_steps=4).run(given_input)


@settings(max_examples=150, deadline=None)
@given(result=runs_full_of_text(), full=st.booleans())
def test_show_prints_exactly_the_lines_of_its_format(result: RunResult, full: bool) -> None:
    """For any text in a run: one line per thing shown, and nothing a terminal would act on."""
    with tempfile.TemporaryDirectory() as folder:
        out = show(save(result, Path(folder)), *(["--full"] if full else []))

    assert out.endswith("\n")
    lines = out[:-1].split("\n")
    given_count = len(input_messages(result))
    closing = [
        "status",
        "steps",
        "calls",
        *(name for name in ("output", "reason", "error") if getattr(result, name) is not None),
        *(["rejected"] if result.rejected_value is not None else []),
    ]
    expected = [
        "title",
        "",
        *(["input", *["message"] * given_count, ""] if given_count else []),
        "header",
        *["row"] * len(result.events),
        "",
        *closing,
    ]
    assert len(lines) == len(expected)
    for line, kind in zip(lines, expected, strict=True):
        assert not any(unicodedata.category(char) in UNSAFE for char in line), line
        if kind == "":
            assert line == ""
        elif kind == "title":
            assert line == f"agentloop run: {result.status.value}"
        elif kind == "message":
            assert line.startswith("  #")
        elif kind in closing:
            assert line.startswith(f"{kind:<8} ")
        elif kind == "header":
            assert line.startswith("step  ")
    rows = lines[len(expected) - len(closing) - 1 - len(result.events) : -len(closing) - 1]
    for number, (line, event) in enumerate(zip(rows, result.events, strict=True), 1):
        assert re.match(rf"{number} +{event.source.value} → {event.dest.value} ", line), line


# -- report --------------------------------------------------------------------------


def test_report_writes_html(
    saved: tuple[RunResult, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """report -o writes one HTML page with the status and the transcript."""
    _, path = saved
    out = tmp_path / "run.html"
    assert main(["report", str(path), "-o", str(out)]) == 0

    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert '<span id="status" class="status finished">finished</span>' in page
    assert "Which is warmer today, Lisbon or Porto? In Fahrenheit, please." in page
    assert capsys.readouterr().out == f"wrote {out}\n"


def test_report_to_stdout(
    saved: tuple[RunResult, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Without -o the page goes to stdout."""
    _, path = saved
    assert main(["report", str(path)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("</html>")


# -- files that cannot be used ---------------------------------------------------------


@pytest.mark.parametrize("command", ["show", "report", "diagram --run"])
def test_missing_file_exits_2_in_one_line(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing run file: one line on stderr naming it, exit 2, nothing on stdout."""
    missing = tmp_path / "absent.json"
    assert main([*command.split(), str(missing)]) == 2

    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"agentloop: error: cannot read {missing}: No such file or directory\n"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"format": "agentloop.run", "version": 9}', "$.version: expected version 6"),
        ("{not json", "expected a JSON document, got invalid JSON"),
        (
            "\udcff\udcfe{}",  # written back as the bytes ff fe: not UTF-8 at all
            "expected a JSON document in UTF-8, got bytes that are not UTF-8 text (from byte 0)",
        ),
        ('{"format": "agentloop.run", "version": 6}', "$: expected the field 'status'"),
    ],
)
def test_damaged_file_exits_2_in_one_line(
    content: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A damaged run file: one line naming the file and the problem, exit 2."""
    path = tmp_path / "run.json"
    path.write_bytes(content.encode(errors="surrogateescape"))
    assert main(["show", str(path)]) == 2

    err = capsys.readouterr().err
    assert err.startswith(f"agentloop: error: not a valid run file: {path}: ")
    assert problem in err
    assert err.count("\n") == 1


def test_an_error_quoting_the_file_stays_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whatever the error quotes from the file or its name is escaped: one line on stderr."""
    path = tmp_path / "run\n\u202e.json"
    path.write_text('{"format": "agentloop.run", "version": "\\u001b[2J\\nstatus finished"}')
    assert main(["show", str(path)]) == 2

    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.endswith("\n")
    assert "run\\n\\u202e.json" in err
    assert not any(unicodedata.category(char) in UNSAFE for char in err[:-1])


@pytest.mark.parametrize("command", ["show", "report", "diagram --run"])
def test_max_size_is_passed_to_the_loader(
    saved: tuple[RunResult, Path], command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--max-size BYTES: a file of exactly that size loads, one byte more is refused, exit 2."""
    _, path = saved
    size = path.stat().st_size
    assert main([*command.split(), str(path), "--max-size", str(size)]) == 0
    capsys.readouterr()

    assert main([*command.split(), str(path), "--max-size", str(size - 1)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"agentloop: error: not a valid run file: {path}: expected a run file of at most "
        f"{size - 1} bytes (raise the limit with max_bytes=, or --max-size on the command "
        f"line), got more than {size - 1} bytes\n"
    )


@pytest.mark.parametrize("limit", [[], ["--max-size", "1000"]], ids=["default", "1000"])
def test_an_endless_file_is_refused_in_one_line(
    limit: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """/dev/zero never ends: it is read up to the limit and refused, exit 2."""
    assert main(["show", "/dev/zero", *limit]) == 2

    bytes_ = limit[1] if limit else str(MAX_BYTES)
    err = capsys.readouterr().err
    assert err.startswith(
        "agentloop: error: not a valid run file: /dev/zero: "
        f"expected a run file of at most {bytes_} bytes"
    )
    assert err.count("\n") == 1


def test_max_size_default_is_the_loaders(capsys: pytest.CaptureFixture[str]) -> None:
    """The default --max-size is load_run's own limit, and --help says so."""
    with pytest.raises(SystemExit):
        main(["show", "--help"])
    assert f"(default: {MAX_BYTES}, 256 MiB)" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("size", ["0", "-1", "1e6", "lots"])
def test_max_size_must_be_a_positive_count(
    saved: tuple[RunResult, Path], size: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--max-size that is not a positive whole number is a usage error, exit 2."""
    _, path = saved
    with pytest.raises(SystemExit) as caught:
        main(["show", str(path), "--max-size", size])
    assert caught.value.code == 2
    assert f"expected a positive number of bytes, got '{size}'" in capsys.readouterr().err


def test_unwritable_output_exits_2(
    saved: tuple[RunResult, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An -o path that cannot be written: one line, exit 2."""
    _, path = saved
    out = tmp_path / "no" / "such" / "dir" / "run.html"
    assert main(["report", str(path), "-o", str(out)]) == 2
    assert (
        capsys.readouterr().err
        == f"agentloop: error: cannot write {out}: No such file or directory\n"
    )


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse rejects an unknown command with exit code 2."""
    with pytest.raises(SystemExit) as caught:
        main(["frobnicate"])
    assert caught.value.code == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["show {run}", "report {run}", "runs x.db", "demo"])
def test_an_unknown_option_is_told_by_its_command(
    saved: tuple[RunResult, Path], command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """COMMAND ... --wat: the command's own usage and error, not the top-level usage."""
    _, path = saved
    with pytest.raises(SystemExit) as caught:
        main([*command.format(run=path).split(), "--wat"])
    assert caught.value.code == 2

    err = capsys.readouterr().err
    name = command.split()[0]
    assert err.startswith(f"usage: agentloop {name} ")
    assert err.endswith(f"agentloop {name}: error: unrecognized arguments: --wat\n")


@pytest.mark.parametrize("where", ["under-a-file", "a-file", "read-only"])
def test_demo_out_that_cannot_be_written_fails_before_the_demo(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """demo --out DIR that cannot hold a file: one line, exit 2, and no demo printed first."""
    afile = tmp_path / "afile"
    afile.write_text("")
    out = {"under-a-file": afile / "demo", "a-file": afile, "read-only": tmp_path / "ro"}[where]
    if where == "read-only":
        out.mkdir(mode=0o555)
        if os.access(out, os.W_OK):
            pytest.skip("this user writes in a read-only directory (root)")

    assert main(["demo", "--out", str(out)]) == 2

    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"agentloop: error: cannot save the demo in {out}")
    assert captured.err.count("\n") == 1
    if where == "a-file":
        assert "(expected a directory)" in captured.err


# -- real processes ----------------------------------------------------------------------


def test_python_dash_m_runs_in_a_real_process(saved: tuple[RunResult, Path]) -> None:
    """python -m agentloop: show succeeds; a damaged file exits 2 with no traceback."""
    _, path = saved
    ok = run(sys.executable, "-m", "agentloop", "show", str(path))
    assert ok.returncode == 0, ok.stderr
    assert "dispatching → awaiting_model" in ok.stdout

    path.write_text("[]")
    bad = run(sys.executable, "-m", "agentloop", "show", str(path))
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert bad.stderr == (
        f"agentloop: error: not a valid run file: {path}: "
        "expected a JSON object (a run file), got array []\n"
    )


def test_console_script_is_installed() -> None:
    """The agentloop console script (declared in pyproject) runs the same main()."""
    assert SCRIPT.exists(), "install the package (make install) to get the console script"
    done = run(str(SCRIPT), "diagram", "--format", "dot")
    assert done.returncode == 0, done.stderr
    # Not compared with to_dot(): the script runs whichever agentloop is installed.
    assert done.stdout.startswith("digraph agentloop {\n")
    assert all(f'"{state.value}" [shape=' in done.stdout for state in State)


def read_then_close(command: str, path: Path, read: int) -> tuple[int, str]:
    """Run ``agentloop command path``, read ``read`` bytes of its output, close the pipe:
    its exit code and stderr (a reader such as ``| head``)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "agentloop", *command.split(), str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    assert len(process.stdout.read(read)) == read
    process.stdout.close()
    err = process.stderr.read().decode()
    process.stderr.close()
    return process.wait(timeout=60), err


@pytest.mark.parametrize("command", ["report", "diagram --run", "show"])
def test_a_closed_pipe_is_not_an_error(saved: tuple[RunResult, Path], command: str) -> None:
    """Output piped into a reader that stops early (| head): no traceback, exit 1."""
    code, err = read_then_close(command, saved[1], 0)  # gone before anything is written
    assert code == 1
    assert "Traceback" not in err
    assert "BrokenPipeError" not in err


@pytest.mark.parametrize("command", ["report", "show --full"])
def test_a_pipe_closed_in_the_middle_of_a_long_output_is_exit_1(
    tmp_path: Path, command: str
) -> None:
    """A reader that leaves after the first bytes of megabytes of output (| head -c 100):
    still exit 1, not a silent 0 with the rest dropped."""
    path = save(Loop(ScriptedModel([final("x" * 2_000_000)])).run("go"), tmp_path)
    code, err = read_then_close(command, path, 100)
    assert code == 1
    assert "Traceback" not in err


def test_show_does_not_pass_terminal_escapes_through(tmp_path: Path) -> None:
    """Control characters from a run file are shown escaped, never sent to the terminal."""
    out = show(
        save(Loop(ScriptedModel([final("\x1b[2J\x1b]0;owned\x07gone")])).run("go"), tmp_path)
    )

    assert "\x1b" not in out
    assert "\x07" not in out
    assert "final: \\x1b[2J\\x1b]0;owned\\x07gone\n" in out
    assert "output   \\x1b[2J\\x1b]0;owned\\x07gone\n" in out


def test_report_refuses_to_write_html_to_a_terminal(tmp_path: Path) -> None:
    """On a terminal, report asks for -o or a pipe: the page's text would reach the terminal."""
    import pty

    result = Loop(ScriptedModel([final("hi \x1b[31m red")])).run("go")
    path = tmp_path / "run.json"
    agentloop.review.save_run(result, path)
    leader, follower = pty.openpty()
    process = subprocess.run(
        [sys.executable, "-m", "agentloop", "report", str(path)],
        stdout=follower,
        stderr=subprocess.PIPE,
        check=False,
    )
    os.close(follower)
    os.close(leader)
    assert process.returncode == 2
    assert b"the report is an HTML page: write it to a file with -o FILE" in process.stderr
