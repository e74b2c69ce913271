"""A fork of a run (``DBOS.fork_workflow``) from after an agent call's child started.

DBOS copies the run's record of the child's start into the fork, so the
fork's workflow gets the original run's child back: a child of another
lineage, whose steps read the original run's cancel markers, and which
``pending``, ``decide`` and ``cancel_run`` of the fork would not reach. The
fork waits for a child of its own instead, ``child_run_id(fork_id,
call_id)``: a child that had ended is read back as recorded (its result,
never run again); one that had not is forked too (DBOS's fork of its
workflow, every step it recorded copied), and goes on as a recovery of it
would, so a call it may have started comes back ``OutcomeUnknown`` (an
idempotent tool runs again), and none runs twice. Its ancestors are those
its id names (``driven_with``), so the fork's cancel markers, ``pending``
and ``decide`` reach it.
"""

from __future__ import annotations

from typing import Any, Final

from dbos import DBOS, SetWorkflowID

from agentloop._dbos.decisions import APPROVAL_TOPIC
from agentloop._dbos.descendants import NOT_ENDED
from agentloop._dbos.marker import cancelled, workflow_exists
from agentloop._durable.ids import child_run_id

__all__ = ["forked_result"]

#: The wait is recorded under the name of DBOS's own step that awaits a child's result: a
#: fork taken after that step reads DBOS's record back, and a fork of a fork reads this one's.
_AWAIT: Final[Any] = {"name": "DBOS.getResult"}


def forked_result(recorded: str, call_id: str, watched: tuple[str, ...]) -> Any:
    """The result of the fork's own child, of its call ``call_id``, made from ``recorded``.

    One step, in the fork's workflow, in the place of DBOS's wait for the
    recorded child: what it returns (or raises) is recorded, and a recovery
    of the fork reads it back, or, cut off, finds the child it forked.
    ``watched``: the fork's cancel markers (its id's, then its ancestors').
    """
    return DBOS.run_step(_AWAIT, _own_child_result, recorded, call_id, watched)


def _own_child_result(recorded: str, call_id: str, watched: tuple[str, ...]) -> Any:
    """Wait for the fork's child: forked from its source's unless that ended; else its result."""
    child_id = child_run_id(watched[0], call_id)
    if not workflow_exists(child_id):
        recorded = _source_child(watched[0], call_id, recorded)
        status = DBOS.get_workflow_status(recorded)
        if status is None or status.status not in NOT_ENDED:  # ended: read back as recorded
            return DBOS.retrieve_workflow(recorded).get_result()
        done = DBOS.list_workflow_steps(recorded, load_output=False)
        start = 1 + max((step["function_id"] for step in done), default=0)
        try:
            with SetWorkflowID(child_id):
                DBOS.fork_workflow(recorded, start)  # every step it recorded, copied
        except Exception:
            if not workflow_exists(child_id):  # not another execution's fork of it, first
                raise
    # Its recorded steps read no marker again, and a cancel_run of the fork that listed the
    # runs below it before the child existed sent it nothing: this wakes it (also when an
    # execution cut off after it forked the child, before this, had).
    if cancelled(watched):
        DBOS.send(child_id, {"cancel": True}, APPROVAL_TOPIC)
    return DBOS.retrieve_workflow(child_id).get_result()


def _source_child(run_id: str, call_id: str, recorded: str) -> str:
    """The child of call ``call_id`` in the run ``run_id`` was forked from (or ``recorded``).

    Up the runs it was forked from (a fork of a fork's), the nearest that
    had a child of its own for the call; none: the child its record names.
    """
    status = DBOS.get_workflow_status(run_id)
    above = None if status is None else status.forked_from
    while above is not None:
        own = child_run_id(above, call_id)
        if own == recorded or workflow_exists(own):
            return own
        status = DBOS.get_workflow_status(above)
        above = None if status is None else status.forked_from
    return recorded
