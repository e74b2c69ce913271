"""The demo, diagrams, and saved run files: shown as text or written as a page."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from agentloop._cli.nesting import nested_lines, unshown
from agentloop._cli.printing import (
    CommandError,
    print_lines,
    self_command,
    shell_path,
    write,
)
from agentloop._errors import RunFileError, SVGUnavailableError

if TYPE_CHECKING:
    from agentloop._core.values import RunResult

__all__ = ["demo", "diagram", "load", "report", "show", "shown_lines", "unreadable"]


def load(path: str, max_bytes: int) -> RunResult:
    """The run saved in ``path``; a ``CommandError`` saying why not."""
    from agentloop._review.runfile import load_run

    try:
        return load_run(path, max_bytes=max_bytes)
    except OSError as exc:
        raise unreadable(path, exc) from None
    except RunFileError as exc:
        raise CommandError(f"not a valid run file: {exc}") from None


def unreadable(path: str, exc: OSError) -> CommandError:
    """The error of a file that cannot be read, as every command words it."""
    return CommandError(f"cannot read {path}: {exc.strerror or exc}")


def demo(out: str | None) -> int:
    """Run the scripted scenario, print it, and save it in ``out`` if given."""
    from agentloop._cli.demo import QUESTION, demo_loop
    from agentloop._review.text import run_lines

    folder = None if out is None else _writable(out)  # before the demo prints a line
    result = demo_loop().run(QUESTION)
    print_lines(run_lines(result, title="agentloop demo: one transition per step"))
    if folder is not None:
        from agentloop._review.diagram import to_mermaid
        from agentloop._review.report import report_html
        from agentloop._review.runfile import save_run

        try:
            save_run(result, folder / "run.json")
            (folder / "trace.mmd").write_text(to_mermaid(result), encoding="utf-8")
            (folder / "report.html").write_text(report_html(result), encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot save the demo in {out}: {exc.strerror or exc}") from None
        print(
            f"\nsaved the run to {folder / 'run.json'}, its trace diagram to "
            f"{folder / 'trace.mmd'} and a report to {folder / 'report.html'}\n"
            f"next: {self_command()} show {shell_path(folder / 'run.json')}"
        )
    return 0 if result.status == "finished" else 1


def _writable(out: str) -> Path:
    """The folder ``out``, made if need be, once a file could be written in it."""
    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass  # what permissions say is not enough: a read-only mount, root, ACLs
    except OSError as exc:
        expected = " (expected a directory)" if folder.exists() and not folder.is_dir() else ""
        raise CommandError(
            f"cannot save the demo in {out}{expected}: {exc.strerror or exc}"
        ) from None
    return folder


def diagram(
    format_: str,
    run: RunResult | None,
    output: str | None,
    *,
    path: bool = False,
    features: list[str] | None = None,
) -> int:
    """The machine, or the path ``run`` took on it, in ``format_``; ``path``: that path alone.

    ``features``: the machine of one configuration (the basic rows and these features').
    """
    from agentloop._review.diagram import path_dot, path_svg, to_dot, to_mermaid, to_svg

    try:
        if path:
            assert run is not None, "the command line asks for a run with --path"
            text = {"dot": path_dot, "svg": path_svg}[format_](run)
        else:
            draw = {"mermaid": to_mermaid, "dot": to_dot, "svg": to_svg}[format_]
            text = draw(run, features=features)
    except SVGUnavailableError as exc:
        raise CommandError(str(exc)) from None
    write(text, output)
    return 0


def show(
    result: RunResult, limit: int | None, *, title: str | None = None, depth: int | None = None
) -> int:
    """``result`` as text (values cut to ``limit``, its child runs nested ``depth`` deep)."""
    print_lines(shown_lines(result, limit, title, depth))
    return 0


def shown_lines(
    result: RunResult, limit: int | None, title: str | None = None, depth: int | None = None
) -> list[str]:
    """What ``show`` prints of ``result``: its lines, each child run's put under its call.

    Child runs down to ``depth`` generations (``None``: all); a line counts those left out.
    """
    from agentloop._review.text import run_lines

    title = f"agentloop run: {result.status.value}" if title is None else title
    lines = run_lines(result, title=title, limit=limit)
    lines = nested_lines(
        result, lines, lambda child, heading: run_lines(child, title=heading, limit=limit), depth
    )
    left_out = unshown(result, depth)
    return lines if left_out is None else [*lines, left_out]


def report(result: RunResult, output: str | None) -> int:
    """``result`` as one HTML page, to ``output`` or a pipe (never to a terminal)."""
    from agentloop._review.report import report_html

    return write_page(report_html(result), output)


def write_page(html: str, output: str | None) -> int:
    """Write an HTML page to ``output``, or to stdout unless it is a terminal."""
    if output in (None, "-") and sys.stdout.isatty():
        # HTML holds the run's text as it is; a terminal would act on its control characters.
        raise CommandError(
            "the report is an HTML page: write it to a file with -o FILE, or pipe it"
        )
    write(html, output)
    return 0
