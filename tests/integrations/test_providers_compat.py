"""OpenAI-compatible servers, each departure from Chat Completions a test, through the openai SDK.

Each test is a row of the Providers page's table: a server's documented
departure (a call without an id, arguments sent as an object, a stream
without indexes, usage elsewhere, another finish reason, a message it
refuses), played by a loopback server of our own that answers as that
server does, and refuses what it refuses. Each runs through the real openai
SDK, sync and async, whole and streamed where the departure is in both.
"""

from __future__ import annotations

import json
import random
import re
from typing import TYPE_CHECKING, Any

import openai
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import Loop, ToolRegistry
from agentloop.context import keep_last
from agentloop.ledger import SQLiteLedger
from agentloop.models import RetryPolicy
from agentloop.providers._compat import CallIds, short_ids
from agentloop.providers.openai import Compat, openai_chat
from agentloop.review import load_run, save_run
from agentloop.streaming import ToolCallStart
from tests.integrations.test_providers_streaming import pieces
from tests.support.helpers import add, mul
from tests.support.ledgers import Crash, CrashingLedger
from tests.support.wire import FLAVOURS, Streamed, Wire, run, sse

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

Message = dict[str, Any]
#: ``openai_chat``, called with ``stream`` a bool (its overloads want a literal).
chat: Any = openai_chat
#: An id of agentloop's making.
MADE = re.compile(r"call_[0-9a-f]{24}")
#: A key the server leaves out.
OMIT: Any = object()
USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 30,
    "total_tokens": 150,
    "prompt_tokens_details": {"cached_tokens": 100},
}
REPLY_USAGE = {"input_tokens": 120, "output_tokens": 30, "cached_tokens": 100}


# -- what the servers send -----------------------------------------------------------------------


def tool_call(
    call_id: Any = "call_1",
    name: str = "add",
    arguments: Any = '{"a": 2, "b": 3}',
    kind: Any = "function",
) -> Message:
    """One ``tool_calls`` entry of a whole response; ``OMIT`` leaves a key out."""
    entry = {"id": call_id, "type": kind, "function": {"name": name, "arguments": arguments}}
    return {key: value for key, value in entry.items() if value is not OMIT}


def completion(
    *,
    calls: list[Message] = (),  # type: ignore[assignment]
    text: str | None = None,
    finish: str | None = None,
    usage: Message | None = USAGE,
) -> Message:
    """A Chat Completions response body, as a compatible server sends it."""
    message: Message = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    body: Message = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_750_000_000,
        "model": "served-model",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish or ("tool_calls" if calls else "stop"),
            }
        ],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def chunks(
    body: Message,
    *,
    index: str = "each",
    repeat_ids: bool = False,
    later_names: str | None = None,
    usage: str | None = "chunk",
) -> list[tuple[str | None, Any]]:
    """``body`` as the server streams it, then ``[DONE]``.

    ``index``: each call its own (OpenAI), ``"zero"`` for every call, or
    ``"none"`` (the key left out, each call whole in one chunk). ``repeat_ids``:
    every delta of a call repeats its id; ``later_names``: every later delta
    carries this name. ``usage``: in a last chunk of its own (``"chunk"``),
    in the chunk with the finish (``"finish"``), in Groq's ``x_groq`` there
    (``"x_groq"``), or nowhere (``None``).
    """
    base = {key: body[key] for key in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"
    choice = body["choices"][0]

    def chunk(delta: Message, finish: str | None = None, **extra: Any) -> tuple[None, Message]:
        return None, {
            **base,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }

    said = choice["message"]
    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": piece}) for piece in pieces(said["content"] or "")]
    for at, call in enumerate(said.get("tool_calls", ())):
        where = {} if index == "none" else {"index": 0 if index == "zero" else at}
        function = call["function"]
        arguments = function["arguments"]
        whole = index == "none" or type(arguments) is not str
        first = {key: value for key, value in call.items() if key != "function"}
        first["function"] = {"name": function["name"], "arguments": arguments if whole else ""}
        out.append(chunk({"tool_calls": [{**where, **first}]}))
        for piece in () if whole else pieces(arguments):
            delta: Message = {**where, "function": {"arguments": piece}}
            if repeat_ids:
                delta["id"] = call["id"]
            if later_names is not None:
                delta["function"]["name"] = later_names
            out.append(chunk({"tool_calls": [delta]}))
    extra: Message = {}
    if usage == "finish" and "usage" in body:
        extra["usage"] = body["usage"]
    elif usage == "x_groq" and "usage" in body:
        extra["x_groq"] = {"id": "req_01", "usage": body["usage"]}
    out.append(chunk({}, choice["finish_reason"], **extra))
    if usage == "chunk" and "usage" in body:
        out.append((None, {**base, "choices": [], "usage": body["usage"]}))
    return [*out, (None, "[DONE]")]


def answer(body: Message, streamed: bool, **streaming: Any) -> tuple[int, Any]:
    """``body`` as the server answers it, whole or streamed (``streaming``: ``chunks``'s)."""
    return (200, Streamed(sse(chunks(body, **streaming))) if streamed else body)


def client(wire: Wire, flavour: str) -> Any:
    """The openai SDK's own client, talking to ``wire``, with its retries off."""
    http = wire.sync_client() if flavour == "sync" else wire.async_client()
    kind: Any = openai.OpenAI if flavour == "sync" else openai.AsyncOpenAI
    return kind(api_key="k", base_url="https://compatible.test/v1", max_retries=0, http_client=http)


def model(wire: Wire, flavour: str, streamed: bool, **options: Any) -> Any:
    return chat(client(wire, flavour), "served-model", stream=streamed, **options)


@pytest.fixture(params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=[False, True], ids=["whole", "streamed"])
def streamed(request: pytest.FixtureRequest) -> bool:
    return request.param  # type: ignore[no-any-return]


def tools() -> ToolRegistry:
    return ToolRegistry([add, mul])


def sent_calls(wire: Wire) -> list[list[tuple[str, str]]]:
    """Each request's (call id, result id) pairs, in order: what the server was sent back."""
    out = []
    for body in wire.requests:
        ids = [c["id"] for m in body["messages"] for c in m.get("tool_calls", ())]
        answered = [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
        out.append(list(zip(ids, answered, strict=True)))
    return out


DONE = completion(text="5.")


# -- call ids ------------------------------------------------------------------------------------


@pytest.mark.parametrize("given", [OMIT, "", None], ids=["missing", "empty", "null"])
async def test_a_call_without_an_id_gets_one(given: Any, flavour: str, streamed: bool) -> None:
    """llama.cpp and LM Studio have sent calls with an empty id, others with none: each gets
    one of agentloop's making, which the transcript keeps and the next request sends back."""
    wire = Wire([answer(completion(calls=[tool_call(given)]), streamed), answer(DONE, streamed)])
    result = await run(Loop(model(wire, flavour, streamed), tools=tools()), flavour, "2+3?")
    assert (result.status, result.output, result.calls) == ("finished", "5.", 1)
    call, outcome = result.transcript[1], result.transcript[2]
    assert MADE.fullmatch(call["id"])
    assert outcome == {
        "kind": "tool_result",
        "id": call["id"],
        "name": "add",
        "status": "ok",
        "content": 5,
    }
    assert sent_calls(wire) == [[], [(call["id"], call["id"])]]


async def test_a_streamed_call_starts_with_the_id_it_ends_with(flavour: str) -> None:
    """The stream's ``ToolCallStart`` carries the id made for the call, which the reply keeps."""
    body = completion(calls=[tool_call(OMIT), tool_call("", "mul")])
    wire = Wire([answer(body, True)])
    stream = model(wire, flavour, True)([{"kind": "user", "text": "?"}], tools=tools().specs())
    if flavour == "async":
        stream = await stream
        items = [item async for item in stream]
    else:
        items = list(stream)
    reply = items[-1]
    starts = [
        (item.index, item.id, item.name) for item in items[:-1] if type(item) is ToolCallStart
    ]
    assert starts == [(at, c["id"], c["name"]) for at, c in enumerate(reply["calls"])]
    assert all(MADE.fullmatch(c["id"]) for c in reply["calls"])
    assert reply["calls"][0]["id"] != reply["calls"][1]["id"]


async def test_two_calls_of_one_reply_with_one_id_are_two_calls(
    flavour: str, streamed: bool
) -> None:
    """A server that gives every call of a reply the same id: the second is another call, so it
    gets another id, and both run; a later reply can still not reuse the first."""
    twins = completion(
        calls=[tool_call("call_same"), tool_call("call_same", "mul", '{"a": 2, "b": 4}')]
    )
    wire = Wire([answer(twins, streamed), answer(DONE, streamed)])
    result = await run(Loop(model(wire, flavour, streamed), tools=tools()), flavour, "2+3, 2*4?")
    assert (result.status, result.calls) == ("finished", 2)
    first, second = result.transcript[1]["calls"]
    assert first["id"] == "call_same"
    assert MADE.fullmatch(second["id"])
    assert [m["content"] for m in result.transcript[2:4]] == [5, 8]


def kimi(then: list[Message], streamed: bool) -> list[Callable[[Message], tuple[int, Any]]]:
    """vLLM serving Kimi K2 (``--tool-call-parser kimi_k2``): each call's id is
    ``functions.<name>:<n>``, ``n`` the number of calls in the history it was sent. ``then``:
    the replies to make, in order, each call's id so made."""

    def respond(body: Message) -> Callable[[Message], tuple[int, Any]]:
        def made(request: Message) -> tuple[int, Any]:
            count = sum(len(m.get("tool_calls", ())) for m in request["messages"])
            calls = [
                tool_call(
                    f"functions.{c['function']['name']}:{count + at}",
                    c["function"]["name"],
                    c["function"]["arguments"],
                )
                for at, c in enumerate(body["choices"][0]["message"].get("tool_calls", ()))
            ]
            return answer(
                completion(calls=calls, text=body["choices"][0]["message"]["content"]), streamed
            )

        return made

    return [respond(body) for body in then]


READS = [completion(calls=[tool_call(OMIT, "add", json.dumps({"a": n, "b": n}))]) for n in range(4)]


async def test_ids_counted_from_a_trimmed_history_repeat_and_stop_the_run(
    flavour: str, streamed: bool
) -> None:
    """vLLM's Kimi ids count the calls in the history sent: once ``keep_last`` trims it, an id
    comes again. Without the switch the engine refuses it (``repeated_call``): a false stop,
    but nothing ran twice, and the error names the id."""
    wire = Wire(kimi([*READS, DONE], streamed))
    loop = Loop(model(wire, flavour, streamed), tools=tools(), context=keep_last(tokens=100))
    result = await run(loop, flavour, "Add.")
    assert result.status == "repeated_call"
    ran = [m["id"] for m in result.transcript if m["kind"] == "tool_result"]
    assert len(ran) == len(set(ran)) == result.calls
    assert result.error is not None
    assert "functions.add:1" in result.error


async def test_fresh_ids_make_every_id_unique(flavour: str, streamed: bool) -> None:
    """``Compat(fresh_ids=True)``: every call gets an id of agentloop's making, the server's
    dropped; the run goes to the end, each call run once, under its own id."""
    wire = Wire(kimi([*READS, DONE], streamed))
    compat = Compat(fresh_ids=True)
    loop = Loop(
        model(wire, flavour, streamed, compat=compat),
        tools=tools(),
        context=keep_last(tokens=100),
    )
    result = await run(loop, flavour, "Add.")
    assert (result.status, result.output, result.calls) == ("finished", "5.", 4)
    ids = [m["id"] for m in result.transcript if m["kind"] == "call"]
    assert len(set(ids)) == 4
    assert all(MADE.fullmatch(one) for one in ids)
    assert [m["content"] for m in result.transcript if m["kind"] == "tool_result"] == [0, 2, 4, 6]


async def test_a_made_id_is_kept_by_a_resumed_run(tmp_path: Path, flavour: str) -> None:
    """The made id is recorded with the reply, which goes with the call's start: a run resumed
    after that (the process died before the tool ran) answers the call under that id, and never
    asks the model for it again."""
    db = tmp_path / "runs.db"
    first = Wire([answer(completion(calls=[tool_call("")]), False)])
    dying = CrashingLedger(SQLiteLedger(db), 1, "after")  # dies once the call's start is kept
    loop = Loop(model(first, "sync", False), tools=tools(), ledger=dying)
    with pytest.raises(Crash):
        loop.run("2+3?", run_id="r1")
    made = orjson.loads(SQLiteLedger(db).read("r1")[1][0].body)[0]["input"]["id"]
    assert MADE.fullmatch(made)

    second = Wire([answer(DONE, False)])
    again = Loop(model(second, flavour, False), tools=tools(), ledger=SQLiteLedger(db))
    result = again.resume("r1") if flavour == "sync" else await again.aresume("r1")
    assert (result.status, result.output) == ("finished", "5.")
    assert result.transcript[1]["id"] == result.transcript[2]["id"] == made
    assert result.transcript[2]["content"]["type"] == "OutcomeUnknown"  # never run twice
    assert (len(first.requests), sent_calls(second)) == (1, [[(made, made)]])


async def test_a_made_id_is_kept_by_a_saved_run(tmp_path: Path, flavour: str) -> None:
    """A run file keeps the made id, and loading it (a replay through the engine) accepts it."""
    wire = Wire([answer(completion(calls=[tool_call(OMIT)]), False), answer(DONE, False)])
    result = await run(Loop(model(wire, flavour, False), tools=tools()), flavour, "2+3?")
    save_run(result, tmp_path / "run.json")
    loaded = load_run(tmp_path / "run.json")
    assert loaded.transcript == result.transcript
    assert MADE.fullmatch(loaded.transcript[1]["id"])


# -- arguments and calls -------------------------------------------------------------------------


async def test_arguments_sent_as_an_object_are_taken_as_they_are(
    flavour: str, streamed: bool
) -> None:
    """llama.cpp (and Ollama before it sent text) has sent a call's arguments as a JSON object:
    they are the arguments; the next request sends them back as JSON text, as OpenAI's are."""
    body = completion(calls=[tool_call("call_1", "add", {"a": 2, "b": 3})])
    wire = Wire([answer(body, streamed), answer(DONE, streamed)])
    result = await run(Loop(model(wire, flavour, streamed), tools=tools()), flavour, "2+3?")
    assert (result.status, result.transcript[2]["content"]) == ("finished", 5)
    assert result.transcript[1]["arguments"] == {"a": 2, "b": 3}
    (turn,) = [m for m in wire.requests[1]["messages"] if m["role"] == "assistant"]
    assert json.loads(turn["tool_calls"][0]["function"]["arguments"]) == {"a": 2, "b": 3}


async def test_a_call_without_a_type_is_a_function_call(flavour: str, streamed: bool) -> None:
    """A tool call with no ``type`` is a function call, as it is the only kind they send."""
    body = completion(calls=[tool_call("call_1", kind=OMIT)])
    wire = Wire([answer(body, streamed), answer(DONE, streamed)])
    result = await run(Loop(model(wire, flavour, streamed), tools=tools()), flavour, "2+3?")
    assert (result.status, result.calls) == ("finished", 1)


PARALLEL = completion(calls=[tool_call("call_a"), tool_call("call_m", "mul", '{"a": 2, "b": 4}')])


@pytest.mark.parametrize(
    "streaming",
    [
        {"index": "none"},  # Ollama (until it set them), Gemini's endpoint
        {"index": "zero"},  # every call at index 0, told apart by its id
        {"repeat_ids": True},  # DeepSeek and Qwen: the id in every delta of its call
        {"later_names": ""},  # LM Studio: an empty name in every later delta
    ],
    ids=["no-index", "index-zero", "ids-repeated", "empty-later-names"],
)
async def test_streamed_calls_are_told_apart_as_servers_send_them(
    streaming: Message, flavour: str
) -> None:
    """However a server marks the calls of a stream, two calls are two calls, each with its
    own id, name and arguments: the reply the same response gives whole."""
    whole = Wire([answer(PARALLEL, False), answer(DONE, False)])
    streamed = Wire([answer(PARALLEL, True, **streaming), answer(DONE, True, **streaming)])
    expected = await run(Loop(model(whole, flavour, False), tools=tools()), flavour, "?")
    got = await run(Loop(model(streamed, flavour, True), tools=tools()), flavour, "?")
    assert got.transcript == expected.transcript
    assert [m["content"] for m in got.transcript[2:4]] == [5, 8]


# -- finish reasons ------------------------------------------------------------------------------


async def test_calls_with_finish_reason_stop_are_calls(flavour: str, streamed: bool) -> None:
    """Ollama (before 0.3.x set it), Gemini's endpoint and OpenAI itself at times end a reply of
    calls with ``stop``: the calls are read from the message, whatever the reason."""
    body = completion(calls=[tool_call("call_1")], finish="stop")
    wire = Wire([answer(body, streamed), answer(DONE, streamed)])
    result = await run(Loop(model(wire, flavour, streamed), tools=tools()), flavour, "2+3?")
    assert (result.status, result.calls) == ("finished", 1)


async def test_an_empty_finish_reason_ends_a_stream(flavour: str) -> None:
    """Ollama has sent ``finish_reason: ""`` in every chunk: the stream still ends a reply."""
    events = chunks(DONE)
    for _, data in events:
        if isinstance(data, dict):
            for choice in data["choices"]:
                choice["finish_reason"] = ""
    wire = Wire([(200, Streamed(sse(events)))])
    result = await run(Loop(model(wire, flavour, True)), flavour, "2+3?")
    assert (result.status, result.output) == ("finished", "5.")


def instant() -> RetryPolicy:
    return RetryPolicy(sleep=lambda seconds, token: None, random=random.Random(1).random)


async def test_mistral_model_length_is_a_cut_off_reply(flavour: str, streamed: bool) -> None:
    """Mistral's ``model_length`` (the context window is full) is a reply cut off: the run
    fails, never taking the half text as an answer, and does not ask again."""
    wire = Wire([answer(completion(text="5 and", finish="model_length"), streamed)])
    result = await run(Loop(model(wire, flavour, streamed), retry=instant()), flavour, "2+3?")
    assert (result.status, result.steps) == ("failed", 1)
    assert result.error == (
        "the model raised IncompleteReply: the reply was cut off: the context window is full "
        "(finish_reason 'model_length')"
    )


@pytest.mark.parametrize("reason", ["error", "insufficient_system_resource"])
async def test_a_server_side_stop_is_asked_again(reason: str, flavour: str, streamed: bool) -> None:
    """Mistral's ``error`` and DeepSeek's ``insufficient_system_resource`` stop a reply for the
    server's own reasons: a failed call that may pass, which the Loop's policy asks again."""
    wire = Wire([answer(completion(text="5", finish=reason), streamed), answer(DONE, streamed)])
    result = await run(Loop(model(wire, flavour, streamed), retry=instant()), flavour, "2+3?")
    assert (result.status, result.output, result.steps) == ("finished", "5.", 2)
    assert result.events[0].guard == "retry_planned"
    assert result.events[0].error is not None
    assert f"finish_reason '{reason}'" in result.events[0].error


# -- usage ---------------------------------------------------------------------------------------


async def test_deepseek_cache_hits_are_the_cached_tokens(flavour: str, streamed: bool) -> None:
    """DeepSeek reports its cache in ``prompt_cache_hit_tokens``: they are the cached tokens."""
    used = {
        "prompt_tokens": 120,
        "completion_tokens": 30,
        "total_tokens": 150,
        "prompt_cache_hit_tokens": 100,
        "prompt_cache_miss_tokens": 20,
    }
    wire = Wire([answer(completion(text="5.", usage=used), streamed)])
    result = await run(Loop(model(wire, flavour, streamed)), flavour, "2+3?")
    (replied,) = [e for e in result.events if e.trigger == "model_replied"]
    assert replied.usage is not None
    assert replied.usage._asdict() == REPLY_USAGE


async def test_groq_stream_usage_in_x_groq_is_the_usage(flavour: str) -> None:
    """Groq has put a stream's usage in ``x_groq.usage`` on its last chunk: it is the usage."""
    wire = Wire([answer(DONE, True, usage="x_groq")])
    result = await run(Loop(model(wire, flavour, True)), flavour, "2+3?")
    assert result.usage._asdict() == REPLY_USAGE


async def test_a_stream_without_usage_is_a_reply_without_usage(flavour: str) -> None:
    """LM Studio ignores ``stream_options`` and reports no usage in a stream: the reply is taken
    with none, and the run counts none for it."""
    wire = Wire([answer(DONE, True, usage=None)])
    result = await run(Loop(model(wire, flavour, True), max_total_tokens=10), flavour, "2+3?")
    assert (result.status, result.output) == ("finished", "5.")
    assert result.usage._asdict() == {"input_tokens": 0, "output_tokens": 0, "cached_tokens": 0}


@pytest.mark.parametrize("counts", [{"prompt_tokens": None}, {"completion_tokens": None}])
async def test_usage_without_its_counts_is_no_usage(
    counts: Message, flavour: str, streamed: bool
) -> None:
    """A usage whose counts are ``null`` is left out, as none reported; the reply is taken."""
    wire = Wire([answer(completion(text="5.", usage={**USAGE, **counts}), streamed)])
    result = await run(Loop(model(wire, flavour, streamed)), flavour, "2+3?")
    assert (result.status, result.usage.input_tokens) == ("finished", 0)


# -- what servers refuse -------------------------------------------------------------------------


def refusing(
    rule: Callable[[Message], tuple[int, Message] | None], answers: list[tuple[int, Any]]
) -> list[Callable[[Message], tuple[int, Any]]]:
    """Each of ``answers``, unless ``rule`` refuses the request: the server's error instead."""

    def respond(given: tuple[int, Any]) -> Callable[[Message], tuple[int, Any]]:
        return lambda request: rule(request) or given

    return [respond(one) for one in answers]


def mistral_options(request: Message) -> tuple[int, Message] | None:
    """Mistral refuses ``stream_options`` (it sends a stream's usage unasked)."""
    if "stream_options" not in request:
        return None
    detail = [
        {
            "type": "extra_forbidden",
            "loc": ["body", "stream_options"],
            "msg": "Extra inputs are not permitted",
        }
    ]
    return 422, {"object": "error", "message": {"detail": detail}, "type": "invalid_request_error"}


async def test_mistral_refuses_stream_options(flavour: str) -> None:
    """Unswitched, the stream's first request is refused (422), and the run fails at once."""
    wire = Wire(refusing(mistral_options, [answer(DONE, True, usage="finish")]))
    result = await run(Loop(model(wire, flavour, True), retry=instant()), flavour, "2+3?")
    assert (result.status, result.steps) == ("failed", 1)
    assert result.error is not None
    assert result.error.startswith("the model raised UnprocessableEntityError: ")


async def test_stream_usage_off_sends_no_stream_options(flavour: str) -> None:
    """``Compat(stream_usage=False)``: no ``stream_options``; the usage Mistral sends unasked,
    with the finish, is still the reply's."""
    wire = Wire(refusing(mistral_options, [answer(DONE, True, usage="finish")]))
    compat = Compat(stream_usage=False)
    result = await run(Loop(model(wire, flavour, True, compat=compat)), flavour, "2+3?")
    assert (result.status, result.output) == ("finished", "5.")
    assert result.usage._asdict() == REPLY_USAGE
    assert "stream_options" not in wire.requests[0]


def mistral_ids(request: Message) -> tuple[int, Message] | None:
    """Mistral refuses a call id that is not nine letters and digits."""
    for message in request["messages"]:
        for one in [c["id"] for c in message.get("tool_calls", ())] + [message.get("tool_call_id")]:
            if one is not None and not re.fullmatch(r"[A-Za-z0-9]{9}", one):
                text = f"Tool call id was {one} but must be a-z, A-Z, 0-9, with a length of 9."
                return 400, {"object": "error", "message": text, "type": "invalid_request_error"}
    return None


# A history made elsewhere (OpenAI's ids, then an id of agentloop's making), then Mistral's own.
CARRIED = [
    {"kind": "user", "text": "2+3, then 2*4?"},
    {
        "kind": "call",
        "id": "call_Kx9QmLzN2rT5vW8yB1cD3eF7",
        "name": "add",
        "arguments": {"a": 2, "b": 3},
    },
    {
        "kind": "tool_result",
        "id": "call_Kx9QmLzN2rT5vW8yB1cD3eF7",
        "name": "add",
        "status": "ok",
        "content": 5,
    },
    {
        "kind": "call",
        "id": "call_0123456789abcdef01234567",
        "name": "mul",
        "arguments": {"a": 2, "b": 4},
    },
    {
        "kind": "tool_result",
        "id": "call_0123456789abcdef01234567",
        "name": "mul",
        "status": "ok",
        "content": 8,
    },
]


@pytest.mark.parametrize("switched", [False, True], ids=["refused", "short-ids"])
async def test_mistral_takes_other_ids_as_short_ones(
    switched: bool, flavour: str, streamed: bool
) -> None:
    """A history whose ids came from another provider (after a fallback, or a caller's) is
    refused by Mistral; ``Compat(short_ids=True)`` sends each as nine letters and digits, the
    same in a call and its result, Mistral's own unchanged. The record keeps them all."""
    mistral_call = completion(calls=[tool_call("D681PevKs", "add", '{"a": 5, "b": 8}')])
    wire = Wire(refusing(mistral_ids, [answer(mistral_call, streamed), answer(DONE, streamed)]))
    options = {"compat": Compat(short_ids=True)} if switched else {}
    loop = Loop(model(wire, flavour, streamed, **options), tools=tools(), retry=instant())
    result = await run(loop, flavour, CARRIED)
    if not switched:
        assert (result.status, result.steps) == ("failed", 1)
        assert result.error is not None
        assert result.error.startswith("the model raised BadRequestError: ")
        return
    assert (result.status, result.output) == ("finished", "5.")
    assert result.transcript[: len(CARRIED)] == CARRIED
    assert result.transcript[len(CARRIED)]["id"] == "D681PevKs"
    first, second = sent_calls(wire)
    assert [a for a, _ in second] == [*(a for a, _ in first), "D681PevKs"]
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", a) and a == b for a, b in second)
    assert len({a for a, _ in second}) == 3


def gemini_names(request: Message) -> tuple[int, Message] | None:
    """Gemini's OpenAI-compatible endpoint refuses a tool message without a ``name``."""
    if any(m["role"] == "tool" and "name" not in m for m in request["messages"]):
        return 400, [
            {
                "error": {
                    "code": 400,
                    "message": "Request contains an invalid argument.",
                    "status": "INVALID_ARGUMENT",
                }
            }
        ]  # type: ignore[return-value]
    return None


def groq_names(request: Message) -> tuple[int, Message] | None:
    """Groq refuses ``messages[].name``."""
    for at, message in enumerate(request["messages"]):
        if "name" in message:
            text = f"'messages.{at}' : property 'name' is unsupported"
            return 400, {"error": {"message": text, "type": "invalid_request_error"}}
    return None


@pytest.mark.parametrize(
    ("rule", "compat", "status"),
    [
        (gemini_names, Compat(), "failed"),
        (gemini_names, Compat(tool_names=True), "finished"),
        (groq_names, Compat(), "finished"),
        (groq_names, Compat(tool_names=True), "failed"),
    ],
    ids=["gemini-unnamed", "gemini-tool-names", "groq-unnamed", "groq-tool-names"],
)
async def test_tool_messages_are_named_where_the_server_wants_it(
    rule: Callable[[Message], Any], compat: Compat, status: str, flavour: str, streamed: bool
) -> None:
    """Gemini's endpoint wants each tool message to name its tool, Groq refuses any message
    with a name: ``Compat(tool_names=True)`` for the first, the default for the second."""
    script = [answer(completion(calls=[tool_call("call_1")]), streamed), answer(DONE, streamed)]
    wire = Wire(refusing(rule, script))
    loop = Loop(model(wire, flavour, streamed, compat=compat), tools=tools(), retry=instant())
    result = await run(loop, flavour, "2+3?")
    assert result.status == status
    if status == "finished":
        (tool,) = [m for m in wire.requests[1]["messages"] if m["role"] == "tool"]
        assert tool.get("name") == ("add" if compat.tool_names else None)


# -- the switches --------------------------------------------------------------------------------


def test_compat_takes_switches_and_nothing_else() -> None:
    """Each switch is a bool, the adapter's ``compat`` a ``Compat``: anything else is a
    ``TypeError`` that names what was expected, now rather than at the first step."""
    assert Compat() == Compat(
        fresh_ids=False,
        tool_names=False,
        stream_usage=True,
        short_ids=False,
        thought_signatures=False,
    )
    with pytest.raises(
        TypeError, match=r"^Compat\(\) expected tool_names to be True or False, got 1$"
    ):
        Compat(tool_names=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^openai_chat\(\) expected compat to be a Compat"):
        chat(client(Wire([]), "sync"), "m", compat={"tool_names": True})


def gemini_signatures(request: Message) -> tuple[int, Message] | None:
    """Gemini 3 refuses a step of the current turn (after the last user message) whose first
    call has no thought signature; and, as its endpoint does, a tool message without a name."""
    messages = request["messages"]
    last_user = max(at for at, m in enumerate(messages) if m["role"] == "user")
    for at, message in enumerate(messages[last_user + 1 :], start=last_user + 1):
        calls = message.get("tool_calls") or []
        signed = calls[0].get("extra_content", {}).get("google", {}) if calls else {}
        if calls and not signed.get("thought_signature"):
            text = f"Function call is missing a thought_signature in functionCall parts. ({at})"
            return 400, [{"error": {"code": 400, "message": text, "status": "INVALID_ARGUMENT"}}]  # type: ignore[return-value]
    return gemini_names(request)


SIGNED = completion(
    calls=[
        {
            **tool_call("function-call-1"),
            "extra_content": {"google": {"thought_signature": "c2lnbmF0dXJlLTE="}},
        },
        tool_call("function-call-2", "mul", '{"a": 2, "b": 4}'),
    ]
)


@pytest.mark.parametrize("switched", [False, True], ids=["refused", "thought-signatures"])
async def test_gemini_thought_signatures_go_back_with_their_calls(
    switched: bool, flavour: str, streamed: bool
) -> None:
    """Gemini 3 sends a thought signature with a step's first call (``extra_content``), and
    refuses the next request without it: the call keeps it (``signature``, in the record), and
    ``Compat(thought_signatures=True)`` sends it back with the call."""
    script = [answer(SIGNED, streamed), answer(DONE, streamed)]
    wire = Wire(refusing(gemini_signatures, script))
    compat = Compat(tool_names=True, thought_signatures=switched)
    loop = Loop(model(wire, flavour, streamed, compat=compat), tools=tools(), retry=instant())
    result = await run(loop, flavour, "2+3, 2*4?")
    first, second = result.transcript[1]["calls"]
    assert first == {
        "id": "function-call-1",
        "name": "add",
        "arguments": {"a": 2, "b": 3},
        "signature": "c2lnbmF0dXJlLTE=",
    }
    assert "signature" not in second
    if not switched:
        assert (result.status, result.steps) == ("failed", 2)
        assert result.error is not None
        assert result.error.startswith("the model raised BadRequestError: ")
        return
    assert (result.status, result.output) == ("finished", "5.")
    (turn,) = [m for m in wire.requests[1]["messages"] if m["role"] == "assistant"]
    assert [c.get("extra_content") for c in turn["tool_calls"]] == [
        {"google": {"thought_signature": "c2lnbmF0dXJlLTE="}},
        None,
    ]


async def test_a_call_gemini_did_not_make_is_sent_with_googles_stand_in(
    flavour: str, streamed: bool
) -> None:
    """A call of the current turn that no Gemini reply signed (another provider's, after a
    fallback) goes with the signature Google documents for it, which Gemini 3 takes."""
    carried = [
        {"kind": "user", "text": "2+3?"},
        {"kind": "call", "id": "call_from_elsewhere", "name": "add", "arguments": {"a": 2, "b": 3}},
        {
            "kind": "tool_result",
            "id": "call_from_elsewhere",
            "name": "add",
            "status": "ok",
            "content": 5,
        },
    ]
    wire = Wire(refusing(gemini_signatures, [answer(DONE, streamed)]))
    compat = Compat(tool_names=True, thought_signatures=True)
    result = await run(
        Loop(model(wire, flavour, streamed, compat=compat), tools=tools()), flavour, carried
    )
    assert (result.status, result.output) == ("finished", "5.")
    (turn,) = [m for m in wire.requests[0]["messages"] if m["role"] == "assistant"]
    assert turn["tool_calls"][0]["extra_content"] == {
        "google": {"thought_signature": "skip_thought_signature_validator"}
    }


# -- the ids, as properties ----------------------------------------------------------------------

SHORT = re.compile(r"[A-Za-z0-9]{9}")
server_ids = st.one_of(
    st.none(),
    st.just(""),
    st.sampled_from(["call_0", "functions.add:0", "a"]),
    st.text(max_size=12),
)


@settings(max_examples=300, deadline=None)
@given(given_ids=st.lists(server_ids, max_size=8), fresh=st.booleans())
def test_a_replys_ids_are_unique_and_the_servers_where_they_can_be(
    given_ids: list[str | None], fresh: bool
) -> None:
    """Whatever ids a server gives a reply's calls, each call gets a non-empty id no other call
    of the reply has: the server's own when it has one that no earlier call took (unless
    ``fresh``), else one of agentloop's making."""
    ids = CallIds(fresh)
    made = [ids(one) for one in given_ids]
    assert len(set(made)) == len(made)
    taken: set[str] = set()
    for one, got in zip(given_ids, made, strict=True):
        if one and one not in taken and not fresh:
            assert got == one
        else:
            assert MADE.fullmatch(got)
        taken.add(got)


ids_in_a_history = st.lists(
    st.one_of(st.text(min_size=1, max_size=40), st.from_regex(SHORT, fullmatch=True)), max_size=10
)


@settings(max_examples=300, deadline=None)
@given(ids=ids_in_a_history, later=ids_in_a_history)
def test_short_ids_are_one_to_one_and_stable(ids: list[str], later: list[str]) -> None:
    """Every id becomes nine letters and digits, two ids never one, an id of that form stays
    itself, and an id keeps its short form when the history grows (a call and its result,
    sent in one request and again in the next, agree)."""
    short = short_ids(ids)
    assert set(short) == set(ids)
    assert all(SHORT.fullmatch(one) for one in short.values())
    assert len(set(short.values())) == len(short)
    assert all(short[one] == one for one in ids if SHORT.fullmatch(one))
    grown = short_ids(ids + later)
    assert all(grown[one] == short[one] for one in ids)
