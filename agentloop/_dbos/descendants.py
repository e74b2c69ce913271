"""The runs below a run on DBOS: the child workflows of its agent calls that have not ended.

The child run that answers call ``k`` of run ``r`` is the workflow
``child_run_id(r, k)`` (DBOS's child of ``r``'s, or in a fork, ``forks.py``,
DBOS's fork of the original's child):
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
    the runs below it). ``via``: ``DBOS``, or a ``DBOSClient``. Found by the
    ids agentloop derives (a fork's child, ``forks.py``, is DBOS's fork of
    another run's child, not the fork's child workflow): a workflow under
    another id is not one.
    """
    found = via.list_workflows(
        workflow_id_prefix=f"{run_id}:",
        name=RUN_WORKFLOW,
        status=list(NOT_ENDED),
        load_input=False,
        load_output=False,
    )
    return _below(run_id, [status.workflow_id for status in found])


def _below(run_id: str, ids: list[str]) -> Iterator[tuple[tuple[str, ...], str]]:
    """``runs_below`` among ``ids`` (in the order they began)."""
    for each in ids:
        call_id = child_call_id(run_id, each)
        if call_id is None:
            continue
        yield (call_id,), each
        for path, below in _below(each, ids):
            yield (call_id, *path), below
