"""Starting a durable run, and resuming one: its records fed back through the one replay.

A resume reads the run's records (``records.py``) and feeds its events to a
fresh ``DurableEngine`` through the one replay (``_core/replay.py``), the
replay that reads run files and forks runs: each event is given back what it
was given (the calls handed out before it, the reply or the outcome) and
must come out as the row recorded. The engine then goes on live with the usual
driver, model and tools, recording. So a recorded reply is never asked for
again, and a finished call is never run again. Where the run was cut short:

* a step with no reply recorded asks the model;
* a call with no ``tool_started`` runs;
* a call with ``tool_started`` and no outcome gets an ``error`` result saying
  its outcome is unknown, or runs again if its tool is idempotent (under the
  same idempotency key).

A call the replay handed out whose outcome is not recorded is handed to the
driver first (``DurableEngine.handed``).
"""

from __future__ import annotations

import re
import weakref
from typing import TYPE_CHECKING, Any, Final
from uuid import uuid4

import orjson

from agentloop._core.agents import Agents
from agentloop._core.context_policy import policy_from_record
from agentloop._core.output_schema import OutputSchema
from agentloop._core.replay import Mismatch, refusals_standing
from agentloop._core.requests import uncalled_check
from agentloop._core.table import State, Trigger
from agentloop._core.values import CancelToken
from agentloop._durable.ids import child_run_id, turn_run_id
from agentloop._durable.journal import Journal, fingerprint, header, idempotent_tools
from agentloop._durable.recording import DurableEngine
from agentloop._durable.records import Recorded
from agentloop._errors import (
    ConfigurationMismatchError,
    InvalidStateError,
    LedgerError,
    RunBusyError,
)

if TYPE_CHECKING:
    from agentloop._core.context_policy import ContextPolicy
    from agentloop._core.retry_policy import RetryPolicy
    from agentloop._core.values import Budget
    from agentloop._durable.protocol import Ledger, LedgerRecord, LedgerWriter

__all__ = [
    "begin",
    "checked_run_id",
    "differences",
    "mismatch",
    "replayed",
    "resume",
]

_ABSENT: Final = object()  # a fingerprint's field that one side does not have
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")  # a key shown as .key, not ['key']


def begin(
    ledger: Ledger,
    run_id: str | None,
    messages: str | list[dict[str, Any]],
    *,
    budget: Budget,
    dispatcher: object,
    cancel: CancelToken | None,
    context: ContextPolicy | None = None,
    continues: str | None = None,
    models: tuple[str, ...] = (),
    output: OutputSchema | None = None,
    retry: RetryPolicy | None = None,
    conversation: tuple[str, int] | None = None,
    summary: tuple[int, str] | None = None,
    agents: Agents | None = None,
    team: dict[str, Any] | None = None,
    caller: tuple[str, str] | None = None,
) -> DurableEngine:
    """A new durable run: the input checked, then its header recorded and the run claimed.

    With handoffs, ``agents`` is the team as the engine knows it, and ``team``
    what the header keeps of it (``fingerprint``).

    ``conversation`` (its id and the turn, from 1) makes the run that turn: its
    id is then derived (``ids.turn_run_id``), and ``run_id`` must be ``None``;
    ``summary`` is the summary it carries in from the turn before.
    ``caller`` (the parent's run id and call id) makes it the child run that
    answers that call of an agent tool: its id is then derived (``ids.child_run_id``).
    """
    if caller is not None:
        assert run_id is None, "a child's id is derived"
        run_id = checked_run_id(child_run_id(*caller), new=True, derived=True)
    elif conversation is not None:
        assert run_id is None, "a turn's id is derived"
        run_id = checked_run_id(turn_run_id(*conversation), new=True, derived=True)
    elif run_id is None:
        run_id = uuid4().hex
    else:
        run_id = checked_run_id(run_id, new=True)
    # Bad input raises first.
    engine = DurableEngine(
        messages,
        budget=budget,
        cancel=cancel,
        context=context,
        retry=retry,
        models=models,
        output=output,
        run_id=run_id,
        continues=continues,
        conversation=conversation,
        summary=summary,
        agents=agents,
    )
    configuration = fingerprint(budget, dispatcher, context, output, team)
    document = header(
        run_id, engine.history(), configuration, continues, models, conversation, summary, caller
    )
    writer = ledger.create(run_id, document)
    engine.journal = Journal(writer, run_id, idempotent_tools(dispatcher), ledger=ledger)
    weakref.finalize(engine, engine.journal.release)  # an abandoned run frees its claim
    return engine


def resume(
    ledger: Ledger,
    run_id: str,
    *,
    budget: Budget,
    dispatcher: object,
    cancel: CancelToken | None,
    context: ContextPolicy | None = None,
    output: OutputSchema | None = None,
    team: dict[str, Any] | None = None,
    checks: bool = False,
    child: bool = False,
    models: tuple[str, ...] = (),
) -> tuple[DurableEngine, CancelToken | None]:
    """The run, replayed from its records: done, or ready for a driver to go on live.

    Also returns the token the driver is to watch (``None`` without ``cancel``).
    ``checks``: the Loop has output validators.
    ``child``: the run is a child, resumed inside its parent's call (else one is refused).
    ``models``: the Loop's fallback models, by name, which must be the ones recorded (a
    run's events name the model of each answer, or none: not some of them).
    A finished run is only read; any other is claimed first, so its records
    cannot change while they are replayed. A run found ended whose end is not
    recorded keeps its claim: ``engine.record_end()`` writes the end.
    """
    run_id = checked_run_id(run_id)
    if not child:
        _refuse_child(ledger, run_id)
    writer: LedgerWriter | None
    busy: RunBusyError | None = None
    try:
        writer = ledger.claim(run_id)
    except RunBusyError as exc:
        writer, busy = None, exc  # unless it has ended: then there is nothing to write
    try:
        head, records = ledger.read(run_id)
        recorded = Recorded(run_id, head, records)
        if busy is not None and not recorded.ended:
            raise busy
        differences_found = differences(
            recorded.fingerprint, fingerprint(budget, dispatcher, context, output, team)
        )
        if recorded.models != models:
            differences_found.append(
                f"models: recorded {list(recorded.models)}, now {list(models)}"
            )
        if differences_found:
            raise mismatch(run_id, differences_found)
        token = CancelToken()  # cancellation comes from the record until the run goes live
        journal = Journal(
            writer or _NoWriter(run_id),
            run_id,
            idempotent_tools(dispatcher),
            started=set(recorded.started),
            ledger=ledger,
            records=len(records),
        )
        engine = replayed(recorded, budget, journal, token, context, output, checks)
    except BaseException:
        if writer is not None:
            writer.release()
        raise
    if engine.done:
        if recorded.ended:
            engine.journal.release()
        else:  # it ended before its end was written: the caller writes it (record_end)
            engine.end_unrecorded = True
            weakref.finalize(engine, engine.journal.release)
        return engine, None
    assert writer is not None, "a run that has not ended was claimed"
    weakref.finalize(engine, engine.journal.release)
    if engine.state is State.AWAITING_APPROVAL:
        engine.journal.pause()  # a person may decide in any process
    if cancel is None:
        return engine, None
    engine.journal.link(cancel.on_cancel(token.cancel))  # the caller's token, from now on
    return engine, token


def _refuse_child(ledger: Ledger, run_id: str) -> None:
    """Refuse to resume an agent tool's child run by itself, before anything is claimed.

    A child goes on only inside the call it answers: resumed alone, its end
    would answer nothing, and its parent would be left waiting. The error
    names the run to resume instead, the top of its tree. A run id without
    ``':'`` is never a child's (``ids.py``): its header is not read here.
    """
    if ":" not in run_id:
        return
    caller = Recorded(run_id, ledger.read(run_id)[0], []).caller
    if caller is None:
        return
    top, seen = caller[0], {run_id}
    while top not in seen:  # up the callers to a run that has none (a damaged ledger's may loop)
        seen.add(top)
        try:
            above = Recorded(top, ledger.read(top)[0], []).caller
        except LedgerError:
            break  # its parent is not readable: name it all the same
        if above is None:
            break
        top = above[0]
    raise ValueError(
        f"expected the id of a run to resume, got {run_id!r}, the child run that answers "
        f"call {caller[1]!r} of run {caller[0]!r} (an agent tool's): a child goes on only "
        f"inside that call; resume {top!r}, which resumes it where it stopped"
    )


def replayed(
    recorded: Recorded,
    budget: Budget,
    journal: Journal,
    token: CancelToken,
    context: ContextPolicy | None = None,
    output: OutputSchema | None = None,
    checks: bool | None = None,
) -> DurableEngine:
    """A fresh engine fed ``recorded``: ended, or stopped where the records stop.

    ``journal`` is the engine's (nothing is written while the records are fed);
    ``token`` is what it watches: the replay cancels it where the run was cancelled.
    ``context`` and ``output`` are the run's context policy and output schema;
    when not given, the ones its header recorded (read without a Loop:
    ``show``, ``pending``). ``checks``: the run's finals are checked by output
    validators, whose recorded answers the engine takes (the Loop's say; read
    without one, a run that recorded a check had them).
    """
    if context is None:
        context = _recorded_context(recorded)
    if output is None:
        output = _recorded_output(recorded)
    try:
        engine = DurableEngine(
            recorded.input,
            budget=budget,
            cancel=token,
            context=context,
            models=recorded.models,
            output=output,
            run_id=recorded.run_id,
            continues=recorded.continues,
            conversation=recorded.conversation,
            summary=recorded.summary,
            agents=_recorded_agents(recorded),
        )
    except (TypeError, ValueError) as exc:
        raise LedgerError(
            f"run {recorded.run_id!r}: the recorded input is not valid: {exc}"
        ) from None
    engine.journal = journal
    engine.replaying = True
    if checks is None:
        checks = any(report.trigger is Trigger.OUTPUT_CHECKED for report in recorded.reports)
    if checks:  # the driver sets its own check before it asks: this one is never called
        engine.output_check = uncalled_check
    try:
        with refusals_standing(engine, recorded.refused):
            recorded.feed(engine, token)
    except Mismatch as exc:
        where = exc.where.replace("$.events[", "event [", 1)
        detail = f"{where}: expected {exc.expected}, got {exc.found}"
        raise diverged(recorded.run_id, detail) from None
    except InvalidStateError as exc:
        raise diverged(recorded.run_id, str(exc)) from None
    engine.replayed()
    return engine


def _recorded_agents(recorded: Recorded) -> Agents | None:
    """The team a run's header recorded (its handoffs); None when it had none."""
    record = recorded.fingerprint.get("agents")
    return None if record is None else Agents.from_json(record)


def _recorded_context(recorded: Recorded) -> ContextPolicy | None:
    """The context policy a run's header recorded, made again; None when it has none."""
    record = recorded.fingerprint.get("context")
    if record is None:
        return None
    try:
        policy = policy_from_record(record)
    except (TypeError, ValueError) as exc:
        raise LedgerError(f"run {recorded.run_id!r}: its header's context policy: {exc}") from None
    if policy is None:
        raise LedgerError(
            f"run {recorded.run_id!r}: its header's context policy cannot be made again here: "
            f"expected one with a counter this agentloop knows, got {record!r:.120}"
        )
    return policy


def _recorded_output(recorded: Recorded) -> OutputSchema | None:
    """The output schema a typed run's header recorded (``Loop(output=T)``); None if none."""
    schema = recorded.fingerprint.get("output")
    if schema is None:
        return None
    try:
        return OutputSchema(schema)
    except TypeError as exc:
        raise LedgerError(f"run {recorded.run_id!r}: its header's output schema: {exc}") from None


def checked_run_id(run_id: object, *, new: bool = False, derived: bool = False) -> str:
    """``run_id`` if it is a run id: any non-empty str of text (``'order-42'``, a uuid).

    A ``new`` run's id has no ``':'``: ``':'`` belongs to the ids agentloop derives
    (a conversation's turn ``'c::3'``), and the idempotency key
    ``f"{run_id}:{esc(call_id)}"`` ends its run id at its last ``':'``
    (``key_of``). Runs recorded before this rule still resume. A ``derived`` id is
    agentloop's own (a conversation's turn, an agent tool's child run, ``ids.py``): its
    ``':'`` are the rule's.
    """
    if type(run_id) is not str:
        raise TypeError(
            f"expected run_id to be a non-empty str (say 'order-42'), got {type(run_id).__name__}"
        )
    if not run_id:
        raise ValueError(
            "expected run_id to be a non-empty str (say 'order-42'), got '': leave run_id out "
            "for a fresh one"
        )
    try:
        run_id.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"expected run_id to be text (it is stored as UTF-8), got {run_id!r:.80}: {exc.reason}"
        ) from None
    if new and not derived and ":" in run_id:
        raise ValueError(
            f"expected a new run's id without ':', got {run_id!r:.80}: ':' belongs to the "
            "ids agentloop makes (a conversation's turn 'c::3'), and a call's idempotency "
            "key is f'{run_id}:{call_id}'"
        )
    return run_id


class _NoWriter:
    """The writer of a run only read (it has ended): writing to it is a bug."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def append(self, record: LedgerRecord) -> None:
        raise LedgerError(f"run {self.run_id!r} has ended; nothing more is recorded")

    def release(self) -> None:
        pass


# -- the configuration a run was recorded with ---------------------------------------------


def mismatch(run_id: str, found: list[str]) -> ConfigurationMismatchError:
    """The error refusing to go on with run ``run_id`` under another configuration."""
    return ConfigurationMismatchError(
        f"run {run_id!r} was recorded with another configuration than this Loop's: "
        + "; ".join(found),
        found,
    )


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What differs between two fingerprints: each field by its path, recorded and now.

    ``tools.add.parameters.properties.b.type: recorded 'integer', now 'string'``.
    """
    found: list[str] = []
    _compare("", recorded, orjson.loads(orjson.dumps(current)), found)  # both as JSON reads
    return found


def _compare(path: str, was: object, now: object, found: list[str]) -> None:
    if was == now:
        return
    if type(was) is dict and type(now) is dict:
        for key in sorted(was.keys() | now.keys()):
            if key == "description" and _describes(path):
                continue  # words for the model: what a record means is the same without them
            step = f"{path}.{key}" if _NAME.fullmatch(key) else f"{path}[{key!r}]"
            _compare(step.lstrip("."), was.get(key, _ABSENT), now.get(key, _ABSENT), found)
        return
    if was is _ABSENT:
        before = "not recorded"
    else:
        before = "recorded" if type(was) is dict else f"recorded {_shown(was)}"
    if now is _ABSENT:
        after = "missing now"
    else:
        after = "present now" if type(now) is dict else f"now {_shown(now)}"
    found.append(f"{path}: {before}, {after}")


def _describes(path: str) -> bool:
    """Whether a ``description`` key at ``path`` is a schema's words.

    In a tool's parameters or the output, rather than a property or a definition
    of that name.
    """
    in_schema = path.startswith(("tools.", "tools[", "output"))
    return in_schema and not path.endswith(("properties", "['$defs']"))


def _shown(value: object) -> str:
    """``repr(value)``; a long list or number cut short (a str, a type's name, is kept whole)."""
    text = repr(value)
    return text if len(text) <= 100 or type(value) is str else text[:97] + "..."


def diverged(run_id: str, detail: str) -> LedgerError:
    """The error for records that are not a run this engine makes."""
    return LedgerError(
        f"run {run_id!r}: its records do not replay through this engine ({detail}); "
        "the ledger was changed, or written by another agentloop"
    )
