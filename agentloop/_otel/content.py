"""Message content on spans: the GenAI conventions' shape, captured only when the user opts in.

The conventions call instructions, messages and tool arguments and results
sensitive: instrumentations do not capture them unless the user opts in,
with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (the variable
OpenTelemetry's GenAI instrumentations read) or an explicit setting.
Messages go on spans as JSON strings (the Python SDK's attributes hold no
structures), each ``{"role", "parts": [...]}`` after the conventions' input
and output messages schemas.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final

import orjson

from agentloop._core.json import exception_content

if TYPE_CHECKING:
    from agentloop._core.values import Transition

__all__ = [
    "CAPTURE_VARIABLE",
    "arguments_json",
    "call_arguments",
    "captures",
    "input_messages",
    "output_messages",
    "result_message",
]

#: The conventions' opt-in for content: ``true`` (older instrumentations' form),
#: ``SPAN_ONLY`` or ``SPAN_AND_EVENT`` put it on spans; anything else does not.
CAPTURE_VARIABLE: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_ON_SPANS: Final = frozenset({"true", "span_only", "span_and_event"})


def captures(setting: bool | None) -> bool:
    """Whether content goes on spans: ``setting``, or, when ``None``, the environment's opt-in."""
    if setting is None:
        return os.environ.get(CAPTURE_VARIABLE, "").strip().lower() in _ON_SPANS
    if type(setting) is not bool:
        raise TypeError(
            f"expected capture_content to be True, False or None (the environment's "
            f"{CAPTURE_VARIABLE} decides), got {setting!r:.80}"
        )
    return setting


def input_messages(history_json: bytes) -> str:
    """``gen_ai.input.messages``: the history a request carried, in the order it was sent."""
    return _dumps([_message(message) for message in orjson.loads(history_json)])


def output_messages(reply_json: bytes) -> str:
    """``gen_ai.output.messages``: the model's reply, one message with its finish reason."""
    reply = orjson.loads(reply_json)
    message = _message(reply)
    kind = reply.get("kind") if type(reply) is dict else None
    message["role"] = "assistant"
    message["finish_reason"] = "tool_call" if kind in ("call", "calls") else "stop"
    return _dumps([message])


def arguments_json(call: dict[str, Any]) -> str:
    """``gen_ai.tool.call.arguments``: a call's arguments, as the model sent them."""
    return _dumps(call.get("arguments"))


def call_arguments(reply_json: bytes) -> dict[str, str]:
    """Each call's arguments in a reply, by id, as ``gen_ai.tool.call.arguments`` has them."""
    reply = orjson.loads(reply_json)
    if type(reply) is not dict:
        return {}
    calls = [reply] if reply.get("kind") == "call" else reply.get("calls")
    if type(calls) is not list:
        return {}
    return {str(call.get("id")): arguments_json(call) for call in calls if type(call) is dict}


def result_message(transition: Transition) -> str:
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


def _message(message: object) -> dict[str, Any]:
    """One agentloop message as the conventions' ``{"role", "parts"}``."""
    if type(message) is not dict:
        return {"role": "user", "parts": [{"type": "unknown", "content": message}]}
    kind = message.get("kind")
    text = message.get("text")
    if kind in ("system", "user", "final"):
        role = "assistant" if kind == "final" else kind
        return {"role": role, "parts": [{"type": "text", "content": text}]}
    if kind == "call":
        return {"role": "assistant", "parts": [_tool_call(message)]}
    if kind == "calls":
        parts = [{"type": "text", "content": text}] if text else []
        calls = message.get("calls")
        parts += (
            [_tool_call(call) for call in calls if type(call) is dict]
            if type(calls) is list
            else []
        )
        return {"role": "assistant", "parts": parts}
    if kind == "tool_result":
        part = {
            "type": "tool_call_response",
            "id": message.get("id"),
            "response": message.get("content"),
        }
        return {"role": "tool", "parts": [part]}
    # A kind of the library's own (a summary's, say): a part of that type, as it is.
    fields = {key: value for key, value in message.items() if key != "kind"}
    return {"role": "user", "parts": [{**fields, "type": str(kind)}]}


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "tool_call",
        "id": call.get("id"),
        "name": call.get("name"),
        "arguments": call.get("arguments"),
    }


def _dumps(value: object) -> str:
    return orjson.dumps(value, default=str).decode()
