"""The attributes' names: the GenAI semantic conventions' and agentloop's own."""

from __future__ import annotations

from typing import Final

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
    "AGENT_NAME",
    "CONVERSATION_ID",
    "ERROR_TYPE",
    "INPUT_MESSAGES",
    "INPUT_TOKENS",
    "OPERATION",
    "OUTPUT_MESSAGES",
    "OUTPUT_TOKENS",
    "PROVIDER_NAME",
    "REQUEST_MODEL",
    "REQUEST_STREAM",
    "TIME_TO_FIRST_CHUNK",
    "TOOL_CALL_ARGUMENTS",
    "TOOL_CALL_ID",
    "TOOL_CALL_RESULT",
    "TOOL_NAME",
    "TOOL_TYPE",
]

# GenAI semantic conventions (development status), as strings: the
# semantic-conventions package only has them in an unstable module.
OPERATION: Final = "gen_ai.operation.name"
#: On a run span: the conversation a run is a turn of (``after=``, ``conversation=``).
CONVERSATION_ID: Final = "gen_ai.conversation.id"
AGENT_NAME: Final = "gen_ai.agent.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
REQUEST_STREAM: Final = "gen_ai.request.stream"
TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
TOOL_TYPE: Final = "gen_ai.tool.type"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
ERROR_TYPE: Final = "error.type"
# Content, captured only on the user's opt-in (``agentloop._otel.content``).
INPUT_MESSAGES: Final = "gen_ai.input.messages"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"

#: The counters after the transition that ended the span.
AGENTLOOP_STEPS: Final = "agentloop.steps"
AGENTLOOP_CALLS: Final = "agentloop.calls"
#: On a run span: the terminal state, and ``max_steps``/``max_calls`` when exhausted.
AGENTLOOP_STATUS: Final = "agentloop.status"
AGENTLOOP_REASON: Final = "agentloop.reason"
#: On a run span: the run's id in its ledger, for a durable run.
AGENTLOOP_RUN_ID: Final = "agentloop.run_id"
#: On a chat span: how the model call ended (``model_replied``, ``model_raised``, ...;
#: ``summary_written`` and the like for a summary's call).
AGENTLOOP_TRIGGER: Final = "agentloop.trigger"
#: On a tool span: the result's status (``ok``, ``error``, ``denied``, ..., ``cancelled``).
AGENTLOOP_RESULT_STATUS: Final = "agentloop.result_status"
#: On a chat span whose reply streamed (``OtelListener.delta`` heard it): seconds from
#: the call's start to its first delta (``gen_ai.response.time_to_first_chunk`` too).
AGENTLOOP_TIME_TO_FIRST_TOKEN: Final = "agentloop.time_to_first_token"  # noqa: S105 - a name
#: On a run span ended without its terminal transition (see ``OtelListener``).
AGENTLOOP_END_UNSEEN: Final = "agentloop.end_unseen"
