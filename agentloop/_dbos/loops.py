"""The DBOSLoops of this process, by name, and the run workflow that finds its DBOSLoop.

A run's workflow names its DBOSLoop; every worker makes the same DBOSLoops
under the same names, so whichever drives (or recovers) the run finds it
here. A DBOSLoop's name is taken once per process; a DBOSLoop closed while a
run of it is driven here would leave that run without its child DBOSLoops,
so the close is refused.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from dbos import DBOS

from agentloop._errors import AgentloopError, RunBusyError

if TYPE_CHECKING:
    from collections.abc import Callable

    from dbos import WorkflowHandle

    from agentloop._core.values import RunResult
    from agentloop._dbos.child_workflows import Handout
    from agentloop._dbos.dbos_loop import DBOSLoop

__all__ = ["LOOPS", "forget", "refuse_taken", "run_workflow", "started_here"]

#: The DBOSLoops of this process, by name: what a run's workflow is driven with.
LOOPS: dict[str, DBOSLoop[Any]] = {}
#: Held while a run's workflow finds its DBOSLoop and while a DBOSLoop closes: every run
#: found before a close is one the close sees.
_FOUND = threading.RLock()


def refuse_taken(name: str, child_of: tuple[str, str] | None = None) -> None:
    """``ValueError`` if a DBOSLoop of this process is named ``name``, saying whose it is.

    ``child_of``: the names of the DBOSLoop being made and of its agent tool,
    whose child DBOSLoop ``name`` would be.
    """
    taken = LOOPS.get(name)
    if taken is None:
        return
    caller = taken._agents.caller
    if child_of is not None:
        owner_name, tool_name = child_of
        whose = (
            f"the DBOSLoop {owner_name!r} names the child DBOSLoop of its agent tool "
            f"{tool_name!r} so; expected a name for it whose children's names no DBOSLoop "
            f"of this process has, got {owner_name!r}"
        )
    elif caller is None:
        whose = "give the new one another name"
    else:  # a child DBOSLoop: its owner made it under a name derived from its own
        owner, tool = caller
        agent = name[len(owner.name) + 1 :].rpartition("/")[0]
        of = f" of its agent {agent!r}" if agent else ""
        whose = (
            f"it is the child DBOSLoop that the DBOSLoop {owner.name!r} made for its agent "
            f"tool {tool.name!r}{of}; expected a name no DBOSLoop of this process has, "
            f"got {name!r}"
        )
    raise ValueError(f"a DBOSLoop named {name!r} exists in this process already: {whose}")


def forget(loop: DBOSLoop[Any]) -> None:
    """Forget ``loop`` and its agent tools' children: their names are free.

    ``RunBusyError`` while a run of any of them is driven in this process.
    """
    with _FOUND:
        if LOOPS.get(loop.name) is not loop:
            return
        driven = loop._in_flight()
        if driven:
            raise RunBusyError(
                f"the DBOSLoop {loop.name!r} cannot be closed while runs of it (or of its "
                f"agent tools' child DBOSLoops) are driven in this process: {driven}; "
                "let them end, or cancel them (agentloop.dbos.cancel_run), first"
            )
        del LOOPS[loop.name]
        loop._agents.close()


def started_here(
    loop: DBOSLoop[Any], run_id: str, start: Callable[[], WorkflowHandle[RunResult]]
) -> WorkflowHandle[RunResult]:
    """``start()``, the start of run ``run_id`` of ``loop``: its handle.

    A close is refused from here until the workflow DBOS drives in this
    process (in a thread of its own) has found its DBOSLoop, and then while
    it is driven: a close in between would leave it none. ``ValueError`` if
    ``loop`` was closed.
    """
    with _FOUND:
        if LOOPS.get(loop.name) is not loop:
            raise ValueError(f"this DBOSLoop ({loop.name!r}) was closed")
        loop._starting.append(run_id)

    def unclaimed(_: object = None) -> None:  # no workflow took it (run_workflow does)
        with _FOUND:
            if run_id in loop._starting:
                loop._starting.remove(run_id)

    try:
        handle = start()
    except BaseException:
        unclaimed()
        raise
    # DBOS's handle of a workflow it drives here holds its future; another's, none.
    future = getattr(handle, "future", None)
    if isinstance(future, Future):
        future.add_done_callback(unclaimed)
    else:
        unclaimed()
    return handle


@DBOS.workflow(name="agentloop.run")
def run_workflow(
    name: str,
    history: list[dict[str, Any]],
    recorded: dict[str, Any],
    handout: Handout | None = None,
) -> RunResult:
    """A run of the DBOSLoop ``name``: its workflow id is the run id.

    ``handout``: a child run's, started by its parent's agent call (``child_workflows``).
    """
    run_id = DBOS.workflow_id
    assert run_id is not None, "a run is driven inside its workflow"
    with _FOUND:
        loop = LOOPS.get(name)
        if loop is not None:
            loop._driving.append(run_id)  # a close sees it from here on
            if run_id in loop._starting:  # the start's hold, taken over
                loop._starting.remove(run_id)
    if loop is None:
        raise AgentloopError(
            f"run {run_id!r} belongs to the DBOSLoop {name!r}, and this process has "
            f"none of that name (it has {sorted(LOOPS)}): make it before DBOS.launch() in "
            "every worker process"
        )
    try:
        return loop._drive(history, recorded, handout)
    finally:
        loop._driving.remove(run_id)
