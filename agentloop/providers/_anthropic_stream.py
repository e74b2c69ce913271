"""A Messages API stream as deltas, then its reply: the events folded as they arrive.

``messages_stream`` (``amessages_stream`` for an async client) is what
``anthropic_messages(..., stream=True)`` converts the SDK's stream with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anthropic

from agentloop._drivers.deltas import ArgumentsDelta, TextDelta, ToolCallStart, UsageDelta
from agentloop.providers._anthropic_reply import messages_outcome
from agentloop.providers._convert import parsed_arguments
from agentloop.providers._streaming import afolded, folded

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Generator

    from anthropic.types import RawMessageStreamEvent

    from agentloop._drivers.deltas import Delta
    from agentloop.providers._convert import Message

__all__ = ["amessages_stream", "messages_stream"]


class _MessagesFold:
    """Messages API stream events folded as they arrive: each one's deltas, the reply at the end."""

    __slots__ = ("blocks", "calls", "done", "input", "output", "read", "stop", "written")

    def __init__(self) -> None:
        # by the block's index: [type, text parts or id, name, argument parts]
        self.blocks: dict[int, list[Any]] = {}
        self.calls: dict[int, int] = {}  # a tool_use block's index: its index among the calls
        self.stop: str | None = None
        self.input = self.output = 0
        self.read: int | None = None
        self.written: int | None = None
        self.done = False  # message_stop came

    def feed(self, event: Any) -> tuple[Delta, ...]:  # a RawMessageStreamEvent, by its type
        kind = event.type
        if kind == "content_block_delta":
            delta = event.delta
            block = self.blocks.get(event.index)
            if block is None:
                return ()
            if delta.type == "text_delta":
                block[1].append(delta.text)
                return (TextDelta(text=delta.text),) if delta.text else ()
            if delta.type == "input_json_delta":
                block[3].append(delta.partial_json)
                if not delta.partial_json:
                    return ()
                return (ArgumentsDelta(index=self.calls[event.index], text=delta.partial_json),)
            return ()
        if kind == "content_block_start":
            start = event.content_block
            if start.type == "text":
                self.blocks[event.index] = ["text", [start.text], "", None]
                return (TextDelta(text=start.text),) if start.text else ()
            if start.type == "tool_use":
                index = self.calls[event.index] = len(self.calls)
                self.blocks[event.index] = ["tool_use", start.id, start.name, []]
                return (ToolCallStart(index=index, id=start.id, name=start.name),)
            return ()
        if kind == "message_start":
            used = event.message.usage
            self.input, self.output = used.input_tokens, used.output_tokens
            self.read, self.written = used.cache_read_input_tokens, used.cache_creation_input_tokens
            return ()
        if kind == "message_delta":
            self.stop = event.delta.stop_reason
            used = event.usage
            self.output = used.output_tokens
            # Newer servers repeat the input counts here; the later count wins.
            if used.input_tokens is not None:
                self.input = used.input_tokens
            if used.cache_read_input_tokens is not None:
                self.read = used.cache_read_input_tokens
            if used.cache_creation_input_tokens is not None:
                self.written = used.cache_creation_input_tokens
            read = self.read or 0
            return (
                UsageDelta(
                    input_tokens=self.input + read + (self.written or 0),
                    output_tokens=self.output,
                    cached_tokens=read,
                ),
            )
        if kind == "message_stop":
            self.done = True
        return ()

    def missing(self) -> str | None:
        return None if self.done else "message_stop"

    def reply(self) -> Message:
        blocks = []
        for index in sorted(self.blocks):
            kind, first, name, parts = self.blocks[index]
            if kind == "text":
                blocks.append((kind, "".join(first), "", None))
            else:  # no input_json_delta at all: a tool without parameters
                blocks.append((kind, first, name, parsed_arguments("".join(parts))))
        return messages_outcome(self.stop, self.input, self.output, self.read, self.written, blocks)


def messages_stream(
    events: anthropic.Stream[RawMessageStreamEvent],
) -> Generator[Delta | Message, None, None]:
    """The deltas of a Messages API stream, then its reply."""
    return folded(events, _MessagesFold(), anthropic)


def amessages_stream(events: Any) -> AsyncGenerator[Delta | Message, None]:
    """``messages_stream`` over an async SDK stream."""
    return afolded(events, _MessagesFold(), anthropic)
