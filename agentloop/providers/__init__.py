"""agentloop.providers: model callbacks for real LLM APIs, one module per provider.

- ``agentloop.providers.openai``: ``openai_chat`` (Chat Completions) and
  ``openai_responses`` (the Responses API); needs the ``openai`` extra.
- ``agentloop.providers.anthropic``: ``anthropic_messages`` (the Messages API);
  needs the ``anthropic`` extra.
- ``agentloop.providers.google``: ``gemini_generate_content`` (Gemini's
  ``generateContent``, through google-genai); needs the ``google`` extra.

Each takes a client, a model name and request parameters, and returns the
model callback for ``Loop``: a plain function for a sync client, an
``async def`` one for an async client. It takes ``tools``, so the ``Loop``
passes its registry's specs with every request. This package itself
imports no SDK; ``IncompleteReply`` is what the adapters raise for a reply cut
off, refused or empty, ``UnreadableResponse`` for a response whose body is not
JSON (streamed, not an event stream), and ``NameRule`` how an adapter declares
its provider's rule for tool names (its callback's ``agentloop_tool_names``),
which a ``Loop`` made with it holds its tools to.
"""

from __future__ import annotations

from agentloop._errors import IncompleteReply, UnreadableResponse
from agentloop._names import publish as _publish
from agentloop._tools.specs import NameRule

__all__ = ["IncompleteReply", "NameRule", "UnreadableResponse"]

_publish(__name__, globals(), ["NameRule"])
