"""agentloop.otel: OpenTelemetry spans for runs, after the GenAI semantic conventions.

``OtelListener`` is a listener: ``Loop(..., listeners=[OtelListener()])`` or
``run.subscribe(OtelListener())``, under either driver. For each run it emits
an ``invoke_agent`` span, with a ``chat`` child span per model call and an
``execute_tool`` child span per tool run, named and attributed as the
OpenTelemetry GenAI conventions say (``gen_ai.operation.name``,
``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ...), plus ``agentloop.*``
attributes for what they do not cover (the counters, the result status, the
terminal state).

A listener hears of a transition only after it happened, so spans are made
with explicit timestamps: a span ends when the listener hears the transition
that answers its model call (``model_replied``/``model_raised``/
``model_interrupted``) or tool (``tool_returned``/``tool_interrupted``), and
starts that transition's ``took`` earlier (the engine's measure of the call),
so calls run at once each keep their own time. Without a ``took``, it starts
at the transition before (for a tool, the one into ``dispatching``).

Needs the ``otel`` extra (``opentelemetry-api``); importing this module
without it raises an ``ImportError`` that says so.
"""

from __future__ import annotations

import contextvars
import time
from typing import Final

try:
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode
except ImportError as exc:
    raise ImportError(
        "agentloop.otel needs the OpenTelemetry API: pip install 'agentloop-fsm[otel]'"
    ) from exc

from collections.abc import Callable, Mapping

import attrs
from opentelemetry.trace import TracerProvider
from opentelemetry.util.types import AttributeValue

from agentloop._core.json import exception_content
from agentloop._core.table import MODEL_ANSWERS, TERMINAL, State, Trigger
from agentloop._core.values import RecordedException, Transition
from agentloop._drivers.progress import ToolProgress

__all__ = [
    "AGENTLOOP_CALLS",
    "AGENTLOOP_END_UNSEEN",
    "AGENTLOOP_REASON",
    "AGENTLOOP_RESULT_STATUS",
    "AGENTLOOP_STATUS",
    "AGENTLOOP_STEPS",
    "AGENTLOOP_TIME_TO_FIRST_TOKEN",
    "AGENTLOOP_TRIGGER",
    "OtelListener",
]

# GenAI semantic conventions (development status), as strings: the
# semantic-conventions package only has them in an unstable module.
OPERATION: Final = "gen_ai.operation.name"
AGENT_NAME: Final = "gen_ai.agent.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
TOOL_TYPE: Final = "gen_ai.tool.type"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
ERROR_TYPE: Final = "error.type"

#: The counters after the transition that ended the span.
AGENTLOOP_STEPS: Final = "agentloop.steps"
AGENTLOOP_CALLS: Final = "agentloop.calls"
#: On a run span: the terminal state, and ``max_steps``/``max_calls`` when exhausted.
AGENTLOOP_STATUS: Final = "agentloop.status"
AGENTLOOP_REASON: Final = "agentloop.reason"
#: On a chat span: how the model call ended (``model_replied``, ``model_raised``, ...;
#: ``summary_written`` and the like for a summary's call).
AGENTLOOP_TRIGGER: Final = "agentloop.trigger"
#: On a tool span: the result's status (``ok``, ``error``, ``denied``, ..., ``cancelled``).
AGENTLOOP_RESULT_STATUS: Final = "agentloop.result_status"
#: On a chat span whose reply streamed (``OtelListener.delta`` heard it): seconds from
#: the call's start to its first delta.
AGENTLOOP_TIME_TO_FIRST_TOKEN: Final = "agentloop.time_to_first_token"  # noqa: S105 - a name
#: On a run span ended without its terminal transition (see ``OtelListener``).
AGENTLOOP_END_UNSEEN: Final = "agentloop.end_unseen"

_RAISED: Final = frozenset({Trigger.MODEL_RAISED, Trigger.SUMMARY_RAISED})
_TOOL_ANSWERS: Final = frozenset({Trigger.TOOL_RETURNED, Trigger.TOOL_INTERRUPTED})
# Terminal states that mean something went wrong (exhausted and cancelled are outcomes).
_ERRORS: Final = frozenset(
    {State.FAILED, State.MALFORMED, State.REPEATED_CALL, State.INVALID_OUTPUT}
)
_TOKENS: Final = {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS}


def _error_type(exc: BaseException | None) -> str:
    if isinstance(exc, RecordedException):
        return exc.type_name
    return "_OTHER" if exc is None else type(exc).__qualname__


@attrs.define
class _Run:
    """One run's open span, and what the next transitions need to know."""

    span: Span
    context: Context
    #: Where the run is, after the last transition seen.
    state: State
    steps: int
    calls: int
    #: When the last transition was seen: the next model call started no earlier.
    mark: int
    #: When the accepted call's tool was about to run, while it runs.
    tool_start: int | None = None
    tokens: dict[str, int] = attrs.field(factory=dict)

    def continues(self, transition: Transition) -> bool:
        """Whether ``transition`` is this run's next one (not a new run's first)."""
        return (
            transition.source is self.state
            and transition.steps >= self.steps
            and transition.calls >= self.calls
        )


class OtelListener:
    """A listener that turns each run's transitions into OpenTelemetry spans.

    ``tracer_provider`` defaults to the global one. ``agent_name``,
    ``model_name`` and ``provider_name`` fill ``gen_ai.agent.name``,
    ``gen_ai.request.model`` and ``gen_ai.provider.name`` (and the span names
    ``invoke_agent {agent_name}``, ``chat {model_name}``) when given.

    Token counts come from each reply's ``usage`` (``transition.usage``): they
    go on that call's span as ``gen_ai.usage.*`` and, summed, on the run's
    span. ``usage``, when given, replaces that: a callable that gets each model
    call's transition and returns ``{'input_tokens': n, 'output_tokens': m}``
    (either may be left out) or None.

    One listener can serve many runs, even at once: each run's spans are kept
    in a context variable, so concurrent ``arun`` tasks (or threads) each get
    their own trace. A run stepped from one task (or thread) at a time is
    followed; one whose steps hop between tasks is not. A run whose last
    transition the listener never heard (one abandoned part-way, or ended by
    an interruption under asyncio, when only plain listeners are told) is
    ended when the next run begins in the same context, at the last moment it
    was seen, with ``agentloop.end_unseen`` set.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        agent_name: str | None = None,
        model_name: str | None = None,
        provider_name: str | None = None,
        usage: Callable[[Transition], Mapping[str, int] | None] | None = None,
    ) -> None:
        self._tracer = trace.get_tracer("agentloop", tracer_provider=tracer_provider)
        self._agent_name = agent_name
        self._model_name = model_name
        self._usage = usage
        self._common: dict[str, AttributeValue] = {}
        if provider_name is not None:
            self._common[PROVIDER_NAME] = provider_name
        if model_name is not None:
            self._common[REQUEST_MODEL] = model_name
        # One per listener: two listeners on one run keep their own spans.
        self._current: contextvars.ContextVar[_Run | None] = contextvars.ContextVar(
            f"agentloop.otel.{id(self):x}", default=None
        )
        # When the model call under way sent its first delta (a streaming model).
        self._first: contextvars.ContextVar[int | None] = contextvars.ContextVar(
            f"agentloop.otel.first.{id(self):x}", default=None
        )

    def __repr__(self) -> str:
        return f"OtelListener(agent_name={self._agent_name!r}, model_name={self._model_name!r})"

    def __call__(self, transition: Transition) -> None:
        """Record ``transition``: open, extend or close its run's spans."""
        now = time.time_ns()
        run = self._current.get()
        if run is not None and not run.continues(transition):
            self._end_unseen(run)
            run = None
        if run is None:
            run = self._begin(_began(transition, now, now))
            self._current.set(run)
        trigger = transition.trigger
        if trigger in MODEL_ANSWERS:  # a summary (summarise's) is a model call too: a chat span
            self._model_call(run, transition, now)
        elif transition.dest is State.DISPATCHING and trigger is not Trigger.TOOL_RETURNED:
            run.tool_start = now  # accepted, or decided: the batch's tools start now
        elif trigger in _TOOL_ANSWERS:
            self._tool_call(run, transition, now)
        run.state, run.steps, run.calls, run.mark = (
            transition.dest,
            transition.steps,
            transition.calls,
            now,
        )
        if transition.dest in TERMINAL or transition.dest is State.AWAITING_APPROVAL:
            # A run waiting for a person may wait for days, or go on in another process:
            # its span ends here, and the run's continuation is a span of its own.
            self._end(run, transition, now)
            self._current.set(None)

    def delta(self, delta: object) -> None:
        """Hear a streaming reply's delta: ``run.subscribe_deltas(listener.delta)``.

        The first one of a model call gives its chat span
        ``agentloop.time_to_first_token``. A tool call's ``ToolProgress`` is no token.
        """
        if type(delta) is not ToolProgress and self._first.get() is None:
            self._first.set(time.time_ns())

    # -- spans ----------------------------------------------------------------------

    def _begin(self, now: int) -> _Run:
        name = f"invoke_agent {self._agent_name}" if self._agent_name else "invoke_agent"
        attributes: dict[str, AttributeValue] = {OPERATION: "invoke_agent", **self._common}
        if self._agent_name is not None:
            attributes[AGENT_NAME] = self._agent_name
        # The current context is the caller's: a run inside their span nests under it.
        span = self._tracer.start_span(
            name, kind=SpanKind.INTERNAL, start_time=now, attributes=attributes
        )
        return _Run(
            span=span,
            context=trace.set_span_in_context(span),
            state=State.AWAITING_MODEL,
            steps=0,
            calls=0,
            mark=now,
        )

    def _model_call(self, run: _Run, transition: Transition, now: int) -> None:
        model = transition.model or self._model_name  # a fallback model names itself
        name = f"chat {model}" if model else "chat"
        attributes: dict[str, AttributeValue] = {
            OPERATION: "chat",
            **self._common,
            AGENTLOOP_TRIGGER: transition.trigger.value,
            AGENTLOOP_STEPS: transition.steps,
            AGENTLOOP_CALLS: transition.calls,
        }
        if transition.model is not None:
            attributes[REQUEST_MODEL] = transition.model
        reported = (
            self._usage(transition)
            if self._usage is not None
            else None
            if transition.usage is None
            else transition.usage._asdict()
        )
        if reported:
            for key, count in reported.items():
                if key in _TOKENS and type(count) is int:
                    attributes[_TOKENS[key]] = count
                    run.tokens[key] = run.tokens.get(key, 0) + count
        began = _began(transition, now, run.mark)
        first = self._first.get()
        if first is not None:
            self._first.set(None)
            attributes[AGENTLOOP_TIME_TO_FIRST_TOKEN] = max(first - began, 0) / 1e9
        span = self._tracer.start_span(
            name,
            context=run.context,
            kind=SpanKind.CLIENT,
            start_time=began,
            attributes=attributes,
        )
        if transition.trigger in _RAISED:
            exc = transition.exception
            span.set_attribute(ERROR_TYPE, _error_type(exc))
            if exc is not None:
                span.record_exception(exc, timestamp=now)
            said = transition.error or f"the model raised {_error_type(exc)}"
            span.set_status(Status(StatusCode.ERROR, said))
        span.end(end_time=now)

    def _tool_call(self, run: _Run, transition: Transition, now: int) -> None:
        tool = transition.tool or ""
        attributes: dict[str, AttributeValue] = {
            OPERATION: "execute_tool",
            TOOL_NAME: tool,
            TOOL_TYPE: "function",
            AGENTLOOP_RESULT_STATUS: transition.result_status or "",
            AGENTLOOP_STEPS: transition.steps,
            AGENTLOOP_CALLS: transition.calls,
        }
        if transition.call_id is not None:
            attributes[TOOL_CALL_ID] = transition.call_id
        span = self._tracer.start_span(
            f"execute_tool {tool}",
            context=run.context,
            kind=SpanKind.INTERNAL,
            start_time=_began(
                transition, now, run.tool_start if run.tool_start is not None else run.mark
            ),
            attributes=attributes,
        )
        run.tool_start = None
        if transition.result_status == "error":
            exc = transition.exception
            span.set_attribute(ERROR_TYPE, _error_type(exc))
            if exc is not None:
                span.record_exception(exc, timestamp=now)
            span.set_status(Status(StatusCode.ERROR, _result_message(transition)))
        span.end(end_time=now)

    def _end(self, run: _Run, transition: Transition, now: int) -> None:
        span = run.span
        span.set_attribute(AGENTLOOP_STATUS, transition.dest.value)
        span.set_attribute(AGENTLOOP_STEPS, transition.steps)
        span.set_attribute(AGENTLOOP_CALLS, transition.calls)
        if transition.reason is not None:
            span.set_attribute(AGENTLOOP_REASON, transition.reason)
        for key, count in run.tokens.items():
            span.set_attribute(_TOKENS[key], count)
        if transition.dest in _ERRORS:
            span.set_attribute(ERROR_TYPE, transition.dest.value)
            span.set_status(Status(StatusCode.ERROR, transition.error or transition.dest.value))
        span.end(end_time=now)

    def _end_unseen(self, run: _Run) -> None:
        run.span.set_attribute(AGENTLOOP_END_UNSEEN, True)
        run.span.set_attribute(AGENTLOOP_STEPS, run.steps)
        run.span.set_attribute(AGENTLOOP_CALLS, run.calls)
        run.span.end(end_time=run.mark)


def _result_message(transition: Transition) -> str:
    """``Type: message`` from an ``error`` result's content, as the model was told.

    Mid-batch, the result is not appended yet: the exception behind it says the same.
    """
    for message in transition.appended:
        if message.get("kind") == "tool_result" and message.get("id") == transition.call_id:
            content = message.get("content")
            if isinstance(content, dict):
                return f"{content.get('type')}: {content.get('message')}"
            return str(content)
    if transition.exception is not None:
        content = exception_content(transition.exception)
        return f"{content['type']}: {content['message']}"
    return "the tool failed"


def _began(transition: Transition, now: int, otherwise: int) -> int:
    """When the model call or tool that ``transition`` answers began, in ``time_ns``.

    ``took`` is the engine's measure of it: each of several calls run at once
    gets its own start, and a run's first model call its duration. Without
    one (an interruption, a clock of the caller's own), the transition before.
    """
    took = transition.took
    if took is None or not 0 <= took < 1e9:
        return otherwise
    return now - int(took * 1e9)
