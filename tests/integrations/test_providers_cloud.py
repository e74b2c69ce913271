"""anthropic_messages on Amazon Bedrock and Google Vertex AI, through the SDK's own clients.

``AnthropicBedrock`` and ``AnthropicVertex`` (and their async twins) are the
Messages API behind another door: the same request body, less ``model`` (it
moves into the URL) and plus the SDK's ``anthropic_version``; another
path (Bedrock's ``/model/{id}/invoke``, Vertex's ``...:rawPredict``); other
credentials (AWS SigV4 or a Bedrock API key, a Google access token); other
error bodies; and, on Bedrock, a stream of AWS event-stream frames rather
than Server-Sent Events. Each is answered here by a server of our own on a
mock transport, which keeps every request, headers and all.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anthropic
import attrs
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from agentloop import Loop, ToolRegistry
from agentloop.models import RetryPolicy, fallback
from agentloop.providers.anthropic import anthropic_messages
from tests.integrations.test_providers_anthropic import MODEL, error, message
from tests.integrations.test_providers_streaming import messages_events
from tests.support.helpers import add
from tests.support.wire import FLAVOURS, Streamed, Wire, assert_usage, event_stream, run, sse

if TYPE_CHECKING:
    import httpx2

Message = dict[str, Any]
#: ``anthropic_messages``, called with ``stream`` a bool (its overloads want a literal).
messages: Any = anthropic_messages

KEY, SECRET, TOKEN = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token"
REGION = "us-east-1"
BEDROCK_URL = f"https://bedrock-runtime.{REGION}.amazonaws.test"
VERTEX_URL = "https://us-east5-aiplatform.googleapis.test/v1"
PROJECT = "my-project"
ACCESS_TOKEN = "ya29.an-access-token"


def bedrock_client(wire: Wire, flavour: str, **auth: Any) -> Any:
    """``AnthropicBedrock`` (or its async twin) talking to ``wire``: SigV4 with static keys
    unless ``auth`` says otherwise (``api_key=...``: a Bedrock API key)."""
    auth = auth or {"aws_access_key": KEY, "aws_secret_key": SECRET, "aws_session_token": TOKEN}
    kind: Any = anthropic.AnthropicBedrock if flavour == "sync" else anthropic.AsyncAnthropicBedrock
    http = wire.sync_client() if flavour == "sync" else wire.async_client()
    return kind(aws_region=REGION, base_url=BEDROCK_URL, max_retries=0, http_client=http, **auth)


def vertex_client(wire: Wire, flavour: str) -> Any:
    """``AnthropicVertex`` (or its async twin) talking to ``wire``, with an access token of its
    own, so that no Google credentials are looked up."""
    kind: Any = anthropic.AnthropicVertex if flavour == "sync" else anthropic.AsyncAnthropicVertex
    http = wire.sync_client() if flavour == "sync" else wire.async_client()
    return kind(
        region="us-east5",
        project_id=PROJECT,
        access_token=ACCESS_TOKEN,
        base_url=VERTEX_URL,
        max_retries=0,
        http_client=http,
    )


def first_party_client(wire: Wire, flavour: str) -> Any:
    """``Anthropic`` itself, to compare the platforms' requests with."""
    kind: Any = anthropic.Anthropic if flavour == "sync" else anthropic.AsyncAnthropic
    http = wire.sync_client() if flavour == "sync" else wire.async_client()
    return kind(api_key="sk-ant", base_url="https://api.anthropic.test", http_client=http)


def bedrock_stream(body: Message) -> Streamed:
    """A message as Bedrock streams it: its events in AWS event-stream frames."""
    frames = event_stream([event for _, event in messages_events(body)])
    return Streamed(frames, content_type="application/vnd.amazon.eventstream")


def vertex_stream(body: Message) -> Streamed:
    """A message as Vertex streams it: the first-party Server-Sent Events."""
    return Streamed(sse(messages_events(body)))


@attrs.frozen
class Platform:
    """A cloud that serves Claude, as these tests use it."""

    name: str
    model: str  # the platform's own name for the model
    client: Callable[[Wire, str], Any]
    stream: Callable[[Message], Streamed]

    def __str__(self) -> str:
        return self.name

    def path(self, stream: bool, model: str | None = None) -> str:
        """The URL path a request for ``model`` goes to, streamed or not."""
        model = model or self.model
        if self.name == "bedrock":
            return f"/model/{model}/invoke{'-with-response-stream' if stream else ''}"
        where = f"/v1/projects/{PROJECT}/locations/us-east5/publishers/anthropic/models"
        return f"{where}/{model}:{'streamRawPredict' if stream else 'rawPredict'}"


BEDROCK = Platform(
    "bedrock",
    "anthropic.claude-sonnet-4-5-20250929-v1:0",
    bedrock_client,
    bedrock_stream,
)
VERTEX = Platform("vertex", "claude-sonnet-4-5@20250929", vertex_client, vertex_stream)


@pytest.fixture(params=[BEDROCK, VERTEX], ids=str)
def platform(request: pytest.FixtureRequest) -> Platform:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=[False, True], ids=["whole", "streamed"])
def streamed(request: pytest.FixtureRequest) -> bool:
    return request.param  # type: ignore[no-any-return]


def answer(body: Message, stream: bool, platform: Platform) -> tuple[int, Any]:
    """``body`` as the platform sends it, whole or streamed."""
    return (200, platform.stream(body) if stream else body)


ADDING = message(calls=[("toolu_01", "add", {"a": 2, "b": 3})])
DONE = message(text="2+3 is 5.")


# -- the same run, through another door ----------------------------------------------------------


async def test_a_run_sends_the_first_party_body_to_the_platforms_path(
    platform: Platform, flavour: str, streamed: bool
) -> None:
    """A call, its result, a final: the run is the first-party run, and each request is the
    first-party request less ``model`` (in the path instead) plus ``anthropic_version``."""
    tools = ToolRegistry([add])
    wire = Wire([answer(ADDING, streamed, platform), answer(DONE, streamed, platform)])
    model = messages(platform.client(wire, flavour), platform.model, stream=streamed)
    result = await run(Loop(model, tools=tools), flavour, "2+3?")
    assert (result.status, result.output, result.calls) == ("finished", "2+3 is 5.", 1)
    assert_usage(result, replies=2)

    first_party = Wire([(200, ADDING), (200, DONE)])
    await run(
        Loop(anthropic_messages(first_party_client(first_party, flavour), MODEL), tools=tools),
        flavour,
        "2+3?",
    )
    assert wire.paths == [platform.path(streamed)] * 2
    for sent, expected in zip(wire.requests, first_party.requests, strict=True):
        assert type(sent.pop("anthropic_version")) is str  # the SDK's, for the platform
        if streamed:
            # Vertex keeps stream in the body; Bedrock has it in the path alone.
            assert sent.pop("stream", True) is True
        assert sent == {key: value for key, value in expected.items() if key != "model"}


async def test_typed_output_is_asked_for_natively(platform: Platform, flavour: str) -> None:
    """``Loop(output=T)``'s schema goes out as ``output_config``, as to Anthropic itself."""
    wire = Wire([(200, message(text='{"city": "Lisbon"}'))])
    model = anthropic_messages(platform.client(wire, flavour), platform.model)
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    result = await run(Loop(model, output=schema), flavour, "Where?")
    assert (result.status, result.output) == ("finished", {"city": "Lisbon"})
    (body,) = wire.requests
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}


# -- credentials ---------------------------------------------------------------------------------


def resigned(request: httpx2.Request, session_token: str | None = TOKEN) -> str:
    """The SigV4 signature of ``request`` as it arrived, made afresh by botocore with the same
    keys and time: equal to the one it carries only if what arrived is what was signed."""
    headers = {k: v for k, v in request.headers.items() if k != "authorization"}
    signed = AWSRequest(method="POST", url=str(request.url), headers=headers, data=request.content)
    signed.context["timestamp"] = request.headers["x-amz-date"]
    signer = SigV4Auth(Credentials(KEY, SECRET, session_token), "bedrock", REGION)
    signature: str = signer.signature(
        signer.string_to_sign(signed, signer.canonical_request(signed)), signed
    )
    return signature


async def test_bedrock_signs_each_request_with_sigv4(flavour: str, streamed: bool) -> None:
    """Every request carries an AWS SigV4 ``Authorization`` for the ``bedrock`` service in the
    client's region, signed over the body that arrived, with the session token; no API key."""
    wire = Wire([answer(ADDING, streamed, BEDROCK), answer(DONE, streamed, BEDROCK)])
    model = messages(bedrock_client(wire, flavour), BEDROCK.model, stream=streamed)
    await run(Loop(model, tools=ToolRegistry([add])), flavour, "2+3?")
    assert len(wire.sent) == 2
    for request in wire.sent:
        scheme, _, fields = request.headers["authorization"].partition(" ")
        credential, signed_headers, signature = fields.split(", ")
        day = request.headers["x-amz-date"][:8]
        assert scheme == "AWS4-HMAC-SHA256"
        assert credential == f"Credential={KEY}/{day}/{REGION}/bedrock/aws4_request"
        assert {"host", "x-amz-date", "x-amz-security-token", "content-type"} <= set(
            signed_headers.removeprefix("SignedHeaders=").split(";")
        )
        assert request.headers["x-amz-security-token"] == TOKEN
        assert signature == f"Signature={resigned(request)}"
        assert "x-api-key" not in request.headers


async def test_a_bedrock_api_key_is_a_bearer_token(flavour: str) -> None:
    """With a Bedrock API key the request carries it as a bearer token, and is not signed."""
    wire = Wire([(200, DONE)])
    client = bedrock_client(wire, flavour, api_key="bedrock-api-key")
    await run(Loop(anthropic_messages(client, BEDROCK.model)), flavour, "2+3?")
    (request,) = wire.sent
    assert request.headers["authorization"] == "Bearer bedrock-api-key"
    assert not any(name.startswith("x-amz-") for name in request.headers)


async def test_vertex_sends_its_access_token(flavour: str, streamed: bool) -> None:
    """Vertex gets the access token as a bearer token, and no API key."""
    wire = Wire([answer(DONE, streamed, VERTEX)])
    model = messages(vertex_client(wire, flavour), VERTEX.model, stream=streamed)
    await run(Loop(model), flavour, "2+3?")
    (request,) = wire.sent
    assert request.headers["authorization"] == f"Bearer {ACCESS_TOKEN}"
    assert "x-api-key" not in request.headers


# -- model names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "raw_path"),
    [
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", None),  # a cross-region profile
        (
            "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3",
            "/model/arn:aws:bedrock:us-east-1:123456789012:application-inference-profile%2Fa1b2c3"
            "/invoke",
        ),
    ],
)
async def test_bedrock_model_ids_go_into_the_path(
    name: str, raw_path: str | None, flavour: str
) -> None:
    """An inference profile's id, or an ARN (its ``/`` escaped), is the path's model segment."""
    wire = Wire([(200, DONE)])
    await run(Loop(anthropic_messages(bedrock_client(wire, flavour), name)), flavour, "hi")
    (request,) = wire.sent
    assert request.url.raw_path.decode() == (raw_path or f"/model/{name}/invoke")
    assert "model" not in wire.requests[0]


async def test_a_fallback_from_bedrock_to_vertex_names_each_model(flavour: str) -> None:
    """Bedrock throttled twice, then Vertex answers: the events name each model as given."""
    throttled = (429, {"message": "Too many requests"}, {"x-amzn-errortype": "ThrottlingException"})
    bedrock, vertex = Wire([throttled, throttled]), Wire([(200, DONE)])
    chain = fallback(
        anthropic_messages(bedrock_client(bedrock, flavour), BEDROCK.model),
        anthropic_messages(vertex_client(vertex, flavour), VERTEX.model),
    )
    policy = RetryPolicy(
        attempts=2, sleep=lambda seconds, token: None, random=random.Random(1).random
    )
    result = await run(Loop(chain, retry=policy), flavour, "2+3?")
    assert (result.status, result.output) == ("finished", "2+3 is 5.")
    assert [(e.guard, e.model) for e in result.events if e.model] == [
        ("retry_planned", BEDROCK.model),
        ("fallback_left", BEDROCK.model),
        (None, VERTEX.model),
    ]


# -- errors --------------------------------------------------------------------------------------

# Bedrock's error bodies: {"message"}, the exception named in a header.
THROTTLED = (
    429,
    {"message": "Too many requests, please wait."},
    {"x-amzn-errortype": "ThrottlingException"},
)
UNAVAILABLE = (
    503,
    {"message": "Service unavailable."},
    {"x-amzn-errortype": "ServiceUnavailableException"},
)
MODEL_TIMEOUT = (
    408,
    {"message": "Model has timed out."},
    {"x-amzn-errortype": "ModelTimeoutException"},
)
# Google's error bodies on Vertex.
QUOTA = (
    429,
    {"error": {"code": 429, "message": "Quota exceeded.", "status": "RESOURCE_EXHAUSTED"}},
)
OVERLOADED = (529, error("overloaded_error", "Overloaded"))


def instant() -> RetryPolicy:
    return RetryPolicy(sleep=lambda seconds, token: None, random=random.Random(1).random)


def raised(error: str | None) -> type[BaseException]:
    """The SDK's exception class an event's ``error`` names ("the model raised X: ...")."""
    assert error is not None
    name = error.removeprefix("the model raised ").partition(":")[0]
    found: type[BaseException] = getattr(anthropic, name)
    return found


@pytest.mark.parametrize(
    ("platform", "failure", "kind"),
    [
        (BEDROCK, THROTTLED, anthropic.RateLimitError),
        (BEDROCK, UNAVAILABLE, anthropic.InternalServerError),
        (BEDROCK, MODEL_TIMEOUT, anthropic.APIStatusError),
        (VERTEX, QUOTA, anthropic.RateLimitError),
        (VERTEX, OVERLOADED, anthropic.InternalServerError),
    ],
    ids=[
        "bedrock-throttled",
        "bedrock-unavailable",
        "bedrock-model-timeout",
        "vertex-quota",
        "vertex-overloaded",
    ],
)
async def test_a_passing_error_is_retried(
    platform: Platform, failure: tuple[Any, ...], kind: type[Exception], flavour: str
) -> None:
    """A throttle, an outage or a model timeout (408) is the SDK's error, marked as passing:
    the Loop's policy asks again (the SDK's own retries are off), and the run goes on."""
    wire = Wire([failure, (200, DONE)])
    model = anthropic_messages(platform.client(wire, flavour), platform.model)
    result = await run(Loop(model, retry=instant()), flavour, "2+3?")
    assert (result.status, result.output, result.steps) == ("finished", "2+3 is 5.", 2)
    assert result.events[0].guard == "retry_planned"
    assert issubclass(raised(result.events[0].error), kind)
    assert len(wire.requests) == 2


@pytest.mark.parametrize(
    ("platform", "status", "body", "kind"),
    [
        (
            BEDROCK,
            403,
            {"message": "You don't have access to the model."},
            anthropic.PermissionDeniedError,
        ),
        (
            BEDROCK,
            400,
            {"message": "The provided model identifier is invalid."},
            anthropic.BadRequestError,
        ),
        (BEDROCK, 404, {"message": "Model not found."}, anthropic.NotFoundError),
        (
            VERTEX,
            403,
            {
                "error": {
                    "code": 403,
                    "message": "Permission denied.",
                    "status": "PERMISSION_DENIED",
                }
            },
            anthropic.PermissionDeniedError,
        ),
        (
            VERTEX,
            404,
            {
                "error": {
                    "code": 404,
                    "message": "Publisher model not found.",
                    "status": "NOT_FOUND",
                }
            },
            anthropic.NotFoundError,
        ),
    ],
    ids=["bedrock-403", "bedrock-400", "bedrock-404", "vertex-403", "vertex-404"],
)
async def test_a_refusal_fails_the_run_at_once(
    platform: Platform, status: int, body: Message, kind: type[Exception], flavour: str
) -> None:
    """No access, a wrong model id, a bad request: the SDK's error, asked once, never retried."""
    wire = Wire([(status, body)])
    model = anthropic_messages(platform.client(wire, flavour), platform.model)
    result = await run(Loop(model, retry=instant()), flavour, "2+3?")
    assert (result.status, result.steps) == ("failed", 1)
    assert issubclass(raised(result.error), kind)
    assert len(wire.requests) == 1


async def test_an_exception_frame_mid_stream_is_retried(flavour: str) -> None:
    """Bedrock's stream breaks off with a throttling exception frame after some events: the
    step fails as the SDK's error, marked as a rate limit, and the Loop asks again."""
    events = [event for _, event in messages_events(DONE)][:4]
    broken = Streamed(
        event_stream(events, ("throttlingException", "Too many tokens, please wait.")),
        content_type="application/vnd.amazon.eventstream",
    )
    wire = Wire([(200, broken), answer(DONE, True, BEDROCK)])
    model = anthropic_messages(bedrock_client(wire, flavour), BEDROCK.model, stream=True)
    result = await run(Loop(model, retry=instant()), flavour, "2+3?")
    assert (result.status, result.output, result.steps) == ("finished", "2+3 is 5.", 2)
    assert result.events[0].guard == "retry_planned"
    assert issubclass(raised(result.events[0].error), anthropic.APIStatusError)
    assert broken.closed_at is not None
    assert (
        json.loads(wire.sent[0].content)["messages"] == json.loads(wire.sent[1].content)["messages"]
    )
