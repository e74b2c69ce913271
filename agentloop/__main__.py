"""agentloop's command line: run the demo, draw the machine, review saved runs.

  agentloop demo [--out DIR]                 the scripted scenario, step by step
  agentloop diagram [--format mermaid|dot|svg] [--run RUN.json] [-o FILE]
  agentloop show RUN.json [--full | --width N]   a saved run as text
  agentloop report RUN.json [-o run.html]    a saved run as one self-contained page

Everything is plain text written by this module, with nothing to install
beyond agentloop itself (SVG needs the ``svg`` extra). A missing, damaged or
too big file is reported in one line on stderr, with exit code 2.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from agentloop._errors import RunFileError, SVGUnavailableError
from agentloop._review._runfile import MAX_BYTES

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop._core._values import RunResult

__all__ = ["DISTRIBUTION", "main"]

#: The name agentloop is installed under (``agentloop`` on PyPI is another project).
DISTRIBUTION = "agentloop-fsm"


class CommandError(Exception):
    """A problem to report in one line, exit code 2 (no traceback)."""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples' line breaks; wraps the option help as usual."""


def _version() -> str:
    try:
        return f"{DISTRIBUTION} {metadata.version(DISTRIBUTION)}"
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return f"{DISTRIBUTION} (not installed, version unknown)"


def _whole(least: int, expected: str) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``least``, else "expected ..., got ..."."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


_bytes = _whole(1, "a positive number of bytes")
_width = _whole(2, "a number of characters >= 2")


def _command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    summary: str,
    examples: str,
) -> argparse.ArgumentParser:
    return commands.add_parser(
        name,
        help=summary,
        description=summary[0].upper() + summary[1:] + ".",
        epilog="examples:\n" + examples,
        formatter_class=_Formatter,
    )


_RUN_HELP = "a saved run (agentloop.save_run, or demo --out)"


def _max_size(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--max-size",
        metavar="BYTES",
        type=_bytes,
        default=MAX_BYTES,
        help="refuse a run file larger than this "
        f"(default: %(default)s, {MAX_BYTES / 2**20:g} MiB)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentloop",
        description="An LLM tool-calling loop as an explicit finite-state machine: "
        "run the demo, draw the machine, review saved runs.",
        epilog="examples:\n"
        "  agentloop demo --out demo-output\n"
        "  agentloop show demo-output/run.json\n"
        "  agentloop COMMAND --help",
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = _command(
        commands,
        "demo",
        "run the built-in scripted scenario and print each transition",
        "  agentloop demo                   # print the run\n"
        "  agentloop demo --out demo-output # also save run.json, trace.mmd, report.html",
    )
    demo.add_argument(
        "--out", metavar="DIR", help="also save run.json, trace.mmd and report.html in DIR"
    )

    diagram = _command(
        commands,
        "diagram",
        "draw the state machine, or the path a saved run took on it",
        "  agentloop diagram                                 # the machine, Mermaid\n"
        "  agentloop diagram --format dot -o machine.dot\n"
        "  agentloop diagram --run run.json --format svg -o trace.svg",
    )
    diagram.add_argument(
        "--format",
        choices=("mermaid", "dot", "svg"),
        default="mermaid",
        help="mermaid (stateDiagram-v2), dot (Graphviz) or svg (needs the svg extra); "
        "default: %(default)s",
    )
    diagram.add_argument("--run", metavar="RUN.json", help="mark the path this saved run took")
    diagram.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    _max_size(diagram)

    show = _command(
        commands,
        "show",
        "print a saved run: its input, each transition, how it ended",
        "  agentloop show run.json\n"
        "  agentloop show run.json --full       # values whole, not cut\n"
        "  agentloop show run.json --width 200",
    )
    show.add_argument("run", metavar="RUN.json", help=_RUN_HELP)
    cut = show.add_mutually_exclusive_group()
    cut.add_argument("--full", action="store_true", help="show every value whole")
    cut.add_argument(
        "--width",
        metavar="N",
        type=_width,
        default=80,
        help="cut input messages, calls and outcomes to N characters (default: %(default)s)",
    )
    _max_size(show)

    report = _command(
        commands,
        "report",
        "write a saved run as one self-contained HTML page",
        "  agentloop report run.json -o run.html\n  agentloop report run.json > run.html",
    )
    report.add_argument("run", metavar="RUN.json", help=_RUN_HELP)
    report.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    _max_size(report)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run one command; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            return _demo(args.out)
        if args.command == "diagram":
            run = None if args.run is None else _load(args.run, args.max_size)
            return _diagram(args.format, run, args.output)
        if args.command == "show":
            return _show(_load(args.run, args.max_size), None if args.full else args.width)
        return _report(_load(args.run, args.max_size), args.output)
    except CommandError as exc:
        from agentloop._review._report import printable

        # One line, whatever the message quotes (a path, a value from the file).
        print(f"agentloop: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader stopped early (``| head``): no traceback, exit 1, with stdout
        # pointed at devnull so the interpreter's last flush cannot fail.
        _discard_stdout()
        return 1


def _to_stdout(text: str) -> None:
    """Write ``text`` whole, or raise ``BrokenPipeError`` (the reader left: ``| head``).

    Through the file descriptor: a reader that leaves during one big write cuts
    it short, and ``sys.stdout`` would drop the rest without a word (exit 0).
    """
    fd = _stdout_fd()
    if fd is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    sys.stdout.flush()
    data = memoryview(text.encode(sys.stdout.encoding or "utf-8", sys.stdout.errors or "strict"))
    while data:
        data = data[os.write(fd, data) :]  # a short write goes on: a closed pipe raises here


def _stdout_fd() -> int | None:
    try:
        return sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (captured, replaced)
        return None


def _discard_stdout() -> None:
    fd = _stdout_fd()
    if fd is None:
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _load(path: str, max_bytes: int) -> RunResult:
    from agentloop._review._runfile import load_run

    try:
        return load_run(path, max_bytes=max_bytes)
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from None
    except RunFileError as exc:
        raise CommandError(f"not a valid run file: {exc}") from None


def _write(text: str, output: str | None) -> None:
    if output is None or output == "-":
        _to_stdout(text)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from None
    print(f"wrote {output}")


def _print_lines(lines: list[str]) -> None:
    _write("".join(line + "\n" for line in lines), None)


def _shell_path(path: Path) -> str:
    """``path`` as typed from here: relative when under the current folder, quoted if need be."""
    try:
        shown = str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        shown = str(path)
    return shlex.quote(shown)


def _self_command() -> str:
    """The command that runs this agentloop again from the current folder, as it can be typed."""
    script = Path(sys.argv[0])
    if script.name == "agentloop":  # the console script
        on_path = shutil.which("agentloop")
        if on_path is not None and Path(on_path).resolve() == script.resolve():
            return "agentloop"
        return _shell_path(script)
    return f"{_shell_path(Path(sys.executable))} -m agentloop"


def _demo(out: str | None) -> int:
    from agentloop._demo import QUESTION, demo_loop
    from agentloop._review._report import run_lines

    result = demo_loop().run(QUESTION)
    _print_lines(run_lines(result, title="agentloop demo: one transition per step"))
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
            expected = " (expected a directory)" if folder.exists() and not folder.is_dir() else ""
            raise CommandError(
                f"cannot save the demo in {out}{expected}: {exc.strerror or exc}"
            ) from None
        print(
            f"\nsaved the run to {folder / 'run.json'}, its trace diagram to "
            f"{folder / 'trace.mmd'} and a report to {folder / 'report.html'}\n"
            f"next: {_self_command()} show {_shell_path(folder / 'run.json')}"
        )
    return 0 if result.status == "finished" else 1


def _diagram(format_: str, run: RunResult | None, output: str | None) -> int:
    from agentloop._review._diagram import to_dot, to_mermaid, to_svg

    render = {"mermaid": to_mermaid, "dot": to_dot, "svg": to_svg}[format_]
    try:
        text = render(run)
    except SVGUnavailableError as exc:
        raise CommandError(str(exc)) from None
    _write(text, output)
    return 0


def _show(result: RunResult, limit: int | None) -> int:
    from agentloop._review._report import run_lines

    _print_lines(run_lines(result, title=f"agentloop run: {result.status.value}", limit=limit))
    return 0


def _report(result: RunResult, output: str | None) -> int:
    from agentloop._review._report import report_html

    if output in (None, "-") and sys.stdout.isatty():
        # HTML holds the run's text as it is; a terminal would act on its control characters.
        raise CommandError(
            "the report is an HTML page: write it to a file with -o FILE, or pipe it"
        )
    _write(report_html(result), output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
