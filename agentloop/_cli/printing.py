"""Writing what a command prints: whole, or ``BrokenPipeError`` when the reader leaves."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

__all__ = [
    "CommandError",
    "discard_stdout",
    "print_lines",
    "self_command",
    "shell_path",
    "to_stdout",
    "write",
]


class CommandError(Exception):
    """A problem to report in one line, exit code 2 (no traceback)."""


def to_stdout(text: str) -> None:
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


def discard_stdout() -> None:
    """Point stdout at devnull, so that the interpreter's last flush cannot fail."""
    fd = _stdout_fd()
    if fd is None:
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def write(text: str, output: str | None) -> None:
    """``text`` to stdout (``None`` or ``-``), or to the file ``output``, saying so."""
    if output is None or output == "-":
        to_stdout(text)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from None
    print(f"wrote {output}")


def print_lines(lines: list[str]) -> None:
    """Each line, escaped to stay one line (``printable``), then a newline, to stdout."""
    from agentloop._review.text import printable

    write("".join(printable(line) + "\n" for line in lines), None)


def shell_path(path: Path) -> str:
    """``path`` as typed from here: relative when under the current folder, quoted if need be."""
    try:
        shown = str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        shown = str(path)
    return shlex.quote(shown)


def self_command() -> str:
    """The command that runs this agentloop again from the current folder, as it can be typed."""
    script = Path(sys.argv[0])
    if script.name == "agentloop":  # the console script
        on_path = shutil.which("agentloop")
        if on_path is not None and Path(on_path).resolve() == script.resolve():
            return "agentloop"
        return shell_path(script)
    return f"{shell_path(Path(sys.executable))} -m agentloop"
