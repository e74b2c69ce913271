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
call (``IncompleteReply``, or its error), never half a reply: if it had
handed on deltas, a ``Discard`` follows them, before the ``model_raised``
transition, so that whoever shows them drops them (a retry streams its
reply afresh). A delta whose fields are not what its type says fails the
call where it enters. A cancel, a timeout, a cancelled task or Ctrl-C while
a reply streams closes the stream at once; the run ends ``cancelled`` (or
``failed``, on a timeout) and its ``model_interrupted`` event keeps the
text seen so far (``partial_text``).

A tool call that runs long may say how far it has come
(``agentloop.report_progress``, or an MCP server's progress): the same
listeners hear a ``ToolProgress`` naming the call.

A child run of an agent tool (``Loop.as_tool``) is heard by its parent's
delta listeners: each of its deltas, progress reports and transitions comes
as ``Nested(path, item)``, ``path`` the call ids it came through, the
parent's first. ``stream()`` yields the same items once the call returns,
before its transition.

The provider adapters stream when given ``stream=True``
(``openai_chat(client, "gpt-4.1", stream=True)``). ``chunked`` turns a whole
reply into such a stream, for scripted models and tests.
"""

from __future__ import annotations

from agentloop._drivers.delegation import Nested
from agentloop._drivers.deltas import (
    ArgumentsDelta,
    Delta,
    Discard,
    TextDelta,
    ToolCallStart,
    UsageDelta,
    chunked,
)
from agentloop._drivers.progress import ToolProgress
from agentloop._drivers.streams import is_stream
from agentloop._names import publish as _publish

__all__ = [
    "ArgumentsDelta",
    "Delta",
    "Discard",
    "Nested",
    "TextDelta",
    "ToolCallStart",
    "ToolProgress",
    "UsageDelta",
    "chunked",
    "is_stream",
]

_publish(__name__, globals(), [name for name in __all__ if name != "Delta"])
