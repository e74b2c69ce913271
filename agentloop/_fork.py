"""Forking a run: a new run that starts as an old one was after its first ``at`` transitions.

The old run's events are replayed (``_core/_replay.py``) into a fresh engine,
the first ``at`` of them, and that engine is handed to a driver of the
forking ``Loop``: from there on, its model and tools make the run. With a
ledger, the fork is a new durable run under its own id, and the replayed
prefix is recorded in it as it is fed, exactly as a live run records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from agentloop._core._replay import Mismatch, replay
from agentloop._core._values import CancelToken, RunResult, require_result
from agentloop._durable import _journal, _resume

if TYPE_CHECKING:
    from agentloop._core._engine import Engine
    from agentloop._core._values import Budget
    from agentloop._durable._ledger import Ledger

__all__ = ["forked"]


def forked(
    run: RunResult,
    at: int,
    *,
    budget: Budget,
    ledger: Ledger | None,
    run_id: str | None,
    dispatcher: object,
    cancel: CancelToken | None,
) -> tuple[Engine, CancelToken]:
    """The engine of ``run`` after its first ``at`` transitions, and the token it watches.

    Refuses (``ValueError``) a cut the budget cannot replay, and a cut where a
    call of a batch is running (its outcome would be neither the old run's nor
    the new one's): fork before the batch's calls start, or after they return.
    """
    require_result(run, "fork()")
    events = run.events
    if type(at) is not int or not 0 <= at <= len(events):
        raise ValueError(
            f"expected at to be an int from 0 to {len(events)} (the run's transitions), "
            f"got {at!r:.40}"
        )
    appended = sum(len(event.appended_json) for event in events)
    transcript = orjson.loads(run.transcript_json)
    messages = transcript[: len(transcript) - appended]
    token = CancelToken()  # the engine's; the caller's cancels it from now on
    engine: Engine | None = None
    if ledger is not None:
        engine = _resume.begin(
            ledger, run_id, messages, budget=budget, dispatcher=dispatcher, cancel=token
        )
    elif run_id is not None:
        raise ValueError(
            "run_id= names the fork in a ledger, and this Loop has none: make it with "
            "ledger=agentloop.SQLiteLedger('runs.db') (or another Ledger)"
        )
    try:
        engine = replay(
            messages, budget, events[:at], rejected=run.rejected_value, token=token, engine=engine
        )
        if engine.running:
            raise ValueError(
                f"expected a fork to start where no call is running, got at={at}, where calls "
                f"{list(engine.running)} of a batch are running: fork before its calls start "
                "or after they return"
            )
    except Mismatch as exc:
        _release(engine)
        raise ValueError(
            f"the run's first {at} transitions do not replay under this Loop's budget "
            f"(max_steps={budget.max_steps}, max_calls={budget.max_calls}): "
            f"{exc.where}: expected {exc.expected}, got {exc.found}"
        ) from None
    except BaseException:
        _release(engine)
        raise
    if cancel is not None:
        cancel.on_cancel(token.cancel)
    return engine, token


def _release(engine: Engine | None) -> None:
    """A durable fork that will not be handed out gives up its claim."""
    if isinstance(engine, _journal.DurableEngine):
        engine.journal.release()
