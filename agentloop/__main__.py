"""agentloop's command line: run the demo, draw the machine, review saved runs.

  agentloop demo [--out DIR]                 the scripted scenario, step by step
  agentloop diagram [--format mermaid|dot|svg] [--run RUN.json] [-o FILE]
  agentloop show RUN.json                    a saved run as a table of transitions
  agentloop report RUN.json [-o run.html]    a saved run as one self-contained page

A missing or damaged file is reported in one line on stderr, with exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from agentloop._errors import RunFileError, SVGUnavailableError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rich.console import Console

    from agentloop._core._values import RunResult

__all__ = ["main"]


class CommandError(Exception):
    """A problem to report in one line, exit code 2 (no traceback)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentloop",
        description="An LLM tool-calling loop as an explicit finite-state machine.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser("demo", help="run the built-in scripted scenario step by step")
    demo.add_argument(
        "--out", metavar="DIR", help="also save run.json, trace.mmd and report.html in DIR"
    )
    diagram = commands.add_parser("diagram", help="the state machine as a diagram")
    diagram.add_argument("--format", choices=("mermaid", "dot", "svg"), default="mermaid")
    diagram.add_argument("--run", metavar="RUN.json", help="mark the path this saved run took")
    diagram.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    show = commands.add_parser("show", help="a saved run, one transition per row")
    show.add_argument("run", metavar="RUN.json")
    report = commands.add_parser("report", help="a saved run as one self-contained HTML page")
    report.add_argument("run", metavar="RUN.json")
    report.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run one command; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            return _demo(args.out)
        if args.command == "diagram":
            return _diagram(args.format, args.run, args.output)
        if args.command == "show":
            return _show(_load(args.run))
        return _report(_load(args.run), args.output)
    except CommandError as exc:
        print(f"agentloop: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader stopped early (``| head``): no traceback. As rich does, exit 1,
        # with stdout pointed at devnull so the interpreter's last flush cannot fail.
        _discard_stdout()
        return 1


def _discard_stdout() -> None:
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (captured, replaced)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _load(path: str) -> RunResult:
    from agentloop._review._runfile import load_run

    try:
        return load_run(path)
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from None
    except RunFileError as exc:
        raise CommandError(f"not a valid run file: {exc}") from None


def _write(text: str, output: str | None) -> None:
    if output is None or output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()  # a closed pipe shows here, inside main()
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from None
    print(f"wrote {output}")


def _console() -> Console:
    try:
        from rich.console import Console
    except ImportError:
        raise CommandError(
            "this command prints tables with rich: pip install 'agentloop[cli]'"
        ) from None
    console = Console()
    if not console.is_terminal:
        console.width = 140  # keep piped output (CI logs, files) unwrapped
    return console


def _demo(out: str | None) -> int:
    from agentloop._demo import QUESTION, demo_loop
    from agentloop._review._report import describe

    console = _console()  # fail early, in one line, without rich
    loop = demo_loop()
    run = loop.start(QUESTION)
    rows = [describe(number, transition, loop.budget) for number, transition in enumerate(run, 1)]
    result = run.result()
    _print_run(console, "agentloop demo: one transition per step", rows, result)
    if out is not None:
        from agentloop._review._diagram import to_mermaid
        from agentloop._review._report import report_html
        from agentloop._review._runfile import save_run

        folder = Path(out)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            save_run(result, folder / "run.json")
            (folder / "trace.mmd").write_text(to_mermaid(result), encoding="utf-8")
            (folder / "report.html").write_text(report_html(result), encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot save the demo in {out}: {exc.strerror or exc}") from None
        print(
            f"saved the run to {folder / 'run.json'}, its trace diagram to "
            f"{folder / 'trace.mmd'} and a report to {folder / 'report.html'}\n"
            f"next: python -m agentloop show {folder / 'run.json'}"
        )
    return 0 if result.status == "finished" else 1


def _diagram(format_: str, run_path: str | None, output: str | None) -> int:
    from agentloop._review._diagram import to_dot, to_mermaid, to_svg

    run = _load(run_path) if run_path is not None else None
    render = {"mermaid": to_mermaid, "dot": to_dot, "svg": to_svg}[format_]
    try:
        text = render(run)
    except SVGUnavailableError as exc:
        raise CommandError(str(exc)) from None
    _write(text, output)
    return 0


def _show(result: RunResult) -> int:
    from agentloop._review._report import describe

    console = _console()
    rows = [describe(number, event, result.budget) for number, event in enumerate(result.events, 1)]
    _print_run(console, f"agentloop run: {result.status.value}", rows, result)
    return 0


# C0 and C1 control characters but newline, shown escaped: a run file must not
# drive the terminal (rich drops some, but passes ESC through).
_CONTROLS = {
    code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0)) if code != ord("\n")
}


def _plain(text: str) -> str:
    return text.translate(_CONTROLS)


def _print_run(
    console: Console, title: str, rows: Iterable[tuple[str, ...]], result: RunResult
) -> None:
    """A table of transitions under ``HEADERS``, then the run's outcome, as plain text."""
    from rich.table import Table
    from rich.text import Text

    from agentloop._review._report import HEADERS, rejected_text

    # Text() everywhere: run content is printed as is, never read as rich markup.
    table = Table(title=Text(_plain(title)))
    for header in HEADERS:
        table.add_column(Text(header))
    for cells in rows:
        table.add_row(*(Text(_plain(cell)) for cell in cells))
    budget = result.budget
    lines = [
        f"status   {result.status.value}",
        f"steps    {result.steps} of {budget.max_steps}",
        f"calls    {result.calls} of {budget.max_calls}",
    ]
    for name in ("output", "reason", "error"):
        value = getattr(result, name)
        if value is not None:
            lines.append(f"{name:<8} {value}")
    if result.rejected_value is not None:
        shown, note = rejected_text(result.rejected_value, indent=False)
        lines.append(f"rejected {shown}" + (f"  ({note})" if note else ""))
    console.print(table)
    console.print(Text(_plain("\n".join(lines))))


def _report(result: RunResult, output: str | None) -> int:
    from agentloop._review._report import report_html

    _write(report_html(result), output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
