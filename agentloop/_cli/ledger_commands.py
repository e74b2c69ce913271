"""A ledger's runs from a terminal: listed, shown, their pending calls, and decisions.

Read-only but for ``decide``: nothing here runs a model or a tool, and a run
is viewed without its claim (a live process may hold it). ``decide`` records
a person's decisions as the live driver would; the run goes on when a
process that has its ``Loop`` resumes it.
"""

from __future__ import annotations

import os
import shlex
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import orjson

from agentloop._cli.file_commands import shown_lines, write_page
from agentloop._cli.nesting import who_calls
from agentloop._cli.printing import CommandError, print_lines, self_command, shell_path
from agentloop._core.approval import Decision, DecisionKey, approve, deny, key_text
from agentloop._durable.conversations import turn_ids
from agentloop._durable.sqlite import APPLICATION_ID, SQLiteLedger
from agentloop._durable.view import LedgerRun, RunSummary, decide_run, list_runs, view_run
from agentloop._errors import InvalidStateError, LedgerError, RunNotFoundError
from agentloop._review.runfile import sqlite_header

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from agentloop._core.values import RunResult

__all__ = [
    "DECIDED",
    "Listed",
    "columns",
    "decide",
    "in_conversation",
    "is_ledger",
    "parse_verdicts",
    "pending",
    "report",
    "result",
    "run_table",
    "runs",
    "show",
    "when",
    "which_runs",
]

_MAGIC: Final = b"SQLite format 3\x00"  # the first bytes of every SQLite file
_RUNNING: Final = "no outcome recorded: running now, or cut off when its process stopped"
#: The state ``runs`` and ``show`` give a run whose last record is a person's decisions.
DECIDED: Final = "decided"


def is_ledger(path: str) -> bool:
    """Whether SQLite reads ``path`` as a database (a run file is JSON): ``sqlite_header``."""
    return sqlite_header(path) is not None


def runs(
    path: str, states: Iterable[str], *, flat: bool = False, conversation: str | None = None
) -> int:
    """Every run of the ledger (of ``states`` only, if any): a line each (``run_table``).

    An agent tool's child run is counted on its parent's line, not listed
    (``flat`` lists it too): ``show`` prints it under its call.
    """
    wanted = set(states)
    shown = []
    problems = []
    listed = _listed(path)
    ids = {run.run_id for run in listed}
    children = Counter(run.caller[0] for run in listed if run.caller is not None)
    for run in listed:
        if run.caller is not None and run.caller[0] in ids and not flat:
            continue  # on its parent's line
        state = "unreadable" if run.state is None else DECIDED if run.decided else run.state.value
        turn = None if run.conversation_id is None else (run.conversation_id, run.turn or 0)
        if (wanted and state not in wanted) or not in_conversation(turn, conversation):
            continue
        if run.problem is not None:
            problems.append(run.problem)
        count = len(run.pending)
        steps, calls = str(run.steps), str(run.calls)
        mine = children[run.run_id]
        shown.append(Listed(run.run_id, turn, state, steps, calls, run.changed, count, mine))
    if not shown:
        print_lines([f"no run{which_runs(wanted, conversation)} in {path}"])
        return 0
    print_lines(run_table(shown, flat=flat))
    for problem in problems:
        print_lines([f"unreadable: {problem}"])
    return 1 if problems else 0


class Listed(NamedTuple):
    """A run as ``runs`` lists it (a ledger's or DBOS's)."""

    run_id: str
    #: The conversation it is a turn of, and the turn; else ``None``.
    turn: tuple[str, int] | None
    state: str
    #: As shown: a DBOS run that has not ended shows ``-`` calls.
    steps: str
    calls: str
    changed: float | None
    pending: int
    #: Its agent tools' child runs (a ledger's): ``show`` prints them under their calls.
    children: int = 0


def in_conversation(turn: tuple[str, int] | None, conversation: str | None) -> bool:
    """Whether a run (a turn of ``turn[0]``, if a turn) is listed under ``--conversation``."""
    return conversation is None or (turn is not None and turn[0] == conversation)


def run_table(found: list[Listed], *, flat: bool) -> list[str]:
    """The runs in columns; a conversation's turns together under a line of their own.

    At the place of its first turn, oldest first; ``flat`` lists every run
    on its own, as recorded. A column counts each run's child runs, when any has one.
    """
    rows: list[tuple[str, ...]] = [("run", "state", "steps", "calls", "last change", "pending")]
    if any(run.children for run in found):
        rows = [(*rows[0], "children")]
    turns: dict[str, list[Listed]] = {}
    for run in found:
        if run.turn is not None and not flat:
            turns.setdefault(run.turn[0], []).append(run)
    for run in found:
        if run.turn is None or flat:
            rows.append(_run_row(run))
        elif run.turn[0] in turns:  # its first turn: the whole conversation, here
            together = sorted(
                turns.pop(run.turn[0]), key=lambda turn: turn.turn[1] if turn.turn else 0
            )
            rows.extend(_conversation_rows(run.turn[0], together))
    width = len(rows[0])
    return columns([row + ("",) * (width - len(row)) for row in rows])


def which_runs(wanted: set[str], conversation: str | None) -> str:
    """`` of conversation c in state s``: what ``runs`` looked for, when it found none."""
    of = "" if conversation is None else f" of conversation {conversation}"
    return of + (f" in state {' or '.join(sorted(wanted))}" if wanted else "")


def _run_row(run: Listed, indent: str = "") -> tuple[str, ...]:
    count = str(run.pending) if run.pending else ""
    row = (indent + run.run_id, run.state, run.steps, run.calls, when(run.changed), count)
    return (*row, str(run.children)) if run.children else row


def _conversation_rows(conversation: str, turns: list[Listed]) -> list[tuple[str, ...]]:
    """A conversation's line (its turns, last change and pending calls), then each turn's."""
    changed = [run.changed for run in turns if run.changed is not None]
    pending = sum(run.pending for run in turns)
    head = (
        f"conversation {conversation}",
        f"{len(turns)} turn{'' if len(turns) == 1 else 's'}",
        "",
        "",
        when(max(changed) if changed else None),
        str(pending) if pending else "",
    )
    return [head, *(_run_row(run, "  ") for run in turns)]


def show(path: str, run_id: str, limit: int | None, depth: int | None) -> int:
    """One run of the ledger as text, as ``show`` prints a run file, and what comes next.

    Its agent tools' child runs are printed under their calls, ``depth``
    generations deep (``None``: all); a child's first line says whose child it is.
    """
    run = _view(path, run_id)
    lines = [f"started  {_call_text(call)}  ({_RUNNING})" for call in run.started]
    if run.pending:
        top, keys = _decided_on(path, run)
        decisions = " ".join(f"{shlex.quote(key)}=approve|deny:REASON" for key in keys)
        lines.append(f"to decide: {_again(path, 'decide', top)} {decisions}")
    elif not run.done:
        said = "decided, waiting to be resumed" if run.decided else "not ended"
        lines.append(
            f"{said}: it goes on when a process that has its Loop resumes it "
            f"(loop.resume({run_id!r}))"
        )
    state = DECIDED if run.decided else run.state.value
    shown = shown_lines(run.result, limit, f"agentloop run {run_id}: {state}", depth)
    print_lines([*([] if run.caller is None else [who_calls(run.caller)]), *shown, *lines])
    return 0


def report(path: str, run_id: str, output: str | None) -> int:
    """One run of the ledger as one HTML page, the calls it left running included."""
    from agentloop._review.report import report_html

    run = _view(path, run_id)
    page = report_html(run.result)
    if run.started:
        page = page.replace('<h2 id="transitions">', _started_html(run), 1)
    return write_page(page, output)


def result(path: str, run_id: str) -> RunResult:
    """One run of the ledger as its result so far (``diagram`` draws it)."""
    return _view(path, run_id).result


def pending(path: str) -> int:
    """Every call waiting for a person in the ledger: run, call, tool, reason, arguments."""
    found = _listed(path)
    rows = [("run", "call", "tool", "reason", "arguments")]
    # A child run's calls are listed under the top run that waits on it, by their paths.
    waited = {(run.run_id, c.path[0]) for run in found for c in run.pending if c.path}
    for run in found:
        if run.caller is not None and run.caller in waited:
            continue
        rows.extend(
            (run.run_id, key_text(c.key), c.name, c.reason, c.arguments_json.decode())
            for c in run.pending
        )
    # A damaged run may have calls waiting that cannot be read: said, never left out.
    problems = [f"unreadable: {run.problem}" for run in found if run.problem is not None]
    if len(rows) == 1:
        print_lines([f"no call waits for a person in {path}", *problems])
        return 1 if problems else 0
    template = "RUN_ID CALL_ID=approve|deny:REASON ..."
    print_lines([*columns(rows), "", f"to decide: {_again(path, 'decide')} {template}", *problems])
    return 1 if problems else 0


def decide(path: str, run_id: str, verdicts: list[str]) -> int:
    """Record a person's decisions about paused run ``run_id``, all or nothing."""
    run = _view(path, run_id)
    # A child run's call is decided by its path key: c1/k1.
    keys: dict[str, DecisionKey] = {key_text(call.key): call.key for call in run.pending}
    given = parse_verdicts(verdicts, keys)
    # Bound to the calls shown: a call that changed since is refused, not decided.
    prints = {key_text(call.key): call.fingerprint for call in run.pending}
    decisions: dict[DecisionKey, Decision] = {
        keys.get(text, text): approve(fingerprint=prints.get(text))
        if reason is None
        else deny(reason, fingerprint=prints.get(text))
        for text, reason in given.items()
    }
    with _open(path) as ledger:
        try:
            decide_run(ledger, run_id, decisions)
        except (LedgerError, InvalidStateError, TypeError, ValueError) as exc:
            raise CommandError(str(exc)) from None
    said = ", ".join(
        f"{call_id} approved" if reason is None else f"{call_id} denied ({reason})"
        for call_id, reason in given.items()
    )
    print_lines(
        [
            f"recorded for run {run_id}: {said}",
            f"the run goes on when a process that has its Loop resumes it: loop.resume({run_id!r})",
        ]
    )
    return 0


# -- inside ---------------------------------------------------------------------------------


def _open(path: str) -> SQLiteLedger:
    """The ledger in ``path``, which must exist and be one (it is never made here)."""
    try:
        os.stat(path)
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from None
    header = sqlite_header(path)
    if header is None:
        # Not a database, so no SQLite connection holds it: its first bytes may be read.
        try:
            with Path(path).open("rb") as file:
                head = file.read(len(_MAGIC))
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from None
        # A saved run is JSON: say which command reads it.
        hint = f"; a run file is read by agentloop show {path}" if head[:1] == b"{" else ""
        raise CommandError(
            f"not a ledger: {path} is not an SQLite file (expected a ledger that "
            f"agentloop.ledger.SQLiteLedger made, got a file starting with {head[:8]!r}){hint}"
        )
    application_id, tables = header
    # Refused here, in this command's words, before SQLiteLedger makes its lock file beside
    # another database.
    if application_id not in (0, APPLICATION_ID) or (application_id == 0 and tables):
        raise CommandError(
            f"not a ledger: {path} is an SQLite database that agentloop.ledger.SQLiteLedger did "
            f"not make (expected application_id {APPLICATION_ID:#x}, got {application_id:#x})"
        )
    try:
        return SQLiteLedger(path, make=False)
    except LedgerError as exc:
        raise CommandError(str(exc)) from None


def _listed(path: str) -> list[RunSummary]:
    """Every run of the ledger (``list_runs``); a ledger that cannot be listed, in one line."""
    with _open(path) as ledger:
        try:
            return list_runs(ledger)
        except LedgerError as exc:
            raise CommandError(str(exc)) from None


def _view(path: str, run_id: str) -> LedgerRun:
    if not run_id:
        raise CommandError(f"expected a run id ({_again(path, 'runs')} lists them), got ''")
    with _open(path) as ledger:
        try:
            return view_run(ledger, run_id)
        except RunNotFoundError as exc:
            try:  # a conversation's id names its turns (a damaged file is said as any is)
                turns = [] if ":" in run_id else turn_ids(ledger, run_id)
            except LedgerError as damaged:
                raise CommandError(str(damaged)) from None
            if turns:
                raise CommandError(_a_conversation(path, run_id, turns)) from None
            raise CommandError(f"{exc} ({_again(path, 'runs')} lists them)") from None
        except LedgerError as exc:
            raise CommandError(str(exc)) from None
        except (TypeError, ValueError) as exc:  # not a run id at all
            raise CommandError(str(exc)) from None


def _a_conversation(path: str, conversation_id: str, turns: list[str]) -> str:
    """What ``show``/``report`` of a conversation's id say: its turns, and how to show one."""
    count = f"{len(turns)} turn{'' if len(turns) == 1 else 's'}"
    last = f"agentloop show {shell_path(Path(path))} {shlex.quote(turns[-1])}"
    return (
        f"{conversation_id!r} is a conversation, not a run: its {count} are the runs "
        f"{', '.join(turns)}; show one by its id ({last} shows the last)"
    )


def parse_verdicts(verdicts: list[str], pending: Iterable[str] = ()) -> dict[str, str | None]:
    """``CALL_ID=approve`` and ``CALL_ID=deny:REASON``, as call id -> ``None`` or the reason.

    A call id may hold ``=``: the longest of the ``pending`` call ids that a
    verdict starts with, followed by ``=approve`` or ``=deny:REASON``, is the
    call it decides; else its call id ends at its first ``=``.
    """
    ids = sorted(set(pending), key=len, reverse=True)
    given: dict[str, str | None] = {}
    for text in verdicts:
        try:
            text.encode()
        except UnicodeEncodeError:  # a byte the terminal's encoding did not decode
            raw = text.encode(errors="surrogateescape")
            raise CommandError(
                "expected CALL_ID=approve or CALL_ID=deny:REASON in UTF-8 text (a reason is "
                f"recorded as text), got bytes that are not: {raw!r}"
            ) from None
        call_id, verdict = next(
            (
                (pending_id, text[len(pending_id) + 1 :])
                for pending_id in ids
                if text.startswith(f"{pending_id}=") and _verdict(text[len(pending_id) + 1 :])
            ),
            text.partition("=")[::2],
        )
        if not call_id or not (verdict == "approve" or verdict.startswith("deny:")):
            raise CommandError(f"expected CALL_ID=approve or CALL_ID=deny:REASON, got {text!r}")
        reason = None if verdict == "approve" else verdict.removeprefix("deny:")
        if reason == "":
            raise CommandError(f"expected a reason after deny: (the model reads it), got {text!r}")
        if call_id in given:
            raise CommandError(f"expected one decision for call {call_id!r}, got two")
        given[call_id] = reason
    return given


def _verdict(text: str) -> bool:
    """Whether ``text`` is ``approve`` or ``deny:REASON``."""
    return text == "approve" or (text.startswith("deny:") and len(text) > len("deny:"))


def when(at: float | None) -> str:
    """A time as ``time.time()`` gives it, in local time to the second; ``unknown`` if none."""
    if at is None:
        return "unknown"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
    except (ValueError, OverflowError, OSError):  # no time a clock shows
        return "unknown"


def _decided_on(path: str, run: LedgerRun) -> tuple[str, list[str]]:
    """The run a paused run's calls are decided on (the top of a waiting tree), and their keys."""
    at, above = run, [c.key if c.path else (c.call_id,) for c in run.pending]
    with _open(path) as ledger:
        while at.caller is not None:
            parent_id, call_id = at.caller
            try:
                parent = view_run(ledger, parent_id, children=False)
            except (LedgerError, RunNotFoundError):
                break  # a parent that cannot be read waits on nothing here
            if not any(p.path[:1] == (call_id,) for p in parent.pending):
                break
            at, above = parent, [(call_id, *key) for key in above]
    return at.run_id, [key_text(key) for key in above]


def _again(path: str, command: str, run_id: str | None = None) -> str:
    """The command line of ``command`` on the ledger ``path`` (and ``run_id``), as typed."""
    typed = f"{self_command()} {command} {shell_path(Path(path))}"
    return typed if run_id is None else f"{typed} {shlex.quote(run_id)}"


def _call_text(call: dict[str, Any]) -> str:
    """``tool#id {arguments}``."""
    arguments = orjson.dumps(call.get("arguments")).decode()
    return f"{call.get('name')}#{call.get('id')} {arguments}"


def _started_html(run: LedgerRun) -> str:
    """The report's section on calls started with no outcome recorded, before its transitions."""
    from html import escape

    rows = "".join(
        f"<tr><td>{escape(str(call.get('id')))}</td><td>{escape(str(call.get('name')))}</td>"
        f"<td>{escape(orjson.dumps(call.get('arguments')).decode())}</td></tr>"
        for call in run.started
    )
    return (
        '<h2 id="started">Started, no outcome recorded</h2>\n'
        f'<p class="note">Run state {escape(run.state.value)}: {escape(_RUNNING)}.</p>\n'
        "<table><thead><tr><th>call</th><th>tool</th><th>arguments</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>\n"
        '<h2 id="transitions">'
    )


def columns(rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Rows aligned in columns two spaces apart, each cell on one line."""
    from agentloop._review.text import printable

    cells = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(row[column]) for row in cells) for column in range(len(cells[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
