"""agentloop.dbos: durable runs as DBOS workflows, served by any number of worker processes.

A run is a DBOS workflow whose workflow id is the run id. The workflow is a
driver like ``Run``: a short loop over the engine's protocol (``next()``,
then ``replied``/``raised``/``returned``), where what comes from outside is
a DBOS step, so DBOS records it before the engine takes it:

* ``agentloop.model``: each model call, with its reply (or what the model
  raised) as the step's output: recovery never asks the model again;
* ``agentloop.tool``: each call's outcome (the dispatcher, so the handler,
  runs inside it);
* ``agentloop.review``: the policies' answers about a batch;
  ``agentloop.check_output``: the output validators' problems with a final;
  ``agentloop.handoff_filter``: the view a handoff's filter sends the next
  agent (with handoffs, each model step asks the agent in force's model).

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

Cancellation (``cancel_run(run_id)``, from any process) is a marker: a tiny
workflow whose id is derived from the run id. The steps read whether it
exists, by its key, and return that with their output, so the decision is
recorded with the step and a recovery replays it at the same checkpoint:
before the first model ask and right after each reply (the model step reads
it), before each tool and before each later ask (the step before reads it,
once its work is done; a tool's step reads it again before its handler). A
run waiting for a person also gets it as a message.

Human approval: when the loop's tools have policies, an ``agentloop.review``
step asks them about each batch before its first call (each policy once).
If one asks, the run waits in ``awaiting_approval``: it publishes its
pending calls as a DBOS event (``pending(run_id)`` reads them from any
process) and waits in ``DBOS.recv`` for the decisions ``decide(run_id,
...)`` sends from any process. Both are durable: a worker that dies while
the run waits leaves it waiting, and the worker that recovers it takes the
decisions.

Agents as tools (``Loop.as_tool``): the child run of each agent call is a
DBOS child workflow of the run's, ``child_run_id(run_id, call_id)``, of a
``DBOSLoop`` the parent's made for the agent tool's Loop (named
``f"{name}/{tool}"``). The parent records its start and its result (a
recovery gets the same child back, never starting it again), then the
call's outcome in an ``agentloop.tool`` step; the child records its own
steps, and reads its ancestors' cancel markers as well as its own. A child
whose policy asks a person waits in its own workflow while its parent's
waits for its result: ``pending(parent_id)`` lists its calls under their
paths (the parent's call id, then the child's), ``decide(parent_id,
{("c1", "k1"): ...})`` sends them to it, and ``cancel_run(parent_id)``
wakes it. A fork of the parent (``DBOS.fork_workflow``) from after the
child started has a child of its own: the recorded child read back if it
had ended, else forked too, under the fork's lineage.

Needs the ``dbos`` extra; importing this module without it raises an
``ImportError`` that says so. Import it before ``DBOS.launch()``: it
registers its two workflows (``agentloop.run`` and ``agentloop.cancel``).
"""

from __future__ import annotations

try:
    import dbos as _dbos  # noqa: F401 - only to say what is missing, before anything else
except ModuleNotFoundError as exc:  # missing; a script named like it fails on its own
    raise ImportError(
        "agentloop.dbos needs DBOS Transact: the dbos extra (see the docs' Install page)"
    ) from exc

from agentloop._dbos.dbos_loop import STEPS, DBOSLoop
from agentloop._dbos.decisions import APPROVAL_TOPIC, PENDING_EVENT, decide, pending
from agentloop._dbos.marker import cancel_requested, cancel_run
from agentloop._names import publish as _publish

__all__ = [
    "APPROVAL_TOPIC",
    "PENDING_EVENT",
    "STEPS",
    "DBOSLoop",
    "cancel_requested",
    "cancel_run",
    "decide",
    "pending",
]

_publish(__name__, globals(), __all__)
