"""What each DBOS step of a run does: ask, summarise, filter, review, call a tool, check a final.

Each returns its outcome as data (what the step records), with the cancel
markers read at the checkpoint the step records: ``watched``, the run's id
and, for an agent call's child run, its ancestors' (``marker.cancelled``).
How a review's answers are recorded (``_verdict_data``) and read back
(``recorded_verdict``) is here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from agentloop._core.approval import Decision
from agentloop._core.json import exception_content
from agentloop._dbos.marker import cancelled
from agentloop._drivers.awaiter import Awaiter
from agentloop._drivers.run_context import CallScope, in_context, reviewed_in
from agentloop._drivers.streams import is_stream, whole_reply
from agentloop._durable.bodies import (
    outcome_record,
    raised_record,
    recorded_outcome,
    reply_record,
)
from agentloop._durable.journal import OUTCOME_UNKNOWN, idempotent_tools
from agentloop._loop.output_checks import check
from agentloop._loop.team import agent_asked
from agentloop._tools.registry import PreparedCall, reviewing

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop._loop.loop import Loop

__all__ = ["StepWork", "batch_started", "recorded_verdict"]


class StepWork:
    """The work of a DBOSLoop's steps, each run by ``DBOS.run_step`` (through ``StepRunner``).

    With handoffs, ``team`` holds each agent's Loop by name: a step asks the
    agent in force's model, and calls its tools.
    """

    __slots__ = ("_idempotent", "_team", "loop")

    def __init__(self, loop: Loop, team: dict[str, Loop] | None) -> None:
        self.loop, self._team = loop, team
        # The tools a crash may run again, by agent (None: the Loop's own, without a team).
        self._idempotent: dict[str | None, frozenset[str]] = {
            None: idempotent_tools(loop.dispatcher)
        }
        for name, agent in (team or {}).items():
            self._idempotent[name] = idempotent_tools(agent.dispatcher)

    def _agent(self, agent: str | None) -> Loop:
        """The Loop whose model and tools a step uses: the agent in force's, or the Loop."""
        return self.loop if agent is None or self._team is None else self._team[agent]

    def ask(
        self,
        watched: tuple[str, ...],
        history: list[dict[str, Any]],
        model: int = 0,
        retries: int = 0,
        options: dict[str, Any] | None = None,
        first: bool = False,
        agent: str | None = None,
    ) -> dict[str, Any]:
        """The ``agentloop.model`` step: the model's reply (or what it raised), as data.

        ``model``: which fallback model to ask; ``retries``: the retries of this
        ask made so far. The wait before a retry is chosen here, in the step
        (the policy's jitter is random): a recovered workflow reads it back.
        ``options`` are the request's (``tool_choice='none'`` in the wrap-up step).
        ``first``: the run's first ask, before which the marker is read too.
        ``agent``: with handoffs, the agent in force, whose model is asked.
        """
        if first and cancelled(watched):
            return {"cancel": True, "unasked": True}
        answer: dict[str, Any]
        try:
            if agent is None:  # with the tools, for a model that takes them
                reply = self.loop._bound_models[model](history, **(options or {}))
            else:  # with its own system prompt and tools
                reply = agent_asked(self._agent(agent), history, options or {})
            if type(reply) is not dict and is_stream(reply):  # a streaming model
                # The step records the whole reply, not the deltas: taken before the stream
                # is closed, so that nothing it runs at its close changes what is recorded.
                reply = whole_reply(reply, reply_record)[1]
        except Exception as exc:  # noqa: BLE001 - recorded; the engine says what it means
            answer = raised_record(exc)
            policy = self.loop.retry
            wait = None if policy is None else policy.wait_for(exc, retries)
            if wait is not None:
                answer["wait"] = wait
        else:
            answer = reply_record(reply)[0]
        answer["cancel"] = cancelled(watched)
        return answer

    def summarise(self, watched: tuple[str, ...], history: list[dict[str, Any]]) -> dict[str, Any]:
        """(context) The ``agentloop.model`` step of a summary: its writer's reply, as data."""
        policy = self.loop.context
        assert policy is not None, "a summary is asked only under a context policy"
        assert policy.summariser is not None, "and only under summarise"
        return _written(watched, policy.summariser, history)

    def check_output(
        self, watched: tuple[str, ...], value: Any, scope: CallScope
    ) -> dict[str, Any]:
        """The ``agentloop.check_output`` step: the output validators' problems with a final.

        Run as a synchronous run runs them (``output_checks.check``): in the
        output's context, an async one awaited on an event loop of the step's own.
        The markers are read after them: a refused final goes back to the model,
        and a cancel that came while they ran is seen before it is asked.
        """
        awaiter = Awaiter()
        try:
            problems = check(self.loop.output_validators, scope, awaiter)(value)
        finally:
            if awaiter.open:
                awaiter.close()
        return {"problems": problems, "cancel": cancelled(watched)}

    def filter(
        self,
        watched: tuple[str, ...],
        handoff_filter: Callable[..., Any],
        history: list[dict[str, Any]],
    ) -> dict[str, Any]:
        """The ``agentloop.handoff_filter`` step: what a handoff's filter sends the next agent."""
        return _written(watched, handoff_filter, history)

    def review(
        self, watched: tuple[str, ...], calls: list[dict[str, Any]], scope: CallScope
    ) -> dict[str, Any]:
        """The ``agentloop.review`` step: what the policies answer about each call, as data.

        Each call reviewed in its context (``scope``: the run's deps, id and counters).
        """
        registry = reviewing(self.loop.dispatcher)
        assert registry is not None, "a batch is reviewed only when the tools have policies"
        # By call id, under a key of its own: a call's id is the model's, any string.
        answers = {
            call["id"]: _verdict_data(reviewed_in(scope.handed(call), registry.review, call))
            for call in calls
        }
        return {"answers": answers, "cancel": cancelled(watched)}

    def call(
        self,
        watched: tuple[str, ...],
        call: dict[str, Any],
        again: bool,
        decision: dict[str, Any] | None,
        scope: CallScope,
    ) -> dict[str, Any]:
        """The ``agentloop.tool`` step: the call's outcome, as data.

        ``again``: the step before this one was recorded by a process that
        died: it may have started this call, so its handler may have run.
        Only an idempotent tool runs then. ``decision``: what the policies or
        a person answered about the call at its review, if it had one.
        ``scope``: what the call's context holds (the run's deps, id and counters).
        The markers are read before the handler (``unrun``: cancelled, it does not run;
        a call another execution may have started is answered as above) and after it.
        """
        if not again and cancelled(watched):  # right before the tool: cancelled since the step
            return {"cancel": True, "unrun": True}  # before read it; the handler never runs
        outcome: dict[str, Any]
        agent = scope.engine.agent  # with handoffs: whose tools the call is of
        if again and call["name"] not in self._idempotent[agent if self._team else None]:
            outcome = {"status": "error", "content": dict(OUTCOME_UNKNOWN), "exception": None}
        else:
            dispatch = in_context(self._agent(agent).dispatcher.dispatch, [], scope)
            try:
                if decision is None:
                    got = dispatch(call)
                else:  # only a registry's calls are reviewed
                    got = dispatch(call, decision=Decision(**decision))
            except Exception as exc:  # noqa: BLE001 - recorded; the engine says what it means
                outcome = {"raised": exception_content(exc)}
            else:
                outcome = outcome_record(got)[0]
        outcome["cancel"] = cancelled(watched)
        return outcome


def _written(
    watched: tuple[str, ...],
    writer: Callable[[list[dict[str, Any]]], object],
    history: list[dict[str, Any]],
) -> dict[str, Any]:
    """What ``writer`` (a summariser, a handoff's filter) answers ``history``, as data.

    The markers of ``watched`` (the run and its ancestors) are read after it.
    """
    answer: dict[str, Any]
    try:
        written = writer(history)
    except Exception as exc:  # noqa: BLE001 - recorded; the engine says what it means
        answer = raised_record(exc)
    else:
        answer = reply_record(written)[0]
    answer["cancel"] = cancelled(watched)
    return answer


def _verdict_data(answer: PreparedCall | dict[str, Any]) -> dict[str, Any]:
    """A review's answer as a step records it: the policies' decision, or the call's outcome."""
    if isinstance(answer, PreparedCall):
        return {"decision": attrs.asdict(answer.decision)}  # an ask too: its asks field is kept
    return {"outcome": outcome_record(answer)[0]}


def recorded_verdict(data: dict[str, Any] | None) -> Decision | dict[str, Any] | None:
    """The recorded review's answer about a call (``None``: no policy was asked)."""
    if data is None:
        return None
    if "decision" in data:
        return Decision(**data["decision"])
    return recorded_outcome(data["outcome"])


def batch_started(watched: tuple[str, ...]) -> dict[str, Any]:
    """The ``agentloop.tool_started`` step, after a batch waited for a person: its start.

    The decisions came by message, which is no step of ours; this step's
    record marks the batch's first call as started.
    """
    return {"cancel": cancelled(watched)}
