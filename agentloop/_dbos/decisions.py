"""The wait for a person: a run's pending calls published, and decisions sent from any process.

Both are durable: a worker that dies while the run waits leaves it waiting,
and the worker that recovers it takes the decisions. A child run (an agent
call's child workflow) waits as any run does, in its own workflow, while its
parent's workflow waits for its result; ``pending`` and ``decide`` of the
parent reach it, under the path of call ids it is reached through.
"""

from __future__ import annotations

import time
from typing import Any, Final

from dbos import DBOS, DBOSClient

from agentloop._core.approval import Decision, Decisions, PendingCall
from agentloop._core.batch import check_decisions
from agentloop._core.engine import Engine
from agentloop._core.table import State
from agentloop._core.values import CancelToken, Transition
from agentloop._dbos.descendants import runs_below
from agentloop._errors import InvalidStateError

__all__ = ["APPROVAL_TOPIC", "PENDING_EVENT", "decide", "pending", "wait_for_decisions"]

#: The ``DBOS.recv`` topic a waiting run takes its decisions (and cancellation) on.
APPROVAL_TOPIC: Final = "agentloop.approval"
#: The DBOS event a waiting run publishes its pending calls on (empty once decided).
PENDING_EVENT: Final = "agentloop.pending"
# How long one wait for decisions lasts before it is begun again (each is recorded).
_WAIT_SECONDS: Final = 3600.0
# How often ``pending`` reads again while it waits for a call to wait.
_POLL_SECONDS: Final = 0.05


def wait_for_decisions(
    engine: Engine, token: CancelToken, waiting: tuple[PendingCall, ...]
) -> Transition:
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

    Its own, and those of the runs below it (its agent calls' child
    workflows, and theirs) that wait, each under its ``path``: the call ids
    it is reached through, this run's first (``PendingCall.key`` is what
    ``decide`` takes its decision under). From any process with DBOS
    launched, or through ``client`` (a ``DBOSClient``). ``timeout_seconds``:
    how long to wait for a call to wait, read again every few tens of
    milliseconds; none by then, ``()``.
    """
    via: Any = DBOS if client is None else client
    deadline = time.monotonic() + timeout_seconds
    while True:
        waiting = tuple(call for _, calls in _waiting(run_id, via) for call in calls)
        left = deadline - time.monotonic()
        if waiting or left <= 0:
            return waiting
        time.sleep(min(_POLL_SECONDS, left))


def decide(run_id: str, decisions: Decisions, *, client: DBOSClient | None = None) -> None:
    """Send a person's decisions to run ``run_id``, waiting in ``awaiting_approval``.

    ``{key: approve() | deny(reason)}`` for every pending call ``pending(run_id)``
    lists, keyed by its ``key``: its call id, or for a call of a run below
    (an agent call's child) its path, ``("c1", "k1")``. Checked here as
    ``run.decide`` checks them (a missing or extra key, another call's
    fingerprint, anything but a decision raises, and nothing is sent);
    ``InvalidStateError`` when nothing waits. Each waiting run is sent its
    own calls' decisions, by their call ids. From any process with DBOS
    launched, or through ``client``; the worker holding each run goes on
    with it.
    """
    via: Any = DBOS if client is None else client
    found = _waiting(run_id, via)
    waiting = tuple(call for _, calls in found for call in calls)
    if not waiting:
        raise InvalidStateError(
            f"run {run_id!r} is not awaiting approval: no call of it, nor of a run below it, "
            "waits for a decision (were they taken already?)",
            state=State.AWAITING_APPROVAL,
        )
    checked = dict(check_decisions(waiting, decisions))
    for waits, calls in found:  # every key checked above: now each run's are sent
        message = {"decisions": {call.call_id: checked[call.key].record() for call in calls}}
        via.send(waits, message, APPROVAL_TOPIC)


def _waiting(run_id: str, via: Any) -> list[tuple[str, tuple[PendingCall, ...]]]:
    """Each run of ``run_id``'s tree that waits for a person: its id, and its pending calls.

    The run's own first, then the runs below it (``runs_below``), each call
    under the path it is reached through.
    """
    found = []
    for path, waits in [((), run_id), *runs_below(run_id, via)]:
        published = via.get_event(waits, PENDING_EVENT, 0.0)
        calls = tuple(PendingCall.from_record(data) for data in published or ())
        if calls:
            found.append((waits, tuple(call._replace(path=(*path, *call.path)) for call in calls)))
    return found
