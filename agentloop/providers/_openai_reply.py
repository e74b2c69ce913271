"""An OpenAI response as a reply: a chat completion's first choice, or a Responses API response.

``chat_reply`` and ``responses_reply`` take a whole response; ``chat_outcome``
takes a first choice's parts, whole or streamed (``_openai_stream`` folds the
stream's chunks into them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, TypeGuard

import orjson

from agentloop._core.messages import SIGNATURE
from agentloop._core.retry_policy import mark
from agentloop._errors import IncompleteReply
from agentloop.providers._compat import CallIds, extra, thought_signature
from agentloop.providers._convert import parsed_arguments, reply, usage

if TYPE_CHECKING:
    from collections.abc import Iterable

    from openai.types.chat import ChatCompletion
    from openai.types.responses import Response

    from agentloop.providers._convert import Message

__all__ = ["call_arguments", "chat_outcome", "chat_reply", "chat_usage", "responses_reply"]

# Why a chat reply cannot be taken as it is, by its finish_reason, and whether that may pass.
# OpenAI's own two, and what compatible servers add: Mistral's model_length (the context
# window is full) and error, DeepSeek's insufficient_system_resource.
_STOPPED: Final = {
    "length": ("the reply was cut off at the output limit (finish_reason 'length')", False),
    "content_filter": ("the reply was withheld by the content filter", False),
    "model_length": (
        "the reply was cut off: the context window is full (finish_reason 'model_length')",
        False,
    ),
    "error": ("the server stopped the reply with an error (finish_reason 'error')", True),
    "insufficient_system_resource": (
        "the server stopped the reply for want of resources "
        "(finish_reason 'insufficient_system_resource')",
        True,
    ),
}

# Why a Responses API reply is incomplete, said as Chat Completions' are.
_INCOMPLETE = {
    "max_output_tokens": "the reply was cut off at max_output_tokens",
    "content_filter": "the reply was withheld by the content filter",
}


def chat_reply(completion: ChatCompletion, fresh: bool = False) -> Message:
    """The reply for a chat completion (its first choice), with its usage.

    ``fresh``: every call gets an id of agentloop's making (``Compat.fresh_ids``).
    """
    used = chat_usage(completion.usage)
    if not completion.choices:
        return chat_outcome(used, None, None, None, None, ())
    choice = completion.choices[0]
    message = choice.message
    ids = CallIds(fresh)
    calls: list[tuple[str, str, str, object, str | None]] = []
    for call in message.tool_calls or ():
        if call.type == "function" or call.type is None:  # some servers leave the type out
            function = call.function
            signature = thought_signature(call)
            calls.append(("function", ids(call.id), function.name, function.arguments, signature))
        else:
            calls.append((call.type, ids(call.id), "", "", None))
    return chat_outcome(used, choice.finish_reason, message.content, message.refusal, "", calls)


def chat_usage(used: object) -> Message | None:
    """A completion's or a chunk's ``usage`` as the reply's, or None when it has no counts.

    OpenAI's ``prompt_tokens_details.cached_tokens``, or DeepSeek's
    ``prompt_cache_hit_tokens``, are the cached tokens. A count that is not
    a whole number (a server that sends ``null``) leaves the usage out, as
    none reported, rather than make the reply one the engine must refuse.
    ``used`` is the SDK's object, or a plain dict (Groq's ``x_groq.usage``).
    """
    if used is None:
        return None
    prompt, output = _field(used, "prompt_tokens"), _field(used, "completion_tokens")
    if not (_count(prompt) and _count(output)):
        return None
    cached = _field(_field(used, "prompt_tokens_details"), "cached_tokens")
    if cached is None:
        cached = used.get("prompt_cache_hit_tokens") if type(used) is dict else None
        cached = extra(used, "prompt_cache_hit_tokens") if cached is None else cached
    return usage(prompt, output, cached if _count(cached) and cached <= prompt else 0)


def _field(value: object, name: str) -> object:
    """``value``'s field ``name`` (one the SDK declares): a dict's item or a model's attribute."""
    if type(value) is dict:
        return value.get(name)
    return None if value is None else getattr(value, name, None)


def _count(value: object) -> TypeGuard[int]:
    return type(value) is int and value >= 0


def chat_outcome(
    used: Message | None,
    finish: str | None,
    content: str | None,
    refusal: str | None,
    choice: str | None,
    calls: Iterable[tuple[str, str, str, object, str | None]],
) -> Message:
    """The reply for a first choice's parts, whole or streamed (``choice`` None: no choice).

    ``calls`` are ``(type, id, name, arguments, signature)``, in order, their
    ids final; arguments are the model's text, or an object where a server
    sends one; a signature (Gemini's thought signature) is kept with its call.
    """
    if choice is None:
        raise IncompleteReply("the reply was empty: the response has no choices", used)
    if refusal:
        raise IncompleteReply(f"the model refused: {refusal}", used)
    stopped = _STOPPED.get(finish or "")
    if stopped is not None:
        why, passing = stopped
        exc = IncompleteReply(why, used)
        if passing:
            mark(exc, "server")
        raise exc
    parsed = []
    for kind, call_id, name, arguments, signature in calls:
        if kind != "function":
            raise IncompleteReply(
                f"the model made a {kind!r} tool call, which agentloop lacks", used
            )
        call = {"id": call_id, "name": name, "arguments": call_arguments(arguments)}
        if signature is not None:
            call[SIGNATURE] = signature
        parsed.append(call)
    return reply(content or "", parsed, used)


def call_arguments(arguments: object) -> Any:
    """A call's arguments: a dict as it came (a server that sends an object), text parsed.

    ``None`` is no arguments; any other value is kept as its JSON text, which
    the registry answers ``invalid_arguments``.
    """
    if type(arguments) is dict:
        return arguments
    if arguments is None:
        return {}
    if type(arguments) is not str:
        arguments = orjson.dumps(arguments).decode()
    return parsed_arguments(arguments)


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
