"""Cancellation: the marker, a tiny workflow whose id is derived from the run id, and its read.

``cancel_run(run_id)`` (from any process) starts it; each checkpoint of the run
reads whether it exists, by its key, in the step that records it.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Final

import sqlalchemy as sa
from dbos import DBOS, DBOSClient, EnqueueOptions, SetWorkflowID
from dbos import error as dbos_error
from dbos._dbos import _get_dbos_instance
from dbos._utils import INTERNAL_QUEUE_NAME

from agentloop._dbos.decisions import APPROVAL_TOPIC
from agentloop._dbos.descendants import runs_below

__all__ = ["cancel_requested", "cancel_run", "cancelled", "workflow_exists"]

_CANCEL_PREFIX: Final = "agentloop.cancel:"


@DBOS.workflow(name="agentloop.cancel")
def _cancel_marker(run_id: str) -> str:
    """The marker that cancels run ``run_id``: that it exists is the request."""
    return run_id


def cancel_run(run_id: str, *, client: DBOSClient | None = None) -> None:
    """Cancel run ``run_id``; idempotent.

    From any process with DBOS launched, or through ``client`` (a
    ``DBOSClient``). The request is kept in the database: it outlives a
    crash of the run's worker. The run ends ``cancelled`` at its next
    checkpoint: before its next model ask (or its first), right after a
    reply, or before its next tool, with every call of its batch answered.
    A run that ended already is unchanged. The runs below it (its agent
    calls' child workflows) end ``cancelled`` too, at their next checkpoint,
    or at once if one waits for a person. (``DBOS.cancel_workflow`` stops
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
    # A run waiting for a person waits in recv, where no step reads the marker; so may a run
    # below it (an agent call's child), which reads the run's marker at its checkpoints. Each
    # that began before the marker is found here; one begun after reads the marker first.
    via: Any = DBOS if client is None else client
    woken = [run_id, *(below for _, below in runs_below(run_id, via))]
    for waiting in woken:
        # One not started yet reads the marker when it starts.
        with contextlib.suppress(dbos_error.DBOSNonExistentWorkflowError):
            via.send(waiting, {"cancel": True}, APPROVAL_TOPIC)


def cancel_requested(run_id: str, *, client: DBOSClient | None = None) -> bool:
    """Whether ``cancel_run(run_id)`` was called (read live, where a step records it).

    Through ``client`` in a process that does not launch DBOS.
    """
    if client is None:
        return workflow_exists(_CANCEL_PREFIX + run_id)
    try:
        client.retrieve_workflow(_CANCEL_PREFIX + run_id)
    except dbos_error.DBOSNonExistentWorkflowError:
        return False
    return True


def cancelled(watched: tuple[str, ...]) -> bool:
    """Whether any of ``watched`` was cancelled: a run's id, then its ancestors' (a child's).

    Read in the step that records it: ``cancel_run`` of a parent reaches its child runs.
    """
    return any(cancel_requested(run_id) for run_id in watched)


def workflow_exists(workflow_id: str) -> bool:
    """Whether workflow ``workflow_id`` exists: one read of its key, on DBOS's own engine.

    DBOS has no public read this small: ``DBOS.get_workflow_status`` loads the
    whole row (inputs and output too) at about three times the CPU, and a run
    reads its marker at every checkpoint. Where DBOS's system database is not
    as this expects, the public read.
    """
    try:
        system = _get_dbos_instance()._sys_db
        statement, sql = _key_read(system)
    except Exception:  # noqa: BLE001 - DBOS's insides are not as expected: its public read
        return DBOS.get_workflow_status(workflow_id) is not None
    if sql is not None:
        return _exists_on_postgres(system.engine, sql, workflow_id)
    with system.engine.connect() as connection:
        found = connection.execute(statement, {"workflow_id": workflow_id}).first()
    return found is not None


def _exists_on_postgres(engine: sa.Engine, sql: str, workflow_id: str) -> bool:
    """The key read on Postgres, as one statement on a pooled driver connection.

    Outside a transaction (autocommit: no BEGIN or ROLLBACK round trip), and
    past SQLAlchemy's statement machinery, which cost more CPU than the read.
    """
    pooled = engine.raw_connection()
    try:
        connection = pooled.driver_connection
        connection.autocommit = True  # type: ignore[union-attr]  # a psycopg connection
        try:
            with connection.cursor() as cursor:  # type: ignore[union-attr]
                cursor.execute(sql, {"workflow_id": workflow_id})
                return cursor.fetchone() is not None
        finally:
            connection.autocommit = False  # type: ignore[union-attr]
    finally:
        pooled.close()  # back to the pool


@functools.lru_cache(maxsize=4)
def _key_read(system: Any) -> tuple[Any, str | None]:
    """The statement that reads a workflow's id by its key, made once a system database.

    On Postgres also its SQL, rendered for the driver with DBOS's schema in place.
    """
    table = system.tables.workflow_status
    where = system._wf(table, sa.bindparam("workflow_id"))
    statement = sa.select(table.c.workflow_uuid).where(*where)
    engine = system.engine
    if engine.dialect.name != "postgresql":
        # (Not on SQLite, where DBOS sets each connection's own isolation level.)
        return statement, None
    compiled = statement.compile(
        dialect=engine.dialect,
        schema_translate_map=engine.get_execution_options().get("schema_translate_map"),
        render_schema_translate=True,
    )
    if set(compiled.params) != {"workflow_id"}:  # more than the key (a shard, say): as it is
        return statement, None
    return statement, str(compiled)
