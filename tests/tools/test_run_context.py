"""RunContext: a tool's and a policy's view of the run they serve, and the deps given to it.

Step by step on both drivers: what a handler's context holds (the deps given, the ids,
the idempotency key the ledger guards, the counters as the call was handed out, the
run's token), that it is never published, that a policy gets one too, that the deps
are checked where a Loop and a run meet, and that a resumed run is given them again.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import attrs
import pytest

import agentloop
from agentloop import Loop, RunContext, State, Tool, ToolRegistry, current_context
from agentloop.ledger import SQLiteLedger
from agentloop.testing import ScriptedModel, batch, with_usage
from tests.support.helpers import DRIVERS, SyncDriver, call, final, kinds

if TYPE_CHECKING:
    from pathlib import Path

    from agentloop.streaming import ToolProgress
    from tests.support.helpers import Driver


@attrs.define
class Bank:
    """The deps: live, mutable, shared with the caller (never copied)."""

    balances: dict[str, float]
    paid: list[tuple[str, float, str | None]] = attrs.field(factory=list)
    limit: float = 100.0


class Vault(Bank):
    """Deps of a subclass: a Loop of Vault serves a tool of Bank."""


class Other:
    """Deps of an unrelated type."""


def balance(ctx: RunContext[Bank], account: str) -> float:
    """The balance of one account."""
    return ctx.deps.balances[account]


def pay(to: str, ctx: RunContext[Bank], amount: float) -> str:
    """Pay someone, once (the context in the middle: any position)."""
    ctx.deps.paid.append((to, amount, ctx.idempotency_key))
    ctx.deps.balances["main"] -= amount
    return f"paid {amount} to {to}"


def no_large_payments(call: dict[str, Any], ctx: RunContext[Bank]) -> agentloop.Decision:
    """A policy reading the deps: over the bank's limit, a person decides."""
    amount = call["arguments"].get("amount", 0)
    if amount > ctx.deps.limit:
        return agentloop.ask(f"{amount} is over {ctx.deps.limit} (call {ctx.call_id})")
    return agentloop.allow()


def bank() -> Bank:
    return Bank({"main": 500.0})


def tools() -> list[Tool]:
    return [Tool(balance), Tool(pay, policy=no_large_payments)]


# -- the schema -----------------------------------------------------------------------


def test_a_tools_context_is_not_published() -> None:
    """The context parameter, in any position, is in no schema nor any provider's spec; the
    same with parameters= given, and with an annotation naming a type that cannot be
    resolved (imported under TYPE_CHECKING)."""
    registry = ToolRegistry(tools())
    assert registry["balance"].parameters["properties"] == {"account": {"type": "string"}}
    assert registry["pay"].parameters["required"] == ["to", "amount"]
    for format in ("json-schema", "openai", "openai-responses", "anthropic", "gemini"):
        assert "ctx" not in str(registry.specs(format))

    def given(ctx: RunContext[Bank], **arguments: Any) -> Any:
        return arguments, ctx.deps

    own = Tool(given, parameters={"type": "object", "properties": {"x": {"type": "integer"}}})
    assert own.context == ("ctx", Bank)
    assert own.parameters["properties"] == {"x": {"type": "integer"}}

    def unresolved(ctx: RunContext[Path], city: str) -> str:  # Path: for type checking alone
        return city

    assert Tool(unresolved).context is not None
    assert list(Tool(unresolved).parameters["properties"]) == ["city"]


def test_two_context_parameters_are_refused() -> None:
    def twice(a: RunContext[Any], b: RunContext[Any], x: int) -> int:
        return x

    with pytest.raises(TypeError, match=r"tool 'twice': expected at most one RunContext"):
        Tool(twice)


def test_a_registry_on_its_own_gives_an_empty_context() -> None:
    """Dispatched outside any run, a tool still gets a context: no deps, no ids."""
    got: list[RunContext[Any]] = []

    def look(ctx: RunContext, n: int) -> int:  # type: ignore[type-arg]  # bare: any deps
        got.append(ctx)
        return n

    registry = ToolRegistry([look])
    assert registry.dispatch({"id": "k", "name": "look", "arguments": {"n": 1}})["status"] == "ok"
    assert got[0].deps is None
    assert got[0].call_id is None
    assert got[0].idempotency_key is None
    assert current_context() is None


# -- what the context holds, step by step -------------------------------------------------


def test_context_carries_deps_ids_counters_and_token(driver: Driver, tmp_path: Path) -> None:
    """A durable run of two steps: each handler sees the deps given (the very object), the
    run id, its call id and tool, the idempotency key (as idempotency_key() says, and as
    the ledger's tool_started record keys it), the counters and usage as the call was
    handed out, and the run's token; the handler's effect lands on the caller's deps."""
    seen: list[tuple[RunContext[Bank], str | None]] = []

    def watched(ctx: RunContext[Bank], account: str) -> float:
        seen.append((ctx, agentloop.idempotency_key()))
        return ctx.deps.balances[account]

    def watched_pay(ctx: RunContext[Bank], to: str, amount: float) -> str:
        seen.append((ctx, agentloop.idempotency_key()))
        return pay(to, ctx, amount)

    script = ScriptedModel(
        [
            with_usage(call("c1", "watched", account="main"), 10, 2),
            batch(
                call("c2", "watched_pay", to="bob", amount=20.0),
                call("c3", "watched", account="main"),
            ),
            final("paid"),
        ]
    )
    ledger = SQLiteLedger(tmp_path / "runs.db")
    loop = Loop(script, tools=[watched, watched_pay], deps_type=Bank, ledger=ledger)
    deps, token = bank(), agentloop.CancelToken()
    run = driver.start(loop, "pay bob", cancel=token, deps=deps)
    while run.step().trigger.value != "tool_returned":  # the model asked for c1, valid
        assert seen == []
    assert len(seen) == 1
    assert (run.calls, run.steps) == (1, 1)
    while not run.done:  # the model's batch, c2, c3, the final
        run.step()
    result = run.result()
    assert result.status == "finished"
    assert result.output == "paid"
    assert (result.steps, result.calls) == (3, 3)
    assert kinds(result.transcript) == [
        "user", "call", "tool_result:ok", "calls", "tool_result:ok", "tool_result:ok", "final"
    ]  # fmt: skip
    assert deps.paid == [("bob", 20.0, f"{run.run_id}:c2")]
    assert deps.balances["main"] == 480.0
    started = [r.key for r in ledger.read(run.run_id)[1] if r.kind == "tool_started"]
    assert started == ["c1", "c2", "c3"]
    for (ctx, key), call_id, tool, steps, calls in zip(
        seen,
        started,
        ["watched", "watched_pay", "watched"],
        [1, 2, 2],
        [1, 3, 3],
        strict=True,
    ):
        assert ctx.deps is deps
        assert (ctx.run_id, ctx.call_id, ctx.tool) == (run.run_id, call_id, tool)
        assert ctx.idempotency_key == key == f"{run.run_id}:{call_id}"
        assert (ctx.steps, ctx.calls) == (steps, calls)
        assert ctx.usage == agentloop.Usage(10, 2)
        assert ctx.budget == loop.budget
        assert ctx.cancel is token
    assert agentloop.idempotency_key() is None
    assert current_context() is None


def test_a_run_without_a_ledger_has_no_ids_and_its_own_token(driver: Driver) -> None:
    """No ledger: no run id, no key. No token given: the run makes one, which is the one
    its checkpoints read (cancelling it from a tool stops the run)."""
    seen: list[RunContext[Bank]] = []

    def look(ctx: RunContext[Bank], account: str) -> float:
        seen.append(ctx)
        return ctx.deps.balances[account]

    script = ScriptedModel([call("c1", "look", account="main"), final("500")])
    result = driver.run(Loop(script, tools=[look], deps_type=Bank), "how much?", deps=bank())
    assert result.status == "finished"
    (ctx,) = seen
    assert ctx.run_id is None
    assert ctx.idempotency_key is None
    assert ctx.call_id == "c1"
    assert isinstance(ctx.cancel, agentloop.CancelToken)
    assert not ctx.cancel.cancelled


def test_cancel_through_the_context_stops_the_run(driver: Driver) -> None:
    """A tool that cancels ctx.cancel: its own call returns, the next call of the batch is
    answered cancelled before it runs (the checkpoint before each tool), no model is asked
    again, and every call has its result."""
    ran: list[str] = []

    def stop(ctx: RunContext[None], why: str) -> str:
        ran.append(why)
        ctx.cancel.cancel()  # type: ignore[union-attr]  # the run's own token
        return "stopping"

    def other(ctx: RunContext[None]) -> str:
        ran.append("other")
        return "ran"

    script = ScriptedModel([batch(call("a", "stop", why="enough"), call("b", "other")), final()])
    run = driver.start(Loop(script, tools=[stop, other]), "go")
    transitions = list(run)
    result = run.result()
    assert result.status == "cancelled"
    assert ran == ["enough"]
    assert transitions[-1].dest is State.CANCELLED
    results = [m for m in result.transcript if m["kind"] == "tool_result"]
    assert [(m["id"], m["status"]) for m in results] == [("a", "ok"), ("b", "cancelled")]
    assert result.steps == 1
    assert result.calls == 2
    assert len(script.seen) == 1


def test_report_progress_through_the_context(driver: Driver) -> None:
    """ctx.report_progress is report_progress for its call: the delta listeners hear it."""

    def count(ctx: RunContext[None], n: int) -> int:
        for step in range(1, n + 1):
            ctx.report_progress(step, n)
        return n

    run = driver.start(Loop(ScriptedModel([call("a", "count", n=2), final()]), tools=[count]), "go")
    heard: list[ToolProgress] = []
    run.subscribe_deltas(heard.append)
    list(run)
    assert [(p.call_id, p.progress, p.total) for p in heard] == [("a", 1, 2), ("a", 2, 2)]


def test_a_dispatcher_of_ones_own_reads_current_context(driver: Driver) -> None:
    """A dispatcher with no parameters to fill reads the call's context."""
    seen: list[tuple[object, str | None]] = []

    class Mine:
        def dispatch(self, call: dict[str, Any]) -> dict[str, Any]:
            ctx = current_context()
            assert ctx is not None
            seen.append((ctx.deps, ctx.call_id))
            return {"status": "ok", "content": "done"}

    deps = bank()
    script = ScriptedModel([call("x1", "anything"), final()])
    result = driver.run(Loop(script, tools=Mine()), "go", deps=deps)
    assert result.status == "finished"
    assert seen == [(deps, "x1")]


# -- policies ----------------------------------------------------------------------------


def test_context_in_a_policy(driver: Driver) -> None:
    """The tool's policy reads the deps: a small payment runs, a large one waits for a
    person, named with its call id; approved, it runs, and the effect is on the deps."""
    script = ScriptedModel(
        [
            call("p1", "pay", to="ann", amount=5.0),
            call("p2", "pay", to="bob", amount=150.0),
            final(),
        ]
    )
    deps = bank()
    run = driver.start(Loop(script, tools=tools(), deps_type=Bank), "pay", deps=deps)
    while run.state is not State.AWAITING_APPROVAL:
        run.step()
    assert [p.reason for p in run.pending] == ["150.0 is over 100.0 (call p2)"]
    assert deps.paid == [("ann", 5.0, None)]
    run.decide({"p2": agentloop.approve()})
    list(run)
    assert run.result().status == "finished"
    assert deps.paid == [("ann", 5.0, None), ("bob", 150.0, None)]
    assert deps.balances["main"] == 345.0


def test_a_registrys_policy_gets_the_context_too(driver: Driver) -> None:
    seen: list[tuple[object, str | None]] = []

    def gate(call: dict[str, Any], ctx: RunContext[Bank]) -> agentloop.Decision:
        seen.append((ctx.deps, ctx.call_id))
        return agentloop.deny("closed") if ctx.deps.limit == 0 else agentloop.allow()

    registry = ToolRegistry([balance], policy=gate)
    deps = Bank({"main": 1.0}, limit=0)
    script = ScriptedModel([call("b1", "balance", account="main"), final()])
    result = driver.run(Loop(script, tools=registry, deps_type=Bank), "go", deps=deps)
    assert result.status == "finished"
    assert [m["status"] for m in result.transcript if m["kind"] == "tool_result"] == ["denied"]
    assert seen == [(deps, "b1")]


def test_policy_ctx_concurrent_calls_each_their_own() -> None:
    """Under asyncio with max_concurrency=3, each async policy and each handler of a batch
    sees its own call's context, while the others run."""
    policed: list[tuple[str, str | None]] = []
    handled: list[tuple[str, str | None]] = []

    async def policy(call: dict[str, Any], ctx: RunContext[Bank]) -> agentloop.Decision:
        await asyncio.sleep(0)
        policed.append((call["id"], ctx.call_id))
        return agentloop.allow()

    started: list[int] = []
    everyone = asyncio.Event()

    async def slow(ctx: RunContext[Bank], n: int) -> int:
        started.append(n)
        if len(started) == 3:
            everyone.set()
        await asyncio.wait_for(everyone.wait(), 10)  # the three run at once, or this fails
        handled.append((f"k{n}", ctx.call_id))  # its own still, after the others ran
        return n

    script = ScriptedModel([batch(*(call(f"k{n}", "slow", n=n) for n in range(3))), final()])
    loop = Loop(script, tools=[Tool(slow, policy=policy)], deps_type=Bank, max_concurrency=3)
    result = asyncio.run(loop.arun("go", deps=bank()))
    assert result.status == "finished"
    assert sorted(policed) == [(f"k{n}", f"k{n}") for n in range(3)]
    assert sorted(handled) == [(f"k{n}", f"k{n}") for n in range(3)]
    assert sorted(started) == [0, 1, 2]


# -- deps checked where a Loop and a run meet ---------------------------------------------


def test_a_tool_for_other_deps_is_refused_at_loop() -> None:
    with pytest.raises(TypeError) as caught:
        Loop(ScriptedModel([final()]), tools=tools(), deps_type=Other)
    assert (
        str(caught.value)
        == "tool 'balance' takes RunContext[Bank], but this Loop's deps_type is Other"
    )
    Loop(ScriptedModel([final()]), tools=tools(), deps_type=Vault)  # a subclass serves


def test_a_tool_for_other_deps_added_since_is_refused_at_the_run() -> None:
    """A tool added to the Loop's registry after it was made is checked when a run begins."""

    def audit(ctx: RunContext[Other]) -> str:
        return "audited"

    registry = ToolRegistry(tools())
    script = ScriptedModel([final()])
    loop = Loop(script, tools=registry, deps_type=Bank)
    registry.add(audit)
    with pytest.raises(TypeError, match=r"^tool 'audit' takes RunContext\[Other\]"):
        loop.run("go", deps=bank())
    assert script.seen == []


def test_a_policy_for_other_deps_is_refused_at_loop() -> None:
    def gate(call: dict[str, Any], ctx: RunContext[Other]) -> agentloop.Decision:
        return agentloop.allow()

    with pytest.raises(TypeError, match=r"^the policy of tool 'balance' takes RunContext\[Other\]"):
        Loop(ScriptedModel([final()]), tools=[Tool(balance, policy=gate)], deps_type=Bank)


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_a_run_without_deps_or_with_other_deps_is_refused(driver: Driver) -> None:
    """Refused before anything runs: the model is never asked."""
    script = ScriptedModel([final()])
    loop = Loop(script, tools=tools(), deps_type=Bank)
    with pytest.raises(TypeError) as caught:
        driver.run(loop, "go")
    assert str(caught.value).startswith(
        "expected deps= (a Bank): this Loop's tools take RunContext[Bank], and a run was given none"
    )
    with pytest.raises(
        TypeError, match=r"^expected deps to be a Bank \(this Loop's deps_type\), got Other$"
    ):
        driver.run(loop, "go", deps=Other())
    assert script.seen == []
    assert driver.run(loop, "go", deps=Vault({})).status == "finished"


def test_a_tools_context_class_is_checked_on_a_loop_without_deps_type(
    driver: Driver, tmp_path: Path
) -> None:
    """Without deps_type a tool of RunContext[Bank] ran with deps=None: refused at the start."""
    script = ScriptedModel([call("b1", "balance", account="main"), final("500")])
    ledger = SQLiteLedger(tmp_path / "runs.db")
    loop = Loop(script, tools=tools(), ledger=ledger)
    with pytest.raises(TypeError) as caught:
        driver.run(loop, "go")
    assert str(caught.value).startswith(
        "tool 'balance' takes RunContext[Bank], and this run was given no deps=: "
        "pass deps=Bank(...) to the run, and say so with Loop(deps_type=Bank)"
    )
    with pytest.raises(TypeError, match=r"given deps of type Other: pass deps=Bank"):
        driver.run(loop, "go", deps=Other())
    assert (script.seen, ledger.run_ids()) == ([], [])
    done = driver.run(loop, "go", deps=Vault({"main": 500.0}))
    assert (done.status, done.calls, done.output) == (State.FINISHED, 1, "500")
    assert done.transcript[2]["content"] == 500.0
    # RunContext[object], bare RunContext and RunContext[Any] take whatever the run has.

    def anything(ctx: RunContext[object]) -> str:
        """Anything."""
        return repr(ctx.deps)

    def untyped(ctx: RunContext, x: int) -> int:  # type: ignore[type-arg]
        """Untyped."""
        return x

    plain = Loop(ScriptedModel([final()]), tools=[Tool(anything), Tool(untyped)])
    assert driver.run(plain, "go").status == "finished"


# -- resume takes the deps again ----------------------------------------------------------


def test_resume_needs_deps_again(driver: Driver, tmp_path: Path) -> None:
    """A durable run paused for a person (no crash: the process that ran it is done with
    it) is resumed by another Loop: without deps refused, nothing written; with new deps,
    the approved call runs against them, under the key its run gave it."""
    script = [call("p1", "pay", to="bob", amount=150.0), final("paid")]
    ledger = SQLiteLedger(tmp_path / "runs.db")
    first = bank()
    run = driver.start(
        Loop(ScriptedModel(script), tools=tools(), deps_type=Bank, ledger=ledger), "pay", deps=first
    )
    while run.state is not State.AWAITING_APPROVAL:
        run.step()
    run_id = run.run_id
    records = ledger.read(run_id)[1]
    again = Loop(ScriptedModel(script[1:]), tools=tools(), deps_type=Bank, ledger=ledger)
    resume = again.resume if isinstance(driver, SyncDriver) else _aresume(again)
    with pytest.raises(TypeError, match=r"^expected deps= \(a Bank\)"):
        resume(run_id, decisions={"p1": agentloop.approve()})
    assert ledger.read(run_id)[1] == records
    second = bank()
    result = resume(run_id, decisions={"p1": agentloop.approve()}, deps=second)
    assert result.status == "finished"
    assert result.output == "paid"
    assert first.paid == []
    assert second.paid == [("bob", 150.0, f"{run_id}:p1")]


def _aresume(loop: Loop) -> Any:
    def resume(run_id: str, **options: Any) -> agentloop.RunResult:
        return asyncio.run(loop.aresume(run_id, **options))

    return resume


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_fork_and_continue_take_deps(driver: Driver) -> None:
    """fork and continue_run start new runs: they take deps= as run does, and refuse a run
    without them."""
    script = [call("c1", "balance", account="main"), call("c2", "balance", account="main")]
    loop = Loop(ScriptedModel(script), tools=tools(), deps_type=Bank, max_steps=2)
    ended = driver.run(loop, "go", deps=bank())
    assert ended.status == "exhausted"
    again = Loop(ScriptedModel([final("500")]), tools=tools(), deps_type=Bank)
    with pytest.raises(TypeError, match=r"^expected deps="):
        again.continue_run(ended)
    assert again.continue_run(ended, deps=bank()).output == "500"
    forking = Loop(ScriptedModel([final("500")]), tools=tools(), deps_type=Bank)
    with pytest.raises(TypeError, match=r"^expected deps="):
        forking.fork(ended, at=2)
    assert forking.fork(ended, at=2, deps=bank()).finish().output == "500"


def test_async_tools_and_policies_under_the_sync_driver_see_the_context() -> None:
    """The synchronous driver awaits an async policy and an async tool on its own event loop:
    each still sees its call's context there."""
    seen: list[tuple[str, object, str | None]] = []

    async def gate(call: dict[str, Any], ctx: RunContext[Bank]) -> agentloop.Decision:
        await asyncio.sleep(0)
        seen.append(("policy", ctx.deps, ctx.call_id))
        return agentloop.allow()

    async def fetch(ctx: RunContext[Bank], account: str) -> float:
        await asyncio.sleep(0)
        seen.append(("tool", ctx.deps, agentloop.current_context().call_id))  # type: ignore[union-attr]
        return ctx.deps.balances[account]

    deps = bank()
    script = ScriptedModel([call("f1", "fetch", account="main"), final()])
    result = Loop(script, tools=[Tool(fetch, policy=gate)], deps_type=Bank).run("go", deps=deps)
    assert result.status == "finished"
    assert [m["content"] for m in result.transcript if m["kind"] == "tool_result"] == [500.0]
    assert seen == [("policy", deps, "f1"), ("tool", deps, "f1")]
