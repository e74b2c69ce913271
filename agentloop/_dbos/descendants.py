"""The runs below a run on DBOS: the child workflows of its agent calls that have not ended.

The child run that answers call ``k`` of run ``r`` is DBOS's child of ``r``'s
workflow (its ``parent_workflow_id``) under the id ``child_run_id(r, k)``:
``pending`` and ``decide`` reach a waiting child's calls through it, under
the path of call ids it is reached by, and ``cancel_run`` wakes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from agentloop._durable.ids import child_call_id

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["NOT_ENDED", "RUN_WORKFLOW", "runs_below"]

#: The name of a run's workflow.
RUN_WORKFLOW: Final = "agentloop.run"
#: The DBOS statuses of a workflow that has not ended (a recovered one is ENQUEUED on DBOS's
#: internal queue until a worker takes it again).
NOT_ENDED: Final = ("PENDING", "ENQUEUED")


def runs_below(run_id: str, via: Any) -> Iterator[tuple[tuple[str, ...], str]]:
    """Each run below ``run_id`` that has not ended: the path of call ids to it, and its id.

    Depth first, each generation in the order its runs began (a child, then
    the runs below it). ``via``: ``DBOS``, or a ``DBOSClient``. A workflow
    that is the run's child under another id (not an agent call's) is not one.
    """
    found = via.list_workflows(
        parent_workflow_id=run_id,
        name=RUN_WORKFLOW,
        status=list(NOT_ENDED),
        load_input=False,
        load_output=False,
    )
    for status in found:
        call_id = child_call_id(run_id, status.workflow_id)
        if call_id is None:
            continue
        yield (call_id,), status.workflow_id
        for path, below in runs_below(status.workflow_id, via):
            yield (call_id, *path), below
