"""Hypothesis properties over random scripted models, budgets and cancellation points."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any
from unittest import mock

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import agentloop
import agentloop.context
import agentloop.models
from agentloop import CancelToken, InvalidStateError, Loop, State

# Private by necessity: the reference engine swaps the engine's one seam (row choice)
# for transitions, and nothing public can.
from agentloop._core import engine as engine_module
from agentloop._core.build import ALL, TABLE, Row, reference_machine
from agentloop._core.register import EFFECTS, GUARDS
from agentloop.engine import Effect, Engine, Guard
from agentloop.testing import final
from tests.support.helpers import DRIVERS, Driver

if TYPE_CHECKING:
    from agentloop._core.drafts import Draft
    from agentloop._core.table import Trigger


Message = dict[str, Any]

IDS = st.sampled_from(["c1", "c2", "c3", "c4", "c5", "c6"])  # few ids, so repeats happen
ARGS = st.fixed_dictionaries(
    {}, optional={"a": st.integers(-5, 5) | st.text(max_size=2), "b": st.integers(0, 3)}
)
TOOL_NAMES = st.sampled_from(["add", "add", "boom", "missing", "stop"])
CALLS = st.builds(
    lambda i, n, a: {"kind": "call", "id": i, "name": n, "arguments": a},
    IDS,
    TOOL_NAMES,
    ARGS,
)
ELEMENTS = st.builds(lambda i, n, a: {"id": i, "name": n, "arguments": a}, IDS, TOOL_NAMES, ARGS)
BATCHES = st.builds(
    lambda calls, text: {"kind": "calls", "calls": calls, **text},
    st.lists(ELEMENTS, min_size=1, max_size=5),
    st.fixed_dictionaries({}, optional={"text": st.text(max_size=3)}),
)
FINALS = st.builds(lambda t: {"kind": "final", "text": t}, st.text(max_size=5))
GARBAGE: st.SearchStrategy[object] = st.sampled_from(
    [None, "text", {"kind": "call"}, {"kind": "final", "text": 1}, []]
)
ERRORS = st.builds(ValueError, st.text(max_size=5))
REPLIES = st.one_of(CALLS, CALLS, BATCHES, BATCHES, FINALS, GARBAGE, ERRORS)


@attrs.define
class World:
    """A scripted model and tools that log what ran, and when cancellation was requested."""

    replies: list[object]
    cancel_at: int | None  # cancel from inside the model on this invocation
    token: CancelToken = attrs.field(factory=CancelToken)
    invocations: int = 0
    handler_runs: list[tuple[str, bool]] = attrs.field(factory=list)  # (tool, cancelled then?)

    def model(self, history: list[Message]) -> object:
        self.invocations += 1
        if self.invocations == self.cancel_at:
            self.token.cancel()
        reply = self.replies.pop(0) if self.replies else {"kind": "final", "text": "end"}
        if isinstance(reply, Exception):
            raise reply
        return reply

    def tools(self) -> dict[str, Any]:
        def add(a: int = 0, b: int = 0) -> int:
            self.handler_runs.append(("add", self.token.cancelled))
            return a + b

        def boom(**kwargs: Any) -> None:
            self.handler_runs.append(("boom", self.token.cancelled))
            raise RuntimeError("boom")

        def stop(**kwargs: Any) -> str:
            """Cancel the run from inside a tool (a batch's later calls must not run)."""
            self.handler_runs.append(("stop", self.token.cancelled))
            self.token.cancel()
            return "stopped"

        return {"add": add, "boom": boom, "stop": stop}


worlds = st.builds(
    World,
    replies=st.lists(REPLIES, max_size=12),
    cancel_at=st.none() | st.integers(1, 8),
)
budgets = st.tuples(st.integers(0, 8), st.integers(0, 5))


def check_invariants(
    result: agentloop.RunResult, world: World, max_steps: int, max_calls: int
) -> None:
    """The contract's invariants for one finished run."""
    transcript = result.transcript
    # Counters never exceed budgets; steps are exactly the model invocations.
    assert result.steps <= max_steps
    assert result.calls <= max_calls
    assert result.steps == world.invocations
    check_paired(transcript)
    # No call id appears twice; no handler ran after cancellation was requested.
    ids = [call["id"] for m in transcript for call in calls_of(m)]
    assert len(ids) == len(set(ids))
    assert not any(cancelled for _, cancelled in world.handler_runs)
    # Every handler that ran has its result in the transcript (a batch cut short keeps them).
    ran = [m for m in transcript if m["kind"] == "tool_result" and m["status"] in {"ok", "error"}]
    assert len(ran) == len(world.handler_runs)
    # The ledger: counters are monotone and end at the result's; the transcript is
    # the input plus every transition's appended messages.
    assert [e.steps for e in result.events] == sorted(e.steps for e in result.events)
    assert [e.calls for e in result.events] == sorted(e.calls for e in result.events)
    if result.events:
        assert (result.events[-1].steps, result.events[-1].calls) == (result.steps, result.calls)
    rebuilt = [{"kind": "user", "text": "go"}]
    for event in result.events:
        rebuilt.extend(event.appended)
    assert rebuilt == transcript
    # Every accepted call was answered in the transcript, or dropped whole, with its batch,
    # by a cancellation before the batch's first call started; only terminal at the end.
    dropped = result.events[-1].source == State.DISPATCHING and not result.events[-1].appended_json
    assert result.calls == len(ids) + (len(calls_of(result.rejected)) if dropped else 0)
    assert [e.dest in agentloop.engine.TERMINAL for e in result.events] == [False] * (
        len(result.events) - 1
    ) + [True]
    # The status-specific fields.
    assert (result.output is not None) == (result.status == "finished")
    assert (result.reason is not None) == (result.status == "exhausted")
    assert (result.error is not None) == (result.status in {"failed", "malformed", "repeated_call"})


def calls_of(message: Any) -> list[Message]:
    """The calls a call or calls message makes, in order."""
    if type(message) is not dict:
        return []
    if message.get("kind") == "call":
        return [message]
    return list(message["calls"]) if message.get("kind") == "calls" else []


def check_paired(transcript: list[Message]) -> None:
    """Every call (alone or in a batch) is followed at once by its results, in emission order."""
    for index, message in enumerate(transcript):
        calls = calls_of(message)
        following = transcript[index + 1 : index + 1 + len(calls)]
        assert [(m["kind"], m["id"], m["name"]) for m in following] == [
            ("tool_result", c["id"], c["name"]) for c in calls
        ]


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
@settings(max_examples=200, deadline=None)
@given(world=worlds, budget=budgets)
def test_random_runs_keep_the_contract(
    driver: Driver, world: World, budget: tuple[int, int]
) -> None:
    """Whatever the model does, the invariants hold and the run ends in a terminal state.

    One call at a time: calls run at once start together, each past its own cancel
    checkpoint, so one that cancels cannot stop the others already running
    (tests/drivers/test_batches.py checks that case).
    """
    max_steps, max_calls = budget
    loop = Loop(
        world.model,
        tools=world.tools(),
        max_steps=max_steps,
        max_calls=max_calls,
        max_concurrency=1,
    )
    run = driver.start(loop, "go", cancel=world.token)
    for _ in range(8 * max_steps + 2):  # a step is at most 2 + 5 transitions, then 1
        if run.done:
            break
        run.step()
        check_paired(run.transcript)  # after every step
    assert run.done
    result = run.result()
    check_invariants(result, world, max_steps, max_calls)
    # Terminal states absorb: stepping again raises and changes nothing.
    try:
        run.step()
    except InvalidStateError:
        pass
    else:
        raise AssertionError("step() after the end did not raise")
    assert (run.state, run.steps, run.calls) == (result.status, result.steps, result.calls)


class _Model:
    """transitions' model: each guard and effect it names is the registered function, on the run."""

    def __init__(self, engine: Engine) -> None:
        self.run = engine._run

    def __getattr__(self, name: str) -> Any:
        function: Any
        if name in Guard.__members__.values():
            function = GUARDS[Guard(name)]
        elif name in Effect.__members__.values():
            function = EFFECTS[Effect(name)]
        else:
            raise AttributeError(name)
        return lambda: function(self.run)


class ReferenceEngine(Engine):
    """The engine with each row chosen, and its effects run, by ``transitions``, on the whole table.

    It replaces ``_choose``: that is the one seam between the engine and its
    table, and nothing public can swap it. The engine runs its configuration's
    table; this one, every feature's rows.
    """

    __slots__ = ("_machine", "_model", "_taken")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._model = _Model(self)
        self._taken: list[Row] = []
        self._machine = reference_machine(TABLE, self._model, on_row=self._taken.append)

    def _choose(self, trigger: Trigger, draft: Draft) -> Row:
        self._run.draft = draft
        self._machine.set_state(self.state.value, self._model)
        self._taken.clear()
        assert self._model.trigger(trigger.value)
        (row,) = self._taken
        return row


def drive_engine(engine: Engine, world: World) -> None:
    """A custom driver over the public protocol: the README's, with the world's tools."""
    tools = agentloop.ToolRegistry(world.tools())
    while not engine.done:
        need = engine.next()
        if isinstance(need, agentloop.engine.AskModel):
            try:
                engine.replied(world.model(need.history))
            except Exception as exc:  # noqa: BLE001 - the engine says what it means
                engine.raised(exc)
        elif isinstance(need, agentloop.engine.RunTool):
            engine.returned(tools.dispatch(need.call))
        elif isinstance(need, agentloop.engine.CheckOutput):
            problems = need.check(need.value)
            assert isinstance(problems, list)
            engine.output_checked(problems)


@settings(max_examples=1000, deadline=None)
@given(data=st.data(), budget=budgets)
def test_engine_matches_transitions_on_random_runs(
    data: st.DataObject, budget: tuple[int, int]
) -> None:
    """transitions, running the engine's real guards and effects, makes the same run."""
    replies = data.draw(st.lists(REPLIES | st.sampled_from([final("7")]), max_size=10))
    cancel_at = data.draw(st.none() | st.integers(1, 8))
    checked = data.draw(st.booleans())  # a driver with output validators: it checks each final
    outcomes = []
    for engine_class in (Engine, ReferenceEngine):
        world = World(list(replies), cancel_at)
        budget_ = agentloop.engine.Budget(max_steps=budget[0], max_calls=budget[1])
        engine = engine_class("go", budget=budget_, cancel=world.token)
        engine.output_check = _no_sevens_told if checked else None
        drive_engine(engine, world)
        result = engine.result()
        outcomes.append(
            (
                result.events,
                result.steps,
                result.calls,
                result.transcript,
                result.rejected,
                result.error,
                world.handler_runs,
            )
        )
    assert outcomes[0] == outcomes[1]


def _no_sevens(value: object) -> None:
    """An output validator: a final of 7 goes back to the model."""
    if str(value) == "7":
        raise agentloop.Retry("not 7")


def _no_sevens_told(value: object) -> list[str]:
    """``_no_sevens`` as a driver's check reports it."""
    return ["not 7"] if str(value) == "7" else []


def _policy(call: dict[str, Any]) -> agentloop.Decision:
    """Ask about one tool, deny another, allow the rest: the review's rows all fire."""
    if call["name"] == "boom":
        return agentloop.deny("no booms")
    return agentloop.ask("a stop?") if call["name"] == "stop" else agentloop.allow()


configurations = st.fixed_dictionaries(
    {
        "max_steps": st.integers(0, 8),
        "max_calls": st.integers(0, 5),
        "on_exhausted": st.sampled_from(["stop", "answer"]),
        "max_identical_calls": st.sampled_from([None, 1, 2]),
        "output": st.sampled_from([None, int]),
        "retry": st.sampled_from(
            [None, agentloop.models.RetryPolicy(base=0.0, jitter=0.0, sleep=lambda s, t: None)]
        ),
        "context": st.sampled_from([None, agentloop.context.keep_last(tokens=400)]),
        "reviewed": st.booleans(),
        "output_validators": st.sampled_from([(), (_no_sevens,)]),
    }
)


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    configuration=configurations,
    cancel_at=st.none() | st.integers(1, 8),
)
def test_a_configurations_table_runs_as_the_whole_table_does(
    data: st.DataObject, configuration: dict[str, Any], cancel_at: int | None
) -> None:
    """Rows of features that are off never fire: on its own table and on the whole, one run."""
    replies = data.draw(
        st.lists(REPLIES | st.builds(TimeoutError) | st.sampled_from([final("7")]), max_size=10)
    )
    reviewed = configuration.pop("reviewed")
    outcomes = []
    for whole in (False, True):
        world = World(list(replies), cancel_at)
        tools = agentloop.ToolRegistry(world.tools(), policy=_policy if reviewed else None)
        loop = Loop(world.model, tools=tools, max_concurrency=1, **configuration)
        every = mock.patch.object(engine_module, "features_of", return_value=ALL)
        with every if whole else contextlib.nullcontext():
            result = loop.run("go", cancel=world.token)
        outcomes.append(
            (result.events, result.transcript, result.rejected, result.error, world.handler_runs)
        )
    assert outcomes[0] == outcomes[1]


@settings(max_examples=200, deadline=None)
@given(data=st.data(), budget=budgets)
def test_sync_and_async_drivers_agree(data: st.DataObject, budget: tuple[int, int]) -> None:
    """On the same script, both drivers make the same transitions and the same transcript."""
    replies = data.draw(st.lists(REPLIES, max_size=10))
    cancel_at = data.draw(st.none() | st.integers(1, 8))
    outcomes = []
    for driver in DRIVERS:
        world = World(list(replies), cancel_at)
        loop = Loop(world.model, tools=world.tools(), max_steps=budget[0], max_calls=budget[1],
                    max_concurrency=1)  # fmt: skip
        result = driver.run(loop, "go", cancel=world.token)
        outcomes.append((result.events, result.transcript, result.rejected, world.handler_runs))
    assert outcomes[0] == outcomes[1]


class SteppedRun(RuleBasedStateMachine):
    """Stateful test: interleave steps and outside cancellation at random."""

    driver: Driver = DRIVERS[0]

    def __init__(self) -> None:
        super().__init__()
        self.world = World([], None)
        self.loop: Loop | None = None
        self.run: Any = None
        self.cancelled_before: int | None = None

    @precondition(lambda self: self.run is None)
    @rule(replies=st.lists(REPLIES, max_size=10), budget=budgets)
    def start(self, replies: list[object], budget: tuple[int, int]) -> None:
        self.world = World(replies, None)
        self.budget = budget
        self.loop = Loop(
            self.world.model,
            tools=self.world.tools(),
            max_steps=budget[0],
            max_calls=budget[1],
            max_concurrency=1,  # as in test_random_runs_keep_the_contract
        )
        self.run = self.driver.start(self.loop, "go", cancel=self.world.token)

    @precondition(lambda self: self.run is not None and not self.run.done)
    @rule()
    def step(self) -> None:
        assert self.run is not None
        before = self.run.state
        transition = self.run.step()
        assert transition.source == before
        assert transition.dest == self.run.state

    @precondition(lambda self: self.run is not None)
    @rule()
    def cancel(self) -> None:
        self.world.token.cancel()

    @precondition(lambda self: self.run is not None and self.run.done)
    @rule()
    def step_after_the_end(self) -> None:
        assert self.run is not None
        state = self.run.state
        try:
            self.run.step()
        except InvalidStateError:
            pass
        else:
            raise AssertionError("a terminal state did not absorb")
        assert self.run.state == state

    @invariant()
    def counters_within_budget_and_calls_paired(self) -> None:
        if self.run is None:
            return
        assert self.run.steps <= self.budget[0]
        assert self.run.calls <= self.budget[1]
        check_paired(self.run.transcript)
        assert not any(cancelled for _, cancelled in self.world.handler_runs)
        if self.run.done:
            check_invariants(self.run.result(), self.world, *self.budget)


class AsyncSteppedRun(SteppedRun):
    """The same stateful test through the asyncio driver."""

    driver = DRIVERS[1]


TestSteppedRun = SteppedRun.TestCase
TestSteppedRun.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
TestAsyncSteppedRun = AsyncSteppedRun.TestCase
TestAsyncSteppedRun.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
