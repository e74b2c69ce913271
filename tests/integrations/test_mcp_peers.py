"""agentloop.mcp against MCP peers that others wrote, in the long tier.

The official servers (server-everything, server-filesystem, server-memory), the
TypeScript SDK's client and server, and the Inspector's CLI, at the versions
tests/mcp_peers/package-lock.json pins, installed there by ``npm ci`` once (and
again when the lock changes). They need Node.js and npm: ``.ci/run`` installs
Debian's when they are missing.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import importlib.metadata
import json
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

import agentloop
from agentloop import Loop, ToolRegistry
from agentloop import mcp as amcp
from agentloop.streaming import ToolProgress
from agentloop.testing import ScriptedModel, batch, call, final
from tests.support import SUPPORT

if TYPE_CHECKING:
    from pathlib import Path

    from tests.support.helpers import Driver

pytestmark = pytest.mark.slow

PEERS = SUPPORT / "mcp_peers"
MODULES = PEERS / "node_modules"
SERVED = str(SUPPORT / "mcp_served.py")


@pytest.fixture(scope="session")
def peers() -> Path:
    """tests/mcp_peers/node_modules, as ``npm ci`` installs it from the lock (once, locked)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("no Node.js: install nodejs and npm (.ci/run does, from Debian)")
    digest = hashlib.sha256((PEERS / "package-lock.json").read_bytes()).hexdigest()
    stamp = MODULES / ".agentloop-installed"
    with (PEERS / ".npm-ci.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install, whatever runs the tests at once
        if not (stamp.exists() and stamp.read_text() == digest):
            subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=PEERS,
                check=True,
                timeout=600,
            )
            stamp.write_text(digest)
    return MODULES


def official(peers: Path, server: str, *args: str, **options: Any) -> amcp.Server:
    """An official server of the pinned ones, launched with Node over stdio."""
    script = peers / "@modelcontextprotocol" / f"server-{server}" / "dist" / "index.js"
    return amcp.stdio("node", [str(script), *args], name=server, timeout=30, **options)


def results(result: agentloop.RunResult) -> list[tuple[str, str, Any]]:
    return [
        (m["id"], m["status"], m["content"])
        for m in result.transcript
        if m["kind"] == "tool_result"
    ]


# -- the official servers, and the TypeScript SDK's, as agentloop's tool sources


def test_the_everything_server_is_taken_but_for_its_task_only_tool(
    peers: Path, driver: Driver
) -> None:
    """Every tool of server-everything is registered (each schema Draft 7), but
    simulate-research-query, which runs only as a task; a batch of its tools runs."""
    with official(peers, "everything", "stdio") as everything:
        listed = {tool.name: tool for tool in everything._listing}
        assert listed["simulate-research-query"].execution is not None
        assert listed["simulate-research-query"].execution.task_support == "required"
        registry = ToolRegistry()
        everything.register(registry)
        assert "simulate-research-query" not in registry
        assert set(listed) - {tool.name for tool in registry} == {"simulate-research-query"}
        assert registry["echo"].idempotent  # readOnlyHint
        assert registry["echo"].parameters["$schema"] == "http://json-schema.org/draft-07/schema#"
        model = ScriptedModel(
            [
                batch(
                    call("a", "get-sum", a=2, b=3),
                    call("b", "echo", message="hi"),
                    call("c", "get-tiny-image"),
                    call("d", "get-sum", a="2", b=3),
                ),
                final("done"),
            ]
        )
        result = driver.run(Loop(model, tools=registry), "go")
    (_, s1, c1), (_, s2, c2), (_, s3, c3), (_, s4, _) = results(result)
    assert (s1, s2, s3, s4) == ("ok", "ok", "ok", "invalid_arguments")
    assert "5" in c1
    assert "hi" in c2
    assert any(part.get("type") == "image" for part in c3)


def test_the_everything_servers_progress_reaches_the_runs_listeners(
    peers: Path, driver: Driver
) -> None:
    """trigger-long-running-operation reports each of its steps; the run's delta listeners hear
    each as a ToolProgress of the call, in order, before its outcome."""
    with official(peers, "everything", "stdio") as everything:
        registry = ToolRegistry()
        everything.register(registry, allow=["trigger-long-running-operation"])
        model = ScriptedModel(
            [call("a", "trigger-long-running-operation", duration=0.3, steps=3), final("done")]
        )
        run = driver.start(Loop(model, tools=registry), "go")
        heard: list[object] = []
        run.subscribe_deltas(heard.append)
        for _ in run:
            pass
    assert results(run.result())[0][1] == "ok"
    progress = [item for item in heard if isinstance(item, ToolProgress)]
    assert [(item.call_id, item.progress, item.total) for item in progress] == [
        ("a", step, 3) for step in (1, 2, 3)
    ]


def test_a_typescript_servers_draft_7_tuple_is_read_as_draft_7(peers: Path) -> None:
    """The TypeScript SDK writes z.tuple as Draft 7's items: [...]: taken, and arguments checked
    by Draft 7's rules before they are sent."""
    script = str(PEERS / "ts_server.mjs")
    with amcp.stdio("node", [script], name="ts") as ts:
        registry = ToolRegistry()
        ts.register(registry)
        point = registry["pair"].parameters["properties"]["point"]
        assert isinstance(point["items"], list)
        ok = asyncio.run(
            registry.adispatch({"id": "1", "name": "pair", "arguments": {"point": [1, "x"]}})
        )
        wrong = asyncio.run(
            registry.adispatch({"id": "2", "name": "pair", "arguments": {"point": ["x", 1]}})
        )
    assert ok == {"status": "ok", "content": "1 x"}
    assert wrong["status"] == "invalid_arguments"
    assert [problem["path"] for problem in wrong["content"]] == ["point[0]", "point[1]"]


def test_the_filesystem_server_writes_and_reads_where_it_may(peers: Path, tmp_path: Path) -> None:
    """server-filesystem, confined to a directory: a write asks a person first (it may destroy),
    then the file is there and read back."""
    with official(peers, "filesystem", str(tmp_path)) as files:
        registry = ToolRegistry()
        files.register(
            registry,
            allow=["write_file", "read_text_file"],
            destructive=amcp.ask_before_destructive,
        )
        target = str(tmp_path / "note.txt")
        model = ScriptedModel(
            [
                call("a", "write_file", path=target, content="buy milk"),
                call("b", "read_text_file", path=target),
                final("done"),
            ]
        )
        run = Loop(model, tools=registry).start("go")
        paused = run.finish()
        assert [pending.name for pending in paused.pending] == ["write_file"]
        run.decide({pending.call_id: pending.approve() for pending in paused.pending})
        result = run.finish()
    assert (tmp_path / "note.txt").read_text() == "buy milk"
    assert [status for _, status, _ in results(result)] == ["ok", "ok"]
    assert "buy milk" in json.dumps(results(result)[1][2])


def test_the_memory_server_keeps_what_it_is_told(peers: Path, tmp_path: Path) -> None:
    """server-memory: an entity made by one call is in the graph the next reads."""
    memory = tmp_path / "memory.jsonl"
    with official(peers, "memory", env={"MEMORY_FILE_PATH": str(memory)}) as graph:
        registry = ToolRegistry()
        graph.register(registry, allow=["create_entities", "read_graph"])
        entity = {"name": "Ada", "entityType": "person", "observations": ["wrote programs"]}
        model = ScriptedModel(
            [call("a", "create_entities", entities=[entity]), call("b", "read_graph"), final("ok")]
        )
        result = Loop(model, tools=registry).run("go")
    (_, s1, _), (_, s2, graph_read) = results(result)
    assert (s1, s2) == ("ok", "ok")
    assert "Ada" in json.dumps(graph_read)
    assert memory.exists()


# -- agentloop.mcp.serve, as the TypeScript SDK's client and the Inspector's CLI meet it


def typescript_client(peers: Path, plan: list[dict[str, Any]]) -> dict[str, Any]:
    """What the TypeScript SDK's client makes of tests/support/mcp_served.py, following ``plan``."""
    done = subprocess.run(
        ["node", str(PEERS / "client.mjs"), json.dumps(plan), sys.executable, SERVED],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_the_typescript_client_meets_a_served_registry(peers: Path) -> None:
    """serverInfo names agentloop's version; each tool carries what the registry knows; an
    unknown tool is JSON-RPC -32602; a denied call is a tool error; a handler's progress and the
    idempotency key sent in _meta arrive."""
    key = "io.github.agentloop/idempotency-key"
    seen = typescript_client(
        peers,
        [
            {"name": "add", "arguments": {"a": 1, "b": 2}},
            {"name": "nope"},
            {"name": "pay", "arguments": {"amount": 5}},
            {"name": "count", "arguments": {"steps": 3}, "progress": True},
            {"name": "charge", "arguments": {"amount": 5}, "meta": {key: "r9:c1"}},
            {"name": "charge", "arguments": {"amount": 5}, "meta": {key: "r9:c1"}},
        ],
    )
    version = importlib.metadata.version("agentloop-fsm")
    assert (seen["server"]["name"], seen["server"]["version"]) == ("served", version)
    hints = {tool["name"]: tool.get("annotations") for tool in seen["tools"]}
    assert hints["add"] == {"readOnlyHint": True, "idempotentHint": True}
    assert hints["pay"] == {"idempotentHint": False}
    add, nope, pay, count, charged, again = seen["calls"]
    assert add["result"]["content"] == [{"type": "text", "text": "3"}]
    assert nope["error"]["code"] == -32602
    assert (pay["result"]["isError"], pay["result"]["content"][0]["text"]) == (
        True,
        "denied: not that one",
    )
    assert count["result"]["content"] == [{"type": "text", "text": "3"}]
    assert [(p["progress"], p["total"], p["message"]) for p in count["progress"]] == [
        (1, 3, "step 1"),
        (2, 3, "step 2"),
        (3, 3, "step 3"),
    ]
    assert charged["result"]["content"][0]["text"] == "charged 5 under r9:c1"
    assert again["result"]["content"][0]["text"] == "already charged under r9:c1"


def inspector(peers: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """The Inspector's CLI (v1: v2 needs Node 22) against tests/support/mcp_served.py."""
    script = peers / "@modelcontextprotocol" / "inspector-cli" / "build" / "index.js"
    return subprocess.run(
        ["node", str(script), sys.executable, SERVED, *options],
        # It reads its own package.json through a path it tests against its working directory.
        cwd=peers,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_inspector_cli_meets_a_served_registry(peers: Path) -> None:
    """tools/list and tools/call as the Inspector's CLI makes them; its tool metadata carries an
    idempotency key to the handler; an unknown tool is refused with -32602."""
    listed = inspector(peers, "--method", "tools/list")
    assert listed.returncode == 0, listed.stderr
    tools = {tool["name"]: tool for tool in json.loads(listed.stdout)["tools"]}
    assert tools["charges"]["annotations"] == {"readOnlyHint": True, "idempotentHint": True}
    added = inspector(
        peers, "--method", "tools/call", "--tool-name", "add", "--tool-arg", "a=1", "b=2"
    )
    assert json.loads(added.stdout)["content"] == [{"type": "text", "text": "3"}]
    charged = inspector(
        peers,
        "--method",
        "tools/call",
        "--tool-name",
        "charge",
        "--tool-arg",
        "amount=7",
        "--tool-metadata",
        "io.github.agentloop/idempotency-key=r8:c2",
    )
    assert json.loads(charged.stdout)["content"][0]["text"] == "charged 7 under r8:c2"
    unknown = inspector(peers, "--method", "tools/call", "--tool-name", "nope")
    assert "-32602" in unknown.stdout + unknown.stderr
