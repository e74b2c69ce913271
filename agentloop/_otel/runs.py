"""A run's open spans as the listener follows it: ``OpenRun``, and the ``Scope`` of a request.

A ``Scope`` is what the pump enters around the performance of a request: its
span is current in it. ``end_open`` ends what a run left open; ``began_at``
dates a request heard after the fact.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import attrs
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

from agentloop._core.table import State
from agentloop._otel.names import AGENTLOOP_RESULT_STATUS

if TYPE_CHECKING:
    from agentloop._core.values import Transition

__all__ = ["OpenRun", "Scope", "began_at", "end_open"]


@attrs.define
class OpenRun:
    """One run's open span, and what the next transitions need to know."""

    span: Span
    context: Context
    #: Where the run is, after the last transition seen.
    state: State
    steps: int
    calls: int
    #: When the last transition was seen: the next model call started no earlier.
    mark: int
    #: When the accepted call's tool was about to run, while it runs (heard after the fact).
    tool_start: int | None = None
    tokens: dict[str, int] = attrs.field(factory=dict)
    #: The model call under way, and the calls under way by id: their spans, current
    #: while they run (a run followed live).
    chat: Scope | None = None
    tools: dict[str, Scope] = attrs.field(factory=dict)
    #: How many of this run's scopes are entered now: a run begun inside one (a child
    #: run, in a tool) is nested in this one, not a sign that this one was abandoned.
    active: int = 0
    ended: bool = False
    #: With content captured and heard after the fact: each call's arguments, by id,
    #: from the reply that made the call.
    arguments: dict[str, str] = attrs.field(factory=dict)

    def continues(self, transition: Transition) -> bool:
        """Whether ``transition`` is this run's next one (not a new run's first)."""
        return (
            transition.source is self.state
            and transition.steps >= self.steps
            and transition.calls >= self.calls
        )


class Scope:
    """A span made current around a request's performance, as often as the pump enters it.

    The span is the model call's or the tool's, or ``None`` for the run's
    own (around a review, a wait). ``pulls``: how often it was entered (more
    than once: a stream was read); ``left``: when it was last left, which
    ends its span (for a stream, after its last chunk).
    """

    __slots__ = ("_token", "began", "context", "left", "pulls", "run", "span")

    def __init__(self, run: OpenRun, span: Span | None, began: int) -> None:
        self.run, self.span, self.began = run, span, began
        self.context = trace.set_span_in_context(run.span if span is None else span)
        self.left: int | None = None
        self.pulls = 0
        self._token: object = None

    def __enter__(self) -> None:
        self._token = otel_context.attach(self.context)
        self.run.active += 1
        self.pulls += 1

    def __exit__(self, *exc: object) -> None:
        self.run.active -= 1
        self.left = time.time_ns()
        otel_context.detach(self._token)  # type: ignore[arg-type]  # attach's token


def end_open(run: OpenRun, now: int) -> None:
    """End the spans of requests the run never answered: calls cut off at its end, say."""
    for scope in run.tools.values():
        assert scope.span is not None, "a tool's scope has its span"
        scope.span.set_attribute(AGENTLOOP_RESULT_STATUS, "cancelled")
        scope.span.end(end_time=min(scope.left or now, now))
    if run.chat is not None and run.chat.span is not None:
        run.chat.span.end(end_time=min(run.chat.left or now, now))
    run.tools.clear()
    run.chat = None


def began_at(transition: Transition, now: int, otherwise: int) -> int:
    """When the model call or tool that ``transition`` answers began, in ``time_ns``.

    ``took`` is the engine's measure of it: each of several calls run at once
    gets its own start, and a run's first model call its duration. Without
    one (an interruption, a clock of the caller's own), the transition before.
    """
    took = transition.took
    if took is None or not 0 <= took < 1e9:
        return otherwise
    return now - int(took * 1e9)
