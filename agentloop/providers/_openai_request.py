"""OpenAI's requests: the history as Chat Completions ``messages`` and Responses ``input``.

Each is a fold (``_fold.py``): the record's messages are converted once each,
and a step converts only those recorded since the last one.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from agentloop._core.messages import SIGNATURE
from agentloop.providers._compat import DEFAULT, SKIP_SIGNATURE, Compat, ShortIds
from agentloop.providers._convert import (
    Message,
    arguments_text,
    assistant_turn,
    result_content,
    result_text,
    unknown_kind,
)
from agentloop.providers._fold import Fold, folded, last_own

if TYPE_CHECKING:
    from agentloop._core.requests import Messages

__all__ = ["_ChatFold", "_chat_messages", "_responses_input"]


def _chat_messages(
    history: list[Message] | Messages, compat: Compat = DEFAULT, key: object = None
) -> list[dict[str, Any]]:
    """The history as Chat Completions ``messages``, as ``compat`` says the server takes them.

    The record's messages are converted once each, kept under ``key`` (``folded``).
    """
    return folded(history, key, partial(_ChatFold, compat))


class _ChatFold(Fold[list[dict[str, Any]]]):
    """Chat Completions ``messages``, a history message at a time."""

    __slots__ = ("compat", "items", "signed", "wire")

    def __init__(self, compat: Compat) -> None:
        super().__init__()
        self.compat = compat
        self.items: list[dict[str, Any]] = []
        self.wire = ShortIds() if compat.short_ids else None
        self.signed: list[int] = []  # items given the stand-in signature in the current turn

    def add(self, index: int, message: Message) -> None:  # the commonest kinds first
        compat, wire, kind = self.compat, self.wire, message.get("kind")
        if kind == "tool_result":
            call_id = message["id"] if wire is None else wire(message["id"])
            tool = {"role": "tool", "tool_call_id": call_id, "content": result_text(message)}
            if compat.tool_names:
                tool["name"] = message["name"]
            self.items.append(tool)
        elif kind == "call" or kind == "calls":
            text, calls = assistant_turn(message)
            turn: dict[str, Any] = {"role": "assistant"}
            if text:
                turn["content"] = text
            turn["tool_calls"] = [
                {
                    "id": call["id"] if wire is None else wire(call["id"]),
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": arguments_text(call["arguments"]),
                    },
                }
                for call in calls
            ]
            if compat.thought_signatures and _signed(turn["tool_calls"], calls):
                self.signed.append(len(self.items))
            self.items.append(turn)
        elif kind == "user" or kind == "system":
            if kind == "user":
                self._turn_ends()
            self.items.append({"role": kind, "content": message["text"]})
        elif kind == "final":
            self.items.append({"role": "assistant", "content": message["text"]})
        else:
            raise unknown_kind(index, kind)

    def _turn_ends(self) -> None:
        """A user message begins a turn: the steps before it need no stand-in signature."""
        items = self.items
        for at in self.signed:  # a new dict each: a request already sent keeps its own
            first, *rest = items[at]["tool_calls"]
            unsigned = {name: value for name, value in first.items() if name != "extra_content"}
            items[at] = {**items[at], "tool_calls": [unsigned, *rest]}
        self.signed.clear()

    def made(self) -> list[dict[str, Any]]:
        return last_own(self.items)


def _signed(sent: list[dict[str, Any]], calls: list[Message]) -> bool:
    """Each call's thought signature in its tool call, as Gemini's endpoint takes it.

    In the current turn, a step whose first call has none gets Google's
    stand-in there (another provider's calls, or a history written by hand):
    whether it did, so that a later user message takes it back.
    """
    stand_in = False
    for at, (entry, call) in enumerate(zip(sent, calls, strict=True)):
        signature = call.get(SIGNATURE)
        if signature is None and at == 0:
            signature, stand_in = SKIP_SIGNATURE, True
        if signature is not None:
            entry["extra_content"] = {"google": {"thought_signature": signature}}
    return stand_in


def _output(message: Message) -> str | list[dict[str, Any]]:
    """A ``function_call_output``'s output: text, or input items when the result holds an image."""
    return result_content(
        message,
        lambda text: {"type": "input_text", "text": text},
        lambda media, data: {"type": "input_image", "image_url": f"data:{media};base64,{data}"},
    )


def _responses_input(history: list[Message] | Messages, key: object = None) -> list[dict[str, Any]]:
    """The history as Responses API ``input`` items (the record's converted once, under ``key``)."""
    return folded(history, key, _ResponsesFold)


class _ResponsesFold(Fold[list[dict[str, Any]]]):
    """Responses API ``input`` items, a history message at a time."""

    __slots__ = ("items",)

    def __init__(self) -> None:
        super().__init__()
        self.items: list[dict[str, Any]] = []

    def add(self, index: int, message: Message) -> None:  # the commonest kinds first
        out, kind = self.items, message.get("kind")
        if kind == "tool_result":
            out.append(
                {
                    "type": "function_call_output",
                    "call_id": message["id"],
                    "output": _output(message),
                }
            )
        elif kind == "call" or kind == "calls":
            text, calls = assistant_turn(message)
            if text:
                out.append({"role": "assistant", "content": text})
            for call in calls:
                out.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": call["name"],
                        "arguments": arguments_text(call["arguments"]),
                    }
                )
        elif kind == "user" or kind == "system":
            out.append({"role": kind, "content": message["text"]})
        elif kind == "final":
            out.append({"role": "assistant", "content": message["text"]})
        else:
            raise unknown_kind(index, kind)

    def made(self) -> list[dict[str, Any]]:
        return last_own(self.items)
