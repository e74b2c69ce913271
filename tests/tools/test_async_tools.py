"""Async handlers: awaited by the registry's adispatch, and by a synchronous run."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from agentloop import ToolRegistry, allow, deny
from tests.support.tool_types import Point, dispatch

# -- async handlers -------------------------------------------------------------------


def test_adispatch_awaits_async_handlers() -> None:
    """adispatch awaits an async def handler; the same checks and outcomes apply."""
    problem = LookupError("gone")

    async def fetch(key: str, point: Point) -> dict[str, Any]:
        await asyncio.sleep(0)
        if key == "missing":
            raise problem
        return {"key": key, "point": point}

    registry = ToolRegistry([fetch], policy=lambda c: deny("no") if c["id"] == "x" else allow())

    async def main() -> list[dict[str, Any]]:
        calls = [
            {"id": "1", "arguments": {"key": "k", "point": {"x": 1}}},
            {"id": "2", "arguments": {"key": "missing", "point": {"x": 1}}},
            {"id": "3", "arguments": {"key": 1}},
            {"id": "x", "arguments": {"key": "k", "point": {"x": 1}}},
        ]
        return [await registry.adispatch({"name": "fetch", **c}) for c in calls]

    ok, error, invalid, denied = asyncio.run(main())
    assert ok == {"status": "ok", "content": {"key": "k", "point": {"x": 1, "y": 0}}}
    assert (error["status"], error["exception"]) == ("error", problem)
    assert invalid["status"] == "invalid_arguments"
    assert denied == {"status": "denied", "content": "no"}


def test_adispatch_runs_plain_handlers_in_a_thread_when_asked() -> None:
    """With to_thread=True a plain handler runs in a worker thread, otherwise in the caller's."""
    threads: list[int] = []

    def where() -> None:
        threads.append(threading.get_ident())

    registry = ToolRegistry([where])
    call_ = {"name": "where", "arguments": {}}
    asyncio.run(registry.adispatch(call_))
    asyncio.run(registry.adispatch(call_, to_thread=True))
    assert threads[0] == threading.get_ident()
    assert threads[1] != threading.get_ident()


def test_sync_dispatch_refuses_an_async_handler() -> None:
    """dispatch cannot await: an async handler gives error (and no never-awaited warning)."""

    async def later() -> int:
        return 1

    outcome = dispatch(ToolRegistry([later]), "later")
    assert outcome["status"] == "error"
    assert outcome["content"]["message"] == (
        "tool 'later' is async; run the loop with the async driver (loop.arun or loop.astart), "
        "which awaits it"
    )
