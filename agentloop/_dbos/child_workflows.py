"""A DBOSLoop's agent tools: the child run of each agent call is a DBOS child workflow.

The child that answers call ``k`` of run ``r`` is the ``agentloop.run``
workflow ``child_run_id(r, k)``, of a DBOSLoop of the agent tool's Loop that
the parent's made with itself, named ``f"{name}/{tool}"`` (in a team,
``f"{name}/{agent}/{tool}"``; grandchildren's below theirs): every worker
that makes the parent can drive the child, and recover it. The parent's
workflow starts it (DBOS records it as the parent's child: a recovery of
the parent gets the same handle back, and never starts it again) and awaits
its result (which DBOS records in the parent too; a fork of the parent
awaits a child of its own, ``forks.py``). The call is answered
from that result as a run in memory answers it (the agent tool's own
``_answer``), in an ``agentloop.tool`` step that records the outcome, with
the child's usage, and the cancel marker read after it.

The child's hand-out is a workflow input, so it is recorded: the token
limit it starts with (what the parent had left), and its lineage, the
calls above it (each run's id, call id and counters at the hand-out). Its
steps read its ancestors' cancel markers as well as its own (each
ancestor's id as its own id names it), and its
worker makes its deps again from the lineage: the top run's provider's, each
agent tool's ``deps=`` applied on the way down (``child_deps``).

A child whose policy asks a person waits in its own workflow, as any run
does (``decisions.py``), while its parent's workflow waits for its result:
the parent's ``pending`` and ``decide`` reach it by its derived id.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import attrs
from dbos import DBOS, SetWorkflowID
from dbos import error as dbos_error

from agentloop._core.approval import Decision
from agentloop._core.values import Budget, CancelToken, RunResult, Usage
from agentloop._dbos.forks import forked_result
from agentloop._dbos.loops import refuse_taken
from agentloop._dbos.marker import cancelled
from agentloop._drivers.callbacks import TokenCancelled
from agentloop._drivers.run_context import CallScope, RunContext, in_context, key_of
from agentloop._durable.bodies import outcome_record, recorded_outcome
from agentloop._durable.ids import child_call_id, child_run_id
from agentloop._errors import AgentloopError
from agentloop._loop.agent_tool import AgentTool
from agentloop._loop.deps import for_run
from agentloop._tools.registry import ToolRegistry

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop._dbos.dbos_loop import DBOSLoop
    from agentloop._dbos.steps import StepRunner
    from agentloop._loop.loop import Loop

__all__ = ["AgentCalls", "Handout", "child_deps", "driven_with", "markers"]

#: A child workflow's hand-out (a workflow input): ``lineage``, the calls above it (the top
#: run's first), each ``{"run", "call", "steps", "calls", "usage", "budget"}``; and
#: ``max_total_tokens``, the token limit it starts with.
Handout = dict[str, Any]


class AgentCalls:
    """The agent tools of a DBOSLoop: the DBOSLoops of their Loops, and their calls' work.

    With handoffs, every agent's agent tools: a child's DBOSLoop is then named
    ``f"{name}/{agent}/{tool}"`` (one tool that two agents have: the first's).
    ``caller``: for a child's DBOSLoop, the parent's and the agent tool whose
    calls it runs (``None`` for a top one).
    """

    __slots__ = ("_agents", "_children", "_loop", "_workflow", "caller")

    def __init__(self, loop: DBOSLoop[Any], workflow: Callable[..., Any]) -> None:
        self._loop, self._workflow = loop, workflow
        self.caller: tuple[DBOSLoop[Any], AgentTool] | None = None
        # By the agent tool's id (each child's caller holds its tool: the id stays its own).
        self._children: dict[int, DBOSLoop[Any]] = {}
        # Each agent's Loop, by name (``None``: the Loop's own, without handoffs).
        team = loop._team
        self._agents: dict[str | None, Loop[Any, Any]] = {None: loop.loop}
        if team is not None:
            self._agents = {}
            for name, each in team[1].items():
                self._agents[name] = each
        making: set[int] = _MAKING.__dict__.setdefault("loops", set())
        making.add(id(loop.loop))
        try:
            for agent, member in self._agents.items():
                for tool in _agent_tools(member.dispatcher):
                    if id(tool) in self._children:  # in two agents' tools: the first's child
                        continue
                    _refuse_recursion(tool, making)
                    # Given by the tool's deps=(ctx) when it has one: checked when it runs.
                    provider = loop._deps if tool._deps is None else _mapped
                    under = tool.name if agent is None else f"{agent}/{tool.name}"
                    refuse_taken(f"{loop.name}/{under}", child_of=(loop.name, tool.name))
                    child = type(loop)(tool.loop, name=f"{loop.name}/{under}", deps=provider)
                    child._agents.caller = (loop, tool)
                    self._children[id(tool)] = child
        except BaseException:
            self.close()
            raise
        finally:
            making.discard(id(loop.loop))

    def fingerprints(self) -> dict[str, Any]:
        """Each child DBOSLoop's fingerprint (its own children's within), by its name below."""
        below = len(self._loop.name) + 1
        return {child.name[below:]: child._fingerprint for child in self._children.values()}

    def close(self) -> None:
        """Forget the children's DBOSLoops (and theirs) in this process."""
        for child in self._children.values():
            child.close()

    def in_flight(self) -> list[str]:
        """The ids of the children's (and their children's) runs driven in this process."""
        return [run for child in self._children.values() for run in child._in_flight()]

    def answers(self, call: dict[str, Any], scope: CallScope) -> bool:
        """Whether ``call`` is an agent tool's (the agent in force's): its child is a workflow."""
        tool = _tool_of(self._in_force(scope).dispatcher, call["name"])
        return tool is not None and id(tool) in self._children

    def _in_force(self, scope: CallScope) -> Loop[Any, Any]:
        """The Loop of the agent in force, whose tools a call is of."""
        return self._agents[None if None in self._agents else scope.engine.agent]

    def call(
        self,
        call: dict[str, Any],
        decision: dict[str, Any] | None,
        scope: CallScope,
        steps: StepRunner,
        step: Any,
        watched: tuple[str, ...],
    ) -> dict[str, Any]:
        """The agent call's outcome: dispatched here, its child a child workflow, then recorded.

        The registry checks the arguments and applies ``decision`` as for any
        call, in the workflow: what it reads is recorded (the call, the review)
        or DBOS's (the child's start and result), so a recovery makes the same
        outcome. The ``step`` records it (or that the child ended cancelled,
        which ends the run ``cancelled``, as in memory) with the marker read
        after it. An error of DBOS's own raises, the call unanswered.
        """
        dispatch = in_context(self._in_force(scope).dispatcher.dispatch, [], scope)
        answer: dict[str, Any]
        try:
            if decision is None:
                got = dispatch(call)
            else:  # what the review (or a person) answered, as recorded
                got = dispatch(call, decision=Decision(**decision))
        except TokenCancelled as exc:  # the child ended cancelled: the cancel wins
            answer = {"cancelled": str(exc)}
        else:
            unanswered = got.get("exception")
            if type(unanswered) is _Unanswered:
                raise unanswered.cause
            answer = outcome_record(got)[0]
            if "usage" in got:
                answer["usage"] = got["usage"]
        recorded = steps.run(step, _answered, answer, watched)
        if recorded.pop("cancel"):
            assert scope.cancel is not None, "a workflow has its token"
            scope.cancel.cancel()  # the checkpoint before the next tool or model ask
        if "cancelled" in recorded:
            raise TokenCancelled(recorded["cancelled"])
        usage = recorded.pop("usage", None)
        outcome = recorded_outcome(recorded)
        assert outcome is not None, recorded
        if usage is not None:
            outcome["usage"] = usage
        return outcome

    def runner(self, lineage: list[dict[str, Any]]) -> Callable[..., RunResult[Any]]:
        """``CallScope.run_child`` for a run with ``lineage`` (its own hand-out's; ``[]``: top)."""

        def run_child(tool: AgentTool, input: str, ctx: RunContext[Any]) -> RunResult[Any]:
            return self._run_child(lineage, tool, input, ctx)

        return run_child

    def _run_child(
        self, lineage: list[dict[str, Any]], tool: AgentTool, input: str, ctx: RunContext[Any]
    ) -> RunResult[Any]:
        """Start the child workflow of the call ``ctx`` (or get its handle back); its result."""
        child = self._children.get(id(tool))
        if child is None:
            raise AgentloopError(
                f"agent tool {tool.name!r} was added to the Loop after its DBOSLoop "
                f"{self._loop.name!r} was made: make the DBOSLoop with every tool it will have"
            )
        run_id, call_id = str(ctx.run_id), str(ctx.call_id)
        child_id, history = child._checked(input, child_run_id(run_id, call_id), derived=True)
        handed = {
            "run": run_id,
            "call": call_id,
            "steps": ctx.steps,
            "calls": ctx.calls,
            "usage": list(ctx.usage),
            "budget": None if ctx.budget is None else attrs.asdict(ctx.budget),
        }
        handout: Handout = {
            "lineage": [*lineage, handed],
            "max_total_tokens": tool.child_budget(ctx).max_total_tokens,
        }
        try:
            with SetWorkflowID(child_id):
                handle = DBOS.start_workflow(
                    self._workflow, child.name, history, child._fingerprint, handout
                )
        except Exception as exc:
            raise _Unanswered(exc) from exc
        # DBOS's own error raises past the registry; any other is the child's: the call's error.
        try:
            if handle.workflow_id == child_id:
                result: RunResult[Any] = handle.get_result()
            else:  # a fork of the run from after the child started: DBOS gave the original's
                result = forked_result(handle.workflow_id, call_id, markers(run_id, lineage))
        except dbos_error.DBOSException as exc:
            raise _Unanswered(exc) from exc
        return result


def driven_with(
    loop: DBOSLoop[Any], run_id: str, handout: Handout | None, token: CancelToken
) -> tuple[object, Budget | None, tuple[str, ...], list[dict[str, Any]]]:
    """What run ``run_id`` of ``loop`` is driven with: its deps, budget, markers and lineage.

    A top run (no ``handout``): its provider's deps, the Loop's budget, its own
    marker. A child: the deps its parents' calls give it (``child_deps``,
    checked against its tools as in memory: a ``TypeError`` fails its
    workflow, and so answers the call with an error), its token limit, and
    its own and its ancestors' markers, nearest first.
    """
    if handout is None:
        return None if loop._deps is None else loop._deps(run_id), None, (run_id,), []
    # Each ancestor's id as the run's own id names it: a fork's child (``forks``), forked
    # from a child of another run, was handed out by the fork. Above an id that names none
    # (DBOS's fork of a child, under an id of its own), as the hand-out recorded them.
    lineage: list[dict[str, Any]] = []
    above: str | None = run_id
    for handed in reversed(handout["lineage"]):
        if above is not None:
            parent = above.rpartition(":")[0]
            above = parent if parent and child_call_id(parent, above) == handed["call"] else None
        lineage.insert(0, handed if above is None else {**handed, "run": above})
    budget = attrs.evolve(loop.loop.budget, max_total_tokens=handout["max_total_tokens"])
    watched = markers(run_id, lineage)
    deps = child_deps(loop, run_id, lineage, token)
    for_run(loop.loop, deps, token)
    return deps, budget, watched, lineage


def markers(run_id: str, lineage: list[dict[str, Any]]) -> tuple[str, ...]:
    """The cancel markers run ``run_id`` reads: its own, then its ancestors', nearest first."""
    return (run_id, *(handed["run"] for handed in reversed(lineage)))


def child_deps(
    loop: DBOSLoop[Any], run_id: str, lineage: list[dict[str, Any]], token: CancelToken
) -> object:
    """The deps of run ``run_id`` of ``loop``, as its parents' calls gave them.

    A top run's are its provider's (``provider(run_id)``). A child's are its
    parent's, or its agent tool's ``deps=(ctx)`` of them, ``ctx`` the parent
    call's context as handed out (its counters and budget as recorded, its
    token the child's).
    """
    caller = loop._agents.caller
    if caller is None or not lineage:
        return None if loop._deps is None else loop._deps(run_id)
    parent, tool = caller
    *above, handed = lineage
    deps = child_deps(parent, handed["run"], above, token)
    if tool._deps is None:
        return deps
    ctx: RunContext[Any] = RunContext(
        deps=deps,
        run_id=handed["run"],
        call_id=handed["call"],
        tool=tool.name,
        idempotency_key=key_of(handed["run"], handed["call"]),
        steps=handed["steps"],
        calls=handed["calls"],
        usage=Usage(*handed["usage"]),
        budget=None if handed["budget"] is None else Budget(**handed["budget"]),
        cancel=token,
    )
    return tool._deps(ctx)


#: The Loops whose DBOSLoops this thread is making (by id): each makes its children's first.
_MAKING = threading.local()


def _refuse_recursion(tool: AgentTool, making: set[int]) -> None:
    """``ValueError`` for an agent tool that runs a Loop whose DBOSLoop is being made above it.

    Its child DBOSLoop would make that Loop's children again, without end.
    """
    if id(tool.loop) in making:
        raise ValueError(
            f"DBOSLoop: agent tool {tool.name!r} runs the Loop {tool.loop.name!r}, which is "
            "its own caller or one above it (an agent that calls itself, by a tool or through "
            "its team): a DBOSLoop names a child DBOSLoop for each agent tool at each level, "
            "so it cannot make one for a Loop that recurses: run it without DBOS, or "
            "give the agent tool a Loop that does not call back up"
        )


def _agent_tools(dispatcher: object) -> list[AgentTool]:
    """The agent tools of ``dispatcher`` (a registry's; none for a dispatcher of one's own)."""
    tools = dispatcher if isinstance(dispatcher, ToolRegistry) else ()
    return [tool for tool in tools if isinstance(tool, AgentTool)]


def _tool_of(dispatcher: object, name: str) -> object:
    """The tool named ``name`` of ``dispatcher``, if it is a registry that has one."""
    return dispatcher.get(name) if isinstance(dispatcher, ToolRegistry) else None


def _answered(answer: dict[str, Any], watched: tuple[str, ...]) -> dict[str, Any]:
    """The ``agentloop.tool`` step of an agent call: its outcome, and the marker read after it."""
    return {**answer, "cancel": cancelled(watched)}


def _mapped(run_id: str) -> object:
    """A child DBOSLoop's provider when its agent tool maps the deps (never called)."""
    raise AssertionError("a child's deps are made by child_deps")


class _Unanswered(Exception):
    """DBOS's own error in an agent call (its ``cause``): raised past the registry, unanswered."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause
