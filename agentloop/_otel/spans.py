"""``OtelListener``: a run's spans, current while its model calls and tools run.

On a ``Loop`` or a run, the driver asks the listener for its listener of
that run (``for_run``), whose ``around(request)`` it enters around each
request it performs: the chat span around the model call (and around each
pull of a stream), the tool's span around its dispatch, the run's span
around the rest (a review, a wait). The span is started there, and so is
current while the model or the tool runs: an instrumented HTTP client, a
database driver or a ``Loop`` run inside a tool nests under it. The
transition that answers the request, heard as any listener hears it, sets
the span's attributes and status and ends it.

Called by hand (``listener(transition)``: events read back, a host that
gives its listeners transitions only), the listener makes the same spans
after the fact, with explicit times: each starts its transition's ``took``
before it was heard.
"""

from __future__ import annotations

import contextvars
import time

# Imported at run time, not under TYPE_CHECKING: typing.get_type_hints reads the public
# signatures (tests/test_type_hints.py).
from collections.abc import Callable, Mapping
from typing import Final

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.util.types import AttributeValue

from agentloop._core.context_policy import Summarise
from agentloop._core.table import MODEL_ANSWERS, TERMINAL, State, Trigger
from agentloop._core.values import AskModel, RecordedException, RunTool, Transition
from agentloop._drivers.progress import ToolProgress
from agentloop._drivers.transition import Request, RunView
from agentloop._otel.content import (
    arguments_json,
    call_arguments,
    captures,
    input_messages,
    output_messages,
    result_message,
)
from agentloop._otel.names import (
    AGENT_NAME,
    AGENTLOOP_CALLS,
    AGENTLOOP_END_UNSEEN,
    AGENTLOOP_REASON,
    AGENTLOOP_RESULT_STATUS,
    AGENTLOOP_RUN_ID,
    AGENTLOOP_STATUS,
    AGENTLOOP_STEPS,
    AGENTLOOP_TIME_TO_FIRST_TOKEN,
    AGENTLOOP_TRIGGER,
    CONVERSATION_ID,
    ERROR_TYPE,
    INPUT_MESSAGES,
    INPUT_TOKENS,
    OPERATION,
    OUTPUT_MESSAGES,
    OUTPUT_TOKENS,
    PROVIDER_NAME,
    REQUEST_MODEL,
    REQUEST_STREAM,
    TIME_TO_FIRST_CHUNK,
    TOOL_CALL_ARGUMENTS,
    TOOL_CALL_ID,
    TOOL_CALL_RESULT,
    TOOL_NAME,
    TOOL_TYPE,
)
from agentloop._otel.runs import OpenRun, Scope, began_at, end_open

__all__ = ["OtelListener"]

_RAISED: Final = frozenset({Trigger.MODEL_RAISED, Trigger.SUMMARY_RAISED})
_REPLIES: Final = frozenset({Trigger.MODEL_REPLIED, Trigger.SUMMARY_WRITTEN})
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


class _Following:
    """``OtelListener.for_run(run)``: the listener of that one run, current around its requests."""

    __slots__ = ("_conversation_id", "_listener", "_run", "_run_id")

    def __init__(
        self, listener: OtelListener, run_id: str | None, conversation_id: str | None
    ) -> None:
        self._listener, self._run_id = listener, run_id
        self._conversation_id = conversation_id
        self._run: OpenRun | None = None

    def __repr__(self) -> str:
        return f"{self._listener!r}.for_run(run_id={self._run_id!r})"

    def __call__(self, transition: Transition) -> None:
        now = time.time_ns()
        run = self._run
        if run is None or run.ended:  # a run subscribed mid-way, or going on after a pause
            began = began_at(transition, now, now)
            run = self._run = self._listener._begin(began, self._run_id, self._conversation_id)
        self._listener._heard(run, transition, now)

    def around(self, need: Request) -> Scope:
        now = time.time_ns()
        run = self._run
        if run is None or run.ended:
            run = self._run = self._listener._begin(now, self._run_id, self._conversation_id)
        return self._listener._scope(run, need, now)


class OtelListener:
    """A listener that turns each run's transitions into OpenTelemetry spans.

    ``tracer_provider`` defaults to the global one. ``agent_name``,
    ``model_name`` and ``provider_name`` fill ``gen_ai.agent.name``,
    ``gen_ai.request.model`` and ``gen_ai.provider.name`` (and the span names
    ``invoke_agent {agent_name}``, ``chat {model_name}``) when given.

    On a ``Loop`` or a run, each model call's and each tool's span is current
    while it runs: what the model or the tool does under OpenTelemetry (an
    instrumented HTTP client, a database driver, another run) nests under it,
    in the run's trace. A stream's reading is inside its chat span, and the
    caller's code between two deltas is not; the span ends with the stream's
    last chunk.

    ``capture_content``: whether messages, tool arguments and results go on
    the spans (``gen_ai.input.messages``, ``gen_ai.output.messages``,
    ``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``). They are
    sensitive, so the default, ``None``, follows the GenAI conventions' opt-in:
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` set to ``true``,
    ``SPAN_ONLY`` or ``SPAN_AND_EVENT`` (read when the listener is made).

    Token counts come from each reply's ``usage`` (``transition.usage``): they
    go on that call's span as ``gen_ai.usage.*`` and, summed, on the run's
    span. ``usage``, when given, replaces that: a callable that gets each model
    call's transition and returns ``{'input_tokens': n, 'output_tokens': m}``
    (either may be left out) or None.

    One listener serves any number of runs, one after another, at once, or
    one inside another's tool: each run it is given to has its own spans. A
    run whose end the listener never heard (one abandoned part-way) is ended
    when the next run begins in the same context (thread or task), unless
    that run is inside one of its calls, at the last moment it was seen,
    with ``agentloop.end_unseen`` set. Called by hand with transitions, the
    listener keeps each run's spans in a context variable and makes them
    after the fact, each starting its transition's ``took`` before.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        agent_name: str | None = None,
        model_name: str | None = None,
        provider_name: str | None = None,
        usage: Callable[[Transition], Mapping[str, int] | None] | None = None,
        capture_content: bool | None = None,
    ) -> None:
        self._tracer = trace.get_tracer("agentloop", tracer_provider=tracer_provider)
        self._agent_name = agent_name
        self._model_name = model_name
        self._usage = usage
        self._content = captures(capture_content)
        self._common: dict[str, AttributeValue] = {}
        if provider_name is not None:
            self._common[PROVIDER_NAME] = provider_name
        if model_name is not None:
            self._common[REQUEST_MODEL] = model_name
        # One per listener: two listeners on one run keep their own spans.
        # The run heard by hand in this context (``__call__``), and the run followed live
        # that began last in it (``for_run``): a run begun after it while it is idle
        # means it was abandoned.
        self._current: contextvars.ContextVar[OpenRun | None] = contextvars.ContextVar(
            f"agentloop.otel.{id(self):x}", default=None
        )
        self._latest: contextvars.ContextVar[OpenRun | None] = contextvars.ContextVar(
            f"agentloop.otel.latest.{id(self):x}", default=None
        )
        # When the model call under way sent its first delta (a streaming model).
        self._first: contextvars.ContextVar[int | None] = contextvars.ContextVar(
            f"agentloop.otel.first.{id(self):x}", default=None
        )

    def __repr__(self) -> str:
        return f"OtelListener(agent_name={self._agent_name!r}, model_name={self._model_name!r})"

    def for_run(self, run: RunView) -> _Following:
        """The listener of ``run`` alone, whose spans are current around its requests.

        The drivers call this for each run the listener is given to (on the
        ``Loop``, or by ``run.subscribe``), subscribe what it returns, and
        enter its ``around(request)`` around each request they perform.
        """
        return _Following(self, run.run_id, run.conversation_id)

    def __call__(self, transition: Transition) -> None:
        """Record ``transition`` heard by hand: open, extend or close its run's spans."""
        now = time.time_ns()
        run = self._current.get()
        if run is not None and not run.continues(transition):
            self._end_unseen(run)
            run = None
        if run is None:
            run = self._begin(began_at(transition, now, now), None, None, followed=False)
            self._current.set(run)
        self._heard(run, transition, now)
        if run.ended:
            self._current.set(None)

    def delta(self, delta: object) -> None:
        """Hear a streaming reply's delta: ``run.subscribe_deltas(listener.delta)``.

        The first one of a model call gives its chat span
        ``agentloop.time_to_first_token``. A tool call's ``ToolProgress`` is no token.
        """
        if type(delta) is not ToolProgress and self._first.get() is None:
            self._first.set(time.time_ns())

    # -- spans ----------------------------------------------------------------------

    def _begin(
        self, now: int, run_id: str | None, conversation_id: str | None, *, followed: bool = True
    ) -> OpenRun:
        if followed:
            previous = self._latest.get()
            if previous is not None and not previous.ended and not previous.active:
                self._end_unseen(previous)  # idle when another began here: abandoned
        name = f"invoke_agent {self._agent_name}" if self._agent_name else "invoke_agent"
        attributes: dict[str, AttributeValue] = {OPERATION: "invoke_agent", **self._common}
        if self._agent_name is not None:
            attributes[AGENT_NAME] = self._agent_name
        if run_id is not None:
            attributes[AGENTLOOP_RUN_ID] = run_id
        if conversation_id is not None:
            attributes[CONVERSATION_ID] = conversation_id
        # The current context is the caller's (or, for a run inside a tool, the tool's span):
        # the run nests under it.
        span = self._tracer.start_span(
            name, kind=SpanKind.INTERNAL, start_time=now, attributes=attributes
        )
        run = OpenRun(
            span=span,
            context=trace.set_span_in_context(span),
            state=State.AWAITING_MODEL,
            steps=0,
            calls=0,
            mark=now,
        )
        if followed:
            self._latest.set(run)
        return run

    def _scope(self, run: OpenRun, need: Request, now: int) -> Scope:
        """The scope of ``need``: a chat or tool span started now, or the run's own."""
        kind = type(need)
        if kind is AskModel or kind is Summarise:
            name = f"chat {self._model_name}" if self._model_name else "chat"
            attributes: dict[str, AttributeValue] = {OPERATION: "chat", **self._common}
            if self._content:
                attributes[INPUT_MESSAGES] = input_messages(need.history_json)  # type: ignore[union-attr]
            span = self._tracer.start_span(
                name, context=run.context, kind=SpanKind.CLIENT, start_time=now,
                attributes=attributes,
            )  # fmt: skip
            scope = run.chat = Scope(run, span, now)
            return scope
        if kind is RunTool:
            call = need.call  # type: ignore[union-attr]
            tool, call_id = str(call.get("name")), str(call.get("id"))
            attributes = {
                OPERATION: "execute_tool",
                TOOL_NAME: tool,
                TOOL_CALL_ID: call_id,
                TOOL_TYPE: "function",
            }
            if self._content:
                attributes[TOOL_CALL_ARGUMENTS] = arguments_json(call)
            span = self._tracer.start_span(
                f"execute_tool {tool}", context=run.context, kind=SpanKind.INTERNAL,
                start_time=now, attributes=attributes,
            )  # fmt: skip
            scope = run.tools[call_id] = Scope(run, span, now)
            return scope
        return Scope(run, None, now)  # a review, a wait: the run's span is current

    def _heard(self, run: OpenRun, transition: Transition, now: int) -> None:
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

    def _model_call(self, run: OpenRun, transition: Transition, now: int) -> None:
        scope, run.chat = run.chat, None
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
        if transition.agent is not None:  # handoffs: the agent asked
            attributes[AGENT_NAME] = transition.agent
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
        if scope is None:
            began, ended = began_at(transition, now, run.mark), now
        else:
            began, ended = scope.began, scope.left or now
            if scope.pulls > 1:  # entered again for the pulls of a stream
                attributes[REQUEST_STREAM] = True
        first = self._first.get()
        if first is not None:
            self._first.set(None)
            seconds = max(first - began, 0) / 1e9
            attributes[AGENTLOOP_TIME_TO_FIRST_TOKEN] = attributes[TIME_TO_FIRST_CHUNK] = seconds
            attributes[REQUEST_STREAM] = True
        if self._content and transition.trigger in _REPLIES and transition.input_json is not None:
            attributes[OUTPUT_MESSAGES] = output_messages(transition.input_json)
            if scope is None:  # heard after the fact: the calls' spans take their arguments here
                run.arguments.update(call_arguments(transition.input_json))
        if scope is None:
            span = self._tracer.start_span(
                name, context=run.context, kind=SpanKind.CLIENT, start_time=began,
                attributes=attributes,
            )  # fmt: skip
        else:
            span = scope.span  # type: ignore[assignment]  # a chat scope has its span
            span.update_name(name)
            span.set_attributes(attributes)
        if transition.trigger in _RAISED:
            exc = transition.exception
            span.set_attribute(ERROR_TYPE, _error_type(exc))
            if exc is not None:
                span.record_exception(exc, timestamp=now)
            said = transition.error or f"the model raised {_error_type(exc)}"
            span.set_status(Status(StatusCode.ERROR, said))
        span.end(end_time=ended)

    def _tool_call(self, run: OpenRun, transition: Transition, now: int) -> None:
        tool, call_id = transition.tool or "", transition.call_id
        scope = None if call_id is None else run.tools.pop(call_id, None)
        attributes: dict[str, AttributeValue] = {
            OPERATION: "execute_tool",
            TOOL_NAME: tool,
            TOOL_TYPE: "function",
            AGENTLOOP_RESULT_STATUS: transition.result_status or "",
            AGENTLOOP_STEPS: transition.steps,
            AGENTLOOP_CALLS: transition.calls,
        }
        if call_id is not None:
            attributes[TOOL_CALL_ID] = call_id
        if self._content:
            if transition.result_status == "ok" and transition.input_json is not None:
                attributes[TOOL_CALL_RESULT] = transition.input_json.decode()
            arguments = run.arguments.pop(call_id, None) if call_id is not None else None
            if scope is None and arguments is not None:
                attributes[TOOL_CALL_ARGUMENTS] = arguments
        if scope is None:
            start = run.tool_start if run.tool_start is not None else run.mark
            span = self._tracer.start_span(
                f"execute_tool {tool}", context=run.context, kind=SpanKind.INTERNAL,
                start_time=began_at(transition, now, start), attributes=attributes,
            )  # fmt: skip
            ended = now
        else:
            span = scope.span  # type: ignore[assignment]  # a tool scope has its span
            span.set_attributes(attributes)
            ended = scope.left or now
        run.tool_start = None
        if transition.result_status == "error":
            exc = transition.exception
            span.set_attribute(ERROR_TYPE, _error_type(exc))
            if exc is not None:
                span.record_exception(exc, timestamp=now)
            span.set_status(Status(StatusCode.ERROR, result_message(transition)))
        span.end(end_time=ended)

    def _end(self, run: OpenRun, transition: Transition, now: int) -> None:
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
        end_open(run, now)
        span.end(end_time=now)
        run.ended = True

    def _end_unseen(self, run: OpenRun) -> None:
        run.span.set_attribute(AGENTLOOP_END_UNSEEN, True)
        run.span.set_attribute(AGENTLOOP_STEPS, run.steps)
        run.span.set_attribute(AGENTLOOP_CALLS, run.calls)
        end_open(run, run.mark)
        run.span.end(end_time=run.mark)
        run.ended = True
