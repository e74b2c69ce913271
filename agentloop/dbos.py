"""agentloop.dbos: durable runs as DBOS workflows, served by any number of worker processes.

A run is a DBOS workflow whose workflow id is the run id. The workflow is a
driver like ``Run``: a short loop over the engine's protocol (``next()``,
then ``replied``/``raised``/``returned``), where what comes from outside is
a DBOS step, so DBOS records it before the engine takes it:

* ``agentloop.model``: each model call, with its reply (or what the model
  raised) as the step's output: recovery never asks the model again;
* ``agentloop.tool``: each call's outcome (the dispatcher, so the handler,
  runs inside it).

After a crash, DBOS runs the workflow again from the top in a worker; every
step it recorded returns its recorded output instead of running, so a fresh
engine is fed the same inputs and makes the same transitions (the engine
reads nothing else from outside, bar a clock for durations). The first step
that was not recorded runs live.

DBOS records a step only once it has completed, so a crash after a tool's
effect and before its step was recorded would run it again. Each step's
output names the execution (the process's run of the workflow) that
recorded it. A call's step is preceded by a step of its run (the reply that
asked for it, the previous call's outcome, or the policies' review), whose
record marks the call started: when that step was recorded by another
execution, a process that died, and the call's own step was not, that
process may have started the call. The call's step then does not call the
handler: the result is the SQLite ledger's outcome-unknown ``error``
(``OUTCOME_UNKNOWN``), unless the tool is idempotent (``Tool(...,
idempotent=True)``), which is run again under the same idempotency key
(``agentloop.idempotency_key()``). A batch that waited for a person took
its decisions by message, not by a step: an ``agentloop.tool_started`` step
marks its start.

Cancellation (``cancel(run_id)``, from any process) is a marker: a tiny
workflow whose id is derived from the run id. The steps read whether it
exists, by its key, and return that with their output, so the decision is
recorded with the step and a recovery replays it at the same checkpoint:
before the first model ask and right after each reply (the model step reads
it), before each tool and before each later ask (the step before reads it,
once its work is done). A run waiting for a person also gets it as a message.

Human approval: when the loop's tools have policies, an ``agentloop.review``
step asks them about each batch before its first call (each policy once).
If one asks, the run waits in ``awaiting_approval``: it publishes its
pending calls as a DBOS event (``pending(run_id)`` reads them from any
process) and waits in ``DBOS.recv`` for the decisions ``decide(run_id,
...)`` sends from any process. Both are durable: a worker that dies while
the run waits leaves it waiting, and the worker that recovers it takes the
decisions.

Needs the ``dbos`` extra; importing this module without it raises an
``ImportError`` that says so. Import it before ``DBOS.launch()``: it
registers its two workflows (``agentloop.run`` and ``agentloop.cancel``).
"""

from __future__ import annotations

import contextlib
import functools
from logging import DEBUG
from typing import TYPE_CHECKING, Any, Final
from uuid import uuid4

import attrs

try:
    import sqlalchemy as sa
    from dbos import DBOS, SetWorkflowID
    from dbos._dbos import _get_dbos_instance
    from dbos._error import DBOSNonExistentWorkflowError
    from dbos._utils import INTERNAL_QUEUE_NAME
except ImportError as exc:
    raise ImportError(
        "agentloop.dbos needs DBOS Transact: pip install 'agentloop-fsm[dbos]'"
    ) from exc


from agentloop._callbacks import TokenCancelled
from agentloop._core._approval import Decision, PendingCall
from agentloop._core._context import Summarise
from agentloop._core._engine import (
    Engine,
    check_decisions,
)
from agentloop._core._json import exception_content
from agentloop._core._table import State
from agentloop._core._values import (
    AskModel,
    CancelToken,
    RecordedException,
    ReviewCalls,
    RunResult,
    RunTool,
    Transition,
    Wait,
)
from agentloop._durable._bodies import (
    outcome_record,
    raised_record,
    recorded_answer,
    recorded_outcome,
    reply_record,
)
from agentloop._durable._journal import OUTCOME_UNKNOWN, fingerprint, idempotent_tools
from agentloop._durable._key import KEY
from agentloop._durable._resume import checked_run_id, differences, mismatch
from agentloop._errors import AgentloopError, InvalidStateError
from agentloop._loop import Loop
from agentloop._run import LOG, log, one_transition
from agentloop._streams import is_stream, whole_reply
from agentloop._tools._registry import PreparedCall, reviewing

if TYPE_CHECKING:
    from dbos import DBOSClient, EnqueueOptions, Queue, WorkflowHandle

    from agentloop._callbacks import Listener

__all__ = [
    "APPROVAL_TOPIC",
    "PENDING_EVENT",
    "STEPS",
    "DBOSLoop",
    "cancel",
    "cancel_requested",
    "decide",
    "pending",
]

#: The names of the DBOS steps a run records: per reply, after a batch waited for a person,
#: per call, per batch whose tools have policies.
STEPS: Final = (
    "agentloop.model",
    "agentloop.tool_started",
    "agentloop.tool",
    "agentloop.review",
)
_MODEL: Final[Any] = {"name": STEPS[0]}
_STARTED: Final[Any] = {"name": STEPS[1]}
_TOOL: Final[Any] = {"name": STEPS[2]}
_REVIEW: Final[Any] = {"name": STEPS[3]}
# The key of a step's output that names the execution that recorded it.
_BY: Final = "by"
#: The ``DBOS.recv`` topic a waiting run takes its decisions (and cancellation) on.
APPROVAL_TOPIC: Final = "agentloop.approval"
#: The DBOS event a waiting run publishes its pending calls on (empty once decided).
PENDING_EVENT: Final = "agentloop.pending"
# How long one wait for decisions lasts before it is begun again (each is recorded).
_WAIT_SECONDS: Final = 3600.0
_CANCEL_PREFIX: Final = "agentloop.cancel:"

#: The DBOSLoops of this process, by name: what a run's workflow is driven with.
_LOOPS: dict[str, DBOSLoop] = {}


class DBOSLoop:
    """A ``Loop`` whose runs are DBOS workflows: durable, queueable, recovered by any worker.

    ``name`` identifies the loop across processes: every worker that may
    serve its runs (or recover them) makes a ``DBOSLoop`` of that name with
    the same configuration. A run records the loop's fingerprint (budgets,
    tool names and schemas, as the SQLite ledger does); a worker whose loop
    differs refuses to drive it (``ConfigurationMismatchError``). The
    ``Loop`` must have no ledger (DBOS is the ledger here) and must not need
    the asyncio driver: the workflow drives the engine synchronously.

    Listeners (``Loop(listeners=...)``) hear each transition as the workflow
    makes it, in whichever process drives it (which logs it at DEBUG, as a
    ``Run`` does): after a recovery, the replayed transitions too.
    """

    def __init__(self, loop: Loop, *, name: str) -> None:
        if not isinstance(loop, Loop):
            raise TypeError(f"expected loop to be an agentloop.Loop, got {type(loop).__name__}")
        if type(name) is not str or not name:
            raise TypeError(f"expected name to be a non-empty str, got {name!r:.80}")
        if loop.ledger is not None:
            raise ValueError(
                "a DBOSLoop's runs are recorded by DBOS: make its Loop without a ledger"
            )
        loop._sync_driver("a DBOSLoop drives its runs synchronously, inside a DBOS workflow")
        if name in _LOOPS:
            raise ValueError(f"a DBOSLoop named {name!r} exists in this process already")
        self.loop, self.name = loop, name
        self._fingerprint = fingerprint(loop.budget, loop.dispatcher, loop.context, loop.output)
        self._idempotent = idempotent_tools(loop.dispatcher)
        _LOOPS[name] = self

    def __repr__(self) -> str:
        return f"DBOSLoop({self.loop!r}, name={self.name!r})"

    def close(self) -> None:
        """Forget this loop in this process: its name can be used again."""
        if _LOOPS.get(self.name) is self:
            del _LOOPS[self.name]

    # -- starting runs ------------------------------------------------------------------

    def start(
        self, messages: str | list[dict[str, Any]], *, run_id: str | None = None
    ) -> WorkflowHandle[RunResult]:
        """Start a run in this process (a DBOS workflow with id ``run_id``); its handle.

        Bad input raises here, before anything is recorded. ``run_id`` is made
        when not given (``handle.workflow_id``). Starting an id that exists
        returns the existing run's handle (DBOS starts a workflow id once).
        """
        run_id, history = self._checked(messages, run_id)
        with SetWorkflowID(run_id):
            return DBOS.start_workflow(_run, self.name, history, self._fingerprint)

    def run(self, messages: str | list[dict[str, Any]], *, run_id: str | None = None) -> RunResult:
        """Start a run and wait for its result."""
        return self.start(messages, run_id=run_id).get_result()

    def enqueue(
        self, queue: Queue, messages: str | list[dict[str, Any]], *, run_id: str | None = None
    ) -> WorkflowHandle[RunResult]:
        """Put a run on a DBOS ``Queue``: a worker process serving that queue drives it."""
        run_id, history = self._checked(messages, run_id)
        with SetWorkflowID(run_id):
            return queue.enqueue(_run, self.name, history, self._fingerprint)

    def client_enqueue(
        self,
        client: DBOSClient,
        queue_name: str,
        messages: str | list[dict[str, Any]],
        *,
        run_id: str | None = None,
    ) -> WorkflowHandle[RunResult]:
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
        self, messages: str | list[dict[str, Any]], run_id: str | None
    ) -> tuple[str, list[dict[str, Any]]]:
        if run_id is None:
            run_id = uuid4().hex
        elif type(run_id) is not str or not run_id:
            raise TypeError(f"expected run_id to be a non-empty str, got {run_id!r:.80}")
        else:
            checked_run_id(run_id, new=True)  # text, and no ':' (the idempotency key's)
        if _LOOPS.get(self.name) is not self:
            raise ValueError(f"this DBOSLoop ({self.name!r}) was closed")
        messages = self.loop._input(messages)  # as Loop.start takes a new run's input
        history = Engine(messages, budget=self.loop.budget).history()  # bad input raises
        return run_id, history

    # -- the workflow's body: the driver ------------------------------------------------

    def _drive(self, history: list[dict[str, Any]], recorded: dict[str, Any]) -> RunResult:
        """The run, as a DBOS workflow: the one transition pumped, each request a DBOS step.

        ``Run`` and ``AsyncRun`` pump the same generator (``agentloop._run``);
        here a model ask, a tool call and a review are steps whose recorded
        outputs a recovery reads back, and a wait (before a retry, or for a
        person) is a durable ``DBOS.recv``.
        """
        run_id = DBOS.workflow_id
        assert run_id is not None, "a run is driven inside its workflow"
        found = differences(recorded, self._fingerprint)
        if found:
            raise mismatch(run_id, found)
        token = CancelToken()
        engine = self._engine(history, token)
        listeners = self.loop.listeners
        # Each step's output says which execution recorded it: the last one's tells whether
        # this execution recorded it (it drove the run up to here) or replayed it (a process
        # that died did, and may have started the call that comes next).
        steps = _Steps(uuid4().hex[:16])
        while not engine.done:
            pumped = one_transition(engine)
            try:
                need = pumped.send(None)
                while True:
                    try:
                        answer = self._perform(need, engine, token, steps, run_id)
                    except (Exception, TokenCancelled) as exc:  # noqa: BLE001 - thrown in: the engine says
                        need = pumped.throw(exc)
                    else:
                        need = pumped.send(answer)
            except StopIteration as stop:
                made: Transition | None = stop.value
            except _Unasked:  # cancelled before the first ask: nothing happened yet
                engine = self._engine(history, token)
                continue
            if made is None:  # the batch waits for a person: decisions come by message
                made = _wait(engine, token, engine.pending)
                # No step of ours took them: a step marks the batch's start.
                if not engine.done and steps.run(_STARTED, _started, run_id).pop("cancel"):
                    token.cancel()  # the checkpoint before the batch's first call
            _tell(listeners, made)
        return engine.result()

    def _engine(self, history: list[dict[str, Any]], token: CancelToken) -> Engine:
        """A fresh engine for the run, configured as the Loop is."""
        loop = self.loop
        engine = Engine(
            history,
            budget=loop.budget,
            cancel=token,
            context=loop.context,
            retry=loop.retry,
            models=loop._model_names,
            output=loop.output,
        )
        engine.reviews = reviewing(loop.dispatcher) is not None
        return engine

    def _perform(
        self, need: object, engine: Engine, token: CancelToken, steps: _Steps, run_id: str
    ) -> object:
        """Do what the engine asked, as a DBOS step; what the step recorded is the answer.

        A step's ``cancel`` is the marker, read at the checkpoint it records.
        """
        if isinstance(need, Wait):  # before a retry: cancel(run_id) cuts it short (its message)
            message = DBOS.recv(APPROVAL_TOPIC, timeout_seconds=need.seconds)
            if type(message) is dict and message.get("cancel"):
                token.cancel()  # the table's waited [cancel_requested] row ends the run
            return None
        if isinstance(need, ReviewCalls):
            answer = steps.run(_REVIEW, self._review, run_id, need.calls)
            if answer["cancel"]:
                token.cancel()  # the checkpoint before the batch's first call
            return {call_id: _verdict(data) for call_id, data in answer["answers"].items()}
        if isinstance(need, RunTool):
            verdict = need.review if need.decision is None else need.decision
            if isinstance(verdict, dict):  # a policy failed: the review recorded the outcome
                return verdict
            recorded = verdict.record() if isinstance(verdict, Decision) else None
            again = steps.replayed()
            outcome = steps.run(_TOOL, self._call, run_id, need.call, again, recorded)
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
                self._ask,
                run_id,
                need.history,
                engine.model_index,
                engine.retries(),
                need.options,
                not engine.events(),
            )
        else:  # Summarise: a model step too, of the context policy's own model callback
            assert isinstance(need, Summarise), need
            answer = steps.run(_MODEL, self._summarise, run_id, need.history)
        if answer.pop("cancel"):
            token.cancel()  # right after the reply (or, the first, before the ask)
        if "unasked" in answer:
            raise _Unasked
        kind, value = recorded_answer(answer) or ("raised", _MISSING)
        if kind == "raised":
            raise value  # with the wait the step chose: the engine takes it as recorded
        return value

    def _ask(
        self,
        run_id: str,
        history: list[dict[str, Any]],
        model: int = 0,
        retries: int = 0,
        options: dict[str, Any] | None = None,
        first: bool = False,
    ) -> dict[str, Any]:
        """The ``agentloop.model`` step: the model's reply (or what it raised), as data.

        ``model``: which fallback model to ask; ``retries``: the retries of this
        ask made so far. The wait before a retry is chosen here, in the step
        (the policy's jitter is random): a recovered workflow reads it back.
        ``options`` are the request's (``tool_choice='none'`` in the wrap-up step).
        ``first``: the run's first ask, before which the marker is read too.
        """
        if first and cancel_requested(run_id):
            return {"cancel": True, "unasked": True}
        answer: dict[str, Any]
        bound = self.loop._bound_models[model]  # with the tools, for a model that takes them
        try:
            reply = bound(history, **(options or {}))
            if type(reply) is not dict and is_stream(reply):  # a streaming model
                reply = whole_reply(reply)  # the step records the whole reply, not the deltas
        except Exception as exc:  # noqa: BLE001 - recorded; the engine says what it means
            answer = raised_record(exc)
            policy = self.loop.retry
            wait = None if policy is None else policy.wait_for(exc, retries)
            if wait is not None:
                answer["wait"] = wait
        else:
            answer = reply_record(reply)[0]
        answer["cancel"] = cancel_requested(run_id)
        return answer

    def _summarise(self, run_id: str, history: list[dict[str, Any]]) -> dict[str, Any]:
        """(context) The ``agentloop.model`` step of a summary: its writer's reply, as data."""
        policy = self.loop.context
        assert policy is not None, "a summary is asked only under a context policy"
        assert policy.summariser is not None, "and only under summarise"
        answer: dict[str, Any]
        try:
            reply = policy.summariser(history)
        except Exception as exc:  # noqa: BLE001 - recorded; the engine says what it means
            answer = raised_record(exc)
        else:
            answer = reply_record(reply)[0]
        answer["cancel"] = cancel_requested(run_id)
        return answer

    def _review(self, run_id: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
        """The ``agentloop.review`` step: what the policies answer about each call, as data."""
        registry = reviewing(self.loop.dispatcher)
        assert registry is not None, "a batch is reviewed only when the tools have policies"
        # By call id, under a key of its own: a call's id is the model's, any string.
        answers = {call["id"]: _verdict_data(registry.review(call)) for call in calls}
        return {"answers": answers, "cancel": cancel_requested(run_id)}

    def _call(
        self, run_id: str, call: dict[str, Any], again: bool, decision: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The ``agentloop.tool`` step: the call's outcome, as data.

        ``again``: the step before this one was recorded by a process that
        died: it may have started this call, so its handler may have run.
        Only an idempotent tool runs then. ``decision``: what the policies or
        a person answered about the call at its review, if it had one.
        """
        outcome: dict[str, Any]
        if again and call["name"] not in self._idempotent:
            outcome = {"status": "error", "content": dict(OUTCOME_UNKNOWN), "exception": None}
        else:
            key = KEY.set(f"{run_id}:{call['id']}")
            try:
                if decision is None:
                    got = self.loop.dispatcher.dispatch(call)
                else:  # only a registry's calls are reviewed
                    got = self.loop.dispatcher.dispatch(call, decision=Decision(**decision))  # type: ignore[call-arg]
            except Exception as exc:  # noqa: BLE001 - recorded; the engine says what it means
                outcome = {"raised": exception_content(exc)}
            else:
                outcome = outcome_record(got)[0]
            finally:
                KEY.reset(key)
        outcome["cancel"] = cancel_requested(run_id)
        return outcome


class _Steps:
    """Runs a run's DBOS steps, each output stamped with the execution that recorded it."""

    __slots__ = ("_execution", "_last")

    def __init__(self, execution: str) -> None:
        self._execution = execution
        self._last: str | None = None  # who recorded the last step; None before the first

    def run(self, step: Any, function: Any, *args: Any) -> dict[str, Any]:
        """Step ``function(*args)``: its output (a dict), recorded or replayed."""
        output: dict[str, Any] = DBOS.run_step(step, self._stamped, function, *args)
        self._last = output.pop(_BY)
        return output

    def replayed(self) -> bool:
        """Whether the last step was recorded by another execution (a process that died)."""
        return self._last is not None and self._last != self._execution

    def _stamped(self, function: Any, *args: Any) -> dict[str, Any]:
        output: dict[str, Any] = function(*args)
        output[_BY] = self._execution
        return output


class _Unasked(BaseException):
    """The run was cancelled before its first ask: nothing happened, and it begins again."""


def _tell(listeners: tuple[Listener, ...], transition: Transition) -> None:
    """Log ``transition`` at DEBUG and tell the listeners, as ``Run`` does."""
    if LOG.isEnabledFor(DEBUG):
        log(transition)
    for listener in listeners:
        listener(transition)


def _wait(engine: Engine, token: CancelToken, waiting: tuple[PendingCall, ...]) -> Transition:
    """Wait (durably) for a person's decisions, or for cancellation; the transition they make.

    A message that is not a valid decision for every pending call is dropped
    (``decide`` checks them before it sends): the run waits on.
    """
    DBOS.set_event(PENDING_EVENT, [call.record() for call in waiting])
    while True:
        message = DBOS.recv(APPROVAL_TOPIC, timeout_seconds=_WAIT_SECONDS)
        if type(message) is not dict:
            continue  # the wait timed out (None), or not a message of ours
        if message.get("cancel"):
            token.cancel()
            transition = engine.next()  # the cancel row: every call answered, none run
            assert isinstance(transition, Transition), transition
            break
        try:
            decisions = {
                call_id: Decision(**data) for call_id, data in message["decisions"].items()
            }
            transition = engine.decided(decisions)
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
        break
    DBOS.set_event(PENDING_EVENT, [])
    return transition


def pending(
    run_id: str, *, timeout_seconds: float = 0.0, client: DBOSClient | None = None
) -> tuple[PendingCall, ...]:
    """The calls run ``run_id`` waits for a person to decide (none when it does not wait).

    From any process with DBOS launched, or through ``client`` (a
    ``DBOSClient``). ``timeout_seconds``: how long to wait for a run that has
    not published them yet.
    """
    via: Any = DBOS if client is None else client
    found = via.get_event(run_id, PENDING_EVENT, timeout_seconds)
    return tuple(PendingCall.from_record(data) for data in found or ())


def decide(
    run_id: str, decisions: dict[str, Decision], *, client: DBOSClient | None = None
) -> None:
    """Send a person's decisions to run ``run_id``, waiting in ``awaiting_approval``.

    ``{call_id: approve() | deny(reason)}`` for every pending call, checked
    here as ``run.decide`` checks them (a missing or extra id, another call's
    fingerprint, anything but a decision raises, and nothing is sent);
    ``InvalidStateError`` when the run waits for nothing. From any process
    with DBOS launched, or through ``client``; the worker holding the run
    goes on with it.
    """
    waiting = pending(run_id, client=client)
    if not waiting:
        raise InvalidStateError(
            f"run {run_id!r} is not awaiting approval: no call of it waits for a decision "
            "(were they taken already?)",
            state=State.AWAITING_APPROVAL,
        )
    checked = check_decisions(waiting, decisions)
    via: Any = DBOS if client is None else client
    message = {"decisions": {call_id: d.record() for call_id, d in checked}}
    via.send(run_id, message, APPROVAL_TOPIC)


def _verdict_data(answer: PreparedCall | dict[str, Any]) -> dict[str, Any]:
    """A review's answer as a step records it: the policies' decision, or the call's outcome."""
    if isinstance(answer, PreparedCall):
        return {"decision": attrs.asdict(answer.decision)}  # an ask too: its asks field is kept
    return {"outcome": outcome_record(answer)[0]}


def _verdict(data: dict[str, Any] | None) -> Decision | dict[str, Any] | None:
    """The recorded review's answer about a call (``None``: no policy was asked)."""
    if data is None:
        return None
    if "decision" in data:
        return Decision(**data["decision"])
    return recorded_outcome(data["outcome"])


def _started(run_id: str) -> dict[str, Any]:
    """The ``agentloop.tool_started`` step, after a batch waited for a person: its start.

    The decisions came by message, which is no step of ours; this step's
    record marks the batch's first call as started.
    """
    return {"cancel": cancel_requested(run_id)}


# What a model step gets if its recorded answer were not one (it always is: we wrote it).
_MISSING: Final = RecordedException("Missing", "no answer was recorded for this step")


@DBOS.workflow(name="agentloop.run")
def _run(name: str, history: list[dict[str, Any]], recorded: dict[str, Any]) -> RunResult:
    """A run of the DBOSLoop ``name``: its workflow id is the run id."""
    loop = _LOOPS.get(name)
    if loop is None:
        raise AgentloopError(
            f"run {DBOS.workflow_id!r} belongs to the DBOSLoop {name!r}, and this process has "
            f"none of that name (it has {sorted(_LOOPS)}): make it before DBOS.launch() in "
            "every worker process"
        )
    return loop._drive(history, recorded)


@DBOS.workflow(name="agentloop.cancel")
def _cancel_marker(run_id: str) -> str:
    """The marker that cancels run ``run_id``: that it exists is the request."""
    return run_id


def cancel(run_id: str, *, client: DBOSClient | None = None) -> None:
    """Cancel run ``run_id``; idempotent.

    From any process with DBOS launched, or through ``client`` (a
    ``DBOSClient``). The request is kept in the database: it outlives a
    crash of the run's worker. The run ends ``cancelled`` at its next
    checkpoint: before its next model ask (or its first), right after a
    reply, or before its next tool, with every call of its batch answered.
    A run that ended already is unchanged. (``DBOS.cancel_workflow`` stops
    a workflow where it is instead: the run then has no result, and a call
    cut off has no answer.)
    """
    if type(run_id) is not str or not run_id:
        raise TypeError(f"expected run_id to be a non-empty str, got {run_id!r:.80}")
    marker = _CANCEL_PREFIX + run_id
    if client is None:
        with SetWorkflowID(marker):
            DBOS.start_workflow(_cancel_marker, run_id)
    else:
        # The marker's row exists (and cancels) once enqueued; any worker runs it to its end
        # from DBOS's own queue, which every launched process serves.
        options: EnqueueOptions = {
            "workflow_name": "agentloop.cancel",
            "queue_name": INTERNAL_QUEUE_NAME,
            "workflow_id": marker,
        }
        client.enqueue(options, run_id)
    # A run waiting for a person waits in recv, where no step reads the marker.
    via: Any = DBOS if client is None else client
    with contextlib.suppress(DBOSNonExistentWorkflowError):  # not started yet: the marker does
        via.send(run_id, {"cancel": True}, APPROVAL_TOPIC)


def cancel_requested(run_id: str, *, client: DBOSClient | None = None) -> bool:
    """Whether ``cancel(run_id)`` was called (read live, where a step records it).

    Through ``client`` in a process that does not launch DBOS.
    """
    if client is None:
        return _exists(_CANCEL_PREFIX + run_id)
    try:
        client.retrieve_workflow(_CANCEL_PREFIX + run_id)
    except DBOSNonExistentWorkflowError:
        return False
    return True


def _exists(workflow_id: str) -> bool:
    """Whether workflow ``workflow_id`` exists: one read of its key, on DBOS's own engine.

    DBOS has no public read this small: ``DBOS.get_workflow_status`` loads the
    whole row (inputs and output too) at about three times the CPU, and a run
    reads its marker at every checkpoint. Where DBOS's system database is not
    as this expects, the public read.
    """
    try:
        system = _get_dbos_instance()._sys_db
        statement = _key_read(system)
    except Exception:  # noqa: BLE001 - DBOS's insides are not as expected: its public read
        return DBOS.get_workflow_status(workflow_id) is not None
    with system.engine.connect() as connection:
        if connection.dialect.name == "postgresql":
            # One statement outside a transaction: no BEGIN or ROLLBACK round trip around it.
            # (Not on SQLite, where DBOS sets each connection's own isolation level, which
            # the reset after AUTOCOMMIT would replace.)
            connection.execution_options(isolation_level="AUTOCOMMIT")
        found = connection.execute(statement, {"workflow_id": workflow_id}).first()
    return found is not None


@functools.lru_cache(maxsize=4)
def _key_read(system: Any) -> Any:
    """The statement that reads a workflow's id by its key, made once a system database."""
    table = system.tables.workflow_status
    where = system._wf(table, sa.bindparam("workflow_id"))
    return sa.select(table.c.workflow_uuid).where(*where)
