"""The command line: demo, diagram, show and report, on saved runs; errors exit 2 in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import agentloop
from agentloop import Loop, RunResult, State, to_dot, to_mermaid
from agentloop.__main__ import main
from agentloop._demo import demo_loop

from .helpers import Script, final
from .test_trace import renderer  # noqa: F401 - a fixture

ROOT = Path(__file__).parent.parent


@pytest.fixture
def saved(tmp_path: Path) -> tuple[RunResult, Path]:
    """The demo's run, saved as tmp_path/run.json."""
    result = demo_loop().run("What's the weather in Lisbon, in Fahrenheit?")
    path = tmp_path / "run.json"
    agentloop.save_run(result, path)
    return result, path


def test_demo_saves_its_run_trace_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """demo --out writes run.json, trace.mmd and report.html, and says where."""
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0

    printed = capsys.readouterr().out
    loaded = agentloop.load_run(out / "run.json")
    assert loaded.status == "finished"
    assert loaded.output == "Lisbon is clear, 21.5 °C (70.7 °F)."
    assert (out / "trace.mmd").read_text(encoding="utf-8") == to_mermaid(loaded)
    assert 'id="status" class="status finished"' in (out / "report.html").read_text("utf-8")
    assert f"saved the run to {out / 'run.json'}" in printed
    assert str(out / "trace.mmd") in printed
    assert "validating → finished" in printed  # the live table


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


def test_diagram_svg_without_renderer_exits_2(
    no_pygraphviz: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without pygraphviz, --format svg says what to install, in one line, exit 2."""
    assert main(["diagram", "--format", "svg"]) == 2

    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("agentloop: error: rendering SVG needs pygraphviz")
    assert "pip install 'agentloop[svg]'" in captured.err
    assert captured.err.count("\n") == 1


def test_show_prints_each_transition(
    saved: tuple[RunResult, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """show prints a row per transition (from → to, trigger [guard], counters, call, outcome)."""
    result, path = saved
    assert main(["show", str(path)]) == 0

    out = capsys.readouterr().out
    assert "agentloop run: finished" in out
    for header in ("step", "from → to", "trigger [guard]", "steps", "calls", "call", "outcome"):
        assert header in out
    for event in result.events:
        assert f"{event.source.value} → {event.dest.value}" in out
    assert "validate [reply_is_final]" in out
    assert "weather#c1" in out
    assert "ok: 70.7" in out
    assert "status   finished" in out
    assert "steps    3 of 5" in out
    assert "output   Lisbon is clear, 21.5 °C (70.7 °F)." in out


def test_show_prints_run_text_literally(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Text from the run that looks like rich markup is printed as is, rejected reply too."""
    reply = {"kind": "final", "text": "[bold]no[/bold]", "extra": "[red]x"}
    result = Loop(Script([reply])).run("go")
    path = tmp_path / "run.json"
    agentloop.save_run(result, path)

    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert '"text":"[bold]no[/bold]"' in out
    assert "[red]x" in out
    assert "status   malformed" in out


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
    assert "What&#x27;s the weather in Lisbon, in Fahrenheit?" in page
    assert capsys.readouterr().out == f"wrote {out}\n"


def test_report_to_stdout(
    saved: tuple[RunResult, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Without -o the page goes to stdout."""
    _, path = saved
    assert main(["report", str(path)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("</html>")


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
        ('{"format": "agentloop.run", "version": 9}', "$.version: expected version 2"),
        ("{not json", "expected a JSON document, got invalid JSON"),
        ('{"format": "agentloop.run", "version": 2}', "$: expected the field 'status'"),
    ],
)
def test_damaged_file_exits_2_in_one_line(
    content: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A damaged run file: one line naming the file and the problem, exit 2."""
    path = tmp_path / "run.json"
    path.write_text(content)
    assert main(["show", str(path)]) == 2

    err = capsys.readouterr().err
    assert err.startswith(f"agentloop: error: not a valid run file: {path}: ")
    assert problem in err
    assert err.count("\n") == 1


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


def test_python_dash_m_runs_in_a_real_process(saved: tuple[RunResult, Path]) -> None:
    """python -m agentloop: show succeeds; a damaged file exits 2 with no traceback."""
    _, path = saved
    ok = subprocess.run(
        [sys.executable, "-m", "agentloop", "show", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert "dispatching → awaiting_model" in ok.stdout

    path.write_text("[]")
    bad = subprocess.run(
        [sys.executable, "-m", "agentloop", "show", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert bad.stderr == (
        f"agentloop: error: not a valid run file: {path}: "
        "expected a JSON object (a run file), got array []\n"
    )


def test_console_script_is_installed() -> None:
    """The agentloop console script (declared in pyproject) runs the same main()."""
    script = Path(sys.executable).parent / "agentloop"
    assert script.exists(), "install the package (make install) to get the console script"
    done = subprocess.run(
        [str(script), "diagram", "--format", "dot"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    # Not compared with to_dot(): the script runs whichever agentloop is installed.
    assert done.stdout.startswith("digraph agentloop {\n")
    assert all(f'"{state.value}" [shape=' in done.stdout for state in State)


def test_final_only_run_shows_its_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A one-step run: show prints the final answer as the last outcome."""
    result = Loop(Script([final("42")])).run("question")
    path = tmp_path / "run.json"
    agentloop.save_run(result, path)

    assert main(["show", str(path)]) == 0
    assert "final: 42" in capsys.readouterr().out


def test_show_without_rich_says_what_to_install(
    saved: tuple[RunResult, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without the cli extra, show says what to install in one line, exit 2."""
    _, path = saved
    for name in ("rich", "rich.console", "rich.table", "rich.text"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails, as when not installed

    assert main(["show", str(path)]) == 2
    assert capsys.readouterr().err == (
        "agentloop: error: this command prints tables with rich: pip install 'agentloop[cli]'\n"
    )


@pytest.mark.parametrize("command", ["report", "diagram --run", "show"])
def test_a_closed_pipe_is_not_an_error(saved: tuple[RunResult, Path], command: str) -> None:
    """Output piped into a reader that stops early (| head): no traceback, exit 1 as rich does."""
    _, path = saved
    process = subprocess.Popen(
        [sys.executable, "-m", "agentloop", *command.split(), str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    process.stdout.close()  # the reader is gone before anything is written
    err = process.stderr.read().decode()
    process.stderr.close()

    assert process.wait(timeout=60) == 1
    assert "Traceback" not in err
    assert "BrokenPipeError" not in err


def test_show_does_not_pass_terminal_escapes_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Control characters from a run file are shown escaped, never sent to the terminal."""
    result = Loop(Script([final("\x1b[2J\x1b]0;owned\x07gone")])).run("go")
    path = tmp_path / "run.json"
    agentloop.save_run(result, path)

    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "\x07" not in out
    assert "final: \\x1b[2J\\x1b]0;owned\\x07gone" in out
    assert "output   \\x1b[2J" in out
