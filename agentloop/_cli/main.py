"""The parser and the dispatch: one subcommand per thing a person does from a terminal.

  agentloop demo [--out DIR]                 the scripted scenario, step by step
  agentloop diagram [RUN.json | LEDGER RUN_ID] [--format mermaid|dot|svg] [--path]
                    [--features NAMES] [-o FILE]
  agentloop show RUN.json [--full | --width N] [--depth N]   a saved run as text
  agentloop show LEDGER RUN_ID [--depth N]   a ledger's run as text (nothing is run)
  agentloop report RUN.json|LEDGER RUN_ID [-o run.html]   one self-contained page
  agentloop runs LEDGER [--state STATE]...   a ledger's runs, a line each
  agentloop pending LEDGER                   every call waiting for a person
  agentloop decide LEDGER RUN_ID CALL_ID=approve|deny:REASON ...
  (LEDGER: a ledger file, or a DBOS system database URL: postgresql://..., sqlite:///...)

Everything is plain text written by this package, with nothing to install
beyond agentloop itself (SVG needs the ``svg`` extra). A missing, damaged or
too big file, an unknown run, a bad decision is reported in one line on
stderr, with exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from agentloop._cli import dbos_commands, file_commands, ledger_commands
from agentloop._cli.printing import CommandError, discard_stdout
from agentloop._core.table import Feature, State
from agentloop._review.runshape import MAX_BYTES

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from agentloop._core.values import RunResult

__all__ = ["DISTRIBUTION", "main"]

#: The name agentloop is installed under (``agentloop`` on PyPI is another project).
DISTRIBUTION = "agentloop-fsm"


class _Store(Protocol):
    """Where runs are kept: a ledger file (``ledger_commands``) or DBOS (``dbos_commands``).

    Both answer the same commands.
    """

    def runs(
        self, path: str, states: Iterable[str], /, *, flat: bool, conversation: str | None
    ) -> int: ...
    def pending(self, path: str, /) -> int: ...
    def decide(self, path: str, run_id: str, verdicts: list[str], /) -> int: ...
    def show(self, path: str, run_id: str, limit: int | None, depth: int | None, /) -> int: ...
    def report(self, path: str, run_id: str, output: str | None, /) -> int: ...
    def result(self, path: str, run_id: str, /) -> RunResult: ...


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
_depth = _whole(0, "a number of generations >= 0 (0: the run alone)")
_Commands = argparse._SubParsersAction  # the type argparse keeps private


def _command(
    commands: _Commands[argparse.ArgumentParser], name: str, summary: str, examples: str
) -> argparse.ArgumentParser:
    return commands.add_parser(
        name,
        help=summary,
        description=summary[0].upper() + summary[1:] + ".",
        epilog="examples:\n" + examples,
        formatter_class=_Formatter,
    )


_RUN_HELP = (
    "a saved run (agentloop.review.save_run, or demo --out), or a ledger or a DBOS system "
    "database URL (then RUN_ID)"
)
_LEDGER_HELP = "a ledger file (agentloop.ledger.SQLiteLedger), or a DBOS system database URL"
_RUN_ID_HELP = "the id of one of the ledger's runs (agentloop runs LEDGER lists them)"


def _max_size(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--max-size",
        metavar="BYTES",
        type=_bytes,
        default=MAX_BYTES,
        help="refuse a run file larger than this "
        f"(default: %(default)s, {MAX_BYTES / 2**20:g} MiB)",
    )


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser, and each command's own (for errors about its arguments)."""
    parser = argparse.ArgumentParser(
        prog="agentloop",
        description="An LLM tool-calling loop as an explicit finite-state machine: "
        "run the demo, draw the machine, review saved runs and ledgers, decide pending calls.",
        epilog="examples:\n"
        "  agentloop demo --out demo-output\n"
        "  agentloop show demo-output/run.json\n"
        "  agentloop runs runs.db\n"
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
        "  agentloop diagram run.json --format svg -o trace.svg   # the path it took\n"
        "  agentloop diagram run.json --format svg --path -o path.svg   # that path alone\n"
        "  agentloop diagram runs.db order-42                  # a ledger's run\n"
        "  agentloop diagram --features output,wrap_up         # one configuration's table",
    )
    diagram.add_argument(
        "--format",
        choices=("mermaid", "dot", "svg"),
        default="mermaid",
        help="mermaid (stateDiagram-v2), dot (Graphviz) or svg (needs the svg extra); "
        "default: %(default)s",
    )
    diagram.add_argument(
        "run",
        metavar="RUN.json|LEDGER",
        nargs="?",
        help="mark the path this run took: " + _RUN_HELP,
    )
    diagram.add_argument("run_id", metavar="RUN_ID", nargs="?", help=_RUN_ID_HELP)
    diagram.add_argument("--run", dest="run_option", metavar="RUN.json", help="the same as RUN")
    diagram.add_argument(
        "--path",
        action="store_true",
        help="draw only the states the run was in, compactly, as the report does "
        "(with a run, --format dot or svg)",
    )
    diagram.add_argument(
        "--features",
        metavar="NAMES",
        help="draw one configuration's table: the basic rows and these features', "
        "comma-separated (" + ", ".join(f.value for f in Feature if f is not Feature.BASIC) + "); "
        "default: the whole table",
    )
    diagram.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    _max_size(diagram)

    show = _command(
        commands,
        "show",
        "print a saved run or a ledger's run: its input, each transition, where it is",
        "  agentloop show run.json\n"
        "  agentloop show run.json --full       # values whole, not cut\n"
        "  agentloop show run.json --width 200\n"
        "  agentloop show runs.db order-42      # a ledger's run, never run by this\n"
        "  agentloop show runs.db order-42 --depth 1   # its child runs, not theirs",
    )
    show.add_argument("run", metavar="RUN.json|LEDGER", help=_RUN_HELP)
    show.add_argument("run_id", metavar="RUN_ID", nargs="?", help=_RUN_ID_HELP)
    cut = show.add_mutually_exclusive_group()
    cut.add_argument("--full", action="store_true", help="show every value whole")
    cut.add_argument(
        "--width",
        metavar="N",
        type=_width,
        default=80,
        help="cut input messages, calls and outcomes to N characters (default: %(default)s)",
    )
    show.add_argument(
        "--depth",
        metavar="N",
        type=_depth,
        help="nest agent tools' child runs N generations deep: 0 the run alone, 1 with its "
        "child runs, 2 with theirs too (default: every generation); a line after the run "
        "counts the runs left out",
    )
    _max_size(show)

    report = _command(
        commands,
        "report",
        "write a saved run or a ledger's run as one self-contained HTML page",
        "  agentloop report run.json -o run.html\n"
        "  agentloop report run.json > run.html\n"
        "  agentloop report runs.db order-42 -o order-42.html",
    )
    report.add_argument("run", metavar="RUN.json|LEDGER", help=_RUN_HELP)
    report.add_argument("run_id", metavar="RUN_ID", nargs="?", help=_RUN_ID_HELP)
    report.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    _max_size(report)

    runs = _command(
        commands,
        "runs",
        "list a ledger's runs: id, state, steps, calls, last change, pending approvals "
        "(and child runs, when any has some)",
        "  agentloop runs runs.db\n"
        "  agentloop runs runs.db --state awaiting_approval\n"
        "  agentloop runs runs.db --state dispatching --state awaiting_model\n"
        "  agentloop runs runs.db --conversation user-42",
    )
    runs.add_argument("ledger", metavar="LEDGER", help=_LEDGER_HELP)
    runs.add_argument(
        "--flat",
        action="store_true",
        help="every run on a line of its own, in the order recorded (by default a "
        "conversation's turns are listed together, under a line of their own, and an agent "
        "tool's child runs are counted on their parent's line)",
    )
    runs.add_argument(
        "--conversation", metavar="ID", help="only the turns of conversation ID, oldest first"
    )
    runs.add_argument(
        "--state",
        metavar="STATE",
        action="append",
        default=[],
        choices=[
            *(state.value for state in State),
            ledger_commands.DECIDED,
            "unreadable",
            *dbos_commands.STATES,
        ],
        help="only runs in this state (repeat it for several): "
        + ", ".join(state.value for state in State)
        + f", {ledger_commands.DECIDED} (a person decided; it waits to be resumed), or unreadable "
        "(damaged records); on DBOS also " + ", ".join(dbos_commands.STATES),
    )

    pending = _command(
        commands,
        "pending",
        "list every call of a ledger's runs that waits for a person, with its reason",
        "  agentloop pending runs.db",
    )
    pending.add_argument("ledger", metavar="LEDGER", help=_LEDGER_HELP)

    decide = _command(
        commands,
        "decide",
        "record a person's decisions about a paused run's pending calls, all at once",
        "  agentloop decide runs.db order-42 call_1=approve\n"
        "  agentloop decide runs.db order-42 call_1=approve 'call_2=deny:not this account'",
    )
    decide.add_argument("ledger", metavar="LEDGER", help=_LEDGER_HELP)
    decide.add_argument("run_id", metavar="RUN_ID", help=_RUN_ID_HELP)
    decide.add_argument(
        "decisions",
        metavar="CALL_ID=approve|deny:REASON",
        nargs="+",
        help="one for each pending call (agentloop pending LEDGER lists them); the run goes "
        "on when a process that has its Loop resumes it (loop.resume(run_id))",
    )
    return parser, dict(commands.choices)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run one command; returns the exit code."""
    parser, commands = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # told by the command's own parser, with its own usage
        commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return _run(args)
    except CommandError as exc:
        from agentloop._review.text import printable

        # One line, whatever the message quotes (a path, a value from the file).
        print(f"agentloop: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader stopped early (``| head``): no traceback, exit 1, with stdout
        # pointed at devnull so the interpreter's last flush cannot fail.
        discard_stdout()
        return 1


def _run(args: argparse.Namespace) -> int:
    command = args.command
    if command == "demo":
        return file_commands.demo(args.out)
    store: _Store = ledger_commands
    if dbos_commands.is_url(getattr(args, "ledger", None) or getattr(args, "run", None) or ""):
        store = dbos_commands  # the same commands, through a DBOSClient
    if command == "diagram":
        if args.run is not None and args.run_option is not None:
            raise CommandError("expected the run once, as RUN or as --run RUN, got both")
        if args.run is None:
            args.run = args.run_option
        if args.path and args.run is None:
            raise CommandError("--path draws a run's path: expected RUN.json or LEDGER RUN_ID")
        if args.path and args.format == "mermaid":
            raise CommandError("--path is drawn by Graphviz: expected --format dot or svg")
        run = None if args.run is None else _saved(args, store)
        features = None if args.features is None else _feature_names(args.features)
        return file_commands.diagram(
            args.format, run, args.output, path=args.path, features=features
        )
    if command == "runs":
        return store.runs(args.ledger, args.state, flat=args.flat, conversation=args.conversation)
    if command == "pending":
        return store.pending(args.ledger)
    if command == "decide":
        return store.decide(args.ledger, args.run_id, args.decisions)
    limit = None if command == "report" or args.full else args.width
    if _in_store(args, store):
        if command == "show":
            return store.show(args.run, args.run_id, limit, args.depth)
        return store.report(args.run, args.run_id, args.output)
    result = file_commands.load(args.run, args.max_size)
    if command == "show":
        return file_commands.show(result, limit, depth=args.depth)
    return file_commands.report(result, args.output)


def _feature_names(text: str) -> list[str]:
    """``--features``' comma-separated names, each a feature's; else a ``CommandError``."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    known = [feature.value for feature in Feature]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise CommandError(
            f"--features expected names among {', '.join(known)}, got {', '.join(unknown)}"
        )
    return names


def _saved(args: argparse.Namespace, store: _Store) -> RunResult:
    """The run ``args`` name: a run file's, or one of a ledger's (or DBOS's) runs."""
    if _in_store(args, store):
        return store.result(args.run, args.run_id)
    return file_commands.load(args.run, args.max_size)


def _in_store(args: argparse.Namespace, store: _Store) -> bool:
    """Whether ``args.run`` is a ledger (or DBOS), whose run ``args.run_id`` names."""
    command = args.command
    if store is dbos_commands or ledger_commands.is_ledger(args.run):
        if args.run_id is None:
            where = "DBOS_URL" if store is dbos_commands else args.run  # a URL may hold a password
            what = (
                "a DBOS system database"
                if store is dbos_commands
                else f"{args.run} is a ledger, which"
            )
            raise CommandError(
                f"{what} holds many runs: name one, agentloop {command} {where} RUN_ID "
                f"(agentloop runs {where} lists them)"
            )
        return True
    if args.run_id is not None:
        try:
            Path(args.run).stat()
        except OSError as exc:  # said as every command says it
            raise file_commands.unreadable(args.run, exc) from None
        raise CommandError(
            f"expected RUN_ID only after a ledger, got {args.run_id!r} after {args.run}, "
            f"which is not one (a run file holds one run: agentloop {command} {args.run})"
        )
    return False
