"""A Gemini response as a reply: its parts' text and function calls, its finish reason, its usage.

``generate_reply`` takes a whole ``GenerateContentResponse``; ``GeminiParts``
collects the parts of one, whole or streamed (``_gemini_stream`` feeds it the
stream's chunks), and makes the reply at the end.

Gemini gives a call an ``id`` on some paths only. A call without one gets
``gemini_<responseId>_<n>``: the response's id (a fresh random one when the
response has none) and the call's place among the reply's calls. It is
unique across a run (each response has its own id), the same streamed or
whole, and the record keeps it, so a resumed or replayed run has it too; the
adapter never sends it back, as the call had none. It is made of the
characters, and within the length, every provider takes in a call id (at
most 40 of ``[A-Za-z0-9_-]``), so a fallback model of another provider can
be given the history.
"""

from __future__ import annotations

import base64
import re
import uuid
from typing import TYPE_CHECKING, Any, Final

from agentloop._core.messages import SIGNATURE
from agentloop._errors import IncompleteReply
from agentloop.providers._convert import reply, usage

if TYPE_CHECKING:
    from google.genai import types

    from agentloop.providers._convert import Message

__all__ = ["MADE_ID", "GeminiParts", "generate_reply", "response_usage"]

#: How the id agentloop makes for a call Gemini gave none starts.
MADE_ID: Final = "gemini_"
# What of a response's id goes into a made call id: the characters every provider takes.
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")

# Why a reply stopped, when it cannot be taken as it is (any other reason but STOP is named).
_STOPPED: Final = {
    "MAX_TOKENS": "the reply was cut off at max_output_tokens",
    "CONTINUATION": "the reply was cut off at the request's token limit "
    "(finish_reason 'CONTINUATION', with automatic_continuation off)",
    "MALFORMED_FUNCTION_CALL": "the model made a function call that does not parse "
    "(finish_reason 'MALFORMED_FUNCTION_CALL')",
}
_TAKEN: Final = frozenset({"STOP", "FINISH_REASON_UNSPECIFIED"})


def response_usage(used: types.GenerateContentResponseUsageMetadata | None) -> Message | None:
    """A response's usage, as the other providers count theirs.

    The prompt with what built-in tools added to it, cached tokens among them,
    and the output with the thinking tokens (billed as output, counted apart).
    """
    if used is None:
        return None
    return usage(
        (used.prompt_token_count or 0) + (used.tool_use_prompt_token_count or 0),
        (used.candidates_token_count or 0) + (used.thoughts_token_count or 0),
        used.cached_content_token_count or 0,
    )


class GeminiParts:
    """A response's parts, whole or chunk by chunk: its text, its calls, how and why it ended."""

    __slots__ = ("blocked", "calls", "finish", "message", "metadata", "response_id", "texts")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.calls: list[Message] = []
        self.response_id: str | None = None
        self.finish: str | None = None
        self.message: str | None = None  # the finish message, or the block's
        self.blocked: str | None = None  # the prompt's block reason
        self.metadata: types.GenerateContentResponseUsageMetadata | None = None

    @property
    def used(self) -> Message | None:
        """The usage so far: a stream's is a running total, so the last chunk's counts."""
        return response_usage(self.metadata)

    def add(self, response: types.GenerateContentResponse) -> list[str | Message]:
        """Take one response (or chunk); return its new text pieces and new calls, in order."""
        if self.response_id is None:  # what of it goes into a made call id
            safe = _UNSAFE.sub("", response.response_id or "")[:24]
            self.response_id = safe or uuid.uuid4().hex[:24]
        if response.usage_metadata is not None:
            self.metadata = response.usage_metadata
        feedback = response.prompt_feedback
        if feedback is not None and feedback.block_reason is not None:
            self.blocked = _named(feedback.block_reason)
            self.message = feedback.block_reason_message
        candidates = response.candidates
        if not candidates:
            return []
        candidate = candidates[0]
        if candidate.index:  # the first candidate is the reply, as for OpenAI's choices
            candidate = next((c for c in candidates if not c.index), None)  # type: ignore[assignment]
            if candidate is None:
                return []
        if candidate.finish_reason is not None:
            self.finish = _named(candidate.finish_reason)
            self.message = candidate.finish_message
        content = candidate.content
        new: list[str | Message] = []
        for part in (content.parts if content is not None else None) or ():
            if part.thought:
                continue  # a thought summary: not the answer
            call = part.function_call
            if call is not None:
                new.append(self._call(call, part.thought_signature))
            elif part.text:
                self.texts.append(part.text)
                new.append(part.text)
        return new

    def _call(self, call: types.FunctionCall, signature: bytes | None) -> Message:
        if call.partial_args or call.will_continue:
            raise IncompleteReply(
                "the model sent a call's arguments in pieces (stream_function_call_arguments), "
                "which agentloop does not assemble: leave it off",
                self.used,
            )
        assert self.response_id is not None, "the response's id is taken first"
        made: Message = {
            "id": call.id or f"{MADE_ID}{self.response_id}_{len(self.calls)}",
            "name": call.name or "",
            "arguments": call.args if call.args is not None else {},
        }
        if signature:
            made[SIGNATURE] = base64.b64encode(signature).decode()
        self.calls.append(made)
        return made

    def reply(self) -> Message:
        """The reply, or ``IncompleteReply`` for one blocked, cut off, filtered or empty."""
        if self.blocked is not None:
            said = f": {self.message}" if self.message else ""
            raise IncompleteReply(
                f"the prompt was blocked (block_reason {self.blocked!r}){said}", self.used
            )
        finish = self.finish
        if finish is not None and finish not in _TAKEN:
            stopped = _STOPPED.get(finish) or f"the reply ended with finish_reason {finish!r}"
            said = f": {self.message}" if self.message else ""
            raise IncompleteReply(stopped + said, self.used)
        return reply("".join(self.texts), self.calls, self.used)


def generate_reply(response: types.GenerateContentResponse) -> Message:
    """The reply for a whole ``generateContent`` response (its first candidate)."""
    parts = GeminiParts()
    parts.add(response)
    if not response.candidates and parts.blocked is None:
        raise IncompleteReply("the reply was empty: the response has no candidates", parts.used)
    return parts.reply()


def _named(reason: Any) -> str:
    """An enum's value (the SDK keeps a reason it does not know as a plain str)."""
    return str(getattr(reason, "value", reason))
