"""A triage agent with two specialists: the customer's question is handed to billing or tech.

Run it with ``python examples/triage.py "I was charged twice for order A-7"``.
With ``OPENAI_API_KEY`` set, every agent is ``gpt-4.1-mini`` (``AGENTLOOP_MODEL``
names another); without it, scripted models play a run that is handed to
billing, offline. It prints who was asked at each step, and the answer.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import agentloop
from agentloop.testing import ScriptedModel, call, final

Model = Callable[..., Any]


def refund(order: str) -> str:
    """Refund an order, by its number (A-7, say)."""
    return f"refunded {order}"


def diagnose(device: str) -> str:
    """Diagnose a customer's connection problem on a device (router, phone...)."""
    return f"the {device} needed a restart"


def team(models: dict[str, Model]) -> agentloop.Loop:
    """The triage Loop, handing to billing and tech; billing can hand back to triage."""
    billing = agentloop.Loop(
        models["billing"],
        name="billing",
        system="You handle billing: charges and refunds. Refund when the customer asks.",
        tools=[refund],
    )
    tech = agentloop.Loop(
        models["tech"],
        name="tech",
        system="You fix connection problems. Diagnose before you answer.",
        tools=[diagnose],
    )
    triage = agentloop.Loop(
        models["triage"],
        name="triage",
        system="Route the customer: hand billing questions to billing, connection problems "
        "to tech. Do not answer them yourself.",
        handoffs=[
            agentloop.handoff(billing, description="Billing questions: charges, refunds."),
            agentloop.handoff(tech, description="Connection problems."),
        ],
        max_steps=10,
        max_calls=10,
    )
    billing.add_handoff(agentloop.handoff(triage, description="Not a billing question."))
    return triage


def offline() -> dict[str, Model]:
    """Scripted models: triage hands to billing, which refunds and answers."""
    return {
        "triage": ScriptedModel([call("c1", "transfer_to_billing")]),
        "billing": ScriptedModel(
            [
                call("c2", "refund", order="A-7"),
                final("I refunded order A-7; sorry for the trouble."),
            ]
        ),
        "tech": ScriptedModel([]),
    }


def live(name: str) -> dict[str, Model]:
    """Each agent a real model (the OpenAI client reads OPENAI_API_KEY)."""
    from openai import OpenAI

    from agentloop.providers.openai import openai_chat

    client = OpenAI()
    return {
        agent: openai_chat(client, name, temperature=0) for agent in ("triage", "billing", "tech")
    }


def main(question: str) -> agentloop.RunResult:
    """Run the team on ``question``: live when a key is set, else offline."""
    key = os.environ.get("OPENAI_API_KEY")
    models = live(os.environ.get("AGENTLOOP_MODEL", "gpt-4.1-mini")) if key else offline()
    result = team(models).run(question)
    for event in result.events:  # who was asked at each step, and each handoff
        if event.trigger == "model_replied" or event.guard == "handoff_alone":
            said = "handed off to" if event.guard == "handoff_alone" else "asked"
            print(f"step {event.steps}: {said} {event.agent}")
    print(f"{result.status} by {result.agent}: {result.output}")
    return result


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "I was charged twice for order A-7")
