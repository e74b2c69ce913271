"""How the ``v6-*.json`` run files were made: ``python -m tests.support.make_v6_run_files DIR``.

Version 6 run files (each event only what it adds) of: ``finished`` (a batch
of two calls, one of invalid arguments, then a final answer), ``paused`` (a
person is asked about a big sum), ``cancelled`` (cancelled by the batch's
first call, so its second never runs), ``malformed`` (a reply of no kind),
``failed`` (the model raised), and what version 6 records where the
transcript does not hold it: ``notjson`` (a reply that was not JSON),
``typed`` (an output retry refused by a converter: ``problems``),
``concurrent`` (a batch run at once, outcomes out of order: ``call``),
``context`` (summarised: a summary is an ``input`` never appended),
``fallback`` (a fallback model, a retry's ``wait``, ``usage``), ``streamed``
(a stream cut by a cancel: ``partial_text``) and ``children`` (an agent
tool's run, a run file inside its parent's). The fixtures are kept as
written: a later agentloop must still open them, so they are not made again.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic

import agentloop
from agentloop import CancelToken, Loop, Tool, ToolRegistry
from agentloop.context import summarise
from agentloop.models import RetryPolicy, fallback
from agentloop.streaming import TextDelta
from agentloop.testing import ScriptedModel, batch, call, final, with_usage
from tests.support.fixture_tools import tools

if TYPE_CHECKING:
    from collections.abc import Iterator

    from agentloop import RunResult

Message = dict[str, Any]


class Adult(pydantic.BaseModel):
    """A typed output whose converter refuses what its schema accepts."""

    age: int

    @pydantic.field_validator("age")
    @classmethod
    def grown(cls, age: int) -> int:
        if age < 18:
            raise ValueError("expected an adult")
        return age


def runs() -> dict[str, RunResult[Any]]:
    """The runs the fixtures hold, by name."""
    token = CancelToken()

    def stop(a: int, b: int) -> int:
        """Cancel the run, and answer ``a``."""
        token.cancel()
        return a

    def loop(script: list[object], registry: ToolRegistry | None = None) -> Loop:
        return Loop(ScriptedModel(script), tools=registry or tools(), max_steps=5, max_calls=4)

    streaming = CancelToken()

    def streamed(history: list[Message]) -> Iterator[object]:
        yield TextDelta(text="Hel")
        streaming.cancel()  # as another thread would, while the reply streams
        yield TextDelta(text="lo")

    async def slow(a: int, b: int) -> int:
        """Add, taking ``a`` hundredths of a second."""
        await asyncio.sleep(a / 100)
        return a + b

    never_sleep = RetryPolicy(attempts=2, base=0.25, jitter=0.0, sleep=lambda s, t: None)
    child = Loop(ScriptedModel([call("k1", "add", a=1, b=1), final("two")]), tools=tools())
    return {
        "finished": loop(
            [
                with_usage(
                    batch(call("c1", "add", a=1, b=2), call("c2", "add", a=2, b="x")), 10, 3
                ),
                final("3"),
            ]
        ).run("go"),
        "paused": loop([batch(call("c1", "add", a=1, b=2), call("c2", "add", a=500, b=1))]).run(
            "go"
        ),
        "cancelled": loop(
            [batch(call("c1", "stop", a=1, b=1), call("c2", "stop", a=2, b=2))],
            ToolRegistry([Tool(stop)]),
        ).run("go", cancel=token),
        "malformed": loop([{"kind": "nope"}]).run("go"),
        "failed": loop([ValueError("down")]).run("go"),
        "notjson": loop([{"kind": "final", "text": {1, 2}}]).run("go"),
        "typed": Loop(ScriptedModel([final('{"age": 3}'), final('{"age": 30}')]), output=Adult).run(
            "go"
        ),
        "concurrent": asyncio.run(
            Loop(
                ScriptedModel(
                    [batch(call("c1", "slow", a=5, b=1), call("c2", "slow", a=0, b=1)), final("7")]
                ),
                tools=ToolRegistry([Tool(slow)]),
                max_concurrency=2,
            ).arun("go")
        ),
        "context": Loop(
            ScriptedModel([call(f"c{i}", "add", a=i, b=i) for i in range(3)] + [final("x")]),
            tools=tools(),
            context=summarise(lambda history: final("the story so far"), tokens=120),
        ).run("go"),
        "fallback": Loop(
            fallback(
                ScriptedModel([ValueError("first is down")]),
                ScriptedModel([TimeoutError("slow"), with_usage(final("ok"), 7, 2)]),
            ),
            retry=never_sleep,
        ).run("go"),
        "streamed": Loop(streamed).run("go", cancel=streaming),
        "children": Loop(
            ScriptedModel([call("c1", "research", input="one and one"), final("two")]),
            tools=[child.as_tool("research", "Research one question.")],
        ).run("go"),
    }


STATUSES = {
    "finished": "finished",
    "paused": "awaiting_approval",
    "cancelled": "cancelled",
    "malformed": "malformed",
    "failed": "failed",
    "notjson": "malformed",
    "typed": "finished",
    "concurrent": "finished",
    "context": "finished",
    "fallback": "finished",
    "streamed": "cancelled",
    "children": "finished",
}


def make(directory: str) -> None:
    """Write each run to ``directory``, as ``v6-<name>.json``."""
    for name, result in runs().items():
        assert result.status == STATUSES[name], (name, result)
        agentloop.review.save_run(result, Path(directory) / f"v6-{name}.json")


if __name__ == "__main__":
    make(sys.argv[1])
