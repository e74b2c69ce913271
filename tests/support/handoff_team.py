"""A durable team for the kill test: triage hands to billing, whose refund kills its process.

``python -m tests.support.handoff_team DIR`` runs the team on the ledger in
``DIR`` until billing's ``refund`` has written its effect and SIGKILLed the
process; the test then resumes the run from the same team, whose refund no
longer kills.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import agentloop
from agentloop.ledger import SQLiteLedger
from agentloop.testing import call, final

RUN_ID = "team-run"


def scripted(name: str, replies: dict[int, dict[str, Any]], asked: list[str]) -> Any:
    """A model that answers by the number of replies in the history, as a real one reads it."""

    def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        asked.append(name)
        return replies[sum(m["kind"] in ("call", "calls", "final") for m in history)]

    return model


def team(directory: Path, *, kill: bool, asked: list[str]) -> agentloop.Loop:
    """The triage agent of the team, on the ledger in ``directory``."""

    def refund(order: str) -> str:
        with (directory / "effects").open("a") as effects:
            effects.write(f"refund {order}\n")
        if kill:
            os.kill(os.getpid(), signal.SIGKILL)
        return f"refunded {order}"

    billing = agentloop.Loop(
        scripted("billing", {1: call("c2", "refund", order="A-7"), 2: final("Refunded.")}, asked),
        name="billing",
        system="You handle billing.",
        tools=[refund],
    )
    return agentloop.Loop(
        scripted("triage", {0: call("c1", "transfer_to_billing")}, asked),
        name="triage",
        system="Route the customer.",
        handoffs=[agentloop.handoff(billing)],
        ledger=SQLiteLedger(directory / "runs.db"),
    )


if __name__ == "__main__":
    team(Path(sys.argv[1]), kill=True, asked=[]).run("charged twice", run_id=RUN_ID)
