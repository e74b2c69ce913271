"""The built-in adapters read the record: each message converted once, requests never changed.

The drivers give an adapter the run's record (``AskModel.messages``) rather
than a fresh copy of the history; the adapter keeps what it made of each
message in the run's cache, and a step converts only the messages recorded
since the last. What it sends must be what converting the whole history
sends, at every step, and a request once sent must never change.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from typing import TYPE_CHECKING, Any, cast

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import Loop, RunResult
from agentloop._core.messages import History
from agentloop._core.requests import AskModel, Messages
from agentloop.providers._compat import SKIP_SIGNATURE as CHAT_SKIP
from agentloop.providers._openai_request import _chat_messages, _responses_input
from agentloop.providers.anthropic import _messages_request
from agentloop.providers.google import _SKIP, _contents
from agentloop.providers.openai import Compat

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.support.helpers import Driver

Message = dict[str, Any]

#: Each adapter's conversion: ``convert(history, key)``, the record's kept under ``key``.
CONVERSIONS: dict[str, Callable[[Any, object], Any]] = {
    "openai_chat": lambda history, key: _chat_messages(history, Compat(), key),
    "openai_chat_compat": lambda history, key: _chat_messages(
        history, Compat(short_ids=True, thought_signatures=True, tool_names=True), key
    ),
    "openai_responses": _responses_input,
    "anthropic_messages": _messages_request,
    "gemini_generate_content": _contents,
}

ids = st.one_of(
    st.from_regex(r"[A-Za-z0-9]{9}", fullmatch=True),  # as Compat.short_ids keeps them
    st.text("abcxyz_-", min_size=1, max_size=12),
)
texts = st.sampled_from(["", "ok", "Thinking.", "done"])
arguments = st.one_of(
    st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 9), max_size=2),
    st.just('{"a": 1,'),  # raw text that did not parse
)
signatures = st.sampled_from(["c2lnbmF0dXJl", "dGhvdWdodA=="])


@st.composite
def calls(draw: st.DrawFn) -> list[Message]:
    made = []
    for _ in range(draw(st.integers(1, 3))):
        call: Message = {"id": draw(ids), "name": "read", "arguments": draw(arguments)}
        if draw(st.booleans()):
            call["signature"] = draw(signatures)
        made.append(call)
    return made


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """A history of every kind: turns with calls and their results, user turns, finals."""
    history: list[Message] = []
    for _ in range(draw(st.integers(0, 10))):
        step = draw(st.sampled_from(["system", "user", "final", "call", "calls"]))
        if step in ("system", "user", "final"):
            text = draw(texts)
            history.append({"kind": step, "text": text or ("go" if step == "user" else "")})
            continue
        made = draw(calls())
        if step == "call":
            history.append({"kind": "call", **made[0]})
            made = made[:1]
        else:
            history.append(
                {
                    "kind": "calls",
                    "calls": made,
                    **({"text": draw(texts)} if draw(st.booleans()) else {}),
                }
            )
        for call in draw(st.permutations(made)):  # answered in any order
            status = draw(st.sampled_from(["ok", "ok", "error", "denied"]))
            content = draw(
                st.one_of(
                    st.just("r" * 20), st.integers(-(2**63), 2**63 - 1), st.just([1, {"a": 2}])
                )
            )
            history.append(
                {"kind": "tool_result", "id": call["id"], "name": "read", "status": status}
                | {"content": content}
            )
            if draw(st.integers(0, 5)) == 0:
                history.append({"kind": "user", "text": "and then"})  # a user message mid-batch
    return history


#: The stand-in thought signature each adapter sends for a step of the current turn.
STAND_INS: dict[str, object] = {"openai_chat_compat": CHAT_SKIP, "gemini_generate_content": _SKIP}


def stand_ins(history: list[Message]) -> int:
    """How many steps need the stand-in: after the last user message, no signature of their own."""
    last = max((i for i, m in enumerate(history) if m["kind"] == "user"), default=-1)
    steps = [m for m in history[last + 1 :] if m["kind"] in ("call", "calls")]
    return sum("signature" not in (m if m["kind"] == "call" else m["calls"][0]) for m in steps)


def occurrences(value: object, wanted: object) -> int:
    """How many times ``wanted`` is a value somewhere in ``value``."""
    if type(value) is dict:
        return sum(occurrences(item, wanted) for item in value.values())
    if type(value) in (list, tuple):
        return sum(occurrences(item, wanted) for item in cast("list[object]", value))
    return 1 if value == wanted else 0


def record_of(history: list[Message]) -> History:
    return History([orjson.dumps(message) for message in history])


@pytest.mark.parametrize("adapter", CONVERSIONS)
@settings(max_examples=60, deadline=None)
@given(history=histories(), asks=st.lists(st.booleans(), min_size=40, max_size=40), data=st.data())
def test_every_request_equals_the_whole_conversion_and_none_sent_changes(
    adapter: str, history: list[Message], asks: list[bool], data: st.DataObject
) -> None:
    convert = CONVERSIONS[adapter]
    key = object()  # one adapter's
    record = record_of([])
    sent: list[tuple[Any, Any]] = []  # each request made, and a deep copy of it then
    views: list[Messages] = []
    for count, message in enumerate(history, 1):
        record.extend((orjson.dumps(message),))
        if not asks[count % len(asks)] and count < len(history):
            continue  # several messages recorded between two requests
        view = AskModel(*record.request()).messages
        assert isinstance(view, Messages)
        assert len(view) == count
        request = convert(view, key)
        assert request == convert(history[:count], None)
        if adapter in STAND_INS:
            assert occurrences(request, STAND_INS[adapter]) == stand_ins(history[:count])
        sent.append((request, copy.deepcopy(request)))
        views.append(view)
        if data.draw(st.integers(0, 6)) == 0:  # an earlier request converted late
            late = data.draw(st.sampled_from(views))
            assert convert(late, key) == convert(history[: len(late)], None)
    for request, then in sent:
        assert request == then
    if sent:  # the record's conversion was kept in the run's cache, under the adapter's key
        assert set(record.cache) == {key}


def test_the_cache_is_the_runs_own() -> None:
    history: list[Message] = [{"kind": "user", "text": "go"}]
    one, two = record_of(history), record_of(history)
    _chat_messages(AskModel(*one.request()).messages, Compat(), "chat")
    assert set(one.cache) == {"chat"}
    assert two.cache == {}


def test_a_message_no_adapter_knows_leaves_no_half_grown_conversion() -> None:
    record = record_of([{"kind": "user", "text": "go"}])
    _messages_request(AskModel(*record.request()).messages, "key")
    record.extend((orjson.dumps({"kind": "note", "text": "?"}),))
    with pytest.raises(ValueError, match="history\\[1\\]"):
        _messages_request(AskModel(*record.request()).messages, "key")
    assert record.cache == {}


# -- through a run ---------------------------------------------------------------------------

RESULT = "r" * 20


def read(n: int) -> str:
    """Read item ``n``."""
    return RESULT


def completion(calls_made: int, calls: int) -> Any:
    """A Chat Completions response: the next call, or the answer once ``calls`` were made."""
    from openai.types.chat import ChatCompletion

    if calls_made < calls:
        call = {
            "id": f"c{calls_made}",
            "type": "function",
            "function": {"name": "read", "arguments": f'{{"n": {calls_made}}}'},
        }
        message: Message = {"role": "assistant", "content": None, "tool_calls": [call]}
        finish = "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": "done"}, "stop"
    choice = {"index": 0, "message": message, "finish_reason": finish}
    return ChatCompletion.model_validate(
        {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
    )


class Client:
    """A stand-in OpenAI client: answers each request, keeps it (and its JSON when it came)."""

    def __init__(self, calls: int, asynchronous: bool = False) -> None:
        self.calls = calls
        self.sent: list[tuple[Message, bytes]] = []
        create = self.acreate if asynchronous else self.create
        self.chat = type("Chat", (), {"completions": type("C", (), {"create": create})})()

    def answer(self, request: Message) -> Any:
        self.sent.append((request, orjson.dumps(request["messages"])))
        made = sum(m["role"] == "tool" for m in request["messages"])
        return completion(made, self.calls)

    def create(self, **request: Any) -> Any:
        return self.answer(request)

    async def acreate(self, **request: Any) -> Any:
        return self.answer(request)


def requests_match(result: RunResult, client: Client) -> None:
    """Each request is the whole conversion of the transcript it was made for, unchanged since."""
    for request, then in client.sent:
        messages = request["messages"]
        assert orjson.dumps(messages) == then
        assert messages == _chat_messages(result.transcript[: len(messages)], Compat())


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_run_converts_each_message_once(driver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentloop.providers import _openai_request, openai

    converted: list[int] = []
    add = _openai_request._ChatFold.add

    def counted(fold: Any, index: int, message: Message) -> None:
        converted.append(index)
        add(fold, index, message)

    monkeypatch.setattr(_openai_request._ChatFold, "add", counted)
    client = Client(calls=6, asynchronous=driver == "async")
    loop = Loop(openai.openai_chat(cast("Any", client), "m"), tools=[read], max_steps=10)
    result = loop.run("go") if driver == "sync" else asyncio.run(loop.arun("go"))
    assert (result.status, result.calls, result.steps, result.output) == ("finished", 6, 7, "done")
    # The last request held every message but the answer; each was converted once, in order.
    assert converted == list(range(len(result.transcript) - 1))
    requests_match(result, client)


def test_a_user_callback_still_gets_a_copy_it_may_change(driver: Driver) -> None:
    seen: list[int] = []

    def model(history: list[Message]) -> Message:
        seen.append(len(history))
        assert type(history) is list
        if len(history) < 5:
            reply = {
                "kind": "call",
                "id": f"c{len(history)}",
                "name": "read",
                "arguments": {"n": 1},
            }
        else:
            reply = {"kind": "final", "text": "done"}
        for message in history:  # all of it the callback's own to change
            message.clear()
        history.append({"kind": "user", "text": "not in the record"})
        return reply

    result = driver.run(Loop(model, tools=[read]), "go")
    assert (result.status, result.calls, seen) == ("finished", 2, [1, 3, 5])
    assert [m["kind"] for m in result.transcript] == ["user", *["call", "tool_result"] * 2, "final"]
    assert result.transcript[0] == {"kind": "user", "text": "go"}


def test_a_model_call_cut_off_in_its_thread_keeps_its_request_and_the_record() -> None:
    """A plain adapter run in a thread (to_thread) times out; while its thread still holds
    its request, the run retries, appends and converts on; the request it finally sends is
    the one it was given, and every request is the conversion of its own prefix."""
    from agentloop.models import RetryPolicy
    from agentloop.providers.openai import openai_chat

    released, entered = threading.Event(), threading.Event()
    client = Client(calls=4)
    answer = client.answer

    def create(**request: Any) -> Any:
        if entered.is_set():
            if len(client.sent) == 3:  # the run has gone on: the cut-off call goes out now
                released.set()
            return answer(request)
        entered.set()  # the first call: held until the run has gone on
        released.wait(5)
        return answer(request)

    client.chat.completions.create = create
    retry = RetryPolicy(sleep=lambda seconds, token: None)
    loop = Loop(
        openai_chat(cast("Any", client), "m"),
        tools=[read],
        to_thread=True,
        model_timeout=0.05,
        retry=retry,
    )
    result = asyncio.run(loop.arun("go"))  # its end waits for the thread
    assert (result.status, result.calls, result.output) == ("finished", 4, "done")
    assert [e.trigger for e in result.events][:2] == ["model_raised", "waited"]
    sizes = [len(request["messages"]) for request, _ in client.sent]
    assert sizes[:3] == [1, 3, 5]
    assert 1 in sizes[3:]  # the cut-off one went out late
    requests_match(result, client)


def test_a_fallback_with_a_user_callback_gives_every_model_a_copy() -> None:
    from agentloop.models import fallback
    from agentloop.providers.openai import openai_chat

    given: list[type] = []

    def plain(history: list[Message]) -> Message:
        given.append(type(history))
        return {"kind": "final", "text": "done"}

    client = Client(calls=0)
    adapter = openai_chat(cast("Any", client), "m")
    reads = getattr(adapter, "agentloop_reads_record", False)
    result = Loop(fallback(plain, adapter)).run("go")
    assert (reads, result.output, given) == (True, "done", [list])


def last_message(request: Any) -> dict[str, Any]:
    """The last message of an adapter's request, whatever its shape."""
    if isinstance(request, dict):
        request = request["messages"]
    if isinstance(request, tuple):
        request = request[0]
    return cast("dict[str, Any]", request[-1])


@pytest.mark.parametrize("adapter", CONVERSIONS)
def test_a_client_that_marks_the_last_message_changes_that_request_alone(adapter: str) -> None:
    """A prompt-cache breakpoint set in place on each request's last message: one a request."""
    convert = CONVERSIONS[adapter]
    history: list[Message] = [{"kind": "user", "text": "go"}]
    for n in range(3):
        history += [
            {"kind": "calls", "calls": [{"id": f"c{n}", "name": "t", "arguments": {}}]},
            {"kind": "tool_result", "id": f"c{n}", "name": "t", "status": "ok", "content": n},
        ]
    record = record_of([])
    for count, message in enumerate(history, 1):
        record.extend((orjson.dumps(message),))
        request = convert(AskModel(*record.request()).messages, "key")
        assert request == convert(history[:count], None)  # no earlier request's mark
        marked = last_message(request)
        for value in marked.values():  # the innermost block, as the recipes mark it
            if isinstance(value, list) and value and isinstance(value[-1], dict):
                marked = value[-1]
        marked["cache_control"] = {"type": "ephemeral"}
        assert repr(request).count("'cache_control'") == 1
