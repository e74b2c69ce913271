"""Google adapter: ``gemini_generate_content`` (Gemini's ``generateContent``, through google-genai).

``Loop(gemini_generate_content(client, "gemini-3-flash"), tools=registry)``:
the Loop passes its registry's specs with every request, which go out as one
``Tool`` of ``function_declarations``. With ``genai.Client`` the model
callback is a plain function, with its ``client.aio`` an ``async def`` one
(for ``arun``/``astart``). A Vertex AI client (``genai.Client(vertexai=True,
...)``) works the same way.

History to request:

- ``system``: the ``system_instruction``, several joined by blank lines;
- ``user``: a text part in a user turn;
- ``call``/``calls``: one model turn, a text part for its text and a
  ``function_call`` part per call, with the call's ``signature`` (Gemini's
  thought signature, kept by the record) as its ``thought_signature``. Its
  ``id`` goes with it only where Gemini gave the call one; ``args`` must be an
  object, so arguments that arrived as text (another provider's invalid JSON)
  are sent as ``{}``;
- ``tool_result``: a ``function_response`` part in a user turn, its
  ``response`` ``{"output": <content>}``; unless ``ok``, ``{"error": <text>}``,
  the text led by ``status: <status>`` on its own line. A result of typed
  parts with an image among them (an MCP tool's) sends the images as the
  response's ``parts``;
- ``final``: a text part in a model turn.

Adjacent messages of one role share a turn: a batch's results are one user
turn, as Gemini wants (as many responses as the turn before had calls), and
a user message right after them joins it, after the results. Empty text is
left out.

Needs the ``google`` extra; importing this module without it raises an
``ImportError`` that says so.
"""

from __future__ import annotations

import base64
import binascii
import inspect
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Literal, overload

try:
    from google import genai  # at run time, so that a missing SDK fails here
    from google.genai import types
except ModuleNotFoundError as exc:  # missing; a script named like it fails on its own
    raise ImportError(
        "agentloop.providers.google needs Google's SDK: pip install 'agentloop-fsm[google]'"
    ) from exc

from agentloop._core.messages import SIGNATURE
from agentloop.providers._compat import SKIP_SIGNATURE
from agentloop.providers._convert import (
    Message,
    assistant_turn,
    image_of,
    part_text,
    result_parts,
    result_text,
    unknown_kind,
)
from agentloop.providers._fold import Turns, folded
from agentloop.providers._gemini_errors import classify_gemini
from agentloop.providers._gemini_reply import MADE_ID, generate_reply
from agentloop.providers._gemini_stream import (
    agenerate_stream,
    aopen_stream,
    generate_stream,
    open_stream,
)
from agentloop.providers._model import (
    AsyncModel,
    SyncModel,
    checked_client,
    checked_params,
    make_model,
)
from agentloop.providers._streaming import (
    AsyncStreamModel,
    StreamModel,
    checked_stream,
    make_stream_model,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop._core.requests import Messages

__all__ = ["SKIP_SIGNATURE", "gemini_generate_content"]

_RESERVED: Final = {
    "system_instruction": "put it in the history as {'kind': 'system', 'text': ...}, "
    "where the run records it",
    "automatic_function_calling": "the adapter turns it off: the Loop runs the tools",
}
_CHOICES: Final = {"none": "NONE", "auto": "AUTO", "required": "ANY"}
# Google's stand-in as the SDK's bytes: it writes them as the same text on the wire.
_SKIP: Final = base64.urlsafe_b64decode(SKIP_SIGNATURE)


@overload
def gemini_generate_content(
    client: genai.Client, model: str, *, stream: Literal[False] = False, **config: Any
) -> SyncModel: ...
@overload
def gemini_generate_content(
    client: genai.client.AsyncClient,
    model: str,
    *,
    stream: Literal[False] = False,
    **config: Any,
) -> AsyncModel: ...
@overload
def gemini_generate_content(
    client: genai.Client, model: str, *, stream: Literal[True], **config: Any
) -> StreamModel: ...
@overload
def gemini_generate_content(
    client: genai.client.AsyncClient, model: str, *, stream: Literal[True], **config: Any
) -> AsyncStreamModel: ...
def gemini_generate_content(
    client: genai.Client | genai.client.AsyncClient,
    model: str,
    *,
    stream: bool = False,
    **config: Any,
) -> SyncModel | AsyncModel | StreamModel | AsyncStreamModel:
    """A model callback over ``generateContent`` (``client.models.generate_content``).

    ``client`` is a ``genai.Client`` (a plain callback) or its ``client.aio``
    (an ``async def`` one). The request's tools are the specs the Loop passes
    with each request, as ``specs('gemini')`` gives them, declarations only:
    the SDK's automatic function calling is off, the Loop runs the tools.
    ``config`` is ``GenerateContentConfig``'s fields, which go into every
    request as they are (``temperature=0``, ``max_output_tokens=...``,
    ``thinking_config=...``, ``safety_settings=...``); a name it lacks is a
    ``TypeError`` now, and so are ``tools``, ``system_instruction`` and
    ``automatic_function_calling``, which are the adapter's. The reply
    carries ``usage``. A reply cut off (``MAX_TOKENS``), stopped for another
    reason than ``STOP`` (``SAFETY``, ``MALFORMED_FUNCTION_CALL``, ...), a
    prompt blocked, or an empty reply raises ``IncompleteReply``, a body that
    is not JSON ``UnreadableResponse``; an SDK error propagates, marked for the
    Loop's retry policy when it may pass (a 429, with the delay its
    ``RetryInfo`` asks for; a 5xx; a timeout; a lost connection). A Loop that
    retries sends each request with the SDK's own retries off
    (``agentloop_single_attempt``), so that the two never multiply.

    ``stream=True``: the callback answers with a stream (``agentloop.streaming``)
    over ``generate_content_stream``; its whole reply is the one the same
    response unstreamed gives. An error chunk mid-stream raises the SDK's
    error (``ServerError`` or ``ClientError``, by the code it carries),
    marked for the retry policy as the same error before the stream began
    is (a 429, a 408, a 5xx); a connection lost mid-stream raises the
    transport's error, marked as it would be before the stream began; a
    chunk that is not JSON raises ``UnreadableResponse``, and so does a
    response that is not an event stream (its first chunk's content type is
    not ``text/event-stream``: a server that ignored ``alt=sse``); a stream
    that ends before a chunk with a ``finish_reason`` raises
    ``IncompleteReply``, marked as a lost connection (unless it brought no
    chunk at all).
    """
    checked_client(
        "gemini_generate_content", client, model, "models.generate_content", "a google-genai"
    )
    checked_stream("gemini_generate_content", stream)
    checked_params("gemini_generate_content", _config_fields, config, _RESERVED)
    models: Any = client.models

    def request(history: list[Message] | Messages, entries: dict[str, Any]) -> dict[str, Any]:
        contents, system = _contents(history, request)  # the record's kept under request
        settings: dict[str, Any] = {"automatic_function_calling": {"disable": True}}
        if system:
            settings["system_instruction"] = system
        for key, value in entries.items():
            settings[key] = [{"function_declarations": value}] if key == "tools" else value
        return {"model": model, "contents": contents, "config": {**settings, **config}}

    if stream:
        create = models.generate_content_stream
        opener = (
            aopen_stream if inspect.iscoroutinefunction(inspect.unwrap(create)) else open_stream
        )
        once = _single_attempts(client, config, create)
        url = f"models/{model}:streamGenerateContent"
        # One marking of errors, whether the call raised them or the stream it began.
        marked = partial(classify_gemini, url=url)
        return make_stream_model(
            opener(create, url),
            request,
            partial(generate_stream, errors=marked),
            partial(agenerate_stream, errors=marked),
            "gemini",
            {},
            _options,
            errors=marked,
            name=model,
            retries_off=lambda: opener(once(), url),
        )
    return make_model(
        models.generate_content,
        request,
        generate_reply,
        "gemini",
        _options,
        errors=partial(classify_gemini, url=f"models/{model}:generateContent"),
        name=model,
        retries_off=_single_attempts(client, config, models.generate_content),
    )


def _single_attempts(
    client: Any, config: dict[str, Any], create: Callable[..., Any]
) -> Callable[[], Callable[..., Any]]:
    """What makes ``create`` send each request with the SDK's own retries off (a Loop retries).

    Per request (``http_options.retry_options``, one attempt): google-genai's
    clients are not copied with other options. That also stops the one retry of
    a lost connection its aiohttp transport makes on its own. ``retry_options``
    given to the client or in ``config`` asked for retries that would never be
    made: they are refused.
    """

    def made() -> Callable[..., Any]:
        # Where google-genai keeps a client's options: it has no public reader for them.
        kept = getattr(getattr(client, "_api_client", None), "_http_options", None)
        for where, options in (("the client's", kept), ("config's", config.get("http_options"))):
            if isinstance(options, dict):
                options = types.HttpOptions.model_validate(options)
            asked = getattr(options, "retry_options", None)
            if asked is not None and asked.attempts not in (0, 1):
                raise ValueError(
                    f"gemini_generate_content(): {where} retry_options would never be used: "
                    "this Loop retries (retry=), and one layer retries, so the adapter's "
                    "requests go out once each; leave retry_options out, or give the Loop "
                    "retry=None to let the SDK retry instead"
                )
        if inspect.iscoroutinefunction(inspect.unwrap(create)):

            async def acreate(**request: Any) -> Any:
                return await create(**_one_attempt(request))

            return acreate

        def screate(**request: Any) -> Any:
            return create(**_one_attempt(request))

        return screate

    return made


def _one_attempt(request: dict[str, Any]) -> dict[str, Any]:
    """``request`` with the SDK's retries off for it, whatever else its ``http_options`` say."""
    config = request["config"]
    options = config.get("http_options")
    if isinstance(options, types.HttpOptions):
        once: Any = options.model_copy(update={"retry_options": types.HttpRetryOptions(attempts=1)})
    else:
        once = {**(options or {}), "retry_options": {"attempts": 1}}
    return {**request, "config": {**config, "http_options": once}}


def _config_fields(**config: Any) -> None:
    """``GenerateContentConfig``'s fields as keyword parameters, for ``checked_params`` to bind."""


_config_fields.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY)
        for name in types.GenerateContentConfig.model_fields
    ]
)


def _options(tools: bool, tool_choice: str | None, output: Message | None) -> dict[str, Any]:
    """``tool_config`` (the wrap-up step's mode ``NONE``) and a response schema (typed output)."""
    out: dict[str, Any] = {}
    if tool_choice is not None and tools:
        mode = _CHOICES.get(tool_choice, tool_choice.upper())
        out["tool_config"] = {"function_calling_config": {"mode": mode}}
    if output is not None:
        out["response_mime_type"] = "application/json"
        out["response_json_schema"] = output["schema"]
    return out


def _contents(
    history: list[Message] | Messages, key: object = None
) -> tuple[list[dict[str, Any]], str | None]:
    """The history as Gemini's ``contents``, and the system instruction if there is one.

    The record's messages are converted once each, kept under ``key`` (``folded``).
    """
    contents, system = folded(history, key, _ContentsFold)
    return contents, "\n\n".join(system) or None


class _ContentsFold(Turns):
    """Gemini's contents and system texts, a history message at a time."""

    __slots__ = ("_stand_ins",)

    def __init__(self) -> None:
        super().__init__("parts")
        # The parts given the stand-in signature in the current turn, as (content, part).
        self._stand_ins: list[tuple[int, int]] = []

    def add(self, index: int, message: Message) -> None:  # the commonest kinds first
        kind = message.get("kind")
        if kind == "tool_result":
            part = {"function_response": _function_response(message)}
            parts = self.turn("user")
            if parts and "function_response" not in parts[-1]:
                # Before the text already in the turn, after its other results.
                at = next(i for i, p in enumerate(parts) if "function_response" not in p)
                parts.insert(at, part)
            else:
                parts.append(part)
        elif kind == "call" or kind == "calls":
            text, calls = assistant_turn(message)
            parts = self.turn("model")
            if text:
                parts.append({"text": text})
            for number, call in enumerate(calls):
                sent = _function_call(call, index, number == 0)
                if sent.get("thought_signature") is _SKIP:
                    self._stand_ins.append((len(self.turns) - 1, len(parts)))
                parts.append(sent)
        elif kind == "system":
            self.system.append(message["text"])
        elif kind == "user" or kind == "final":
            if kind == "user":
                self._turn_ends()
            if message["text"]:
                self.turn("user" if kind == "user" else "model").append({"text": message["text"]})
        else:
            raise unknown_kind(index, kind)

    def _turn_ends(self) -> None:
        """A user message begins a turn: the steps before it need no stand-in signature.

        Gemini 3 checks the thought signatures of the calls after the last user
        message, and refuses a step whose first call has none.
        """
        for at, number in self._stand_ins:
            parts = self.blocks(at)
            parts[number] = {k: v for k, v in parts[number].items() if k != "thought_signature"}
        self._stand_ins.clear()


def _function_call(call: Message, index: int, first_in_turn: bool) -> dict[str, Any]:
    """A call as a ``function_call`` part, its thought signature with it."""
    arguments = call["arguments"]
    function_call = {"name": call["name"], "args": arguments if isinstance(arguments, dict) else {}}
    if not call["id"].startswith(MADE_ID):
        function_call["id"] = call["id"]
    part: dict[str, Any] = {"function_call": function_call}
    signature = call.get(SIGNATURE)
    if signature:
        part["thought_signature"] = _signature(signature, index)
    elif first_in_turn:
        part["thought_signature"] = _SKIP
    return part


def _signature(text: str, index: int) -> bytes:
    """A signature as the record keeps it (base64, either alphabet) as the SDK's bytes."""
    try:
        return binascii.a2b_base64(text, strict_mode=True)  # as a Gemini reply's is kept
    except binascii.Error:
        pass
    padded = text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4)
    try:
        return binascii.a2b_base64(padded, strict_mode=True)
    except binascii.Error:
        raise ValueError(
            f"history[{index}]: expected a call's signature to be base64 (a thought "
            f"signature, as a Gemini reply gave it), got {text!r:.80}"
        ) from None


def _function_response(message: Message) -> dict[str, Any]:
    """A tool result as a ``function_response``: its output, or its error unless ``ok``."""
    out: dict[str, Any] = {"name": message["name"]}
    if not message["id"].startswith(MADE_ID):
        out["id"] = message["id"]
    if message["status"] != "ok":
        out["response"] = {"error": result_text(message)}
        return out
    parts = result_parts(message)
    if parts is None:
        out["response"] = {"output": message["content"]}
        return out
    images = [found for found in map(image_of, parts) if found is not None]
    out["response"] = {"output": [part_text(p) for p in parts if image_of(p) is None]}
    out["parts"] = [
        {"inline_data": {"mime_type": media, "data": base64.b64decode(data)}}
        for media, data in images
    ]
    return out
