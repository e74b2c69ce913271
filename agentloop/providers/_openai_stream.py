"""OpenAI streams as deltas, then their reply: chat chunks or Responses API events, folded.

``chat_stream`` and ``responses_stream`` (``achat_stream`` and
``aresponses_stream`` for an async client) are what ``openai_chat`` and
``openai_responses`` convert the SDK's stream with when ``stream=True``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import openai

from agentloop._streams import ArgumentsDelta, TextDelta, ToolCallStart, UsageDelta
from agentloop.providers._openai_reply import chat_outcome, responses_reply
from agentloop.providers._streaming import afolded, ended_early, error_event, folded

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Generator

    from openai.types.chat import ChatCompletionChunk
    from openai.types.completion_usage import CompletionUsage
    from openai.types.responses import Response, ResponseStreamEvent

    from agentloop._streams import Delta
    from agentloop.providers._convert import Message

__all__ = ["achat_stream", "aresponses_stream", "chat_stream", "responses_stream"]


class _ChatFold:
    """Chat Completions chunks folded as they arrive: the deltas of each, the reply at the end."""

    __slots__ = ("calls", "choice", "finish", "refusal", "text", "used")

    #: Read to the end: the usage chunk comes after the one with the finish_reason.
    done = False

    def __init__(self) -> None:
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, list[Any]] = {}  # index: [type, id, name, [argument texts]]
        self.finish: str | None = None
        self.used: CompletionUsage | None = None
        self.choice: str | None = None  # "" once a chunk had a choice

    def feed(self, chunk: ChatCompletionChunk) -> list[Delta] | tuple[Delta, ...]:
        choices = chunk.choices
        if chunk.usage is None and len(choices) == 1:  # the common chunk: a piece of text
            choice = choices[0]
            delta = choice.delta
            if (
                choice.index == 0
                and choice.finish_reason is None
                and delta.tool_calls is None
                and not delta.refusal
            ):
                self.choice = ""
                content = delta.content
                if content:
                    self.text.append(content)
                    return (TextDelta(text=content),)
                return ()
        out: list[Delta] = []
        if chunk.usage is not None:  # the last chunk (include_usage), with no choices
            self.used = used = chunk.usage
            details = used.prompt_tokens_details
            out.append(
                UsageDelta(
                    input_tokens=used.prompt_tokens,
                    output_tokens=used.completion_tokens,
                    cached_tokens=(details.cached_tokens if details else None) or 0,
                )
            )
        for choice in chunk.choices:
            if choice.index != 0:
                continue  # the first choice is the reply, as unstreamed
            self.choice = ""
            if choice.finish_reason is not None:
                self.finish = choice.finish_reason
            delta = choice.delta
            if delta.content:
                self.text.append(delta.content)
                out.append(TextDelta(text=delta.content))
            if delta.refusal:
                self.refusal.append(delta.refusal)
            for call in delta.tool_calls or ():
                entry = self.calls.get(call.index)
                function = call.function
                if entry is None:
                    name = (function.name if function else None) or ""
                    entry = self.calls[call.index] = [call.type or "function", call.id, name, []]
                    out.append(ToolCallStart(index=call.index, id=call.id or "", name=name))
                if function is not None and function.arguments:
                    entry[3].append(function.arguments)
                    out.append(ArgumentsDelta(index=call.index, text=function.arguments))
        return out

    def reply(self) -> Message:
        if self.choice is not None and self.finish is None:
            raise ended_early("finish_reason")
        calls = [
            (kind, call_id, name, "".join(parts))
            for kind, call_id, name, parts in (self.calls[i] for i in sorted(self.calls))
        ]
        return chat_outcome(
            self.used,
            self.finish,
            "".join(self.text) or None,
            "".join(self.refusal) or None,
            self.choice,
            calls,
        )


def chat_stream(
    chunks: openai.Stream[ChatCompletionChunk],
) -> Generator[Delta | Message, None, None]:
    """The deltas of a chat completion's chunks, then its reply."""
    return folded(chunks, _ChatFold(), openai)


def achat_stream(chunks: Any) -> AsyncGenerator[Delta | Message, None]:
    """``chat_stream`` over an async SDK stream."""
    return afolded(chunks, _ChatFold(), openai)


class _ResponsesFold:
    """Responses API stream events folded: the deltas of each, the reply from the last."""

    __slots__ = ("calls", "final")

    def __init__(self) -> None:
        self.calls: dict[int, int] = {}  # output_index: the call's index among the calls
        self.final: Response | None = None

    @property
    def done(self) -> bool:
        return self.final is not None

    def feed(self, event: Any) -> tuple[Delta, ...]:  # a ResponseStreamEvent, by its type
        kind = event.type
        if kind == "response.output_text.delta":
            return (TextDelta(text=event.delta),) if event.delta else ()
        if kind == "response.function_call_arguments.delta":
            index = self.calls.get(event.output_index)
            if index is None or not event.delta:
                return ()
            return (ArgumentsDelta(index=index, text=event.delta),)
        if kind == "response.output_item.added":
            item = event.item
            if item.type != "function_call":
                return ()
            index = self.calls[event.output_index] = len(self.calls)
            start = ToolCallStart(index=index, id=item.call_id, name=item.name)
            if item.arguments:
                return (start, ArgumentsDelta(index=index, text=item.arguments))
            return (start,)
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            self.final = response = event.response
            used = response.usage
            if used is not None:
                return (
                    UsageDelta(
                        input_tokens=used.input_tokens,
                        output_tokens=used.output_tokens,
                        cached_tokens=used.input_tokens_details.cached_tokens,
                    ),
                )
            return ()
        if kind == "error":
            raise error_event(event.code, event.message)
        return ()

    def reply(self) -> Message:
        if self.final is None:
            raise ended_early("response.completed")
        return responses_reply(self.final)


def responses_stream(
    events: openai.Stream[ResponseStreamEvent],
) -> Generator[Delta | Message, None, None]:
    """The deltas of a Responses API stream, then its reply."""
    return folded(events, _ResponsesFold(), openai)


def aresponses_stream(events: Any) -> AsyncGenerator[Delta | Message, None]:
    """``responses_stream`` over an async SDK stream."""
    return afolded(events, _ResponsesFold(), openai)
