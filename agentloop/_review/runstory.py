"""A result's story: the chain of its events, then the run replayed through the engine.

What ``Loop.resume`` and ``Loop.fork`` go on from. Each event says what it
was given, and the one replay feeds it back (``_core/replay.py``).
Everything the engine makes must be what the result says, compared as JSON
text. (A run file is read by ``runread.py``.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import orjson

from agentloop._core.build import ROWS
from agentloop._core.engine import Engine
from agentloop._core.replay import Mismatch, models_named, row_text
from agentloop._core.replay import replay as replay_events
from agentloop._core.table import TERMINAL, State
from agentloop._core.values import (
    CancelToken,
    RunResult,
    Transition,
    require_result,
)
from agentloop._errors import RunFileError
from agentloop._review.eventrecord import event_record, exception_record
from agentloop._review.runencode import output_of
from agentloop._review.runshape import as_found, as_shown, dumps

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agentloop._core.context_policy import ContextPolicy
    from agentloop._core.output_schema import OutputSchema

__all__ = ["reopen", "summary_at_end"]


# -- the story: replayed through the engine ---------------------------------------


def _check_chain(events: Sequence[Transition]) -> None:
    """Each event is a row of the table, from where the last one left the run, to one end."""
    state = State.AWAITING_MODEL
    last = len(events) - 1
    for index, event in enumerate(events):
        where = f"$.events[{index}]"
        if (event.source, event.trigger, event.guard, event.dest) not in _ROWS:
            raise Mismatch(
                where,
                "a row of the state table (source, trigger, guard, dest)",
                f"{row_text(event)}, which the table has not",
            )
        if event.source is not state:
            raise Mismatch(
                f"{where}.source",
                f"{state.value!r} (where the run was)",
                as_found(event.source.value),
            )
        if event.dest in TERMINAL and index != last:
            raise Mismatch(where, "a terminal state only at the last event", event.dest.value)
        state = event.dest
    if state not in TERMINAL and state is not State.AWAITING_APPROVAL:
        raise Mismatch(
            f"$.events[{last}].dest",
            "a terminal state or awaiting_approval (where a saved run can stop)",
            as_found(state.value),
        )


_ROWS: Final = frozenset(
    (row.source, row.trigger, row.guard, row.dest) for row in ROWS if row.dest is not None
)


def _replayed(
    result: RunResult,
    messages: list[dict[str, Any]],
    token: CancelToken | None = None,
    output: OutputSchema | None = None,
) -> Engine:
    """The one replay of ``result``'s events, each compared as the run file keeps it.

    Under the run's context policy, if it had one (its summaries are in its
    events), and with its fallback models named. ``output`` is the output
    schema to go on with (a Loop's, with its converter); by default the one
    the result records.
    """
    token = CancelToken() if token is None else token
    engine = Engine(
        messages,
        budget=result.budget,
        cancel=token,
        context=result.context,
        models=models_named(result.events),
        output=output_of(result) if output is None else output,
        # A conversation's turn: which it is, and the summary it began with.
        conversation=None
        if result.conversation_id is None or result.turn is None
        else (result.conversation_id, result.turn),
        summary=result.summary,
        agents=result.agents,
    )
    return replay_events(
        messages,
        result.budget,
        result.events,
        rejected=result.rejected_value,
        engine=engine,
        token=token,
        compare=_compare_events,
    )


def reopen(result: RunResult, token: CancelToken, output: OutputSchema | None = None) -> Engine:
    """A saved run replayed into an engine, which goes on if the run has not ended.

    A run that ended gives an engine that is done, as a durable run that
    ended is only read. ``token`` is the engine's cancel token; ``output`` the
    Loop's output schema, when it has one (the caller checked it is the run's).
    A result whose events do not replay is refused.
    """
    result = require_result(result, "resume()")
    try:
        _check_chain(result.events)
        appended = sum(len(event.appended_json) for event in result.events)
        transcript = orjson.loads(result.transcript_json)
        return _replayed(result, transcript[: len(transcript) - appended], token, output)
    except (TypeError, ValueError) as exc:  # the input part is not one a run accepts
        raise RunFileError(
            "result: $.transcript", "input messages a run accepts", str(exc)
        ) from None
    except Mismatch as found:
        raise RunFileError(f"result: {found.where}", found.expected, found.found) from None


def _compare_events(made: Transition, saved: Transition, where: str) -> None:
    # The fast path: equal as values, counters that are ints (not 1.0 or true), the same
    # message bytes and the same exception record. Anything else is compared field by field.
    if (
        made[:11] == saved[:11]  # every field but the exception, messages, usage and times
        and made.appended_json == saved.appended_json
        and made.usage == saved.usage
        and made.pending == saved.pending
        and made.decisions == saved.decisions
        and made.context == saved.context
        and made.wait == saved.wait
        and made.model == saved.model
        and made.agent == saved.agent
        and type(saved.steps) is int
        and type(saved.calls) is int
        and exception_record(made.exception) == exception_record(saved.exception)
    ):
        return
    _compare(_timeless(made), _timeless(saved), where)


def _timeless(event: Transition) -> dict[str, Any]:
    """An event's record without its times, which replay does not reproduce."""
    record = event_record(event)
    del record["at"], record["took"]
    return record


def _compare(want: dict[str, Any], got: dict[str, Any], where: str) -> None:
    """Raise at the first field of ``got`` that differs from ``want``, compared as JSON text.

    As text, ``1``, ``1.0`` and ``true`` differ (Python's ``==`` would take them as equal).
    """
    if dumps(want) == dumps(got):
        return
    for name, value in want.items():
        if name not in got:  # an optional field (wait, model) the document lacks
            raise Mismatch(f"{where}.{name}", f"{as_shown(value)}, as replaying gives", "none")
        if dumps(value) != dumps(got[name]):
            raise Mismatch(
                f"{where}.{name}",
                f"{as_shown(value)}, as replaying the run gives",
                as_found(got[name]),
            )
    for name in got.keys() - want.keys():  # an optional field the replay does not make
        raise Mismatch(f"{where}.{name}", "no such field, as replaying gives", as_found(got[name]))


def summary_at_end(result: RunResult, context: ContextPolicy) -> tuple[int, str] | None:
    """The summary in force when ``result``'s run stopped, under ``context`` (``summarise``).

    What a next turn carries. Found by the one replay of its events under
    ``context`` (the next turn's policy, whose counter a record may not name);
    ``None`` if it has none, or its events do not replay under ``context``.
    """
    transcript = orjson.loads(result.transcript_json)
    given = transcript[: len(transcript) - sum(len(e.appended_json) for e in result.events)]
    try:
        engine = _replayed(result._replace(context=context), given)
    except (Mismatch, TypeError, ValueError):  # run under another policy: nothing is carried
        return None
    return engine.summary
