"""A Messages API response as a reply: its stop reason, its usage, its text and tool calls.

``messages_reply`` takes a whole response; ``messages_outcome`` takes the
parts of one, whole or streamed (``_anthropic_stream`` folds the stream's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from agentloop._errors import IncompleteReply
from agentloop.providers._convert import reply, usage

if TYPE_CHECKING:
    from collections.abc import Iterable

    from anthropic.types import Message as AnthropicMessage

    from agentloop.providers._convert import Message

__all__ = ["FINAL_ANSWER", "messages_outcome", "messages_reply"]

# Why a reply stopped, when it cannot be taken as it is.
_STOPPED = {
    "max_tokens": "the reply was cut off at max_tokens",
    "model_context_window_exceeded": "the reply was cut off: the context window is full",
    "refusal": "the model refused (stop_reason 'refusal')",
    "pause_turn": "the model paused its turn (stop_reason 'pause_turn'), which agentloop "
    "does not resume",
}

#: The tool a typed output is asked through when the SDK has no structured output.
FINAL_ANSWER = "final_answer"


def messages_reply(message: AnthropicMessage) -> Message:
    """The reply for a Messages API response: its text blocks and its ``tool_use`` blocks."""
    used = message.usage
    blocks = [
        ("text", block.text, "", None)
        if block.type == "text"
        else ("tool_use", block.id, block.name, block.input)  # the API parses the input
        for block in message.content
        if block.type == "text" or block.type == "tool_use"
    ]
    return messages_outcome(
        message.stop_reason,
        used.input_tokens,
        used.output_tokens,
        used.cache_read_input_tokens,
        used.cache_creation_input_tokens,
        blocks,
    )


def messages_outcome(
    stop_reason: str | None,
    input_tokens: int,
    output_tokens: int,
    read: int | None,
    written: int | None,
    blocks: Iterable[tuple[str, str, str, Any]],
) -> Message:
    """The reply for a message's parts, whole or streamed: ``(type, text or id, name, input)``."""
    # input_tokens counts only what was neither read from nor written to the cache.
    prompt = input_tokens + (read or 0) + (written or 0)
    tokens = usage(prompt, output_tokens, read or 0)
    stopped = _STOPPED.get(stop_reason or "")
    if stopped:
        raise IncompleteReply(stopped, tokens)
    texts: list[str] = []
    calls: list[Message] = []
    for kind, text_or_id, name, arguments in blocks:
        if kind == "text":
            texts.append(text_or_id)
        elif name == FINAL_ANSWER:  # the output, asked as a tool (an SDK without output_config)
            texts, calls = [orjson.dumps(arguments).decode()], []
            break
        else:
            calls.append({"id": text_or_id, "name": name, "arguments": arguments})
    return reply("".join(texts), calls, tokens)
