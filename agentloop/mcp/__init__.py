"""Tools from Model Context Protocol servers, and a registry served as one.

Needs the ``mcp`` extra (``pip install 'agentloop-fsm[mcp]'``: the official
``mcp`` SDK). ``stdio(command, args)`` and ``http(url)`` make a ``Server``, a
connection used as a context manager; inside it, ``server.register(registry)``
adds the server's tools to a ``ToolRegistry`` as ``MCPTool``s, each keeping the
server's name, description and input schema, validated before a call is sent.

* Annotations: ``readOnlyHint`` or ``idempotentHint`` make a tool idempotent
  for the ledger; ``register(destructive=ask_before_destructive)`` has a person
  approve each call of a tool that may change or delete data. A server may say
  anything of its tools: ``register(annotations=...)`` declares yours, and
  yours win.
* Results: text is the result; ``structuredContent`` is kept as JSON; other
  content kinds stay typed parts; ``isError`` is an ``error`` result
  (``ToolFailed``); once a call is sent, a lost connection, a call past
  ``timeout`` or a JSON-RPC error is an ``error`` result ``OutcomeUnknown``;
  a call that could not be sent ``NotRun``. A server's progress reaches the
  run's delta listeners (``ToolProgress``).
* Tools: each schema is read in the dialect its ``$schema`` declares; a tool
  that runs only as an MCP task is left out (agentloop runs no tasks).
* Changes: a server's changed tools list is put into the registry by
  ``server.refresh()``, or between model steps by the listener
  ``Loop(listeners=[server.refresh_between_steps])``.
* ``serve(registry)``: the other way, a registry's tools as an MCP server,
  with its validation and policies in front.
"""

from __future__ import annotations

try:
    import mcp as _mcp  # noqa: F401 - the extra, checked before any module that imports it
except ModuleNotFoundError as exc:  # missing; a script named like it fails on its own
    raise ImportError(
        "agentloop.mcp needs the official mcp SDK: pip install 'agentloop-fsm[mcp]'"
    ) from exc

from agentloop._names import publish as _publish
from agentloop.mcp._results import NotRun, OutcomeUnknown, ToolFailed
from agentloop.mcp._serve import serve, serve_stdio
from agentloop.mcp._server import MCPTool, Server, ask_before_destructive, http, stdio

__all__ = [
    "MCPTool",
    "NotRun",
    "OutcomeUnknown",
    "Server",
    "ToolFailed",
    "ask_before_destructive",
    "http",
    "serve",
    "serve_stdio",
    "stdio",
]

_publish(__name__, globals(), __all__)
