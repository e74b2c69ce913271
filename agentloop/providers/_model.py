"""The model callback an adapter makes, and the parts of its request the adapters share.

``make_model`` makes the (unstreamed) model callback of an adapter's pieces:
the Loop's tools in the provider's format (``request_tools``), what an
adapter adds for ``tool_choice`` and ``output`` (``Options``), a structured
output wrapped when the provider wants an object at its root
(``object_rooted``), and its SDK's errors marked for the Loop's retries. The
client and the request parameters are checked when the adapter is called.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias, TypeVar

import orjson

from agentloop._core.json import unfenced
from agentloop._tools.specs import PROVIDER_NAMES, build_specs
from agentloop.providers._convert import Message
from agentloop.providers._errors import aparsed, classify, parsed, raw_create

if TYPE_CHECKING:
    from types import ModuleType

    from agentloop._core.requests import Messages
    from agentloop._tools.specs import NameRule, SpecFormat

#: What an adapter's callback is given: a history as a list, or the record (from the drivers).
GivenHistory: TypeAlias = "list[Message] | Messages"

__all__ = [
    "AsyncModel",
    "ModelCallback",
    "Options",
    "SyncModel",
    "checked_client",
    "checked_params",
    "make_model",
    "request_tools",
    "strict_schema",
    "without_retries",
]


ReplyT = TypeVar("ReplyT", covariant=True)


class ModelCallback(Protocol[ReplyT]):
    """An adapter's model callback: the Loop passes its tools' specs.

    And, with ``Loop(output=T)``, ``output`` (``{'name', 'schema'}``); in the
    wrap-up step (``on_exhausted='answer'``), ``tool_choice='none'``. What it
    returns is the adapter's: a reply, a stream of one, or either awaited.
    """

    def __call__(
        self,
        history: list[Message],
        *,
        tools: list[Message] | None = None,
        tool_choice: str | None = None,
        output: Message | None = None,
    ) -> ReplyT:
        """The reply to ``history`` (or its stream), with ``tools`` (neutral specs) offered."""
        ...


#: The model callback for a sync client.
SyncModel = ModelCallback[Message]
#: The model callback for an async client: ``SyncModel``, awaited.
AsyncModel = ModelCallback[Coroutine[Any, Any, Message]]


#: What an adapter adds to a request for ``tool_choice`` and ``output`` (its own keys).
Options = Callable[[bool, str | None, Message | None], dict[str, Any]]


#: Where a provider is asked for an output whose schema's root is not an object.
ANSWER_KEY: Final = "response"


def checked_client(adapter: str, client: object, model: object, create: str, sdk: str) -> None:
    """Refuse, now, a client without the method the adapter calls, or no model name.

    By the method (``create``, a dotted path), not the class: Azure's, Bedrock's
    and Vertex's clients have it without being the SDK's main class.
    """
    method: object = client
    for name in create.split("."):
        method = getattr(method, name, None)
    if not callable(method):
        raise TypeError(
            f"{adapter}() expected client to be {sdk} client (with client.{create}), "
            f"got {type(client).__name__}"
        )
    if type(model) is not str or not model:
        raise TypeError(
            f"{adapter}() expected model to be the provider's model name (a non-empty str), "
            f"got {model!r:.80}"
        )


def without_retries(
    adapter: str, client: Any, create: str, sdk: ModuleType
) -> Callable[[], Callable[..., Any]] | None:
    """What makes ``create`` (a dotted path) of a copy of ``client`` whose own retries are off.

    For a Loop that retries (``retry=``): one layer retries, the Loop's, whose
    attempts are steps in the record. None for a client that does not retry
    (``max_retries=0``) or cannot be copied so (no ``with_options``). A client
    made with ``max_retries`` other than the SDK's default asked for retries
    that would never be made: the Loop is refused, saying what to do instead.
    """
    copy = getattr(client, "with_options", None)
    retries = getattr(client, "max_retries", None)
    if retries == 0 or not callable(copy):
        return None

    def made() -> Callable[..., Any]:
        if retries != getattr(sdk, "DEFAULT_MAX_RETRIES", retries):
            raise ValueError(
                f"{adapter}(): the client's max_retries={retries} would never be used: this "
                "Loop retries (retry=), and one layer retries, so the adapter's requests go "
                "out once each; make the client with max_retries=0, or give the Loop "
                "retry=None to let the SDK retry instead"
            )
        method: Any = copy(max_retries=0)
        for name in create.split("."):
            method = getattr(method, name)
        return method  # type: ignore[no-any-return]

    return made


def checked_params(
    adapter: str, create: Callable[..., Any], params: dict[str, Any], reserved: dict[str, str]
) -> None:
    """Refuse request parameters that ``create`` lacks or that the adapter sets itself.

    Now, rather than at the first step; ``reserved`` says what to do instead.
    ``tools`` come from the Loop, with each request (``make_model``).
    """
    if "tools" in params:
        raise TypeError(
            f"{adapter}() takes no tools=: the tools come from the Loop, which passes its "
            "registry's specs with every request (Loop(model, tools=registry))"
        )
    for name, instead in reserved.items():
        if name in params:
            raise TypeError(f"{adapter}() sets {name!r} itself; {instead}")
    try:
        inspect.signature(create).bind_partial(**params)
    except TypeError as exc:
        raise TypeError(f"{adapter}(): {exc}") from None


def request_tools(specs: list[Message] | None, format: SpecFormat) -> dict[str, Any]:
    """The request's ``tools`` entry: the Loop's specs, in the provider's ``format``.

    ``specs`` are what the Loop passes with each request, in the neutral
    ``'json-schema'`` format (``{'name', 'description', 'parameters'}``),
    converted as the registry converts its own (``build_specs``). No specs,
    no entry: the APIs refuse an empty list.
    """
    if not specs:
        return {}
    entries = []
    for index, spec in enumerate(specs):
        if not (
            isinstance(spec, dict)
            and isinstance(spec.get("name"), str)
            and isinstance(spec.get("parameters"), dict)
        ):
            raise TypeError(
                f"tools[{index}]: expected a spec {{'name', 'description', 'parameters'}} "
                f"(the Loop's registry's specs()), got {spec!r:.80}"
            )
        entries.append((spec["name"], spec.get("description") or "", spec["parameters"]))
    return {"tools": build_specs(entries, format)}


def make_model(
    create: Callable[..., Any],
    request: Callable[[GivenHistory, dict[str, Any]], dict[str, Any]],
    parse: Callable[[Any], Message],
    format: SpecFormat,
    options: Options | None = None,
    *,
    sdk: ModuleType | None = None,
    name: str | None = None,
    sent: dict[str, Any] | None = None,
    names: NameRule | None = None,
    retries_off: Callable[[], Callable[..., Any]] | None = None,
    errors: Callable[[Exception], Exception | None] | None = None,
) -> SyncModel | AsyncModel:
    """The model callback: ``parse(create(**request(history, tools)))``, awaited if async.

    It takes ``tools``, so the Loop passes its specs with every request
    (``request_tools`` puts them in the provider's ``format``), and
    ``tool_choice`` and ``output``, which ``options`` turns into the
    provider's request entries. The SDKs wrap their async methods in plain
    decorators, hence ``unwrap``. An error the ``sdk`` raises is marked with
    its kind when it may pass (``classify``), for the Loop's retry policy,
    which is on by default for these models (``agentloop_retry``); ``errors``
    marks them instead, for an SDK whose errors are named otherwise, and may
    give an error to raise in their place (``UnreadableResponse``). ``name``
    is what fallback models' events call it. ``sent`` goes with every request
    as it is (``stream=True``, for a streaming model).

    ``names`` is the provider's rule for tool names (by default, the
    ``format``'s: ``PROVIDER_NAMES``), declared on the callback as
    ``agentloop_tool_names``: a ``Loop`` made with it refuses a tool whose
    name breaks the rule, before any request. ``retries_off`` gives the
    ``create`` of a client whose own retries are off (``without_retries``):
    the callback's ``agentloop_single_attempt()`` is then the same model over
    it, which a ``Loop`` that retries uses, so that retries do not multiply.
    """
    entries = request_entries(format, options)
    sent = sent or {}
    marked = errors or (lambda exc: classify(exc, sdk))  # None: the error as it is
    # Unstreamed, the SDK's raw response is read: a body that is not JSON is said so.
    raw = None if sent else raw_create(create)

    # What the two callbacks share: each differs from the other only where it awaits.
    def body_of(
        history: GivenHistory, tools: list[Message] | None, choice: str | None, output: Any
    ) -> tuple[dict[str, Any], bool]:
        asked, wrapped = object_rooted(output)
        return request(history, entries(tools, choice, asked)), wrapped

    def reply_of(response: Any, wrapped: bool) -> Message:
        return unwrapping(parse(response)) if wrapped else parse(response)

    made: Any
    if inspect.iscoroutinefunction(inspect.unwrap(create)):

        async def amodel(
            history: GivenHistory,
            *,
            tools: list[Message] | None = None,
            tool_choice: str | None = None,
            output: Message | None = None,
        ) -> Message:
            body, wrapped = body_of(history, tools, tool_choice, output)
            try:
                if raw is None:
                    response = await create(**body, **sent)
                else:
                    response = await aparsed(await raw(**body))
            except Exception as exc:
                instead = marked(exc)
                if instead is None:
                    raise
                raise instead from exc
            return reply_of(response, wrapped)

        made = amodel
    else:

        def model(
            history: GivenHistory,
            *,
            tools: list[Message] | None = None,
            tool_choice: str | None = None,
            output: Message | None = None,
        ) -> Message:
            body, wrapped = body_of(history, tools, tool_choice, output)
            try:
                response = create(**body, **sent) if raw is None else parsed(raw(**body))
            except Exception as exc:
                instead = marked(exc)
                if instead is None:
                    raise
                raise instead from exc
            return reply_of(response, wrapped)

        made = model
    made.agentloop_retry = True
    # The drivers give it the record itself (``Messages``): it converts each message once.
    made.agentloop_reads_record = True
    made.agentloop_name = name or format
    made.agentloop_tool_names = names or PROVIDER_NAMES.get(format)
    if retries_off is not None:
        made.agentloop_single_attempt = lambda: make_model(
            retries_off(),
            request,
            parse,
            format,
            options,
            sdk=sdk,
            name=name,
            sent=sent,
            names=names,
            errors=errors,
        )
    return made  # type: ignore[no-any-return]


def object_rooted(output: Message | None) -> tuple[Message | None, bool]:
    """``output`` as the providers take it, and whether its answer comes wrapped.

    Their structured outputs (and a tool's input) want an object at the
    schema's root: any other output (``list[City]``, ``int``, ``City |
    None``) is asked for as ``{"response": <it>}``, as the OpenAI Agents SDK
    does, and ``unwrapped`` takes the answer out again.
    """
    if output is None:
        return None, False
    schema = output["schema"]
    if schema.get("type") == "object" and "anyOf" not in schema:
        return output, False
    inner = {key: value for key, value in schema.items() if key != "$defs"}
    wrapper: dict[str, Any] = {
        "type": "object",
        "properties": {ANSWER_KEY: inner},
        "required": [ANSWER_KEY],
        "additionalProperties": False,
    }
    if "$defs" in schema:  # its references point at the root's
        wrapper["$defs"] = schema["$defs"]
    return {**output, "schema": wrapper}, True


def unwrapped(reply: Message) -> Message:
    """A final reply to a wrapped output, its text the answer inside (else as it came)."""
    if reply.get("kind") != "final":
        return reply
    try:
        value = orjson.loads(unfenced(reply["text"]))  # as the engine's check reads it
    except orjson.JSONDecodeError:
        return reply  # not JSON: the engine's check says so, to the model
    if type(value) is not dict or value.keys() != {ANSWER_KEY}:
        return reply
    return {**reply, "text": orjson.dumps(value[ANSWER_KEY]).decode()}


def unwrapping(answer: Any) -> Any:
    """``unwrapped`` on a model's answer: a reply, or a stream whose last item is the reply."""
    if type(answer) is dict:
        return unwrapped(answer)
    answer.change_reply(unwrapped)  # a ReplyStream or an AsyncReplyStream
    return answer


def request_entries(
    format: SpecFormat, options: Options | None
) -> Callable[[list[Message] | None, str | None, Message | None], dict[str, Any]]:
    """A request's tool entries in ``format``, and what ``options`` adds for the rest."""

    def entries(
        tools: list[Message] | None, tool_choice: str | None, output: Message | None
    ) -> dict[str, Any]:
        offered = request_tools(tools, format)
        if options is None or (tool_choice is None and output is None):
            return offered
        added = options(bool(offered), tool_choice, output)
        if "tools" in added and "tools" in offered:  # an adapter's own tool, beside the Loop's
            added["tools"] = [*offered["tools"], *added["tools"]]
        return {**offered, **added}

    return entries


def strict_schema(schema: Any) -> bool:
    """Whether OpenAI's strict mode takes ``schema``: every object closed, every key required.

    Strict mode refuses any other schema, so one with an optional field (a
    default) is sent with ``strict: false``: still asked for, not enforced.
    """
    if isinstance(schema, list):
        return all(strict_schema(item) for item in schema)
    if not isinstance(schema, dict):
        return True
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            return False
        if sorted(schema.get("required", [])) != sorted(properties):
            return False
    return all(
        strict_schema(value)
        for key, value in schema.items()
        if key not in ("enum", "const", "default", "required")
    )
