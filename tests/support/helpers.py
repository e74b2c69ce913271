"""Test helpers: the shared tools, reply builders, a path recorder, and the two drivers.

The tests' model is ``agentloop.testing.ScriptedModel``: the testing kit, used here.
"""

from __future__ import annotations

import asyncio
import atexit
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import attrs
import jsonschema_rs
import pydantic

import agentloop
from agentloop import testing
from agentloop._loop.fallback import model_name
from agentloop.models import Fallback, fallback

Message = dict[str, Any]


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


# The shared add, under the name some scripts call.
adder = agentloop.Tool(add, name="adder")


def mul(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def adding_after_a_tool(registry: agentloop.ToolRegistry, tool: Callable[..., Any]) -> Any:
    """A listener that adds ``tool`` to ``registry`` once a tool has returned."""

    def listener(transition: agentloop.Transition) -> None:
        if transition.trigger == "tool_returned" and tool.__name__ not in registry:
            registry.add(tool)

    return listener


def validator_says(schema: dict[str, Any], value: Any) -> str:
    """jsonschema-rs's own words for the first problem of ``value`` under ``schema``.

    The registry tells the model the validator's words as they are. A test compares with
    them rather than spelling them out: they are the validator's, and a release of it may
    word them otherwise.
    """
    return next(iter(jsonschema_rs.Draft202012Validator(schema).iter_errors(value))).message


def pydantic_says(kind: Any, value: Any) -> str:
    """pydantic's own words for the first error of ``value`` as a ``kind``: as ``validator_says``,
    the words are the library's, which a converter's refusal passes on."""
    try:
        pydantic.TypeAdapter(kind).validate_python(value)
    except pydantic.ValidationError as exc:
        return str(exc.errors()[0]["msg"])
    raise AssertionError(f"{value!r} is a valid {kind!r}")


def call(call_id: str, name: str = "add", **arguments: Any) -> Message:
    """The kit's ``call``, to the shared ``add`` unless another tool is named."""
    return testing.call(call_id, name, **arguments)


def final(text: str = "done") -> Message:
    """The kit's ``final``, with a default text."""
    return testing.final(text)


class Asked(NamedTuple):
    """A review's answer that asks a person, with any reason: one the engine must refuse too."""

    reason: object
    asks: bool = True


def asking(reasons: object) -> Any:
    """What a review answers when it asks a person about each call: ``{call_id: reason}``.

    Anything but a dict is passed on as it is (a bad report, for the engine to refuse).
    """
    if not isinstance(reasons, dict):
        return reasons
    return {call_id: Asked(reason) for call_id, reason in reasons.items()}


@attrs.define
class Recorder:
    """A tool handler that records each call's arguments and returns ``result``."""

    result: Callable[..., Any] = lambda **kwargs: sum(kwargs.values())
    calls: list[dict[str, Any]] = attrs.field(factory=list)

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return self.result(**kwargs)


def drive(run: agentloop.Run) -> list[tuple[str, str]]:
    """Step ``run`` to the end; return the (source, dest) path taken."""
    return [(t.source.value, t.dest.value) for t in run]


def kinds(transcript: list[Message]) -> list[str]:
    """The transcript's message kinds, with the status of tool results."""
    return [
        f"tool_result:{m['status']}" if m["kind"] == "tool_result" else m["kind"]
        for m in transcript
    ]


class SyncDriver:
    """The synchronous driver, as the tests drive it."""

    name = "sync"

    def start(self, loop: agentloop.Loop, messages: Any, cancel: Any = None, **options: Any) -> Any:
        return loop.start(messages, cancel=cancel, **options)

    def run(
        self, loop: agentloop.Loop, messages: Any, cancel: Any = None, **options: Any
    ) -> agentloop.RunResult:
        return loop.run(messages, cancel=cancel, **options)


class SteppedAsync:
    """A synchronous face over an ``AsyncRun``: each ``step()`` awaits one ``astep()``."""

    def __init__(self, run: agentloop.AsyncRun, runner: asyncio.Runner) -> None:
        self.run = run
        self.runner = runner

    def step(self) -> agentloop.Transition:
        return self.runner.run(self.run.astep())

    def decide(self, decisions: dict[str, Any]) -> agentloop.Transition:
        return self.runner.run(self.run.adecide(decisions))

    def __iter__(self) -> Iterator[agentloop.Transition]:
        while not self.run.done:
            yield self.step()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.run, name)


class AsyncDriver:
    """The asyncio driver, with the model made ``async def``: same contract, awaited."""

    name = "async"
    _runner: asyncio.Runner | None = None

    @property
    def runner(self) -> asyncio.Runner:
        if AsyncDriver._runner is None:
            AsyncDriver._runner = asyncio.Runner()
            atexit.register(AsyncDriver._runner.close)
        return AsyncDriver._runner

    @staticmethod
    def as_async(loop: agentloop.Loop) -> agentloop.Loop:
        """The same loop with its model (each fallback model) wrapped in ``async def``."""

        def wrapped(model: Any) -> Any:
            async def amodel(history: list[Message]) -> object:
                await asyncio.sleep(0)
                return model(history)

            amodel.__name__ = model_name(model)
            return amodel

        model = loop.model
        if isinstance(model, Fallback):
            model = fallback(*map(wrapped, model.models), names=model.names)
        else:
            model = wrapped(model)
        return agentloop.Loop(
            model,
            retry=loop.retry,
            tools=loop.dispatcher,
            system=loop.system,
            max_steps=loop.budget.max_steps,
            max_calls=loop.budget.max_calls,
            max_total_tokens=loop.budget.max_total_tokens,
            max_concurrency=loop.max_concurrency,
            listeners=loop.listeners,
            model_timeout=loop.model_timeout,
            tool_timeout=loop.tool_timeout,
            to_thread=loop.to_thread,
            context=loop.context,
            output=loop.output,
            max_output_retries=loop.budget.max_output_retries,
            output_validators=loop.output_validators,
            on_exhausted=loop.budget.on_exhausted,
            max_identical_calls=loop.budget.max_identical_calls,
            deps_type=loop.deps_type,
            ledger=loop.ledger,
        )

    def start(self, loop: agentloop.Loop, messages: Any, cancel: Any = None, **options: Any) -> Any:
        return SteppedAsync(
            self.as_async(loop).astart(messages, cancel=cancel, **options), self.runner
        )

    def run(
        self, loop: agentloop.Loop, messages: Any, cancel: Any = None, **options: Any
    ) -> agentloop.RunResult:
        return self.runner.run(self.as_async(loop).arun(messages, cancel=cancel, **options))


Driver = SyncDriver | AsyncDriver
DRIVERS: list[Driver] = [SyncDriver(), AsyncDriver()]


def import_error(missing: str, module: str, first: str = "") -> str:
    """What importing ``module`` raises in a fresh interpreter where ``missing`` is not
    installed (after ``import first``, when given): the ImportError's message."""
    code = (
        f"import sys; sys.modules[{missing!r}] = None\n"
        + (f"import {first}\n" if first else "")
        + f"try:\n    import {module}\nexcept ImportError as exc:\n    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


@attrs.frozen
class City:
    """A city and its population."""

    name: str
    population: int
