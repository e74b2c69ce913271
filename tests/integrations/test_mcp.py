"""agentloop.mcp: real SDK servers (tests/support/mcp_server.py) as tool sources, and serve()
the other way.

One stdio server is shared by the module's fast tests; the tests that kill a
server, change its tools or serve HTTP launch their own.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import socket
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, cast

import anyio
import mcp
import mcp.types
import orjson
import pydantic
import pytest
from anthropic.types import message_create_params
from hypothesis import given, settings
from mcp.shared.exceptions import MCPError
from openai.types.responses import response_create_params

import agentloop
from agentloop import Loop, State, ToolRegistry, allow, deny
from agentloop import mcp as amcp
from agentloop.engine import PreparedCall
from agentloop.ledger import SQLiteLedger
from agentloop.providers import _openai_request, anthropic
from agentloop.streaming import ToolProgress
from agentloop.testing import ScriptedModel, batch, call, final, strategies
from tests.support import SUPPORT
from tests.support.helpers import import_error, validator_says
from tests.support.ledgers import Crash, CrashingLedger, MemoryLedger
from tests.support.wire import conforms

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.support.helpers import Driver

SERVER = str(SUPPORT / "mcp_server.py")
SERVED = str(SUPPORT / "mcp_served.py")
ANTHROPIC = pydantic.TypeAdapter(message_create_params.MessageCreateParamsNonStreaming)
RESPONSES = pydantic.TypeAdapter(response_create_params.ResponseCreateParamsNonStreaming)


def launch(**options: Any) -> amcp.Server:
    """The tests' server over stdio (not yet connected)."""
    return amcp.stdio(sys.executable, [SERVER], name="tests", **options)


@pytest.fixture(scope="module")
def server() -> Iterator[amcp.Server]:
    """One stdio server for the module's tests that leave it as it is."""
    with launch(timeout=5, env={"AGENTLOOP_MCP_TEST": "yes"}) as connected:
        yield connected


@pytest.fixture(scope="module")
def legacy() -> Iterator[amcp.Server]:
    """The same server over the handshake (2025-11-25), as most servers speak today."""
    connected = launch(timeout=5)
    connected._mode = "legacy"
    with connected:
        yield connected


def registry_of(server: amcp.Server, **options: Any) -> ToolRegistry:
    registry = ToolRegistry()
    server.register(registry, **options)
    return registry


def results(result: agentloop.RunResult) -> list[tuple[str, str, Any]]:
    """The run's tool results: (id, status, content)."""
    return [
        (m["id"], m["status"], m["content"])
        for m in result.transcript
        if m["kind"] == "tool_result"
    ]


def test_a_run_calls_a_servers_tools_in_a_batch(server: amcp.Server, driver: Driver) -> None:
    """A batch of three MCP calls runs under either driver; text, JSON and typed parts come back."""
    registry = registry_of(server, prefix="t_", deny=["delete"])
    model = ScriptedModel(
        [
            batch(
                call("a", "t_add", a=2, b=3),
                call("b", "t_shout", text="hi"),
                call("c", "t_picture"),
            ),
            final("done"),
        ]
    )
    result = driver.run(Loop(model, tools=registry), "go")
    assert result.status == "finished"
    assert results(result) == [
        ("a", "ok", 5),  # the SDK's {"result": 5} wrapper, unwrapped
        ("b", "ok", "HI"),
        ("c", "ok", [{"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"}]),
    ]
    assert "t_delete" not in registry


def test_a_tool_keeps_the_servers_name_description_and_schema(server: amcp.Server) -> None:
    """Each tool is described as the server lists it, under the prefix; allow keeps only those."""
    registry = registry_of(server, prefix="x_", allow=["add", "echo"])
    assert sorted(tool.name for tool in registry) == ["x_add", "x_echo"]
    tool = registry["x_add"]
    assert isinstance(tool, amcp.MCPTool)
    assert (tool.remote_name, tool.description) == ("add", "Add two integers.")
    assert tool.parameters["properties"].keys() == {"a", "b"}
    assert tool.parameters["required"] == ["a", "b"]
    assert registry.specs()[0]["name"] == "x_add"


def test_the_client_says_it_is_agentloop(server: amcp.Server, legacy: amcp.Server) -> None:
    """clientInfo is agentloop and its version, over 2026-07-28 and over the handshake alike."""
    version = importlib.metadata.version("agentloop-fsm")
    for connected in (server, legacy):
        registry = registry_of(connected, allow=["client"])
        outcome = asyncio.run(registry.adispatch({"id": "1", "name": "client", "arguments": {}}))
        assert outcome == {"status": "ok", "content": f"agentloop {version}"}


def test_a_tool_that_runs_only_as_a_task_is_left_out(legacy: amcp.Server) -> None:
    """research is listed with execution.taskSupport 'required': agentloop cannot run tasks, so
    the tool is not offered to the model; asking for it by name says why."""
    assert "research" in {tool.name for tool in legacy._listing}
    registry = registry_of(legacy, deny=["die"])
    assert "research" not in registry
    assert "add" in registry
    assert all(tool.name != "research" for tool in legacy.tools())
    options: list[dict[str, Any]] = [
        {"allow": ["add", "research"]},
        {"annotations": {"research": {}}},
    ]
    for option in options:
        with pytest.raises(ValueError, match="'research', which the server runs only as tasks"):
            legacy.register(ToolRegistry(), **option)
    assert "research" not in registry_of(legacy, deny=["research"])


def test_a_schema_is_read_in_the_dialect_it_declares(server: amcp.Server, driver: Driver) -> None:
    """pair's schema says Draft 7 (as the TypeScript SDK stamps every schema), with a tuple as
    items: [...]: it is taken, the model sees it as the server wrote it, and arguments are
    checked by Draft 7's rules."""
    registry = registry_of(server, allow=["pair"])
    assert registry["pair"].parameters["properties"]["point"]["items"] == [
        {"type": "integer"},
        {"type": "string"},
    ]
    model = ScriptedModel(
        [
            batch(call("a", "pair", point=[1, "x"]), call("b", "pair", point=["x", 1])),
            final("ok"),
        ]
    )
    result = driver.run(Loop(model, tools=registry), "go")
    assert results(result) == [
        ("a", "ok", "1 x"),
        (
            "b",
            "invalid_arguments",
            [
                {"path": "point[0]", "message": validator_says({"type": "integer"}, "x")},
                {"path": "point[1]", "message": validator_says({"type": "string"}, 1)},
            ],
        ),
    ]


def test_a_servers_progress_reaches_the_runs_listeners(server: amcp.Server, driver: Driver) -> None:
    """A call asks for progress: each of count's reports is heard as a ToolProgress naming the
    call, in order, before the call's transition; it never enters the transcript."""
    registry = registry_of(server, allow=["count"])
    run = driver.start(
        Loop(ScriptedModel([call("a", "count", steps=3), final("ok")]), tools=registry), "go"
    )
    heard: list[object] = []
    run.subscribe_deltas(heard.append)
    run.subscribe(heard.append)
    for _ in run:
        pass
    assert results(run.result()) == [("a", "ok", 3)]
    assert [item for item in heard if isinstance(item, ToolProgress)] == [
        ToolProgress(call_id="a", progress=step, total=3, message=f"step {step}")
        for step in (1, 2, 3)
    ]
    returned = next(
        index
        for index, item in enumerate(heard)
        if isinstance(item, agentloop.Transition) and item.trigger == "tool_returned"
    )
    assert all(isinstance(item, ToolProgress) for item in heard[returned - 3 : returned])


def test_is_error_is_an_error_result(server: amcp.Server) -> None:
    """A tool that fails on the server is an ``error`` result naming ToolFailed and its text."""
    registry = registry_of(server, allow=["fail"])
    outcome = asyncio.run(
        registry.adispatch({"id": "1", "name": "fail", "arguments": {"message": "boom"}})
    )
    assert outcome["status"] == "error"
    assert outcome["content"]["type"] == "ToolFailed"
    assert "boom" in outcome["content"]["message"]


def test_arguments_are_validated_before_they_are_sent(server: amcp.Server) -> None:
    """``"5"`` for an int, which the server would take, is refused here and never sent."""
    registry = registry_of(server, allow=["add"])
    outcome = registry.dispatch({"id": "1", "name": "add", "arguments": {"a": "5", "b": 1}})
    assert outcome == {
        "status": "invalid_arguments",
        "content": [{"path": "a", "message": validator_says({"type": "integer"}, "5")}],
    }


def test_annotations_make_the_guarantees_and_the_users_declarations_win(
    server: amcp.Server,
) -> None:
    """readOnly or idempotent hints make a tool idempotent; unmarked ones are destructive."""
    tools = {tool.name: tool for tool in server.tools()}
    assert {name for name, tool in tools.items() if tool.idempotent} == {
        "add",
        "fail",
        "hang",
        "picture",
        "environment",
        "overlap",
        "key",
        "header",
        "client",
        "charged",
        "count",
        "pair",
    }
    assert {name for name, tool in tools.items() if tool.destructive} == {
        "delete",
        "shout",
        "charge",
        "research",
    }
    declared = {
        tool.name: tool
        for tool in server.tools(
            annotations={
                "add": {"readOnlyHint": False, "destructiveHint": True},
                "shout": {"readOnlyHint": True},
            }
        )
    }
    assert (declared["add"].idempotent, declared["add"].destructive) == (False, True)
    assert (declared["shout"].idempotent, declared["shout"].destructive) == (True, False)


def test_a_destructive_tool_waits_for_a_persons_approval(server: amcp.Server) -> None:
    """With ask_before_destructive, a batch with delete waits; the person approves; it runs."""
    registry = registry_of(
        server, allow=["delete", "echo"], destructive=amcp.ask_before_destructive
    )
    model = ScriptedModel(
        [batch(call("a", "echo", text="x"), call("b", "delete", path="/tmp/f")), final("ok")]
    )
    run = Loop(model, tools=registry).start("go")
    paused = run.finish()
    assert paused.status == "awaiting_approval"
    assert [(p.call_id, p.name) for p in paused.pending] == [("b", "delete")]
    assert "may change or delete data" in paused.pending[0].reason
    run.decide({"b": paused.pending[0].approve()})
    result = run.finish()
    assert results(result) == [("a", "ok", "x"), ("b", "ok", "deleted /tmp/f")]


def test_the_policy_and_the_destructive_policy_are_both_asked(server: amcp.Server) -> None:
    """A denial by the tools' policy wins over the destructive tool's ask."""
    registry = registry_of(
        server,
        allow=["delete"],
        policy=lambda call: deny("no deleting") if call["arguments"]["path"] == "/" else allow(),
        destructive=amcp.ask_before_destructive,
    )
    denied = registry.review({"id": "1", "name": "delete", "arguments": {"path": "/"}})
    assert isinstance(denied, PreparedCall)
    assert denied.decision == deny("no deleting")
    asked = registry.review({"id": "2", "name": "delete", "arguments": {"path": "/tmp"}})
    assert isinstance(asked, PreparedCall)
    assert asked.asks


def test_a_hanging_tool_meets_the_loops_tool_timeout(server: amcp.Server, driver: Driver) -> None:
    """Past the Loop's tool_timeout the call is an error result, and the connection goes on.

    The timeout bounds the next call too: 1 s leaves a loaded machine's round trip room.
    """
    registry = registry_of(server, allow=["hang", "add"])
    model = ScriptedModel([call("a", "hang", seconds=30), call("b", "add", a=1, b=1), final("ok")])
    result = driver.run(Loop(model, tools=registry, tool_timeout=1.0), "go")
    (_, status, content), after = results(result)
    assert (status, content["type"]) == ("error", "TimeoutError")
    assert after == ("b", "ok", 2)


@pytest.mark.slow
def test_a_hanging_tool_meets_the_servers_timeout() -> None:
    """Past the server's own timeout the outcome is unknown (the call may have run)."""
    with launch(timeout=0.3) as quick:
        registry = registry_of(quick, allow=["hang", "add"])
        model = ScriptedModel(
            [call("a", "hang", seconds=5), call("b", "add", a=1, b=1), final("ok")]
        )
        result = Loop(model, tools=registry).run("go")
    (_, status, content), after = results(result)
    assert (status, content["type"]) == ("error", "OutcomeUnknown")
    assert "did not answer 'hang' within timeout=0.3 s" in content["message"]
    assert after == ("b", "ok", 2)


@pytest.mark.slow
def test_max_concurrency_limits_the_calls_a_server_runs_at_once() -> None:
    """Three calls of a batch run at once by the Loop reach a server limited to one, one by one."""

    async def most_at_once(limit: int | None) -> list[Any]:
        async with launch(max_concurrency=limit) as limited:
            registry = registry_of(limited, allow=["overlap"])
            calls = [call(str(n), "overlap", seconds=0.5) for n in range(3)]
            model = ScriptedModel([batch(*calls), final("ok")])
            result = await Loop(model, tools=registry, max_concurrency=3).arun("go")
        return [content for _, _, content in results(result)]

    assert max(asyncio.run(most_at_once(None))) == 3
    assert asyncio.run(most_at_once(1)) == [1, 1, 1]


def test_the_runs_cancel_token_interrupts_an_mcp_call_and_the_connection_goes_on(
    server: amcp.Server,
) -> None:
    """token.cancel() from another thread ends the run cancelled mid-call; the next call works."""
    registry = registry_of(server, allow=["hang", "add"])
    token = agentloop.CancelToken()
    timer = threading.Timer(0.1, token.cancel)
    timer.start()
    result = Loop(ScriptedModel([call("a", "hang", seconds=30)]), tools=registry).run(
        "go", cancel=token
    )
    timer.join()
    assert (result.status, result.transcript[2]["status"]) == ("cancelled", "cancelled")
    after = asyncio.run(
        registry.adispatch({"id": "b", "name": "add", "arguments": {"a": 1, "b": 2}})
    )
    assert after == {"status": "ok", "content": 3}


def test_the_server_gets_the_environment_it_is_given(server: amcp.Server) -> None:
    """``env`` reaches the server process (the SDK passes only a few variables by itself)."""
    registry = registry_of(server, allow=["environment"])
    outcome = asyncio.run(
        registry.adispatch(
            {"id": "1", "name": "environment", "arguments": {"name": "AGENTLOOP_MCP_TEST"}}
        )
    )
    assert outcome == {"status": "ok", "content": "yes"}


def test_bad_options_are_refused_naming_what_was_expected(server: amcp.Server) -> None:
    """Unknown names, a str for a list, bad hints, clashing names: refused, nothing added."""
    registry = ToolRegistry()
    with pytest.raises(ValueError, match=r"expected names of tools the server lists .*got 'nope'"):
        server.register(registry, allow=["add", "nope"])
    with pytest.raises(
        TypeError, match="expected deny to be a collection of tool names, got a str"
    ):
        server.register(registry, deny="add")
    with pytest.raises(ValueError, match="expected the annotations of 'add' to map readOnlyHint"):
        server.register(registry, annotations={"add": {"readOnly": True}})
    registry.add(agentloop.Tool(lambda: 1, name="add"))
    with pytest.raises(ValueError, match=r"expected unique tool names, got 'add' in the registry"):
        server.register(registry)
    assert [tool.name for tool in registry] == ["add"]  # nothing of the server's was added
    with pytest.raises(ValueError, match="expected an http:// or https:// URL, got 'localhost'"):
        amcp.http("localhost")
    with pytest.raises(ValueError, match="expected timeout to be a positive number"):
        launch(timeout=0)


def test_a_schema_the_registry_cannot_take_is_refused_when_added(server: amcp.Server) -> None:
    """A listed tool whose schema is not an object schema is refused, naming server and tool."""
    listed = mcp.types.Tool(name="odd", input_schema={"type": "array"})
    with pytest.raises(
        TypeError, match="MCP server 'tests': tool 'odd': expected parameters to describe an object"
    ):
        amcp.MCPTool(
            server,
            listed,
            name="odd",
            hints=dict.fromkeys(("readOnlyHint", "destructiveHint", "idempotentHint"), False),
            policy=None,
        )


def test_the_testing_kits_strategies_work_on_mcp_tools(server: amcp.Server) -> None:
    """Calls drawn from MCP tools' schemas: valid ones pass validation, invalid ones are refused."""
    registry = registry_of(server, allow=["add", "echo"])

    @settings(max_examples=5, database=None, deadline=None)
    @given(strategies.valid_calls(registry), strategies.invalid_calls(registry))
    def check(valid: dict[str, Any], invalid: dict[str, Any]) -> None:
        tool = registry[valid["name"]]
        assert tool.problems(valid["arguments"]) == []
        assert registry.dispatch(invalid)["status"] == "invalid_arguments"

    check()


PICTURE: list[dict[str, Any]] = [
    {"type": "text", "text": "a picture:"},
    {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
    {"type": "audio", "data": "aGk=", "mimeType": "audio/wav"},
]


def test_an_image_part_goes_to_the_providers_that_take_images() -> None:
    """Anthropic gets image blocks, the Responses API input items, Chat Completions the JSON."""
    history: list[dict[str, Any]] = [
        {"kind": "user", "text": "show me"},
        {"kind": "call", "id": "c1", "name": "picture", "arguments": {}},
        {"kind": "tool_result", "id": "c1", "name": "picture", "status": "ok", "content": PICTURE},
    ]
    anthropic_body = {"model": "m", "max_tokens": 10, **anthropic._messages_request(history)}
    conforms(anthropic_body, ANTHROPIC)
    (result,) = anthropic_body["messages"][2]["content"]
    assert result["content"] == [
        {"type": "text", "text": "a picture:"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "aGVsbG8="},
        },
        {"type": "text", "text": '{"type":"audio","data":"aGk=","mimeType":"audio/wav"}'},
    ]
    responses_body: dict[str, Any] = {
        "model": "m",
        "input": _openai_request._responses_input(history),
    }
    conforms(responses_body, RESPONSES)
    assert responses_body["input"][2]["output"][1] == {
        "type": "input_image",
        "image_url": "data:image/png;base64,aGVsbG8=",
    }
    chat = _openai_request._chat_messages(history)
    assert chat[2]["content"] == orjson.dumps(PICTURE).decode()
    # Parts without an image a provider takes, and results not ok, stay text.
    for content, status in ((PICTURE[::2], "ok"), (PICTURE, "error")):
        plain = {**history[2], "content": content, "status": status}
        assert isinstance(anthropic._result_content(plain), str)


def test_each_protocol_failure_names_what_is_known_of_the_call(server: amcp.Server) -> None:
    """Once a call is sent, every error is OutcomeUnknown, whatever its code: the SDK's servers
    answer with the error a tool raised, so even "invalid params" may follow an effect."""
    for code in (-32700, -32600, -32601, -32602, -32603, -32001, -32020, -32042, 7):
        failure = server._failure("add", MCPError(code=code, message="no"))
        assert type(failure) is amcp.OutcomeUnknown
        assert str(failure).endswith("took effect is unknown")
    answered = server._failure("add", MCPError(code=-32602, message="Invalid params"))
    assert str(answered) == (
        "the MCP server 'tests' answered 'add' with an error: Invalid params (code -32602); "
        "whether the call took effect is unknown"
    )


def test_a_call_that_took_effect_and_then_failed_is_never_told_it_did_not_run(
    server: amcp.Server, driver: Driver
) -> None:
    """charge takes effect, then its server answers JSON-RPC -32603: the model is told the
    outcome is unknown, not that the call did not run; the charge is there."""
    registry = registry_of(server, allow=["charge", "charged"])
    before = registry.dispatch_or_adispatch({"id": "0", "name": "charged", "arguments": {}})
    assert not isinstance(before, dict)
    charged = asyncio.run(before)["content"]
    model = ScriptedModel([call("a", "charge", amount=5), call("b", "charged"), final("ok")])
    result = driver.run(Loop(model, tools=registry), "go")
    (_, status, content), after = results(result)
    assert (status, content["type"]) == ("error", "OutcomeUnknown")
    assert content["message"] == (
        "the MCP server 'tests' answered 'charge' with an error: the receipt printer jammed "
        "(code -32603); whether the call took effect is unknown"
    )
    assert after == ("b", "ok", charged + 1)  # it ran


def test_a_connection_lost_while_a_call_is_sent_is_never_told_it_did_not_run(
    server: amcp.Server,
) -> None:
    """The connection is marked lost while the call is on its way (the holder noticed first):
    the call was sent, so its outcome is unknown; the next call, never sent, did not run."""
    registry = registry_of(server, allow=["add"])
    client = server._client
    assert client is not None

    async def lost_meanwhile(*args: Any, **options: Any) -> Any:
        server._lost = "the connection was lost (EndOfStream)"
        raise anyio.BrokenResourceError

    client.call_tool = lost_meanwhile  # type: ignore[method-assign]
    try:
        first, second = (
            asyncio.run(registry.adispatch({"id": i, "name": "add", "arguments": {"a": 1, "b": 1}}))
            for i in "ab"
        )
    finally:
        del client.call_tool  # the shared connection as it was
        server._lost = None
    assert (first["status"], first["content"]["type"]) == ("error", "OutcomeUnknown")
    assert first["content"]["message"] == (
        "the call of 'add' on the MCP server 'tests' failed once sent (BrokenResourceError); "
        "whether it took effect is unknown"
    )
    assert (second["status"], second["content"]["type"]) == ("error", "NotRun")
    assert asyncio.run(
        registry.adispatch({"id": "c", "name": "add", "arguments": {"a": 1, "b": 1}})
    ) == {"status": "ok", "content": 2}


def test_a_server_that_cannot_be_reached_is_a_connection_error() -> None:
    """A command that does not exist, or a process that is no MCP server: ConnectionError."""
    with pytest.raises(ConnectionError, match="could not connect to the MCP server 'nothing'"):
        amcp.stdio("/nonexistent/agentloop-mcp", name="nothing").__enter__()
    quiet = amcp.stdio(sys.executable, ["-c", "pass"], name="quiet")
    with pytest.raises(ConnectionError, match="could not connect to the MCP server 'quiet'"):
        quiet.__enter__()
    assert repr(quiet) == "Server('quiet', closed)"


def test_tools_outside_the_connection_are_refused() -> None:
    """Listing tools before ``with server:`` says how to connect."""
    with pytest.raises(RuntimeError, match="is not connected: use its tools inside `with server:`"):
        launch().tools()


def test_serve_offers_a_registry_with_its_checks_in_front() -> None:
    """The SDK's client lists and calls a served registry; validation and policies answer first."""
    registry = ToolRegistry(
        policy=lambda call: deny("not today") if call["name"] == "pay" else allow()
    )

    @registry.tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @registry.tool
    def pay(amount: int) -> str:
        """Pay."""
        return "paid"

    async def client_side() -> list[mcp.types.CallToolResult]:
        async with mcp.Client(amcp.serve(registry)) as client:
            listed = await client.list_tools()
            assert [(t.name, t.description) for t in listed.tools] == [
                ("add", "Add two integers."),
                ("pay", "Pay."),
            ]
            assert listed.tools[0].input_schema == registry["add"].parameters
            with pytest.raises(MCPError) as unknown:
                await client.call_tool("nope", {})
            assert (unknown.value.code, unknown.value.message) == (-32602, "Unknown tool: nope")
            return [
                await client.call_tool("add", {"a": 2, "b": 3}),
                await client.call_tool("add", {"a": "2", "b": 3}),
                await client.call_tool("pay", {"amount": 5}),
            ]

    ok, invalid, denied = asyncio.run(client_side())
    assert (ok.is_error, ok.content[0].text) == (False, "5")  # type: ignore[union-attr]
    assert invalid.is_error  # the spec's tool execution error: the model can correct it
    assert invalid.content[0].text.startswith("invalid_arguments: ")  # type: ignore[union-attr]
    assert (denied.is_error, denied.content[0].text) == (True, "denied: not today")  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_serve_says_who_it_is_and_what_each_tool_may_do(server: amcp.Server, mode: str) -> None:
    """serverInfo names agentloop's version; each tool is listed with the hints the registry
    knows: an MCPTool's three, a native tool's idempotency, and declared ones over them."""
    registry = registry_of(server, allow=["add", "delete", "echo"], prefix="remote_")

    @registry.tool(idempotent=True)
    def lookup(key: str) -> str:
        """Look a key up."""
        return key

    @registry.tool
    def pay(amount: int) -> str:
        """Pay."""
        return "paid"

    async def client_side() -> tuple[mcp.types.Implementation | None, dict[str, Any]]:
        served = amcp.serve(registry, annotations={"lookup": {"readOnlyHint": True}})
        async with mcp.Client(served, mode=mode) as client:
            listed = await client.list_tools()
            hints = {
                tool.name: tool.annotations.model_dump(by_alias=True, exclude_none=True)
                for tool in listed.tools
                if tool.annotations is not None
            }
            return client.server_info, hints

    info, hints = asyncio.run(client_side())
    assert info is not None
    assert (info.name, info.version) == ("agentloop", importlib.metadata.version("agentloop-fsm"))
    assert hints == {
        "remote_add": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True},
        "remote_delete": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
        "remote_echo": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
        "lookup": {"readOnlyHint": True, "idempotentHint": True},
        "pay": {"idempotentHint": False},
    }
    named = amcp.serve(registry, name="payments", version="2.1")
    assert (named.name, named.version) == ("payments", "2.1")
    with pytest.raises(ValueError, match="expected the annotations of 'pay' to map readOnlyHint"):
        amcp.serve(registry, annotations={"pay": {"readonly": True}})


def test_a_served_handler_gets_the_idempotency_key_the_client_sent() -> None:
    """An agentloop client sends its durable call's key in _meta: the served handler's
    agentloop.idempotency_key() is that key, and None when none came; a key that is not a
    non-empty string is refused before the handler runs."""
    registry = ToolRegistry()
    seen: list[str | None] = []

    @registry.tool(idempotent=True)
    def charge(amount: int) -> str:
        """Charge, once per key."""
        seen.append(agentloop.idempotency_key())
        return "charged"

    async def client_side() -> None:
        async with mcp.Client(amcp.serve(registry)) as client:
            keyed = cast("mcp.types.RequestParamsMeta", {amcp_key: "r1:c1"})
            await client.call_tool("charge", {"amount": 5}, meta=keyed)
            await client.call_tool("charge", {"amount": 5})
            wrong = cast("mcp.types.RequestParamsMeta", {amcp_key: 7})
            with pytest.raises(MCPError) as refused:
                await client.call_tool("charge", {"amount": 5}, meta=wrong)
            assert refused.value.code == -32602

    amcp_key = "io.github.agentloop/idempotency-key"
    asyncio.run(client_side())
    assert seen == ["r1:c1", None]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_served_handler_reports_progress_to_the_client(mode: str) -> None:
    """report_progress in a served handler (plain, in a worker thread; or async) reaches the
    client that asked for progress, in order, before the result."""
    registry = ToolRegistry()

    @registry.tool
    def work(steps: int) -> str:
        """Work in steps."""
        for step in range(1, steps + 1):
            agentloop.report_progress(step, steps, f"step {step}")
        return "done"

    @registry.tool
    async def awork(steps: int) -> str:
        """Work in steps, awaiting."""
        for step in range(1, steps + 1):
            agentloop.report_progress(step)
            await asyncio.sleep(0)
        return "done"

    async def client_side() -> list[Any]:
        heard: list[Any] = []

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            heard.append((progress, total, message))

        async with mcp.Client(amcp.serve(registry), mode=mode) as client:
            for name in ("work", "awork"):
                result = await client.call_tool(name, {"steps": 2}, progress_callback=progress)
                heard.append(result.content[0].text)  # type: ignore[union-attr]
            await client.call_tool("work", {"steps": 2})  # nobody asked: nothing sent
        return heard

    assert asyncio.run(client_side()) == [
        (1, 2, "step 1"),
        (2, 2, "step 2"),
        "done",
        (1, None, None),
        (2, None, None),
        "done",
    ]


@pytest.mark.slow
def test_under_asyncio_the_connection_lives_on_the_running_loop() -> None:
    """``async with`` opens the session on the running loop, and a run awaits its calls there."""

    async def main() -> agentloop.RunResult:
        async with launch() as server:
            registry = registry_of(server, allow=["add", "echo"])
            model = ScriptedModel(
                [batch(call("a", "add", a=1, b=2), call("b", "echo", text="e")), final("ok")]
            )
            return await Loop(model, tools=registry, max_concurrency=2).arun("go")

    assert results(asyncio.run(main())) == [("a", "ok", 3), ("b", "ok", "e")]


# -- servers of their own: killed, changed, over HTTP


@pytest.mark.slow
def test_the_server_killed_mid_call_is_an_error_result_and_later_calls_say_it_is_gone() -> None:
    """A server dying mid-call: OutcomeUnknown; the next call: NotRun; the run finishes."""
    with launch() as server:
        registry = registry_of(server, allow=["die", "add"])
        model = ScriptedModel(
            [call("a", "die", after=0.1), call("b", "add", a=1, b=1), final("ok")]
        )
        result = Loop(model, tools=registry).run("go")
    (_, s1, c1), (_, s2, c2) = results(result)
    assert result.status == "finished"
    assert (s1, c1["type"]) == ("error", "OutcomeUnknown")
    assert "closed the connection while 'die' ran" in c1["message"]
    assert (s2, c2["type"]) == ("error", "NotRun")
    after = registry.dispatch_or_adispatch(
        {"id": "c", "name": "add", "arguments": {"a": 1, "b": 1}}
    )
    assert not isinstance(after, dict)
    closed = asyncio.run(after)
    assert (closed["status"], closed["content"]["type"]) == ("error", "NotRun")
    assert "the connection was" in closed["content"]["message"]


@pytest.mark.slow
def test_the_server_killed_mid_call_in_a_durable_run_is_recorded_and_not_run_again(
    tmp_path: Path,
) -> None:
    """With a ledger, the lost call's OutcomeUnknown is recorded; a resume answers from it."""
    db = tmp_path / "runs.db"
    script = [call("a", "die", after=0.1), final("ok")]
    with launch() as server:
        loop = Loop(
            ScriptedModel(script), tools=registry_of(server, allow=["die"]), ledger=SQLiteLedger(db)
        )
        result = loop.run("go", run_id="r1")
    ((_, status, content),) = results(result)
    assert (status, content["type"]) == ("error", "OutcomeUnknown")
    with launch() as server:
        loop = Loop(
            ScriptedModel(script), tools=registry_of(server, allow=["die"]), ledger=SQLiteLedger(db)
        )
        again = loop.resume("r1")
    assert results(again) == results(result)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_changed_tools_list_is_taken_between_model_steps(mode: str) -> None:
    """grow adds double; the listener puts it in the registry before the next model step.

    auto: a 2026-07-28 server streams the change; legacy: the handshake era's notification."""
    server = launch()
    server._mode = mode
    with server:
        registry = registry_of(server, deny=["die"])
        model = ScriptedModel([call("a", "grow"), call("b", "double", x=21), final("ok")])
        loop = Loop(model, tools=registry, listeners=[server.refresh_between_steps])
        run = loop.start("go")
        result = run.finish()
        assert results(result) == [("a", "ok", "grown"), ("b", "ok", 42)]
        assert registry["double"].idempotent
        assert not server.changed


@pytest.mark.slow
def test_a_crash_after_an_mcp_call_resumes_by_the_ledgers_rules() -> None:
    """The process dies before recording a call's outcome: on resume a read-only tool runs again
    under the same idempotency key, which reaches the server; any other gets OutcomeUnknown."""
    memory = MemoryLedger()
    with launch() as server:
        tools = registry_of(server, allow=["key", "echo"])
        for run_id, script in (
            ("r1", [call("a", "key"), final("ok")]),
            ("r2", [call("b", "echo", text="x"), final("ok")]),
        ):
            # Appends: tool_started (with the reply), then tool_finished: dies before it.
            with pytest.raises(Crash):
                Loop(ScriptedModel(script), tools=tools, ledger=CrashingLedger(memory, 2)).run(
                    "go", run_id=run_id
                )
        rerun = Loop(ScriptedModel([call("a", "key"), final("ok")]), tools=tools, ledger=memory)
        unknown = Loop(
            ScriptedModel([call("b", "echo", text="x"), final("ok")]), tools=tools, ledger=memory
        )
        assert results(rerun.resume("r1")) == [("a", "ok", "r1:a")]
        ((_, status, content),) = results(unknown.resume("r2"))
    assert (status, content["type"]) == ("error", "OutcomeUnknown")


@pytest.mark.slow
def test_a_durable_run_resumed_against_changed_tools_meets_the_configuration_check(
    tmp_path: Path,
) -> None:
    """A run paused for approval, resumed where the server lists another tool: refused."""
    ledger = SQLiteLedger(tmp_path / "runs.db")
    script = [call("a", "delete", path="/x"), final("ok")]
    with launch() as server:
        registry = registry_of(server, allow=["delete"], destructive=amcp.ask_before_destructive)
        paused = Loop(ScriptedModel(script), tools=registry, ledger=ledger).run("go", run_id="r1")
        assert paused.status == "awaiting_approval"
    with launch() as server:
        registry = registry_of(server, allow=["delete", "grow"])
        loop = Loop(ScriptedModel(script), tools=registry, ledger=ledger)
        with pytest.raises(agentloop.ConfigurationMismatchError):
            loop.resume("r1")


@pytest.mark.slow
def test_a_served_registry_over_stdio_is_a_tool_source_again() -> None:
    """serve_stdio in a process of its own; agentloop.mcp takes its tools back, checks and all."""
    served = amcp.stdio(sys.executable, [SERVED])
    with served:
        registry = registry_of(served)
        assert registry["add"].idempotent
        model = ScriptedModel(
            [batch(call("a", "add", a=2, b=2), call("b", "pay", amount=5)), final("ok")]
        )
        result = Loop(model, tools=registry).run("go")
    (_, s1, c1), (_, s2, c2) = results(result)
    assert (s1, c1) == ("ok", "4")  # as text: structuredContent is for objects
    assert (s2, c2["type"], c2["message"]) == ("error", "ToolFailed", "denied: not that one")


@pytest.mark.slow
def test_a_durable_run_resumed_after_a_crash_charges_a_served_tool_once() -> None:
    """A durable agentloop client calls a served idempotent charge, and its process stops before
    the outcome is recorded: the resume calls it again under the same key, which reaches the
    served handler as agentloop.idempotency_key(); the handler deduplicates, and the card is
    charged once."""
    memory = MemoryLedger()
    script = [call("a", "charge", amount=5), final("ok")]
    with amcp.stdio(sys.executable, [SERVED], name="served") as served:
        tools = registry_of(served, allow=["charge", "charges"])
        assert tools["charge"].idempotent
        with pytest.raises(Crash):  # tool_started (with the reply), then tool_finished: dies there
            Loop(ScriptedModel(script), tools=tools, ledger=CrashingLedger(memory, 2)).run(
                "go", run_id="r1"
            )
        resumed = Loop(ScriptedModel(script), tools=tools, ledger=memory).resume("r1")
        charged = asyncio.run(tools.adispatch({"id": "x", "name": "charges", "arguments": {}}))
    assert results(resumed) == [("a", "ok", "already charged under r1:a")]
    assert charged == {"status": "ok", "content": {"r1:a": 5}}


@pytest.mark.slow
def test_a_new_tool_whose_name_is_taken_leaves_every_registry_as_it_was() -> None:
    """grow adds double, which the registry has natively: refresh raises and changes nothing."""
    with launch() as server:
        registry = ToolRegistry([agentloop.Tool(lambda x: x, name="double")])
        other = registry_of(server, allow=["grow"])  # a second registry, refreshed alike
        server.register(registry, deny=["die"])
        before = sorted(tool.name for tool in registry)
        grown = asyncio.run(registry.adispatch({"id": "1", "name": "grow", "arguments": {}}))
        assert grown == {"status": "ok", "content": "grown"}
        with pytest.raises(
            ValueError, match=r"now lists tools whose names the registry has already: 'double'"
        ):
            server.refresh(wait=5)
        assert sorted(tool.name for tool in registry) == before
        assert not isinstance(registry["double"], amcp.MCPTool)
        assert [tool.name for tool in other] == ["grow"]
        assert server.changed  # the change stays waiting


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def http_url() -> Iterator[str]:
    """The tests' server over streamable HTTP on localhost, in a process of its own."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, SERVER, "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


@pytest.mark.slow
def test_a_server_over_streamable_http(http_url: str) -> None:
    """Over HTTP: a batch of calls, isError, and a server killed mid-call answers every call."""
    with amcp.http(http_url, name="web") as server:
        registry = registry_of(server, allow=["add", "fail", "die"])
        model = ScriptedModel(
            [
                batch(call("a", "add", a=1, b=2), call("b", "fail", message="no")),
                call("c", "die", after=0.1),
                call("d", "add", a=1, b=1),
                final("ok"),
            ]
        )
        result = Loop(model, tools=registry).run("go")
    statuses = [(i, s, c if s == "ok" else c["type"]) for i, s, c in results(result)]
    assert statuses[:2] == [("a", "ok", 3), ("b", "error", "ToolFailed")]
    assert statuses[2] == ("c", "error", "OutcomeUnknown")
    assert statuses[3][:2] == ("d", "error")
    assert result.status == "finished"


@pytest.mark.slow
def test_headers_go_with_every_http_request(http_url: str) -> None:
    """http(headers=...) sends them: the server's tool reads one back."""
    with amcp.http(http_url, headers={"Authorization": "Bearer t0ken"}) as server:
        registry = registry_of(server, allow=["header"])
        outcome = asyncio.run(
            registry.adispatch(
                {"id": "1", "name": "header", "arguments": {"name": "authorization"}}
            )
        )
    assert outcome == {"status": "ok", "content": "Bearer t0ken"}
    with pytest.raises(TypeError, match="expected headers to map str to str"):
        amcp.http(http_url, headers={"n": 1})  # type: ignore[dict-item]


def test_the_module_says_what_it_needs() -> None:
    """The public names are documented, and State is the engine's."""
    assert "mcp" in (amcp.__doc__ or "")
    for name in amcp.__all__:
        assert getattr(amcp, name).__doc__, name
    assert State.AWAITING_MODEL.value == "awaiting_model"


def test_importing_without_the_mcp_sdk_names_the_extra() -> None:
    """With the mcp SDK missing, the ImportError says which extra to install."""
    assert import_error("mcp", "agentloop.mcp") == (
        "agentloop.mcp needs the official mcp SDK: pip install 'agentloop-fsm[mcp]'"
    )
