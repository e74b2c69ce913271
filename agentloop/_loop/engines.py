"""The engine of each run a ``Loop`` begins: fresh, continued, resumed or forked.

A fresh one records as it goes when the Loop has a ledger; every one
retries and falls back as the Loop does (``retry=``, ``fallback``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from agentloop._core.engine import Engine
from agentloop._core.replay import go_on
from agentloop._core.table import Trigger
from agentloop._durable import resume
from agentloop._durable.ids import turn_run_id
from agentloop._durable.view import view_run
from agentloop._errors import AgentloopError, ConversationBusyError, RunExistsError
from agentloop._loop.continued import continued, forked, resumed
from agentloop._loop.deps import for_run
from agentloop._loop.settings import checked_tool_names, no_ledger, run_input, timeout_bites
from agentloop._loop.team import team_of, team_record
from agentloop._review.runstory import summary_at_end

if TYPE_CHECKING:
    from agentloop._core.agents import Agents
    from agentloop._core.values import Budget, CancelToken, RunResult
    from agentloop._durable.view import LedgerRun
    from agentloop._loop.loop import Loop

__all__ = [
    "carried_summary",
    "check_ready",
    "continued_engine",
    "forked_engine",
    "fresh_engine",
    "make_resilient",
    "plain_engine",
    "recorded_run",
    "resumed_engine",
    "saved_result",
]

_E = TypeVar("_E", bound=Engine)


def fresh_engine(
    loop: Loop,
    messages: str | list[dict[str, Any]],
    cancel: CancelToken | None,
    run_id: str | None,
    deps: object = None,
    continues: str | None = None,
    conversation: tuple[str, int] | None = None,
    summary: tuple[int, str] | None = None,
) -> tuple[Engine, CancelToken | None]:
    """A fresh engine for a new run (a recording one when the Loop has a ledger); its token.

    The token is ``cancel``, or the run's own (``for_run``, which checks
    ``deps`` first, before anything is recorded). ``conversation`` (its id
    and the turn) makes the run that turn; in a ledger, under the turn's id
    (``ConversationBusyError`` if it is taken); ``summary`` is the summary it
    carries in from the turn before.
    """
    check_ready(loop)
    cancel = for_run(loop, deps, cancel)
    messages = run_input(loop.system, messages)
    if loop.ledger is None:
        if run_id is not None:
            no_ledger(run_id)
        engine = plain_engine(
            loop, messages, cancel, continues=continues, conversation=conversation, summary=summary
        )
        return engine, cancel
    try:
        engine = resume.begin(
            loop.ledger,
            run_id,
            messages,
            budget=loop.budget,
            dispatcher=loop.dispatcher,
            cancel=cancel,
            context=loop.context,
            continues=continues,
            models=loop._model_names,
            output=loop.output,
            retry=loop.retry,
            conversation=conversation,
            summary=summary,
            agents=agents_of(loop),
            team=team_record(loop),
        )
    except RunExistsError:
        if conversation is None:
            raise
        conversation_id, turn_number = conversation
        raise ConversationBusyError(
            f"turn {turn_number} of conversation {conversation_id!r} was begun elsewhere first "
            f"(run {turn_run_id(*conversation)!r}): read it, and go on from it",
            conversation_id,
            turn_number,
        ) from None
    return engine, cancel


def continued_engine(
    loop: Loop,
    run: str | RunResult,
    cancel: CancelToken | None,
    run_id: str | None,
    continues: str | None,
    deps: object = None,
) -> tuple[Engine, CancelToken | None]:
    """The engine of a run that continues ``run`` (a failed or exhausted one); its token.

    When ``run`` is a conversation's turn, the new run is its next turn.
    """
    continues, result = continued(
        run, continues, lambda old: recorded_run(loop, old, "continue_run")
    )
    conversation = None
    if result.conversation_id is not None and result.turn is not None:
        if run_id is not None:
            raise ValueError(
                f"run {result.run_id or 'given'!s:.60} is turn {result.turn} of conversation "
                f"{result.conversation_id!r}, and the run that continues it is the next turn, "
                f"whose id is made for it: leave run_id= out, got {run_id!r:.60}"
            )
        conversation = (result.conversation_id, result.turn + 1)
    summary = carried_summary(loop, result)
    return fresh_engine(
        loop, result.transcript, cancel, run_id, deps, continues, conversation, summary
    )


def carried_summary(loop: Loop, before: RunResult) -> tuple[int, str] | None:
    """The summary a turn after ``before`` begins with: ``before``'s at its end, under summarise."""
    if loop.context is None or loop.context.summariser is None:
        return None
    return summary_at_end(before, loop.context)


def saved_result(loop: Loop, run: str | RunResult, call: str) -> RunResult:
    """``run``'s result: given, or read by its id from the Loop's ledger."""
    return recorded_run(loop, run, call).result if isinstance(run, str) else run


def recorded_run(loop: Loop, run_id: str, call: str) -> LedgerRun:
    """The run ``run_id`` of the Loop's ledger, as its records stand."""
    if loop.ledger is None:
        no_ledger(run_id, f"{call}({run_id!r:.60})")
    assert loop.ledger is not None, "no_ledger refused the id"
    return view_run(loop.ledger, run_id)


def check_ready(loop: Loop) -> None:
    """Refuse a run the Loop cannot make now.

    Outside ``with loop:``, when it owns what only that opens; with a tool
    (added since the Loop was made) whose name its model's provider refuses,
    or that a ``tool_timeout`` could not interrupt (``timeout_bites``).
    """
    if loop._owns and loop._open is None:
        raise AgentloopError(
            f"this Loop owns {len(loop._owns)} thing(s) (owns=, an MCP server say) that "
            "only `with loop:` (or `async with loop:`) opens: run it inside that block"
        )
    team = team_of(loop)
    for agent in [loop] if team is None else team[1].values():  # the run's timeout bites all
        checked_tool_names(agent._name_rules, agent.dispatcher)
        timeout_bites(agent.dispatcher, loop.tool_timeout, loop.to_thread)


def plain_engine(
    loop: Loop,
    messages: str | list[dict[str, Any]],
    cancel: CancelToken | None,
    *,
    run_id: str | None = None,
    continues: str | None = None,
    conversation: tuple[str, int] | None = None,
    summary: tuple[int, str] | None = None,
    budget: Budget | None = None,
) -> Engine:
    """An engine configured as ``loop`` is, recording nothing (the Loop's, DBOS's, a child's).

    ``budget``: another than the Loop's (an agent tool's child, within its parent's tokens).
    """
    return Engine(
        messages,
        budget=loop.budget if budget is None else budget,
        cancel=cancel,
        context=loop.context,
        retry=loop.retry,
        models=loop._model_names,
        output=loop.output,
        run_id=run_id,
        continues=continues,
        conversation=conversation,
        summary=summary,
        agents=agents_of(loop),
    )


def agents_of(loop: Loop) -> Agents | None:
    """The team of ``loop``'s runs, as its engine knows it (None: no handoffs)."""
    team = team_of(loop)
    return None if team is None else team[0]


def make_resilient(loop: Loop, engine: _E) -> _E:
    """A replayed ``engine``, going on retrying and falling back as ``loop`` does.

    Its record was replayed with the models it names; from here on it asks
    the Loop's (``retry=``, ``fallback``).
    """
    go_on(engine, retry=loop.retry, models=loop._model_names)
    return engine


def resumed_engine(
    loop: Loop, what: str, run: str | RunResult, cancel: CancelToken | None, deps: object = None
) -> tuple[Engine, CancelToken | None]:
    """The run, fed to a fresh engine, and the token its driver is to watch (``fresh_engine``'s)."""
    check_ready(loop)
    cancel = for_run(loop, deps, cancel)
    engine, token = resumed(
        what,
        run,
        cancel,
        ledger=loop.ledger,
        budget=loop.budget,
        dispatcher=loop.dispatcher,
        context=loop.context,
        output=loop.output,
        team=team_record(loop),
        checks=bool(loop.output_validators),
        models=loop._model_names,
    )
    return make_resilient(loop, engine), token


def forked_engine(
    loop: Loop,
    run: str | RunResult,
    what: str,
    at: int,
    cancel: CancelToken | None,
    run_id: str | None,
    deps: object = None,
) -> tuple[Engine, CancelToken, dict[str, RunResult[Any]]]:
    """A fork's engine (``Loop.fork``): ``run`` after its first ``at`` transitions; its token.

    ``run`` is a result, or an id in the Loop's ledger (``what``, the call, names it).
    With them, the children the fork carries: those of the agent calls it replayed.
    """
    check_ready(loop)
    cancel = for_run(loop, deps, cancel)
    source = saved_result(loop, run, what)
    engine, token = forked(
        source,
        at,
        budget=loop.budget,
        ledger=loop.ledger,
        run_id=run_id,
        dispatcher=loop.dispatcher,
        cancel=cancel,
        context=loop.context,
        output=loop.output,
        agents=agents_of(loop),
        team=team_record(loop),
    )
    children = carried_children(source, engine)
    if isinstance(run, str) and children and loop.ledger is not None:
        from agentloop._loop.child_runs import typed_carried  # it resumes children with these

        tools = {m["id"]: m["name"] for m in engine.history() if m["kind"] == "tool_result"}
        children = typed_carried(loop, loop.ledger, children, tools)
    return make_resilient(loop, engine), token, children


def carried_children(source: RunResult, engine: Engine) -> dict[str, RunResult[Any]]:
    """The children of ``source`` whose calls its fork ``engine`` replayed the answers of."""
    answered = {e.call_id for e in engine.events() if e.trigger is Trigger.TOOL_RETURNED}
    return {call_id: child for call_id, child in source.children.items() if call_id in answered}
