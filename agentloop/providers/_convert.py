"""What the provider adapters share: the contract's messages taken apart, replies put together.

Each adapter converts the history to its provider's request and the response
back to a reply; the pieces both directions have in common live here, so that
the three formats differ only where their wire formats do. ``_model.py``
makes the model callback of an adapter's pieces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import orjson

from agentloop._core.json import json_object
from agentloop._errors import IncompleteReply

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "Message",
    "arguments_text",
    "assistant_turn",
    "image_of",
    "parsed_arguments",
    "part_text",
    "reply",
    "result_content",
    "result_parts",
    "result_text",
    "unknown_kind",
    "usage",
]

Message = dict[str, Any]


KINDS: Final = ("system", "user", "call", "calls", "tool_result", "final")


def unknown_kind(index: int, kind: object) -> ValueError:
    """The error for a message of a kind no adapter knows, naming where it is."""
    return ValueError(
        f"history[{index}]: expected kind to be one of {', '.join(KINDS)}; got {kind!r}"
    )


def assistant_turn(message: Message) -> tuple[str, list[Message]]:
    """A ``call`` or ``calls`` message as one assistant turn: its text and its calls, in order."""
    if message["kind"] == "call":
        return "", [message]
    return message.get("text", ""), message["calls"]


def arguments_text(arguments: Any) -> str:
    """Arguments as the JSON text OpenAI carries; a ``str`` is the model's raw text, unchanged."""
    return arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()


def parsed_arguments(raw: str) -> Any:
    """The provider's argument text as a dict, or the text itself when it is not a JSON object.

    The registry answers a ``str`` with ``invalid_arguments`` and the parse
    error, so the model can correct itself. Empty text is no arguments: some
    OpenAI-compatible servers send ``""`` for a tool without parameters.
    """
    if not raw.strip():
        return {}
    value, _ = json_object(raw)  # an int beyond 64 bits stays text, never a float
    return raw if value is None else value


def result_content(
    message: Message,
    text: Callable[[str], dict[str, Any]],
    image: Callable[[str, str], dict[str, Any]],
) -> str | list[dict[str, Any]]:
    """A tool result as a provider carries it: its text, or its parts when one is an image.

    ``text(part)`` and ``image(media_type, base64_data)`` make the provider's blocks.
    """
    parts = result_parts(message)
    if parts is None:
        return result_text(message)
    blocks: list[dict[str, Any]] = []
    for part in parts:
        found = image_of(part)
        blocks.append(text(part_text(part)) if found is None else image(*found))
    return blocks


def result_text(message: Message) -> str:
    """A tool result's content as text (JSON unless a ``str``), its status first unless ``ok``."""
    content = message["content"]
    text = content if isinstance(content, str) else orjson.dumps(content).decode()
    return text if message["status"] == "ok" else f"status: {message['status']}\n{text}"


#: The image types both providers take inside a tool result.
IMAGE_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


def result_parts(message: Message) -> list[dict[str, Any]] | None:
    """An ``ok`` result's typed parts, when they hold an image a provider can show; else None.

    The parts are MCP's content (``agentloop.mcp`` keeps them so):
    ``{'type': 'text', 'text'}``, ``{'type': 'image', 'data', 'mimeType'}``
    (base64) and other kinds, which an adapter sends as their JSON text.
    """
    content = message["content"]
    if message["status"] != "ok" or type(content) is not list or not content:
        return None
    if not all(type(part) is dict and type(part.get("type")) is str for part in content):
        return None
    if not any(image_of(part) for part in content):
        return None
    return content


def image_of(part: dict[str, Any]) -> tuple[str, str] | None:
    """A part's (media type, base64 data) if it is an image a provider takes, else None."""
    data, media = part.get("data"), part.get("mimeType")
    if part["type"] == "image" and type(data) is str and media in IMAGE_TYPES:
        return media, data
    return None


def part_text(part: dict[str, Any]) -> str:
    """A part that is not an image, as text: a text part's own, any other's JSON."""
    text = part.get("text")
    if part["type"] == "text" and type(text) is str:
        return text
    return orjson.dumps(part).decode()


def usage(input_tokens: int, output_tokens: int, cached_tokens: int) -> Message:
    """A reply's ``usage``: prompt tokens (cached ones included), output tokens, cached ones."""
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cached_tokens": cached_tokens,
    }


def reply(text: str, calls: list[Message], used: Message | None) -> Message:
    """The reply for a response's text and tool calls (``{'id', 'name', 'arguments'}`` each).

    One call alone is a ``call``; several, or text beside them, a ``calls``
    batch; text alone a ``final``. Nothing at all is an ``IncompleteReply``,
    never an empty final.
    """
    if len(calls) == 1 and not text:
        out: Message = {"kind": "call", **calls[0]}
    elif calls:
        out = {"kind": "calls", "calls": calls, **({"text": text} if text else {})}
    elif text:
        out = {"kind": "final", "text": text}
    else:
        raise IncompleteReply("the reply was empty: no text and no tool calls", used)
    if used is not None:
        out["usage"] = used
    return out
