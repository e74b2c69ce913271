"""agentloop.streaming: a model that streams its reply, and the deltas a run hands on.

A streaming model answers with a *stream* rather than a reply: an iterator
(or an async iterator, from an ``async def`` model or an async generator)
that yields deltas as they arrive and then the whole reply, a ``dict``, as
its last item::

    def model(history):
        yield TextDelta(text="Hel")
        yield TextDelta(text="lo")
        yield {"kind": "final", "text": "Hello"}

The engine sees only the whole reply, exactly as from a model that returns
it: nothing enters the history, and no tool runs, before it has arrived and
been accepted. The deltas are not transitions; they reach you beside them,
in order, through ``for item in run.stream()``, ``async for item in
run.astream()``, or a listener (``run.subscribe_deltas(listener)``). A caller
that ignores them sees a run exactly as if the model had not streamed.

A stream that ends, or breaks, before its whole reply is a failed model
call (``IncompleteReply``), never half a reply. A cancel, a timeout, a
cancelled task or Ctrl-C while a reply streams closes the stream at once;
the run ends ``cancelled`` (or ``failed``, on a timeout) and its
``model_interrupted`` event keeps the text seen so far (``partial_text``).

The provider adapters stream when given ``stream=True``
(``openai_chat(client, "gpt-4.1", stream=True)``). ``chunked`` turns a whole
reply into such a stream, for scripted models and tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from agentloop._names import publish
from agentloop._streams import (
    ArgumentsDelta,
    Delta,
    TextDelta,
    ToolCallStart,
    UsageDelta,
    is_stream,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "ArgumentsDelta",
    "Delta",
    "TextDelta",
    "ToolCallStart",
    "UsageDelta",
    "chunked",
    "is_stream",
]


def chunked(reply: dict[str, Any], size: int = 4) -> Iterator[Delta | dict[str, Any]]:
    """``reply`` as a stream: its deltas, then the reply itself.

    Its text and each call's arguments come in pieces of ``size`` characters,
    then its usage.
    ``ScriptedModel``-style models stream with it: ``return chunked(final("Hello"))``.
    """
    if type(size) is not int or size < 1:
        raise ValueError(f"expected size to be a positive int, got {size!r}")
    if not isinstance(reply, dict):
        raise TypeError(f"expected a reply (a dict), got {type(reply).__name__}")
    return _chunks(reply, size)


def _chunks(reply: dict[str, Any], size: int) -> Iterator[Delta | dict[str, Any]]:
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


publish(__name__, globals(), [name for name in __all__ if name != "Delta"])
