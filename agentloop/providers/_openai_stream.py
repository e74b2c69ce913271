"""OpenAI streams as deltas, then their reply: chat chunks or Responses API events, folded.

``chat_stream`` and ``responses_stream`` (``achat_stream`` and
``aresponses_stream`` for an async client) are what ``openai_chat`` and
``openai_responses`` convert the SDK's stream with when ``stream=True``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import openai
import orjson

from agentloop._drivers.deltas import ArgumentsDelta, TextDelta, ToolCallStart, UsageDelta
from agentloop.providers._compat import CallIds, extra, thought_signature
from agentloop.providers._openai_reply import chat_outcome, chat_usage, responses_reply
from agentloop.providers._streaming import afolded, error_event, folded

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Generator

    from openai.types.chat import ChatCompletionChunk
    from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall
    from openai.types.responses import Response, ResponseStreamEvent

    from agentloop._drivers.deltas import Delta
    from agentloop.providers._convert import Message

__all__ = ["achat_stream", "aresponses_stream", "chat_stream", "responses_stream"]


class _ChatFold:
    """Chat Completions chunks folded as they arrive: the deltas of each, the reply at the end.

    Calls are told apart as compatible servers send them, not only as OpenAI
    does: a tool-call delta continues the call its ``index`` opened, unless
    it brings an id other than that call's (a server that sends every call at
    index 0); one without an ``index`` continues the call last opened, unless
    it brings an id of its own. Arguments sent as an object are its JSON
    text, and usage found only in Groq's ``x_groq`` is the usage.
    """

    __slots__ = ("at", "calls", "choice", "finish", "ids", "refusal", "text", "used")

    #: Read to the end: the usage chunk comes after the one with the finish_reason.
    done = False

    def __init__(self, fresh: bool = False) -> None:
        self.text: list[str] = []
        self.refusal: list[str] = []
        # In the order they opened: [type, id, name, [argument texts], the server's id, signature]
        self.calls: list[list[Any]] = []
        self.at: dict[int | None, int] = {}  # the server's index (None: none): its call's place
        self.ids = CallIds(fresh)
        self.finish: str | None = None
        self.used: Message | None = None
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
        reported = chunk.usage
        if reported is None and choices:  # Groq's, on its last chunk
            groq = extra(chunk, "x_groq")
            reported = groq.get("usage") if type(groq) is dict else None
        used = chat_usage(reported)
        if used is not None:  # the last chunk (include_usage), or one with the finish
            self.used = used
            out.append(UsageDelta(**used))
        for choice in choices:
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
                self.feed_call(call, out)
        return out

    def feed_call(self, call: ChoiceDeltaToolCall, out: list[Delta]) -> None:
        """One tool-call delta: a call's start (a new place), or more of its arguments."""
        index = call.index
        place = self.at.get(index)
        if place is None and index is None and self.calls:
            place = len(self.calls) - 1  # no index: the call last opened
        given = call.id
        function = call.function
        if place is None or (given and given != self.calls[place][4]):
            name = (function.name if function else None) or ""
            place = self.at[index] = len(self.calls)
            call_id = self.ids(given)
            signature = thought_signature(call)  # Gemini's, with the call's start
            self.calls.append([call.type or "function", call_id, name, [], given, signature])
            out.append(ToolCallStart(index=place, id=call_id, name=name))
        arguments = function.arguments if function is not None else None
        if arguments:
            if type(arguments) is not str:  # an object, where a server sends one
                arguments = orjson.dumps(arguments).decode()
            self.calls[place][3].append(arguments)
            out.append(ArgumentsDelta(index=place, text=arguments))

    def missing(self) -> str | None:
        return "finish_reason" if self.choice is not None and self.finish is None else None

    def reply(self) -> Message:
        calls = [
            (kind, call_id, name, "".join(parts), signature)
            for kind, call_id, name, parts, _, signature in self.calls
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
    chunks: openai.Stream[ChatCompletionChunk], fresh: bool = False
) -> Generator[Delta | Message, None, None]:
    """The deltas of a chat completion's chunks, then its reply (``fresh``: ids of our own)."""
    return folded(chunks, _ChatFold(fresh), openai)


def achat_stream(chunks: Any, fresh: bool = False) -> AsyncGenerator[Delta | Message, None]:
    """``chat_stream`` over an async SDK stream."""
    return afolded(chunks, _ChatFold(fresh), openai)


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

    def missing(self) -> str | None:
        return "response.completed" if self.final is None else None

    def reply(self) -> Message:
        assert self.final is not None, "folded() reads the reply once its last event came"
        return responses_reply(self.final)


def responses_stream(
    events: openai.Stream[ResponseStreamEvent],
) -> Generator[Delta | Message, None, None]:
    """The deltas of a Responses API stream, then its reply."""
    return folded(events, _ResponsesFold(), openai)


def aresponses_stream(events: Any) -> AsyncGenerator[Delta | Message, None]:
    """``responses_stream`` over an async SDK stream."""
    return afolded(events, _ResponsesFold(), openai)
