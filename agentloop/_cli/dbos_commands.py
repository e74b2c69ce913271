"""Runs on DBOS from a terminal: a system database URL goes where a ledger path goes.

Through a ``DBOSClient``, so nothing is launched here and no workflow runs.
``runs`` and ``pending`` list the ``agentloop.run`` workflows; ``decide``
sends a person's decisions as ``agentloop.dbos.decide`` does (the worker
holding the run goes on with it); ``show`` and ``report`` read a run once it
has ended (its result is the workflow's output). A run that has not ended
shows its model steps; how many calls it accepted is known once it ends.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from agentloop._cli import file_commands
from agentloop._cli.ledger_commands import (
    Listed,
    columns,
    in_conversation,
    parse_verdicts,
    run_table,
    which_runs,
)
from agentloop._cli.printing import CommandError, print_lines, self_command
from agentloop._core.approval import DecisionKey, key_text
from agentloop._core.values import RunResult
from agentloop._dbos.descendants import NOT_ENDED, RUN_WORKFLOW
from agentloop._durable.ids import child_call_id, parse_turn
from agentloop._errors import AgentloopError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = ["STATES", "decide", "is_url", "pending", "report", "result", "runs", "show"]

#: What ``runs`` says of a workflow that has not returned a result, by its DBOS status.
_STATUS: Final = {"PENDING": "running", "ENQUEUED": "enqueued", "ERROR": "error"}
#: The states only a run on DBOS is in (besides ``awaiting_approval`` and the terminal ones).
STATES: Final = tuple(_STATUS.values())
_URL: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(text: str) -> bool:
    """Whether ``text`` is a database URL (``postgresql://...``, ``sqlite:///...``)."""
    return _URL.match(text) is not None


def runs(
    url: str, states: Iterable[str], *, flat: bool = False, conversation: str | None = None
) -> int:
    """Every run on DBOS (of ``states`` only, if any): a line each, as for a ledger.

    An agent tool's child run (a child workflow of a run, under its derived
    id) is counted on its parent's line, not listed (``flat`` lists it too).
    """
    wanted = set(states)
    shown = []
    with _client(url) as (client, dbos):
        found = client.list_workflows(name=RUN_WORKFLOW, load_input=False)
        ids = {status.workflow_id for status in found}
        children = Counter(_child_of(status, ids) for status in found)
        for status in found:
            if not flat and _child_of(status, ids) is not None:
                continue  # on its parent's line
            turn = parse_turn(status.workflow_id)  # a conversation's turn: its id says so
            state, steps, calls, waiting = _summary(client, dbos, status)
            if (wanted and state not in wanted) or not in_conversation(turn, conversation):
                continue
            changed = None if status.updated_at is None else status.updated_at / 1000
            mine = children[status.workflow_id]
            shown.append(
                Listed(status.workflow_id, turn, state, steps, calls, changed, len(waiting), mine)
            )
    if not shown:
        print_lines([f"no run{which_runs(wanted, conversation)} in the DBOS system database"])
        return 0
    print_lines(run_table(shown, flat=flat))
    return 0


def _child_of(status: Any, ids: set[str]) -> str | None:
    """The run whose agent call ``status``'s run answers, if it is one listed in ``ids``.

    By the id it derives (a fork's child is DBOS's fork of another's, with no parent).
    """
    parent = status.workflow_id.rpartition(":")[0]
    if parent not in ids:
        return None
    return parent if child_call_id(parent, status.workflow_id) is not None else None


def pending(url: str) -> int:
    """Every call of a run on DBOS that waits for a person: run, call, tool, reason, arguments.

    A child run's calls are listed under the top run that waits on it, by
    their path keys (``c1/k1``), as for a ledger; its own workflow not apart.
    """
    rows = [("run", "call", "tool", "reason", "arguments")]
    with _client(url) as (client, dbos):
        found = client.list_workflows(name=RUN_WORKFLOW, status=list(NOT_ENDED), load_input=False)
        ids = {status.workflow_id for status in found}
        for status in found:
            if _child_of(status, ids) is not None:
                continue  # under its parent, which waits on it
            rows.extend(
                (status.workflow_id, key_text(c.key), c.name, c.reason, c.arguments_json.decode())
                for c in dbos.pending(status.workflow_id, client=client)
            )
    if len(rows) == 1:
        print_lines(["no call waits for a person in the DBOS system database"])
        return 0
    template = "DBOS_URL RUN_ID CALL_ID=approve|deny:REASON ..."
    print_lines([*columns(rows), "", f"to decide: {self_command()} decide {template}"])
    return 0


def decide(url: str, run_id: str, verdicts: list[str]) -> int:
    """Send a person's decisions to run ``run_id``, waiting on DBOS; all or nothing.

    A child run's call is decided on the top run by its path key, ``c1/k1``.
    """
    with _client(url) as (client, dbos):
        _status(client, run_id)
        waiting = dbos.pending(run_id, client=client)
        keys: dict[str, DecisionKey] = {key_text(call.key): call.key for call in waiting}
        given = parse_verdicts(verdicts, keys)
        # Bound to the calls shown: a call that changed since is refused, not decided.
        prints = {key_text(call.key): call.fingerprint for call in waiting}
        decisions = {
            keys.get(text, text): dbos.approve(fingerprint=prints.get(text))
            if reason is None
            else dbos.deny(reason, fingerprint=prints.get(text))
            for text, reason in given.items()
        }
        try:
            dbos.decide(run_id, decisions, client=client)
        except (AgentloopError, TypeError, ValueError) as exc:
            raise CommandError(str(exc)) from None
    said = ", ".join(
        f"{call_id} approved" if reason is None else f"{call_id} denied ({reason})"
        for call_id, reason in given.items()
    )
    print_lines([f"sent to run {run_id}: {said}", "its DBOS worker goes on with it"])
    return 0


def show(url: str, run_id: str, limit: int | None, depth: int | None) -> int:
    """A run on DBOS that has ended, as ``show`` prints a run file."""
    result = _ended(url, run_id)
    title = f"agentloop run {run_id}: {result.status.value}"
    return file_commands.show(result, limit, title=title, depth=depth)


def report(url: str, run_id: str, output: str | None) -> int:
    """A run on DBOS that has ended, as one HTML page."""
    return file_commands.report(_ended(url, run_id), output)


def result(url: str, run_id: str) -> RunResult:
    """A run on DBOS that has ended, as its result (``diagram`` draws it)."""
    return _ended(url, run_id)


# -- inside ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _client(url: str) -> Iterator[tuple[Any, Any]]:
    """A ``DBOSClient`` on ``url``, and ``agentloop.dbos``; never makes a database."""
    sqlite = url.startswith("sqlite:///")
    if sqlite and not Path(url.removeprefix("sqlite:///")).is_file():
        raise CommandError(
            f"cannot read {url.removeprefix('sqlite:///')}: no such DBOS system database"
        )
    try:
        from dbos import DBOSClient

        import agentloop.dbos as dbos
        from agentloop._core.approval import approve, deny
    except ImportError:
        raise CommandError(
            "a DBOS system database URL needs DBOS Transact: pip install 'agentloop-fsm[dbos]'"
        ) from None
    logger = logging.getLogger("dbos")
    level = logger.level
    logger.setLevel(logging.CRITICAL)  # DBOS logs a failed connection: the line below says it
    try:
        client = DBOSClient(system_database_url=url, retry_connection_errors=False)
        client.check_connection()
    except Exception as exc:  # noqa: BLE001 - any driver's; its message, never the URL's password
        first = (str(exc).splitlines() or [""])[0]
        raise CommandError(
            f"cannot open the DBOS system database: {type(exc).__name__}: {first[:200]}"
        ) from None
    finally:
        logger.setLevel(level)
    try:
        yield client, _Agentloop(dbos, approve, deny)
    finally:
        client.destroy()


class _Agentloop:
    """``agentloop.dbos``'s functions, and the decisions, as this module uses them."""

    def __init__(self, dbos: Any, approve: Any, deny: Any) -> None:
        self.pending, self.decide = dbos.pending, dbos.decide
        self.approve, self.deny = approve, deny


def _status(client: Any, run_id: str) -> Any:
    if not run_id:
        raise CommandError("expected a run id (agentloop runs DBOS_URL lists them), got ''")
    found = client.list_workflows(workflow_ids=[run_id], name=RUN_WORKFLOW)
    if not found:
        raise CommandError(
            f"no run {run_id!r} is in the DBOS system database (agentloop runs DBOS_URL lists them)"
        )
    return found[0]


def _summary(client: Any, dbos: Any, status: Any) -> tuple[str, str, str, tuple[Any, ...]]:
    """A workflow's state, steps, calls and pending calls, as ``runs`` shows them."""
    if isinstance(status.output, RunResult):
        result = status.output
        return result.status.value, str(result.steps), str(result.calls), ()
    waiting = tuple(dbos.pending(status.workflow_id, client=client))
    state = "awaiting_approval" if waiting else _STATUS.get(status.status, status.status.lower())
    steps = client.list_workflow_steps(status.workflow_id, load_output=False)
    models = sum(step["function_name"] == "agentloop.model" for step in steps)
    return state, str(models), "-", waiting


def _ended(url: str, run_id: str) -> RunResult:
    with _client(url) as (client, dbos):
        status = _status(client, run_id)
        if isinstance(status.output, RunResult):
            return status.output
        state, *_ = _summary(client, dbos, status)
    if status.status == "ERROR":  # ended, with no result: what its workflow raised
        error = status.error
        raised = type(error).__name__ if isinstance(error, BaseException) else "an error"
        first = (str(error or "").splitlines() or [""])[0]
        raise CommandError(
            f"run {run_id!r} failed with no result: its workflow raised {raised}: {first[:200]}"
        )
    raise CommandError(
        f"run {run_id!r} has not ended (it is {state}): on DBOS, show and report read a run "
        "once it ends (agentloop pending DBOS_URL lists the calls it waits for)"
    )
