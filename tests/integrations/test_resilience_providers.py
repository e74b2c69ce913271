"""Retries and fallback models through the real SDKs, over loopback transports (no network).

The SDKs' own retries are off (``max_retries=0``): the Loop's retry policy
classifies their exceptions, honours ``Retry-After`` and waits through an
injected sleeper, so nothing here is timed.
"""

from __future__ import annotations

import random
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from google import genai
from google.genai import types

from agentloop import CancelToken, Loop, ToolRegistry
from agentloop.models import RetryPolicy, asleep, fallback, sleep, transient
from agentloop.providers.anthropic import anthropic_messages
from agentloop.providers.google import gemini_generate_content
from tests.integrations import test_providers_gemini as gem
from tests.integrations.test_providers_anthropic import MODEL, answered_first
from tests.integrations.test_providers_anthropic import client as anthropic_client
from tests.integrations.test_providers_anthropic import message as anthropic_answer
from tests.integrations.test_providers_openai import CHAT, ERROR, RESPONSES, Api
from tests.integrations.test_providers_openai import client as openai_client
from tests.support.helpers import add
from tests.support.wire import FLAVOURS, Wire, run

ANTHROPIC_ERROR = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}


class Sleeps:
    """A sleeper that waits no time and keeps every wait it was asked for."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float, token: CancelToken | None) -> None:
        self.waits.append(seconds)


@pytest.fixture(params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=[CHAT, RESPONSES], ids=str)
def api(request: pytest.FixtureRequest) -> Api:
    return request.param  # type: ignore[no-any-return]


def openai_model(api: Api, flavour: str, wire: Wire, name: str = "gpt-4.1") -> Any:
    return api.adapter(openai_client(wire, flavour, max_retries=0), name)


def test_the_adapters_are_retried_by_default_and_plain_callbacks_are_not(api: Api) -> None:
    """Loop(adapter) gets RetryPolicy(); retry=None turns it off."""
    model = openai_model(api, "sync", Wire([]))
    assert Loop(model).retry == RetryPolicy()
    assert Loop(model, retry=None).retry is None
    assert Loop(lambda history: history).retry is None


async def test_a_429_with_retry_after_then_success(api: Api, flavour: str) -> None:
    """OpenAI's RateLimitError is retried after the server's Retry-After, then the reply."""
    wire = Wire([(429, ERROR, {"retry-after": "2"}), (200, api.answer(text="5"))])
    sleeps = Sleeps()
    loop = Loop(openai_model(api, flavour, wire), retry=RetryPolicy(sleep=sleeps))
    result = await run(loop, flavour, "2+3?")
    assert (result.status, result.output, result.steps) == ("finished", "5", 2)
    first = result.events[0]
    assert (first.guard, first.wait) == ("retry_planned", 2.0)
    assert first.error is not None
    assert first.error.startswith("the model raised RateLimitError")
    assert sleeps.waits == [2.0]
    assert len(wire.requests) == 2


async def test_an_anthropic_429_with_retry_after_ms_then_success(flavour: str) -> None:
    """Anthropic's RateLimitError: retry-after-ms is read first, and honoured."""
    wire = Wire(
        [(429, ANTHROPIC_ERROR, {"retry-after-ms": "1500"}), (200, anthropic_answer(text="5"))]
    )
    sleeps = Sleeps()
    model = anthropic_messages(anthropic_client(wire, flavour, max_retries=0), MODEL)
    result = await run(Loop(model, retry=RetryPolicy(sleep=sleeps)), flavour, "2+3?")
    assert (result.status, result.output) == ("finished", "5")
    assert sleeps.waits == [1.5]


async def test_a_500_on_the_primary_then_the_fallback_answers(api: Api, flavour: str) -> None:
    """Two 500s use up the primary's attempts; the secondary answers, and the events say so."""
    primary = Wire([(500, ERROR), (500, ERROR)])
    secondary = Wire([(200, api.answer(text="from the fallback"))])
    chain = fallback(
        openai_model(api, flavour, primary), openai_model(api, flavour, secondary, "gpt-4.1-mini")
    )
    policy = RetryPolicy(attempts=2, sleep=Sleeps(), random=random.Random(1).random)
    result = await run(Loop(chain, retry=policy), flavour, "hi")
    assert (result.status, result.output, result.steps) == ("finished", "from the fallback", 3)
    assert [(e.guard, e.model) for e in result.events if e.model] == [
        ("retry_planned", "gpt-4.1"),
        ("fallback_left", "gpt-4.1"),
        (None, "gpt-4.1-mini"),
    ]
    assert set(result.usage_by_model) == {"gpt-4.1-mini"}
    assert (len(primary.requests), len(secondary.requests)) == (2, 1)


async def test_a_401_is_not_retried_and_moves_to_the_fallback(api: Api, flavour: str) -> None:
    """An authentication error is no passing error: the fallback is asked at once."""
    primary = Wire([(401, ERROR)])
    secondary = Wire([(200, api.answer(text="ok"))])
    chain = fallback(
        openai_model(api, flavour, primary), openai_model(api, flavour, secondary, "other")
    )
    result = await run(Loop(chain, retry=RetryPolicy(sleep=Sleeps())), flavour, "hi")
    assert [e.guard for e in result.events][:1] == ["fallback_left"]
    assert (result.output, result.steps) == ("ok", 2)


async def test_a_cancel_during_the_backoff_wait_ends_the_run_at_once(
    api: Api, flavour: str
) -> None:
    """Retry-After 30 s, cancelled as the wait starts: the drivers' own wait returns at once."""
    token = CancelToken()

    def cancel_then_wait(seconds: float, given: CancelToken | None) -> Any:
        token.cancel()
        return sleep(seconds, given) if flavour == "sync" else asleep(seconds, given)

    wire = Wire([(429, ERROR, {"retry-after": "30"}), (200, api.answer(text="never"))])
    loop = Loop(
        openai_model(api, flavour, wire), retry=RetryPolicy(cap=60.0, sleep=cancel_then_wait)
    )
    result = (
        loop.run("hi", cancel=token) if flavour == "sync" else await loop.arun("hi", cancel=token)
    )
    assert [(e.trigger, e.guard, e.dest) for e in result.events] == [
        ("model_raised", "retry_planned", "backing_off"),
        ("waited", "cancel_requested", "cancelled"),
    ]
    assert result.events[0].wait == 30.0
    assert len(wire.requests) == 1


def test_the_sdks_errors_are_classified_by_their_own_types(api: Api) -> None:
    """429s and 5xx are marked with their kind, a 400 is not; timeouts and lost connections
    on the transport are too, for both SDKs."""
    kinds = []
    for answers in ([(429, ERROR)], [(503, ERROR)], [(400, ERROR)]):
        model = openai_model(api, "sync", Wire(list(answers)))
        with pytest.raises(openai.APIStatusError) as raised:
            model([{"kind": "user", "text": "hi"}])
        found = transient(raised.value)
        kinds.append(None if found is None else found.kind)
    assert kinds == ["rate_limit", "server", None]
    for error, kind in ((httpx2.ReadTimeout, "timeout"), (httpx2.ConnectError, "connection")):

        def fail(request: httpx2.Request, error: type[httpx2.TransportError] = error) -> Any:
            raise error("no answer", request=request)

        transport = httpx2.Client(transport=httpx2.MockTransport(fail))
        for model in (
            api.adapter(
                openai.OpenAI(
                    api_key="sk-test",
                    base_url="https://api.openai.test/v1",
                    max_retries=0,
                    http_client=transport,
                ),
                "gpt-4.1",
            ),
            anthropic_messages(
                anthropic.Anthropic(
                    api_key="sk-ant-test",
                    base_url="https://api.anthropic.test",
                    max_retries=0,
                    http_client=transport,
                ),
                MODEL,
            ),
        ):
            with pytest.raises(Exception) as caught:  # noqa: PT011 - the SDK's own type
                model([{"kind": "user", "text": "hi"}])
            assert transient(caught.value) is not None
            assert transient(caught.value).kind == kind  # type: ignore[union-attr]


def test_gemini_is_retried_by_default() -> None:
    """Loop(gemini_generate_content(...)) gets RetryPolicy(), as the other adapters do."""
    assert Loop(gem.model_for("sync", Wire([]))).retry == RetryPolicy()


async def test_a_gemini_primary_that_fails_mid_run_hands_its_calls_to_another_provider(
    flavour: str,
) -> None:
    """Gemini calls, then 503s past its attempts: the Anthropic fallback is given the history,
    the made ids as they are (within what Anthropic takes), the thought signature left out."""
    primary = Wire(
        [
            (200, gem.response(gem.function_call("add", {"a": 2, "b": 3}, signature="c2ln"))),
            (503, gem.error(503, "UNAVAILABLE", "overloaded")),
            (503, gem.error(503, "UNAVAILABLE", "overloaded")),
        ]
    )
    secondary = Wire([(200, anthropic_answer(text="5"))])
    chain = fallback(
        gem.model_for(flavour, primary),
        anthropic_messages(anthropic_client(secondary, flavour, max_retries=0), MODEL),
    )
    policy = RetryPolicy(attempts=2, sleep=Sleeps(), random=random.Random(1).random)
    result = await run(Loop(chain, tools=ToolRegistry([add]), retry=policy), flavour, "2+3?")
    assert (result.status, result.output) == ("finished", "5")
    assert [(e.guard, e.model) for e in result.events if e.model][-3:] == [
        ("retry_planned", gem.MODEL),
        ("fallback_left", gem.MODEL),
        (None, MODEL),
    ]
    (body,) = secondary.requests
    answered_first(body["messages"])
    called = body["messages"][1]["content"][0]
    assert called == {
        "type": "tool_use",
        "id": "gemini_resp-1_0",
        "name": "add",
        "input": {"a": 2, "b": 3},
    }


async def test_a_gemini_bad_key_moves_to_the_fallback_at_once(flavour: str) -> None:
    """A 400 (Gemini's answer to a bad key) is no passing error: the next model is asked."""
    primary = Wire([(400, gem.BAD_KEY)])
    secondary = Wire([(200, gem.response(gem.text("ok")))])
    chain = fallback(gem.model_for(flavour, primary), gem.model_for(flavour, secondary))
    result = await run(Loop(chain, retry=RetryPolicy(sleep=Sleeps())), flavour, "hi")
    assert [e.guard for e in result.events][:1] == ["fallback_left"]
    assert (result.output, result.steps, len(primary.requests)) == ("ok", 2, 1)


# -- one layer retries: the Loop's policy, or (retry=None) the SDK's ---------------------------

PROVIDERS = ["openai_chat", "openai_responses", "anthropic", "anthropic streaming"]


def sdk_default_model(provider: str, flavour: str, wire: Wire) -> Any:
    """The adapter over a client left at the SDK's own default, ``max_retries=2``."""
    if provider.startswith("anthropic"):
        streams: Any = provider.endswith("streaming")
        return anthropic_messages(anthropic_client(wire, flavour), MODEL, stream=streams)
    api = CHAT if provider == "openai_chat" else RESPONSES
    return api.adapter(openai_client(wire, flavour), "gpt-4.1")


def failing_wire(provider: str, count: int) -> Wire:
    """``count`` answers of 500 in the provider's error format."""
    error = ANTHROPIC_ERROR if provider.startswith("anthropic") else ERROR
    return Wire([(500, error)] * count)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_when_the_loop_retries_the_sdk_does_not(provider: str, flavour: str) -> None:
    """A client left at the SDK's default (``max_retries=2``) and the Loop's policy of 3
    attempts: 3 HTTP requests, one a step, each in the record; not 3 times 3."""
    wire = failing_wire(provider, 9)
    loop = Loop(sdk_default_model(provider, flavour, wire), retry=RetryPolicy(sleep=Sleeps()))
    result = await run(loop, flavour, "hi")
    assert (result.status, result.steps, len(wire.requests)) == ("failed", 3, 3)
    assert [e.guard for e in result.events] == ["retry_planned", None, "retry_planned", None, None]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_the_default_policy_alone_retries(provider: str, flavour: str) -> None:
    """``Loop(adapter)`` retries by its default policy, so the SDK makes one request per step:
    cancelled as the first failure is recorded, the run made one request, not the SDK's 3."""
    wire, token = failing_wire(provider, 3), CancelToken()

    def cancel_on_failure(transition: Any) -> None:
        if transition.trigger == "model_raised":
            token.cancel()

    loop = Loop(sdk_default_model(provider, flavour, wire), listeners=[cancel_on_failure])
    result = (
        loop.run("hi", cancel=token) if flavour == "sync" else await loop.arun("hi", cancel=token)
    )
    assert (result.status, result.steps, len(wire.requests)) == ("cancelled", 1, 1)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_with_retry_none_the_sdk_s_own_retries_run(provider: str, flavour: str) -> None:
    """``retry=None``: the SDK's own retries are the one layer (its ``max_retries=2``): one
    step, 3 HTTP requests."""
    wire = failing_wire(provider, 3)
    result = await run(Loop(sdk_default_model(provider, flavour, wire), retry=None), flavour, "hi")
    assert (result.status, result.steps, len(wire.requests)) == ("failed", 1, 3)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_sdk_retries_asked_for_beside_the_loop_s_are_refused(
    provider: str, flavour: str
) -> None:
    """A client made with ``max_retries=5`` asked for retries a Loop that retries would never
    make: the Loop is refused, saying what to do. With ``retry=None`` they are the one layer:
    one step, 6 HTTP requests."""
    wire = failing_wire(provider, 6)
    if provider.startswith("anthropic"):
        client = anthropic_client(wire, flavour, max_retries=5)
        streams: Any = provider.endswith("streaming")
        model = anthropic_messages(client, MODEL, stream=streams)
        adapter = "anthropic_messages"
    else:
        api = CHAT if provider == "openai_chat" else RESPONSES
        model, adapter = (
            api.adapter(openai_client(wire, flavour, max_retries=5), "gpt-4.1"),
            provider,
        )
    with pytest.raises(
        ValueError,
        match=rf"^{adapter}\(\): the client's max_retries=5 would never be used: this Loop "
        r"retries \(retry=\), .* make the client with max_retries=0, or give the Loop "
        r"retry=None to let the SDK retry instead$",
    ):
        Loop(model)
    result = await run(Loop(model, retry=None), flavour, "hi")
    assert (result.status, result.steps, len(wire.requests)) == ("failed", 1, 6)


def gemini_unavailable(count: int) -> Wire:
    return Wire([(503, gem.error(503, "UNAVAILABLE", "overloaded"))] * count)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_when_the_loop_retries_gemini_s_sdk_does_not(
    flavour: str, stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """google-genai retries nothing by default; under a Loop that retries, the adapter asks it
    for one attempt a request all the same (which also keeps its aiohttp transport from
    retrying a lost connection): 3 attempts, 3 requests, each a step. With retry=None it
    sends the requests as configured."""
    asked: list[Any] = []
    client = gem.client(gemini_unavailable(4), flavour)
    method = "generate_content_stream" if stream else "generate_content"
    create = getattr(client.models, method)

    def spying(**request: Any) -> Any:
        asked.append(request["config"].get("http_options"))
        return create(**request)

    async def aspying(**request: Any) -> Any:
        asked.append(request["config"].get("http_options"))
        return await create(**request)

    monkeypatch.setattr(client.models, method, spying if flavour == "sync" else aspying)
    model = gemini_generate_content(client, gem.MODEL, stream=stream)  # type: ignore[call-overload]
    result = await run(Loop(model, retry=RetryPolicy(sleep=Sleeps())), flavour, "hi")
    assert (result.status, result.steps) == ("failed", 3)
    assert asked == [{"retry_options": {"attempts": 1}}] * 3
    alone = await run(Loop(model, retry=None), flavour, "hi")
    assert (alone.status, alone.steps, asked[3:]) == ("failed", 1, [None])


async def test_gemini_sdk_retries_asked_for_beside_the_loop_s_are_refused(flavour: str) -> None:
    """A client made with retry_options (or a config with them) asked for retries a Loop that
    retries would never make: the Loop is refused, saying what to do. With retry=None they
    are the one layer: one step, 3 HTTP requests. Other per-request options stay."""
    retries = types.HttpRetryOptions(attempts=3, initial_delay=0, max_delay=0, jitter=0)
    wire = gemini_unavailable(3)
    options = gem.http_options(wire)
    options.retry_options = retries
    made = genai.Client(api_key="AIza-test", http_options=options)
    model = gemini_generate_content(made if flavour == "sync" else made.aio, gem.MODEL)
    said = (
        r"^gemini_generate_content\(\): the client's retry_options would never be used: this "
        r"Loop retries \(retry=\), .* give the Loop retry=None to let the SDK retry instead$"
    )
    with pytest.raises(ValueError, match=said):
        Loop(model)
    result = await run(Loop(model, retry=None), flavour, "hi")
    assert (result.status, result.steps, len(wire.requests)) == ("failed", 1, 3)
    per_request = gem.model_for(flavour, Wire([]), http_options={"retry_options": retries})
    with pytest.raises(ValueError, match=r"^gemini_generate_content\(\): config's retry_options"):
        Loop(per_request)
    timed = Wire([(200, gem.response(gem.text("ok")))])
    kept = gem.model_for(flavour, timed, http_options={"headers": {"x-trace": "t-1"}})
    assert (await run(Loop(kept), flavour, "hi")).output == "ok"
    assert timed.sent[0].headers["x-trace"] == "t-1"
