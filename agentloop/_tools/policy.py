"""Permission policies: ``policy(call)`` answers ``allow()``, ``deny(reason)`` or ``ask(reason)``.

The answers themselves live with the engine (``agentloop._core.approval``):
an ``ask`` stops the run, which is the engine's business. A registry's
review hands back a ``PreparedCall``: the call checked once, with the
policies' answer, for the dispatch that follows. How a registry asks its
policies (each on a copy of the call, a failure failing it closed) and
takes the strictest answer is here too.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Generator, Iterable
from typing import Any, TypeGuard, TypeVar

import attrs
import orjson

from agentloop._core.approval import Decision, Policy, allow, ask, deny
from agentloop._drivers.run_context import context_here
from agentloop._tools.results import failed
from agentloop._tools.signature import Context
from agentloop._tools.tool import Tool

__all__ = [
    "Decision",
    "Policy",
    "PreparedCall",
    "allow",
    "ask",
    "awaited",
    "checked_answer",
    "deny",
    "leaves_open",
    "policy_answer",
    "stopped_by",
    "strictest_answer",
    "unawaited",
]

_T = TypeVar("_T")


@attrs.frozen
class PreparedCall:
    """A call a registry's review checked: its tool, its converted arguments, the policies' answer.

    The engine hands it back with the call (``RunTool.review``), and
    ``dispatch(call, review=prepared)`` runs it without validating or
    converting its arguments again. ``asks`` and ``reason`` are the
    answer's: an ask makes the batch wait for a person.
    """

    tool: Tool
    kwargs: dict[str, Any]
    decision: Decision

    @property
    def asks(self) -> bool:
        """Whether the policies asked a person about the call."""
        return self.decision.asks

    @property
    def reason(self) -> str:
        """The policies' reason (an ask's question, a denial's cause)."""
        return self.decision.reason


def stopped_by(decision: Decision) -> dict[str, Any] | None:
    """The ``denied`` outcome a decision gives its call, or ``None`` when the call may run."""
    if decision.allowed:
        return None
    if decision.asks:  # no run to wait in: fail closed, and say what was needed
        return {
            "status": "denied",
            "content": f"this call needs a person's approval, which was not given: "
            f"{decision.reason}",
        }
    return {"status": "denied", "content": decision.reason}


def strictest_answer(answers: Iterable[Decision | dict[str, Any]]) -> Decision | dict[str, Any]:
    """A failure (an ``error`` outcome) or a denial wins, then an ``ask``, then ``allow()``.

    The policies are asked in turn until one fails or denies, so that a
    registry's ``ask`` cannot hide a tool's ``deny`` from the person who
    would approve.
    """
    asked: Decision | None = None
    for answer in answers:
        if not leaves_open(answer):
            return answer
        if answer.asks and asked is None:
            asked = answer
    return asked or allow()


def leaves_open(answer: Decision | dict[str, Any]) -> TypeGuard[Decision]:
    """Whether a later policy can still matter: ``answer`` allows or asks (no failure or denial)."""
    return not isinstance(answer, dict) and (answer.allowed or answer.asks)


def policy_answer(policy: Policy, call: dict[str, Any], context: Context | None) -> object:
    """What ``policy`` answers about a copy of ``call``: a value, an awaitable, or its raise.

    ``context``: the policy's parameter that takes the call's ``RunContext``, if any.
    """
    try:
        copy = orjson.loads(orjson.dumps(call))
        if context is None:
            return policy(copy)
        return policy(copy, **{context[0]: context_here()})
    except Exception as exc:  # noqa: BLE001 - fail closed: the handler does not run
        return exc


def checked_answer(tool: Tool, answer: object) -> Decision | dict[str, Any]:
    """A policy's answer as a ``Decision``, or the ``error`` outcome that fails the call closed."""
    if isinstance(answer, Decision):
        return answer
    if isinstance(answer, Exception):
        return failed(answer)
    if inspect.isawaitable(answer):
        getattr(answer, "close", lambda: None)()  # never awaited: say so, without a warning
        return failed(
            TypeError(
                f"the policy for tool {tool.name!r} is async; run the loop with the async "
                "driver (loop.arun or loop.astart), which awaits it"
            )
        )
    return failed(
        TypeError(
            f"the policy for tool {tool.name!r} returned {answer!r:.80}; "
            "expected agentloop.allow(), agentloop.deny(reason) or agentloop.ask(reason)"
        )
    )


def unawaited(steps: Generator[Awaitable[object], object, _T]) -> _T:
    """What ``steps`` returns, each awaitable it yields sent back as it is (nothing awaits here)."""
    answer: object = None
    try:
        while True:
            answer = steps.send(answer)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def awaited(steps: Generator[Awaitable[object], object, _T]) -> _T:
    """What ``steps`` returns, each awaitable it yields awaited; what one raises is sent back.

    A policy that raises fails its call closed, whether it raised at once or
    when awaited: ``checked_answer`` takes the exception as its answer.
    """
    answer: object = None
    try:
        while True:
            pending = steps.send(answer)
            try:
                answer = await pending
            except Exception as exc:  # noqa: BLE001 - fail closed
                answer = exc
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
