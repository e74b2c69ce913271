"""An OpenAI response as a reply: a chat completion's first choice, or a Responses API response.

``chat_reply`` and ``responses_reply`` take a whole response; ``chat_outcome``
takes a first choice's parts, whole or streamed (``_openai_stream`` folds the
stream's chunks into them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentloop._errors import IncompleteReply
from agentloop.providers._convert import parsed_arguments, reply, usage

if TYPE_CHECKING:
    from collections.abc import Iterable

    from openai.types.chat import ChatCompletion
    from openai.types.completion_usage import CompletionUsage
    from openai.types.responses import Response

    from agentloop.providers._convert import Message

__all__ = ["chat_outcome", "chat_reply", "responses_reply"]

# Why a Responses API reply is incomplete, said as Chat Completions' are.
_INCOMPLETE = {
    "max_output_tokens": "the reply was cut off at max_output_tokens",
    "content_filter": "the reply was withheld by the content filter",
}


def chat_reply(completion: ChatCompletion) -> Message:
    """The reply for a chat completion (its first choice), with its usage."""
    used = completion.usage
    if not completion.choices:
        return chat_outcome(used, None, None, None, None, ())
    choice = completion.choices[0]
    message = choice.message
    calls = [
        (c.type, c.id, c.function.name, c.function.arguments)
        if c.type == "function"
        else (c.type, c.id, "", "")
        for c in message.tool_calls or ()
    ]
    return chat_outcome(used, choice.finish_reason, message.content, message.refusal, "", calls)


def chat_outcome(
    used: CompletionUsage | None,
    finish: str | None,
    content: str | None,
    refusal: str | None,
    choice: str | None,
    calls: Iterable[tuple[str, str, str, str]],
) -> Message:
    """The reply for a first choice's parts, whole or streamed (``choice`` None: no choice).

    ``calls`` are ``(type, id, name, arguments)``, in order.
    """
    details = used.prompt_tokens_details if used else None
    cached = (details.cached_tokens if details else None) or 0
    tokens = None if used is None else usage(used.prompt_tokens, used.completion_tokens, cached)
    if choice is None:
        raise IncompleteReply("the reply was empty: the response has no choices", tokens)
    if refusal:
        raise IncompleteReply(f"the model refused: {refusal}", tokens)
    if finish == "length":
        raise IncompleteReply(
            "the reply was cut off at the output limit (finish_reason 'length')", tokens
        )
    if finish == "content_filter":
        raise IncompleteReply("the reply was withheld by the content filter", tokens)
    parsed = []
    for kind, call_id, name, arguments in calls:
        if kind != "function":
            raise IncompleteReply(
                f"the model made a {kind!r} tool call, which agentloop lacks", tokens
            )
        parsed.append({"id": call_id, "name": name, "arguments": parsed_arguments(arguments)})
    return reply(content or "", parsed, tokens)


def responses_reply(response: Response) -> Message:
    """The reply for a Responses API response: its messages' text and its function calls."""
    used = response.usage
    tokens = (
        None
        if used is None
        else usage(used.input_tokens, used.output_tokens, used.input_tokens_details.cached_tokens)
    )
    if response.status == "incomplete":
        reason = response.incomplete_details and response.incomplete_details.reason
        why = _INCOMPLETE.get(reason or "", f"the reply is incomplete ({reason})")
        raise IncompleteReply(why, tokens)
    if response.status not in (None, "completed"):
        error = response.error
        said = f": {error.code}: {error.message}" if error else ""
        raise IncompleteReply(f"the response is {response.status}{said}", tokens)
    texts, calls = [], []
    for item in response.output:
        if item.type == "message":
            for part in item.content:
                if part.type == "refusal":
                    raise IncompleteReply(f"the model refused: {part.refusal}", tokens)
                texts.append(part.text)
        elif item.type == "function_call":
            calls.append(
                {
                    "id": item.call_id,
                    "name": item.name,
                    "arguments": parsed_arguments(item.arguments),
                }
            )
        # Reasoning and the built-in tools' items have no message in the contract.
    return reply("".join(texts), calls, tokens)
