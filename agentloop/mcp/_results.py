"""What an MCP ``tools/call`` answer becomes: a tool's result, or the exception of an ``error``.

* Text content alone is the result, as one ``str``.
* ``structuredContent`` is kept as JSON, and is then the result (a server
  sends its JSON as text too, for older clients: the text is that copy).
  The SDK's servers wrap a plain return value as ``{'result': value}`` under
  an output schema of their own making (one property ``result``, titled
  ``<tool>Output``): for such a tool the result is the value itself.
* Any other content kind (images, audio, embedded resources, resource
  links) keeps every part, typed, as the MCP wire writes it:
  ``[{'type': 'text', 'text': ...}, {'type': 'image', 'data': ..., 'mimeType': ...}]``,
  with ``{'type': 'structured', 'content': ...}`` last when there is any.
* ``isError`` raises ``ToolFailed`` with the server's text: an ``error`` result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcp.types import TextContent

if TYPE_CHECKING:
    from mcp.types import CallToolResult

__all__ = ["NotRun", "OutcomeUnknown", "ToolFailed", "content_of", "wraps_result"]


class ToolFailed(Exception):
    """The MCP server ran the call and answered ``isError``: its text is the message."""


class NotRun(Exception):
    """The MCP server could not be asked: the connection was gone before the call was sent.

    The only failure that proves the call did not run.
    """


class OutcomeUnknown(Exception):
    """A call was sent, and then the connection was lost, or no answer came, or an error did.

    The error is a JSON-RPC one the server answered with, which may follow a
    tool's effect. Whether the call took effect is unknown, as for a call a
    crash interrupted in a durable run. A tool that is idempotent can be
    called again.
    """


def wraps_result(name: str, output_schema: dict[str, Any] | None) -> bool:
    """Whether ``output_schema`` is the one the SDK makes for a plain return value."""
    return (
        output_schema is not None
        and output_schema.get("title") == f"{name}Output"
        and output_schema.get("required") == ["result"]
        and list(output_schema.get("properties") or ()) == ["result"]
    )


def content_of(result: CallToolResult, *, wrapped: bool = False) -> Any:
    """The result of a call the server answered: see the module; ``ToolFailed`` for ``isError``."""
    parts = result.content
    if result.is_error:
        text = "\n".join(part.text for part in parts if isinstance(part, TextContent))
        raise ToolFailed(text or "the MCP server reported an error and gave no text")
    structured = result.structured_content
    if all(isinstance(part, TextContent) for part in parts):
        if structured is not None:
            if wrapped and structured.keys() == {"result"}:
                return structured["result"]
            return structured
        return "\n".join(part.text for part in parts)  # type: ignore[union-attr]
    typed: list[Any] = [
        part.model_dump(mode="json", by_alias=True, exclude_none=True) for part in parts
    ]
    if structured is not None:
        typed.append({"type": "structured", "content": structured})
    return typed
