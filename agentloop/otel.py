"""agentloop.otel: OpenTelemetry spans for runs, after the GenAI semantic conventions.

``OtelListener`` is a listener: ``Loop(..., listeners=[OtelListener()])`` or
``run.subscribe(OtelListener())``, under either driver. For each run it emits
an ``invoke_agent`` span, with a ``chat`` child span per model call and an
``execute_tool`` child span per tool run, named and attributed as the
OpenTelemetry GenAI conventions say (``gen_ai.operation.name``,
``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ...), plus ``agentloop.*``
attributes for what they do not cover (the counters, the result status, the
terminal state).

Each chat and tool span is current while its model call or tool runs, so
what runs there under OpenTelemetry (an instrumented HTTP client, a
database driver, a ``Loop`` run inside a tool) nests under it, in one
trace. Messages, tool arguments and results go on the spans only when the
user opts in (``capture_content=True``, or the conventions'
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``).

Needs the ``otel`` extra (``opentelemetry-api``); importing this module
without it raises an ``ImportError`` that says so.
"""

from __future__ import annotations

try:
    import opentelemetry.trace as _trace  # noqa: F401 - only to say what is missing, first
except ModuleNotFoundError as exc:  # missing; a script named like it fails on its own
    raise ImportError(
        "agentloop.otel needs the OpenTelemetry API: pip install 'agentloop-fsm[otel]'"
    ) from exc

from agentloop._names import publish as _publish
from agentloop._otel.names import (
    AGENTLOOP_CALLS,
    AGENTLOOP_END_UNSEEN,
    AGENTLOOP_REASON,
    AGENTLOOP_RESULT_STATUS,
    AGENTLOOP_RUN_ID,
    AGENTLOOP_STATUS,
    AGENTLOOP_STEPS,
    AGENTLOOP_TIME_TO_FIRST_TOKEN,
    AGENTLOOP_TRIGGER,
)
from agentloop._otel.spans import OtelListener

__all__ = [
    "AGENTLOOP_CALLS",
    "AGENTLOOP_END_UNSEEN",
    "AGENTLOOP_REASON",
    "AGENTLOOP_RESULT_STATUS",
    "AGENTLOOP_RUN_ID",
    "AGENTLOOP_STATUS",
    "AGENTLOOP_STEPS",
    "AGENTLOOP_TIME_TO_FIRST_TOKEN",
    "AGENTLOOP_TRIGGER",
    "OtelListener",
]

_publish(__name__, globals(), __all__)
