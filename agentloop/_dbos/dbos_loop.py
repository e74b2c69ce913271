"""The DBOS driver: ``DBOSLoop``, whose runs are DBOS workflows (see ``agentloop.dbos``).

The workflow is a driver like ``Run``: a short loop over the engine's
protocol, where what comes from outside is a DBOS step, recorded before the
engine takes it. ``agentloop.dbos`` says what it guarantees; ``loops.py``
(the DBOSLoops by name, and the run workflow), ``steps.py``, ``work.py``,
``marker.py``, ``decisions.py`` and ``child_workflows.py`` (agent calls)
beside this module are its parts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from logging import DEBUG
from typing import Any, Final, Generic
from uuid import uuid4

from dbos import DBOS, DBOSClient, EnqueueOptions, Queue, SetWorkflowID, WorkflowHandle

from agentloop._core.agents import with_filters
from agentloop._core.approval import Decision
from agentloop._core.children import Children
from agentloop._core.context_policy import FilterHistory, Summarise
from agentloop._core.engine import Engine
from agentloop._core.requests import CheckOutput, uncalled_check
from agentloop._core.rows.retry import retries
from agentloop._core.values import (
    AskModel,
    Budget,
    CancelToken,
    OutputT,
    RecordedException,
    ReviewCalls,
    RunResult,
    RunTool,
    Transition,
    Wait,
)
from agentloop._dbos.child_workflows import AgentCalls, Handout, driven_with
from agentloop._dbos.decisions import (
    APPROVAL_TOPIC,
    wait_for_decisions,
)
from agentloop._dbos.loops import LOOPS, forget, refuse_taken, run_workflow, started_here
from agentloop._dbos.steps import StepRunner
from agentloop._dbos.turns import busy, next_turn
from agentloop._dbos.work import StepWork, batch_started, recorded_verdict
from agentloop._drivers.callbacks import Listener, TokenCancelled
from agentloop._drivers.run_context import CallScope
from agentloop._drivers.transition import LOG, drain, log, pump
from agentloop._durable.bodies import recorded_answer, recorded_outcome
from agentloop._durable.ids import parse_turn, turn_run_id
from agentloop._durable.journal import fingerprint
from agentloop._durable.resume import checked_run_id, differences, mismatch
from agentloop._loop.deps import deps_provider
from agentloop._loop.engines import plain_engine
from agentloop._loop.loop import Loop
from agentloop._loop.settings import run_input
from agentloop._loop.team import filters_of, team_of, team_record
from agentloop._tools.registry import reviewing

__all__ = ["STEPS", "DBOSLoop"]

#: The names of the DBOS steps a run records: per reply, after a batch waited for a person,
#: per call, per batch whose tools have policies.
STEPS: Final = (
    "agentloop.model",
    "agentloop.tool_started",
    "agentloop.tool",
    "agentloop.review",
    "agentloop.check_output",
    "agentloop.handoff_filter",
)
_MODEL: Final[Any] = {"name": STEPS[0]}
_STARTED: Final[Any] = {"name": STEPS[1]}
_TOOL: Final[Any] = {"name": STEPS[2]}
_REVIEW: Final[Any] = {"name": STEPS[3]}
_CHECK: Final[Any] = {"name": STEPS[4]}
_FILTER: Final[Any] = {"name": STEPS[5]}


class DBOSLoop(Generic[OutputT]):
    """A ``Loop`` whose runs are DBOS workflows: durable, queueable, recovered by any worker.

    Generic in its output as its ``Loop`` is: ``DBOSLoop(Loop(model, output=City),
    name=...)`` is a ``DBOSLoop[City]``, whose runs' results are ``RunResult[City]``.

    ``name`` identifies the loop across processes: every worker that may
    serve its runs (or recover them) makes a ``DBOSLoop`` of that name with
    the same configuration. A run records the loop's fingerprint (budgets,
    tool names and schemas, as the SQLite ledger does); a worker whose loop
    differs refuses to drive it (``ConfigurationMismatchError``). The
    ``Loop`` must have no ledger (DBOS is the ledger here) and must not need
    the asyncio driver: the workflow drives the engine synchronously.

    ``deps`` provides a run's dependencies (``RunContext.deps``): ``deps(run_id)``
    is called in the worker that drives the run, once for each time it drives
    it (a recovery calls it again), since DBOS records a workflow's arguments
    and dependencies are never recorded. A Loop with ``deps_type`` whose
    tools take a context needs it.

    Listeners (``Loop(listeners=...)``) hear each transition as the workflow
    makes it, in whichever process drives it (which logs it at DEBUG, as a
    ``Run`` does): after a recovery, the replayed transitions too.
    """

    def __init__(
        self, loop: Loop[OutputT], *, name: str, deps: Callable[[str], object] | None = None
    ) -> None:
        if not isinstance(loop, Loop):
            raise TypeError(f"expected loop to be an agentloop.Loop, got {type(loop).__name__}")
        if type(name) is not str or not name:
            raise TypeError(f"expected name to be a non-empty str, got {name!r:.80}")
        if loop.ledger is not None:
            raise ValueError(
                "a DBOSLoop's runs are recorded by DBOS: make its Loop without a ledger"
            )
        loop._sync_driver("a DBOSLoop drives its runs synchronously, inside a DBOS workflow")
        team = team_of(loop)  # with handoffs: checked, each agent's Loop by name
        self._deps = deps_provider(loop, deps)
        refuse_taken(name)
        self.loop, self.name = loop, name
        self._fingerprint = fingerprint(
            loop.budget, loop.dispatcher, loop.context, loop.output, team_record(loop)
        )
        self._team = team
        self._driving: list[str] = []  # the ids of its runs driven in this process now
        self._starting: list[str] = []  # and of those started here, not yet driven
        self._work = StepWork(loop, None if team is None else team[1])  # what each step does
        self._agents = AgentCalls(self, run_workflow)  # its agent tools' DBOSLoops, made and named
        children = self._agents.fingerprints()
        if children:  # in the run's fingerprint: a worker whose child Loops differ refuses it
            self._fingerprint["children"] = children
        LOOPS[name] = self

    def __repr__(self) -> str:
        return f"DBOSLoop({self.loop!r}, name={self.name!r})"

    def close(self) -> None:
        """Forget this loop (and its agent tools' children) in this process: its name is free.

        ``RunBusyError`` while a run of it, or of a child of it, is driven in this
        process (from its ``start`` here; one waiting for a person too): it would find its
        DBOSLoop (or its next agent call its child's) gone. Nothing is forgotten then;
        let the runs end (or ``cancel_run`` them) first.
        """
        forget(self)

    def _in_flight(self) -> list[str]:
        """The ids of the runs of this DBOSLoop and of its children driven in this process."""
        return sorted({*self._driving, *self._starting, *self._agents.in_flight()})

    # -- starting runs ------------------------------------------------------------------

    def start(
        self,
        messages: str | list[dict[str, Any]],
        *,
        run_id: str | None = None,
        conversation: str | None = None,
    ) -> WorkflowHandle[RunResult[OutputT]]:
        """Start a run in this process (a DBOS workflow with id ``run_id``); its handle.

        Bad input raises here, before anything is recorded. ``run_id`` is made
        when not given (``handle.workflow_id``). Starting an id that exists
        returns the existing run's handle (DBOS starts a workflow id once).
        ``conversation="user-42"`` makes the run the conversation's next turn,
        the workflow ``user-42::n``, from the last turn's transcript;
        ``ConversationBusyError`` if another process began that turn first.
        """
        turn = conversation is not None
        if turn:
            if run_id is not None:
                raise ValueError(f"a turn's id is made for it: leave run_id= out, got {run_id!r}")
            run_id, messages = next_turn(conversation, messages)
        run_id, history = self._checked(messages, run_id, derived=turn)

        def begin() -> WorkflowHandle[RunResult]:
            with SetWorkflowID(run_id):
                return DBOS.start_workflow(run_workflow, self.name, history, self._fingerprint)

        handle = started_here(self, run_id, begin)
        taken = busy(run_id, history) if turn else None
        if taken is not None:
            raise taken
        return handle

    def run(
        self,
        messages: str | list[dict[str, Any]],
        *,
        run_id: str | None = None,
        conversation: str | None = None,
    ) -> RunResult[OutputT]:
        """Start a run (``start``'s ``conversation=`` too) and wait for its result."""
        return self.start(messages, run_id=run_id, conversation=conversation).get_result()

    def enqueue(
        self, queue: Queue, messages: str | list[dict[str, Any]], *, run_id: str | None = None
    ) -> WorkflowHandle[RunResult[OutputT]]:
        """Put a run on a DBOS ``Queue``: a worker process serving that queue drives it."""
        run_id, history = self._checked(messages, run_id)
        with SetWorkflowID(run_id):
            return queue.enqueue(run_workflow, self.name, history, self._fingerprint)

    def client_enqueue(
        self,
        client: DBOSClient,
        queue_name: str,
        messages: str | list[dict[str, Any]],
        *,
        run_id: str | None = None,
    ) -> WorkflowHandle[RunResult[OutputT]]:
        """Enqueue a run through a ``DBOSClient``: from a process that does not launch DBOS."""
        run_id, history = self._checked(messages, run_id)
        options: EnqueueOptions = {
            "workflow_name": "agentloop.run",
            "queue_name": queue_name,
            "workflow_id": run_id,
        }
        return client.enqueue(options, self.name, history, self._fingerprint)

    @staticmethod
    def result(
        run_id: str, *, polling_interval_sec: float = 1.0, client: DBOSClient | None = None
    ) -> RunResult:
        """Wait for run ``run_id`` (started in any process) to end; its result.

        The run's status is read every ``polling_interval_sec`` seconds until
        then. From any process with DBOS launched, or through ``client``.
        """
        via: Any = DBOS if client is None else client
        handle: WorkflowHandle[RunResult] = via.retrieve_workflow(run_id)
        return handle.get_result(polling_interval_sec=polling_interval_sec)

    def _checked(
        self, messages: str | list[dict[str, Any]], run_id: str | None, *, derived: bool = False
    ) -> tuple[str, list[dict[str, Any]]]:
        if run_id is None:
            run_id = uuid4().hex
        elif type(run_id) is not str or not run_id:
            raise TypeError(f"expected run_id to be a non-empty str, got {run_id!r:.80}")
        else:
            checked_run_id(run_id, new=True, derived=derived)  # no ':' unless agentloop's
        if LOOPS.get(self.name) is not self:
            raise ValueError(f"this DBOSLoop ({self.name!r}) was closed")
        same_team(self.loop, self._fingerprint)
        messages = run_input(self.loop.system, messages)  # as Loop.start takes a new run's input
        history = Engine(messages, budget=self.loop.budget).history()  # bad input raises
        return run_id, history

    # -- the workflow's body: the driver ------------------------------------------------

    def _drive(
        self,
        history: list[dict[str, Any]],
        recorded: dict[str, Any],
        handout: Handout | None = None,
    ) -> RunResult:
        """The run, as a DBOS workflow: the one transition pumped, each request a DBOS step.

        Pumped by ``Run``'s own loop (``agentloop._drivers.transition.pump``);
        here a model ask, a tool call and a review are steps whose recorded
        outputs a recovery reads back (a streaming model's whole reply, read in
        its step: no stream comes back to the pump), and a wait (before a
        retry, or for a person) is a durable ``DBOS.recv``.
        """
        run_id = DBOS.workflow_id
        assert run_id is not None, "a run is driven inside its workflow"
        found = differences(recorded, self._fingerprint)
        if found:
            raise mismatch(run_id, found)
        token = CancelToken()
        deps, budget, watched, lineage = driven_with(self, run_id, handout, token)
        engine = self._engine(history, token, run_id, budget)
        listeners = self.loop.listeners
        # Each step's output says which execution recorded it: the last one's tells whether
        # this execution recorded it (it drove the run up to here) or replayed it (a process
        # that died did, and may have started the call that comes next).
        steps = StepRunner(uuid4().hex[:16])
        scope = CallScope(engine, deps, run_id, token)
        scope.run_child = self._agents.runner(lineage)  # as child workflows
        while not engine.done:
            perform = functools.partial(
                self._perform, engine=engine, steps=steps, scope=scope, watched=watched
            )
            try:  # Run's loop, no stream coming back here; a cut child's tokens count
                made = drain(pump(engine, perform, children=scope.children))
            except _Unasked:  # cancelled before the first ask: nothing happened yet
                engine = scope.engine = self._engine(history, token, run_id, budget)
                continue
            if made is None:  # the batch waits for a person: decisions come by message
                made = wait_for_decisions(engine, token, engine.pending)
                # No step of ours took them: a step marks the batch's start.
                if not engine.done and steps.run(_STARTED, batch_started, watched).pop("cancel"):
                    token.cancel()  # the checkpoint before the batch's first call
            _tell(listeners, made)
        result = engine.result()
        return result._replace(children=Children(scope.children)) if scope.children else result

    def _engine(
        self,
        history: list[dict[str, Any]],
        token: CancelToken,
        run_id: str,
        budget: Budget | None = None,
    ) -> Engine:
        """A fresh engine for the run ``run_id``, configured as the Loop is.

        ``budget``: a child run's (its token limit within its parent's); else the Loop's.
        """
        same_team(self.loop, self._fingerprint)  # none added to the Loop since
        # A conversation's turn (its id is derived), or None; a child is no turn.
        turn = parse_turn(run_id) if budget is None else None
        before = None if turn is None or turn[1] == 1 else turn_run_id(turn[0], turn[1] - 1)
        engine = plain_engine(
            self.loop,
            history,
            token,
            run_id=run_id,
            continues=before,
            conversation=turn,
            budget=budget,
        )
        engine.reviews = reviewing(self.loop.dispatcher) is not None
        if self._team is not None:  # the handoffs' filters, asked in their own step
            with_filters(engine, filters_of(self._team[1]))
        if self.loop.output_validators:  # each final the schema accepts: a step checks it
            engine.output_check = uncalled_check
        return engine

    def _perform(
        self,
        need: object,
        *,
        engine: Engine,
        steps: StepRunner,
        scope: CallScope,
        watched: tuple[str, ...],
    ) -> object:
        """Do what the engine asked, as a DBOS step; what the step recorded is the answer.

        A step's ``cancel`` is the markers', read at the checkpoint it records
        (``watched``: the run's id, and its ancestors' for a child run).
        ``scope``: what each call's context holds (the run's deps, id and token).
        """
        token = scope.cancel
        assert token is not None, "a workflow has its token"
        if isinstance(need, Wait):  # before a retry: cancel_run(run_id) cuts it short (its message)
            message = DBOS.recv(APPROVAL_TOPIC, timeout_seconds=need.seconds)
            if type(message) is dict and message.get("cancel"):
                token.cancel()  # the table's waited [cancel_requested] row ends the run
            return None
        if isinstance(need, CheckOutput):  # the output validators: their problems recorded
            checked = steps.run(_CHECK, self._work.check_output, watched, need.value, scope)
            if checked.get("cancel"):
                token.cancel()  # the checkpoint before the ask that refused finals go back to
            return checked["problems"]
        if isinstance(need, ReviewCalls):
            answer = steps.run(_REVIEW, self._work.review, watched, need.calls, scope)
            if answer["cancel"]:
                token.cancel()  # the checkpoint before the batch's first call
            return {call_id: recorded_verdict(data) for call_id, data in answer["answers"].items()}
        if isinstance(need, RunTool):
            verdict = need.review if need.decision is None else need.decision
            if isinstance(verdict, dict):  # a policy failed: the review recorded the outcome
                return verdict
            recorded = verdict.record() if isinstance(verdict, Decision) else None
            if self._agents.answers(need.call, scope):  # an agent tool's: a child workflow
                return self._agents.call(need.call, recorded, scope, steps, _TOOL, watched)
            again = steps.replayed()
            outcome = steps.run(_TOOL, self._work.call, watched, need.call, again, recorded, scope)
            if outcome.pop("unrun", False):  # cancelled right before it: it never ran
                token.cancel()
                raise TokenCancelled
            if outcome.pop("cancel"):
                token.cancel()  # the checkpoint before the next tool or model ask
            if "raised" in outcome:
                raise RecordedException.from_content(outcome["raised"])
            return recorded_outcome(outcome)
        if isinstance(need, AskModel):
            # Which fallback model, and the retries made: the step chooses the wait. The
            # run's first ask reads the marker before it asks, too.
            answer = steps.run(
                _MODEL,
                self._work.ask,
                watched,
                need.history,
                engine.model_index,
                retries(engine.events()),
                need.options,
                not engine.events(),
                engine.agent,
            )
        elif isinstance(need, FilterHistory):  # a handoff's filter: the view it sends
            answer = steps.run(_FILTER, self._work.filter, watched, need.model, need.history)
        else:  # Summarise: a model step too, of the context policy's own model callback
            assert isinstance(need, Summarise), need
            answer = steps.run(_MODEL, self._work.summarise, watched, need.history)
        if answer.pop("cancel"):
            token.cancel()  # right after the reply (or, the first, before the ask)
        if "unasked" in answer:
            raise _Unasked
        kind, value = recorded_answer(answer) or ("raised", _MISSING)
        if kind == "raised":
            raise value  # with the wait the step chose: the engine takes it as recorded
        return value


class _Unasked(BaseException):
    """The run was cancelled before its first ask: nothing happened, and it begins again."""


def _tell(listeners: tuple[Listener, ...], transition: Transition) -> None:
    """Log ``transition`` at DEBUG and tell the listeners, as ``Run`` does."""
    if LOG.isEnabledFor(DEBUG):
        log(transition)
    for listener in listeners:
        listener(transition)


# What a model step gets if its recorded answer were not one (it always is: we wrote it).
_MISSING: Final = RecordedException("Missing", "no answer was recorded for this step")


# pending, decide, cancel_run and cancel_requested are defined in agentloop._dbos: named as ours.


def same_team(loop: Loop, made: dict[str, Any]) -> None:
    """``ValueError`` for a Loop whose handoffs changed since its DBOSLoop was made (``made``)."""
    if team_record(loop) != made.get("agents"):
        raise ValueError(
            f"the handoffs of the DBOSLoop's Loop {loop.name!r} changed since the DBOSLoop "
            "was made (add_handoff after DBOSLoop(...)): make the team first, then the DBOSLoop"
        )
