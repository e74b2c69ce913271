"""Continuing a run: resuming it from its record, forking it, or a new run from its transcript.

``continue_run`` goes on from a failed or exhausted run's transcript in a new run.

Resume feeds a saved result's events, or a ledger's (``_durable/resume.py``),
to the one replay; a run that ended is only read.

A fork is a new run that starts as an old one was after its first ``at`` transitions.

The old run's events are replayed (``_core/replay.py``) into a fresh engine,
the first ``at`` of them, and that engine is handed to a driver of the
forking ``Loop``: from there on, its model and tools make the run. With a
ledger, the fork is a new durable run under its own id, and the replayed
prefix is recorded in it as it is fed, exactly as a live run records.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final

import attrs
import orjson

from agentloop._core.children import Children
from agentloop._core.engine import Engine
from agentloop._core.replay import Mismatch, models_named, replay
from agentloop._core.rows.nested_approval import waiting_at
from agentloop._core.table import State
from agentloop._core.values import CancelToken, RunResult
from agentloop._drivers.transition import RunView
from agentloop._durable import recording, resume
from agentloop._errors import ConfigurationMismatchError, InvalidStateError
from agentloop._review.runstory import reopen

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop._core.agents import Agents
    from agentloop._core.context_policy import ContextPolicy
    from agentloop._core.output_schema import OutputSchema
    from agentloop._core.values import Budget
    from agentloop._durable.protocol import Ledger
    from agentloop._durable.view import LedgerRun
    from agentloop._loop.loop import Loop

__all__ = ["continued", "forked", "read_ended", "release_claim", "released_on_error", "resumed"]


def require_run(run: object, what: str) -> RunResult:
    """``run``, a ``RunResult`` (a run id was ruled out); else a ``TypeError`` naming both."""
    if type(run) is not RunResult:
        live = "; call run.result() (or run.finish()) first" if isinstance(run, RunView) else ""
        raise TypeError(
            f"{what}() expected a run id (a str) or a RunResult (a finished run's result(), "
            f"or load_run(path)), got {type(run).__name__}{live}"
        )
    return run


def forked(
    run: RunResult,
    at: int,
    *,
    budget: Budget,
    ledger: Ledger | None,
    run_id: str | None,
    dispatcher: object,
    cancel: CancelToken | None,
    context: ContextPolicy | None = None,
    output: OutputSchema | None = None,
    agents: Agents | None = None,
    team: dict[str, Any] | None = None,
) -> tuple[Engine, CancelToken]:
    """The engine of ``run`` after its first ``at`` transitions, and the token it watches.

    ``agents`` and ``team`` are the Loop's, with handoffs (``team.team_of``, ``team_record``).

    Refuses (``ValueError``) a cut the budget cannot replay, and a cut where a
    call of a batch is running (its outcome would be neither the old run's nor
    the new one's): fork before the batch's calls start, or after they return.
    """
    require_run(run, "fork")
    events = run.events
    if type(at) is not int or not 0 <= at <= len(events):
        raise ValueError(
            f"expected at to be an int from 0 to {len(events)} (the run's transitions), "
            f"got {at!r:.40}"
        )
    appended = sum(len(event.appended_json) for event in events)
    transcript = orjson.loads(run.transcript_json)
    messages = transcript[: len(transcript) - appended]
    models = models_named(events)  # the fallback models its replay needs

    def cut(engine: Engine, token: CancelToken) -> Engine:
        """``engine`` fed the first ``at`` events; ``ValueError`` if the cut is refused."""
        try:
            replay(
                messages,
                budget,
                events[:at],
                rejected=run.rejected_value,
                token=token,
                engine=engine,
                output=output,
            )
        except Mismatch as exc:
            raise ValueError(
                f"the run's first {at} transitions do not replay under this Loop's budget "
                f"(max_steps={budget.max_steps}, max_calls={budget.max_calls}): "
                f"{exc.where}: expected {exc.expected}, got {exc.found}"
            ) from None
        running = [*engine.running, *waiting_at(engine.state, events[:at])]
        if running:
            raise ValueError(
                f"expected a fork to start where no call is running, got at={at}, where calls "
                f"{running} of a batch are running (or wait on their child runs): fork before "
                "its calls start or after they return"
            )
        return engine

    def fresh(token: CancelToken) -> Engine:
        return Engine(
            messages,
            budget=budget,
            cancel=token,
            context=context,
            models=models,
            output=output,
            continues=run.run_id,  # the run it forks, when that one was durable
            summary=run.summary,  # a turn's, carried in: its replay starts from it
            agents=agents,
        )

    token = CancelToken()  # the engine's; the caller's cancels it from now on
    if ledger is None:
        if run_id is not None:
            raise ValueError(
                "run_id= names the fork in a ledger, and this Loop has none: make it with "
                "ledger=agentloop.ledger.SQLiteLedger('runs.db') (or another Ledger)"
            )
        engine = cut(fresh(token), token)
    else:
        # The cut is checked first, on an engine of its own: a refused fork is not recorded.
        check = CancelToken()
        cut(fresh(check), check)
        engine = resume.begin(
            ledger,
            run_id,
            messages,
            budget=budget,
            dispatcher=dispatcher,
            cancel=token,
            context=context,
            models=models,
            output=output,
            continues=run.run_id,
            summary=run.summary,
            agents=agents,
            team=team,
        )
        try:
            cut(engine, token)  # recorded as it is fed, as a live run records
        except BaseException:
            _release(engine)
            raise
    if cancel is not None:
        cancel.on_cancel(token.cancel)
    return engine, token


def _release(engine: Engine) -> None:
    """A durable fork that will not be handed out gives up its claim."""
    if isinstance(engine, recording.DurableEngine):
        engine.journal.release()


def resumed(
    what: str,
    run: str | RunResult,
    cancel: CancelToken | None,
    *,
    ledger: Ledger | None,
    budget: Budget,
    dispatcher: object,
    context: ContextPolicy | None = None,
    output: OutputSchema | None = None,
    team: dict[str, Any] | None = None,
    checks: bool = False,
    models: tuple[str, ...] = (),
) -> tuple[Engine, CancelToken | None]:
    """Run ``run`` fed to a fresh engine, and the token its driver is to watch.

    ``run`` is an id in ``ledger``, or a saved result (which no ledger holds);
    ``team`` is the Loop's, with handoffs (``handoff.team_record``); ``checks``:
    it has output validators; ``models`` its fallback models' names (the ones the run's
    events name, and any after them: every answer of a run names its model, or none does).
    """
    if not isinstance(run, str | RunResult):
        hint = (
            ": a live run goes on with its own step() or finish()"
            if isinstance(run, RunView)
            else f": {what}(agentloop.review.load_run(path)) continues a saved run file"
            if isinstance(run, os.PathLike) and ledger is None
            else f": {what}(run_id) continues a run of this Loop's ledger"
            if isinstance(run, os.PathLike)
            else ""
        )
        raise TypeError(
            f"{what}() expected a run id (a str) or a saved run's RunResult, "
            f"got {type(run).__name__}{hint}"
        )
    if isinstance(run, RunResult):
        if ledger is not None:
            raise ValueError(
                f"{what}(result) continues a saved run outside any ledger, and this Loop "
                f"has one: {what}(run_id) continues its recorded runs"
            )
        found = resume.differences(
            {"budget": attrs.asdict(run.budget)}, {"budget": attrs.asdict(budget)}
        )
        if (run.context and run.context.record()) != (context and context.record()):
            found.append(
                f"context: the run's {run.context and run.context.record()}, "
                f"this Loop's {context and context.record()}"
            )
        mine = None if team is None else {"start": team["start"], "handoffs": team["handoffs"]}
        if (run.agents and run.agents.as_json()) != mine:
            found.append(
                f"agents: the run's {run.agents and run.agents.as_json()}, this Loop's {mine}"
            )
        named = models_named(run.events)
        if bool(named) != bool(models) or models[: len(named)] != named:
            found.append(f"models: the run's {list(named)}, this Loop's {list(models)}")
        if found:
            raise ConfigurationMismatchError(
                "the saved run was made with another budget than this Loop's: " + "; ".join(found),
                found,
            )
        saved = None if run.output_schema_json is None else orjson.loads(run.output_schema_json)
        # As a ledger's resume compares them: a description's words change no record's meaning.
        if resume.differences({"output": saved}, {"output": output and output.schema}):
            found = ["$.output_schema: the saved run's is not this Loop's output="]
            raise ConfigurationMismatchError(
                "the saved run was made with another output than this Loop's: " + found[0], found
            )
        token = CancelToken()  # the engine's; the caller's cancels it from now on
        # Goes on with this Loop's policy (the same, checked above): its summariser writes.
        engine = reopen(run if context is None else run._replace(context=context), token, output)
        if cancel is not None:
            cancel.on_cancel(token.cancel)
        return engine, token
    if ledger is None:
        raise ValueError(
            f"{what} needs a ledger: make the Loop with "
            "ledger=agentloop.ledger.SQLiteLedger('runs.db') (or another Ledger); a saved "
            f"run awaiting approval goes on with {what}(load_run(path))"
        )
    return resume.resume(
        ledger,
        run,
        budget=budget,
        dispatcher=dispatcher,
        cancel=cancel,
        context=context,
        output=output,
        team=team,
        checks=checks,
        models=models,
    )


#: What to do instead with a run ``continue_run`` refuses (a finished one has its answer).
_INSTEAD: Final = {
    State.AWAITING_APPROVAL: ": decide its pending calls and resume it instead",
    **dict.fromkeys(
        (State.CANCELLED, State.MALFORMED, State.REPEATED_CALL, State.INVALID_OUTPUT),
        ": fork it at an event before its end instead (loop.fork(run, at=...)), or begin "
        "a new run from its transcript (loop.run(text, after=run), or "
        "loop.run([*run.transcript, message]) on a Loop with a ledger)",
    ),
}


def continued(
    run: str | RunResult, continues: str | None, recorded: Callable[[str], LedgerRun]
) -> tuple[str | None, RunResult]:
    """The run that ``run`` names, to continue (a failed or exhausted one): its id and result.

    ``run`` is a result (the run it goes on from is ``continues`` if given, else the
    result's own ``run_id``: ``None`` for a run that was not durable), or an
    id, whose recorded run ``recorded(run)`` reads as its records stand (with
    the configuration they record: the new run has this Loop's own).
    """
    if isinstance(run, str):
        if continues is not None:
            raise ValueError(
                "continues= names the run a result goes on from; a run given by id "
                f"is the one it goes on from, got both {run!r} and {continues!r}"
            )
        old = recorded(run)
        if not old.done:
            raise InvalidStateError(
                f"run {run!r} has not ended (it is {old.state.value!r}): resume it, or "
                "continue it once it has failed or run out of budget",
                state=old.state,
            )
        continues, result = run, old.result
    else:
        result = require_run(run, "continue_run")
        if continues is not None and type(continues) is not str:
            raise TypeError(
                f"expected continues to be a str or None, got {type(continues).__name__}"
            )
        if continues is None:
            continues = result.run_id
    if result.status not in (State.FAILED, State.EXHAUSTED):
        raise ValueError(
            f"expected a failed or exhausted run to continue, got one that is "
            f"{result.status.value!r}" + _INSTEAD.get(result.status, "")
        )
    return continues, result


def read_ended(
    engine: Engine, run: str | RunResult, decisions: object, loop: Loop | None = None
) -> RunResult:
    """A resumed run that had ended: its result, unless decisions came for it.

    Decisions are refused, and nothing is written; else a durable run's end
    is written if the resume made it, and its result holds the child runs
    of ``loop``'s agent tools that answered its calls. A saved result is returned itself, once
    its replay checked it (a replay cannot give back its events' times), with
    a typed output made the Loop's type.
    """
    if decisions is not None:
        _release(engine)  # refused: nothing is written
        run_id = getattr(engine, "run_id", None)  # a saved run's engine has none
        which = "the saved run" if run_id is None else f"run {run_id!r}"
        raise InvalidStateError(
            f"{which} ended {engine.state.value!r}: it awaits no decisions (were they "
            "taken already?); resume it without decisions= to read it",
            state=engine.state,
        )
    if isinstance(engine, recording.DurableEngine):
        engine.record_end()  # an end the resume made, not yet written
        from agentloop._loop.child_runs import recorded_children  # it reads children as runs

        children = {} if loop is None else recorded_children(loop, engine)
        if children:
            return engine.result()._replace(children=Children(children))
    if not isinstance(run, RunResult):
        return engine.result()
    if run.output_schema_json is None or run.status is not State.FINISHED:
        return run
    # A run file holds a typed output's JSON: the Loop's type makes it a T (RunResult[T]).
    return run._replace(output=engine.result().output)


class released_on_error:
    """Give up a durable run's claim if what follows raises.

    The caller then never gets the live run to go on with (a refused
    ``decisions=``, a listener that raised): the claim would otherwise stay
    with an object nobody holds, and ``resume`` would be refused until it is
    collected. A run that ended or waits for a person holds none already.
    (A class, not a ``contextlib`` generator: it wraps every run, on its hot path.)
    """

    __slots__ = ("_engine",)

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is not None:
            release_claim(self._engine)


def release_claim(engine: Engine) -> None:
    """Give up a durable run's claim (``released_on_error``'s, on an error)."""
    if isinstance(engine, recording.DurableEngine):
        engine.journal.release()
