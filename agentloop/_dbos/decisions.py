"""The wait for a person: a run's pending calls published, and decisions sent from any process.

Both are durable: a worker that dies while the run waits leaves it waiting,
and the worker that recovers it takes the decisions.
"""

from __future__ import annotations

from typing import Any, Final

from dbos import DBOS, DBOSClient

from agentloop._core.approval import Decision, PendingCall
from agentloop._core.batch import check_decisions
from agentloop._core.engine import Engine
from agentloop._core.table import State
from agentloop._core.values import CancelToken, Transition
from agentloop._errors import InvalidStateError

__all__ = ["APPROVAL_TOPIC", "PENDING_EVENT", "decide", "pending", "wait_for_decisions"]

#: The ``DBOS.recv`` topic a waiting run takes its decisions (and cancellation) on.
APPROVAL_TOPIC: Final = "agentloop.approval"
#: The DBOS event a waiting run publishes its pending calls on (empty once decided).
PENDING_EVENT: Final = "agentloop.pending"
# How long one wait for decisions lasts before it is begun again (each is recorded).
_WAIT_SECONDS: Final = 3600.0


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
