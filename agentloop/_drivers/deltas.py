"""What a stream yields: the deltas, then the whole reply; each item checked as it enters.

A model may answer with a *stream* (``streams.py`` reads it): deltas as
they arrive, then the whole reply, a ``dict``, last. The deltas go to
whoever listens (``run.stream()``, a delta listener) and never into the
history. Each item is checked as it enters (``check_item``): a delta whose
fields are not what its type says (a ``TextDelta`` whose text is ``None``,
or holds a lone surrogate the record could not encode) fails the model call
there, naming the field, before any listener hears it or any text is kept.
A stream that fails after its deltas were handed on is followed by a
``Discard`` (the drivers', never a stream's).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import attrs
import orjson

from agentloop._core.json import describe, intake
from agentloop._core.values import MAX_BUDGET

Message = dict[str, Any]

__all__ = [
    "DELTAS",
    "ArgumentsDelta",
    "Delta",
    "Discard",
    "ListenerFailed",
    "Partial",
    "TextDelta",
    "ToolCallStart",
    "UsageDelta",
    "check_item",
    "chunked",
]


@attrs.frozen(kw_only=True)
class TextDelta:
    """A piece of the reply's text, in order. Don't subclass these."""

    #: The text that arrived (never empty from the adapters).
    text: str


@attrs.frozen(kw_only=True)
class ToolCallStart:
    """A tool call began: its ``index`` among the reply's calls, its id and tool name."""

    #: The call's place in the reply (0, 1, ...): its argument fragments name it.
    index: int
    id: str
    name: str


@attrs.frozen(kw_only=True)
class ArgumentsDelta:
    """A fragment of the arguments' JSON text of the call at ``index`` (not valid JSON alone)."""

    index: int
    text: str


@attrs.frozen(kw_only=True)
class UsageDelta:
    """The tokens the reply cost so far, as the provider reported them (not summed here)."""

    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0


@attrs.frozen(kw_only=True)
class Discard:
    """The deltas handed on since the last transition are void: their stream failed.

    The drivers' own item, never a stream's: a streamed model call that fails
    after it delivered deltas is followed by one ``Discard``, then by its
    ``model_raised`` transition. The reply those deltas began never enters
    the history; a retry (or the next fallback model) streams its reply
    afresh, so a consumer drops the text it had shown.
    """

    #: What failed, as the event's ``error`` names it (``Type: message``).
    error: str


#: What a run hands on beside its transitions: a stream's deltas, and a ``Discard``.
Delta = TextDelta | ToolCallStart | ArgumentsDelta | UsageDelta | Discard

#: The types a stream may yield before its whole reply, for an exact ``type(item) in DELTAS``.
DELTAS: Final = frozenset({TextDelta, ToolCallStart, ArgumentsDelta, UsageDelta})


class ListenerFailed(Exception):
    """A delta listener raised: the model call it heard fails, named as the listener's doing."""

    def __init__(self, exc: Exception) -> None:
        super().__init__(f"a delta listener raised {type(exc).__name__}: {exc}")


def chunked(reply: Message, size: int = 4) -> Iterator[Delta | Message]:
    """``reply`` as a stream: its deltas, then the reply itself.

    Its text and each call's arguments come in pieces of ``size`` characters,
    then its usage.
    ``ScriptedModel``-style models stream with it: ``return chunked(final("Hello"))``.
    """
    if type(size) is not int or size < 1:
        raise ValueError(f"expected size to be a positive int, got {size!r}")
    if not isinstance(reply, dict):
        raise TypeError(f"expected a reply (a dict), got {type(reply).__name__}")
    return _pieces(reply, size)


def _pieces(reply: Message, size: int) -> Iterator[Delta | Message]:
    text = reply.get("text")
    if isinstance(text, str):
        for at in range(0, len(text), size):
            yield TextDelta(text=text[at : at + size])
    calls = [reply] if reply.get("kind") == "call" else reply.get("calls") or []
    for index, call in enumerate(calls):
        if not isinstance(call, dict):
            continue
        yield ToolCallStart(index=index, id=str(call.get("id")), name=str(call.get("name")))
        arguments = call.get("arguments")
        raw = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
        for at in range(0, len(raw), size):
            yield ArgumentsDelta(index=index, text=raw[at : at + size])
    used = reply.get("usage")
    if isinstance(used, dict):
        yield UsageDelta(
            input_tokens=used.get("input_tokens", 0),
            output_tokens=used.get("output_tokens", 0),
            cached_tokens=used.get("cached_tokens", 0),
        )
    yield reply


class Partial:
    """The text a stream has delivered so far: kept for the record if the run is cut off."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[str] = []

    @property
    def text(self) -> str | None:
        """The text so far; ``None`` when none arrived."""
        return "".join(self.parts) if self.parts else None


def check_item(item: object, partial: Partial) -> object:
    """``item`` if it is a delta or the whole reply, its fields as its type says; else a raise.

    What a stream yields enters the run here: a delta's text goes through the
    record's own codec (a ``TextDelta`` the run keeps as ``partial_text``),
    its counts within the record's limits, before any listener hears it.
    """
    kind = type(item)
    if kind is TextDelta:
        text = item.text  # type: ignore[attr-defined]
        if type(text) is not str or not text.isascii():
            _text("TextDelta", "text", text)
        partial.parts.append(text)
    elif kind is dict:
        pass
    elif kind is ArgumentsDelta:
        _index("ArgumentsDelta", item.index)  # type: ignore[attr-defined]
        _text("ArgumentsDelta", "text", item.text)  # type: ignore[attr-defined]
    elif kind is ToolCallStart:
        _index("ToolCallStart", item.index)  # type: ignore[attr-defined]
        _text("ToolCallStart", "id", item.id)  # type: ignore[attr-defined]
        _text("ToolCallStart", "name", item.name)  # type: ignore[attr-defined]
    elif kind is UsageDelta:
        _usage(item)  # type: ignore[arg-type]
    else:
        raise TypeError(
            "expected a stream to yield deltas (agentloop.streaming) and then the whole "
            f"reply (a dict), got {kind.__name__}"
        )
    return item


def _text(kind: str, field: str, value: object) -> None:
    """Refuse a delta's text that is not a str the record can encode."""
    if type(value) is not str:
        raise TypeError(f"expected a stream's {kind}.{field} to be a str, got {describe(value)}")
    intake(value, f"a stream's {kind}.{field}")  # a lone surrogate: a JSONError saying where


def _index(kind: str, value: object) -> None:
    if type(value) is not int or not 0 <= value <= MAX_BUDGET:
        raise TypeError(
            f"expected a stream's {kind}.index to be an int of 0 or more, got {describe(value)}"
        )


def _usage(delta: UsageDelta) -> None:
    """Refuse counts the record could not keep (as a reply's ``usage`` is checked)."""
    counts = (delta.input_tokens, delta.output_tokens, delta.cached_tokens)
    for name, value in zip(("input_tokens", "output_tokens", "cached_tokens"), counts, strict=True):
        if type(value) is not int or not 0 <= value <= MAX_BUDGET:
            raise TypeError(
                f"expected a stream's UsageDelta.{name} to be an int from 0 to 2**63 - 1, "
                f"got {describe(value)}"
            )
    if delta.cached_tokens > delta.input_tokens:
        raise ValueError(
            "expected a stream's UsageDelta.cached_tokens to be at most its input_tokens "
            f"(cached tokens are input tokens), got {delta.cached_tokens} of "
            f"{delta.input_tokens}"
        )
