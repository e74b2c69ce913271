"""A property over random trees of durable parent and child runs, crashed and resumed.

Hypothesis draws a tree of Loops (up to three generations, up to two agent
tools a node), each with a model that answers by the history (calls of its
plain tools and of its agent tools, batches, finals), small budgets that
sometimes run out, policies that ask a person on some tools, a verdict for
each pending path key (approve, deny, or cancel the run while it waits), and
a cancellation by one node's model at one of its steps (any node, under
ancestors that ask a person too, one call at a time or at once). The tree runs
durably twice on the drawn driver: once as the baseline, and once crashed at
a drawn append (``CrashingLedger``, whose count spans every run of the tree
and every process), or interrupted there (``InterruptingLedger``: a
``KeyboardInterrupt`` before or after its commit, the process living on), and
resumed in a "new process" (new Loops over the same ledger) until it ends.
For every run in the ledger: the contract holds, each plain tool took effect
at most once per call (once where its outcome is known), the run ends as the
baseline's (but for ``OutcomeUnknown`` results of a non-idempotent tool cut
by the crash), and its run file loads back equal. Where a child's model
cancels while a batch's calls run at once (``racy``), which of them began
before the cancel is the scheduler's, in each process: the resumed tree may
rightly make other children than the baseline, so each run of either tree is
checked by itself (contract, effects, run file; the top run read back as it
ended) instead of against the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import tempfile
import zlib
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import attrs
import orjson
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import agentloop
from agentloop._durable.ids import child_run_id
from agentloop.ledger import LedgerError, SQLiteLedger, view_run
from agentloop.review import run_from_json, run_to_json
from agentloop.testing import assert_contract, batch, call, final
from tests.conftest import count
from tests.durable.test_agent_children import OrderedLedger
from tests.durable.test_durable import DRIVERS, Driver, World
from tests.support.ledgers import (
    Crash,
    CrashingLedger,
    InterruptingLedger,
    MemoryLedger,
    unknown_ids,
)

Message = dict[str, Any]
PLAIN = ("effect", "idem", "fail")


@attrs.frozen
class Node:
    """One Loop of the tree: its model's replies, budgets, asking tools and agent tools."""

    name: str  # its place in the tree ("n", "n.0", "n.0.1"): where a cancel lands
    script: tuple[Message, ...]
    children: tuple[Node, ...]
    max_steps: int
    max_calls: int
    asks: frozenset[str]  # the tools (plain or agent) whose policy asks a person


@attrs.frozen
class Tree:
    """A drawn tree and what happens to it: driver, concurrency, verdicts, cancel, crash."""

    top: Node
    driver: Driver
    concurrency: int
    seed: int  # with a path key, the person's verdict on it
    cancels: bool  # whether some verdicts cancel the waiting run instead
    cancel_at: tuple[str, int] | None  # (node, reply index) whose model cancels the token
    crash_point: float
    crash_when: str
    sqlite: bool = False  # the ledger: a SQLiteLedger in a file, else a MemoryLedger
    crash_in: str | None = None  # or die first right after the effect of a call of this id
    interrupts: bool = False  # a KeyboardInterrupt at the append instead: the process lives on


@st.composite
def nodes(draw: st.DrawFn, name: str = "n", depth: int = 1) -> Node:
    fan_out = draw(st.integers(1 if depth == 1 else 0, 2)) if depth < 3 else 0
    children = tuple(draw(nodes(f"{name}.{i}", depth + 1)) for i in range(fan_out))
    agents = [f"agent{i}" for i in range(fan_out)]
    tools = [*PLAIN, *agents]
    script: list[Message] = []
    number = 0
    for _ in range(draw(st.integers(1 if depth == 1 else 0, 3))):
        calls = []
        for _ in range(draw(st.integers(1, 2))):
            number += 1
            # The top's first call is an agent's; any other, as often an agent's as a plain one.
            agent = bool(agents) and ((depth, number) == (1, 1) or draw(st.booleans()))
            tool = draw(st.sampled_from(agents if agent else PLAIN))
            arguments = {"input": f"{name} asks {number}"} if tool.startswith("agent") else {}
            calls.append(call(f"c{number}", tool, **arguments, **({} if arguments else {"n": 1})))
        script.append(calls[0] if len(calls) == 1 and draw(st.booleans()) else batch(*calls))
    script.append(final(f"{name} done"))
    asks = draw(st.frozensets(st.sampled_from(tools), max_size=2))
    return Node(
        name=name,
        script=tuple(script),
        children=children,
        max_steps=draw(st.integers(max(1, len(script) - 1), len(script) + 1)),
        max_calls=draw(st.integers(1, 5)),
        asks=asks,
    )


def names(node: Node) -> list[Node]:
    return [node, *(n for child in node.children for n in names(child))]


@st.composite
def trees(draw: st.DrawFn) -> Tree:
    top = draw(nodes())
    driver = draw(st.sampled_from(DRIVERS))
    concurrency = draw(st.integers(1, 2)) if driver == "async" else 1
    cancel_at = None
    # At any node, under asking ancestors too, one call at a time or at once (``racy``).
    if draw(st.integers(0, 3)) == 0:
        where = draw(st.sampled_from(names(top)))
        cancel_at = (where.name, draw(st.integers(0, len(where.script) - 1)))
    interrupts = draw(st.booleans())
    return Tree(
        top=top,
        driver=driver,
        concurrency=concurrency,
        seed=draw(st.integers(0, 2**16)),
        cancels=draw(st.integers(0, 3)) == 0,
        cancel_at=cancel_at,
        crash_point=draw(st.floats(0, 1, exclude_max=True)),
        crash_when=draw(st.sampled_from(["before", "after"])),
        sqlite=draw(st.booleans()),
        # An interrupt in a tool is the run's recorded end (cancelled): only at an append.
        crash_in=None if interrupts else draw(st.none() | st.sampled_from(["c1", "c2", "c3"])),
        interrupts=interrupts,
    )


class Process:
    """One "process": the tree's Loops made afresh, over ``ledger``, with its own token."""

    def __init__(self, tree: Tree, world: World, ledger: Any) -> None:
        self.tree, self.world, self.token = tree, world, agentloop.CancelToken()
        self.loop = self._loop(tree.top, ledger)

    def _loop(self, node: Node, ledger: Any) -> agentloop.Loop:
        registry = self.world.registry(self.tree.driver)
        for i, child in enumerate(node.children):
            registry.add(self._loop(child, None).as_tool(f"agent{i}", "An agent."))
        for name in node.asks:
            registry[name].policy = lambda call: agentloop.ask("a person decides")
        return agentloop.Loop(
            self._model(node),
            tools=registry,
            max_steps=node.max_steps,
            max_calls=node.max_calls,
            max_concurrency=self.tree.concurrency,
            ledger=ledger,
        )

    def _model(self, node: Node) -> Any:
        """A model that answers by the history; at the drawn step it cancels the token too."""

        def reply(history: list[Message]) -> Message:
            done = sum(1 for m in history if m["kind"] in ("call", "calls", "final"))
            if self.tree.cancel_at == (node.name, done):
                self.token.cancel()
            return node.script[min(done, len(node.script) - 1)]

        if self.tree.driver == "sync":
            return reply

        async def areply(history: list[Message]) -> Message:
            await asyncio.sleep(0)
            return reply(history)

        return areply

    def go(
        self, start: bool, decisions: Any = None, cancelled: bool = False
    ) -> agentloop.RunResult[Any]:
        token = self.token
        if cancelled:
            token.cancel()
        loop, driver = self.loop, self.tree.driver
        if start:
            work = loop.arun("go", run_id="r1", cancel=token) if driver == "async" else None
            return asyncio.run(work) if work else loop.run("go", run_id="r1", cancel=token)
        if driver == "async":
            return asyncio.run(loop.aresume("r1", decisions=decisions, cancel=token))
        return loop.resume("r1", decisions=decisions, cancel=token)


def verdict(tree: Tree, key: object) -> str:
    """The person's verdict on the call pending under ``key``: the same in every process."""
    drawn = zlib.crc32(f"{tree.seed}{key}".encode()) % (3 if tree.cancels else 2)
    return ("approve", "deny", "cancel")[drawn]


def to_the_end(tree: Tree, world: World, ledger: Any, start: bool) -> agentloop.RunResult:
    """Start (or resume) the top run and decide each wait by the verdicts, until it ends."""
    result = Process(tree, world, ledger).go(start)
    while result.status == "awaiting_approval":
        verdicts = {p.key: verdict(tree, p.key) for p in result.pending}
        process = Process(tree, world, ledger)
        if "cancel" in verdicts.values():
            result = process.go(False, cancelled=True)
        else:
            decisions = {
                key: agentloop.approve() if v == "approve" else agentloop.deny("no")
                for key, v in verdicts.items()
            }
            result = process.go(False, decisions)
    return result


def crashed(
    tree: Tree, at: int, memory: Any = None
) -> tuple[agentloop.RunResult, World, MemoryLedger]:
    """The tree crashed at its ``at``-th append (or in its first tool of a call ``crash_in``,
    right after its effect, if that comes first), then resumed in new processes to its end."""
    memory, world = MemoryLedger() if memory is None else memory, World()
    kind = InterruptingLedger if tree.interrupts else CrashingLedger
    crashing = kind(memory, at, tree.crash_when)  # type: ignore[arg-type]
    world.ledger, world.crash_in = crashing, tree.crash_in
    try:
        to_the_end(tree, world, crashing, start=True)
    except (Crash, LedgerError):
        assert crashing.dead
    except KeyboardInterrupt:
        assert tree.interrupts
    else:
        raise AssertionError(f"the crash at append {at} was never reached")
    world.ledger = None
    # The process died: its claims with it. In process, the claim of a child its dropped
    # parent run still holds goes once that run is collected (a cycle holds it till then).
    gc.collect()
    return to_the_end(tree, world, memory, start=False), world, memory


def check_record(memory: Any, run_id: str, baseline: Any, world: World) -> int:
    """One run of the tree against the baseline's (``None``: by itself): contract, end,
    effects, run file.

    How many of its outcomes the crash left unknown.
    """
    viewed = view_run(memory, run_id)
    result = viewed.result
    assert_contract(result, result.transcript[:1])
    if baseline is None:
        unknown = {
            str(m["id"])
            for m in result.transcript
            if m["kind"] == "tool_result"
            and isinstance(m["content"], dict)
            and m["content"].get("type") == "OutcomeUnknown"
        }
    else:
        want = view_run(baseline, run_id)
        assert (viewed.state, viewed.steps, viewed.calls, viewed.caller) == (
            want.state,
            want.steps,
            want.calls,
            want.caller,
        ), run_id
        assert result.output == want.result.output, run_id
        unknown = unknown_ids(result.transcript, want.result.transcript, {"idem"})
    if viewed.caller is not None:
        assert run_id == child_run_id(*viewed.caller)
        parent = view_run(memory, viewed.caller[0], children=False)
        if viewed.state == "awaiting_approval":  # no child waits under a parent that ended
            assert parent.state == "awaiting_approval", run_id
    ran = Counter(key for _, key in world.effects)
    for message in result.transcript:
        if message["kind"] != "tool_result" or message["name"] not in PLAIN:
            continue
        times = ran[f"{run_id}:{message['id']}"]
        if message["name"] != "idem":
            assert times <= 1, f"{run_id}: {message['id']} took effect {times} times"
        known = message["id"] not in unknown and message["status"] in ("ok", "error")
        if known and message["name"] != "idem":
            assert times == 1, f"{run_id}: {message['id']} answered, never ran"
        if message["status"] == "denied":
            assert times == 0, f"{run_id}: {message['id']} denied, ran"
    loaded = run_from_json(run_to_json(result))
    assert loaded == result, run_id
    return len(unknown)


@settings(max_examples=count(10, 400), deadline=None)
@given(trees())
def test_a_random_tree_crashed_anywhere_resumes_to_its_uncrashed_end(tree: Tree) -> None:
    """Every run of the tree, crashed at a drawn append and resumed, ends as uncrashed."""
    want, children, unknown = ends_uncrashed(tree)
    event(f"the top run ended {want.status.value}")  # --hypothesis-show-statistics
    event(f"{children} child runs")
    event("a person was asked" if any(e.decisions for e in want.events) else "nobody asked")
    event("an outcome cut by the crash" if unknown else "no outcome cut")
    event("checked by itself (racy)" if racy(tree) else "checked against the baseline")


def test_an_interrupt_as_a_parent_writes_stops_its_running_childs_record_too() -> None:
    """A batch of an agent call and a plain one, at once: the interrupt comes as the parent
    records the plain call's start, while the child runs. The child writes nothing more (its
    end neither): resumed, it goes on, and the tree ends exhausted as uncrashed (the child's
    end written as cancelled made the resumed parent end cancelled)."""
    effect: Message = {"id": "", "name": "effect", "arguments": {"n": 1}}
    child = Node(
        name="n.0",
        script=(
            {"kind": "calls", "calls": [{**effect, "id": "c1"}, {**effect, "id": "c2"}]},
            {"kind": "calls", "calls": [{**effect, "id": "c3"}]},
            {"kind": "final", "text": "n.0 done"},
        ),
        children=(),
        max_steps=2,
        max_calls=2,
        asks=frozenset(),
    )
    agent = {"id": "c1", "name": "agent0", "arguments": {"input": "go"}}
    top = attrs.evolve(
        child,
        name="n",
        script=(
            {"kind": "calls", "calls": [agent, {**effect, "id": "c2"}]},
            {"kind": "calls", "calls": [{**effect, "id": "c3"}]},
            {"kind": "final", "text": "n done"},
        ),
        children=(child,),
    )
    tree = Tree(
        top=top,
        driver="async",
        concurrency=2,
        seed=0,
        cancels=False,
        cancel_at=None,
        crash_point=0.125,  # the second append: the parent's tool_started of c2
        crash_when="before",
        interrupts=True,
    )
    want, children, _ = ends_uncrashed(tree)
    assert (want.status, children) == ("exhausted", 1)


def ends_uncrashed(tree: Tree) -> tuple[agentloop.RunResult, int, int]:
    """Crash ``tree`` at its drawn append and resume it: every run ends as uncrashed.

    Where which calls of a batch began before the cancel is the scheduler's (``racy``), the
    resumed tree may rightly make other children than the uncrashed one: each run of either
    is checked by itself instead. The uncrashed top run's result, how many child runs it
    had, and how many outcomes the crash left unknown.
    """
    with tempfile.TemporaryDirectory() as folder, contextlib.ExitStack() as closing:
        counted = CrashingLedger(closing.enter_context(ledger_of(tree, folder, "baseline")), 0)
        world = World()
        want = to_the_end(tree, world, counted, start=True)
        baseline = counted.inner
        assert_contract(want, "go")
        alone = racy(tree)
        if alone:  # the baseline, by itself
            for run_id in run_ids(baseline):
                check_record(baseline, run_id, None, world)
            assert Process(tree, world, baseline).go(False) == want
        at = 1 + int(tree.crash_point * counted.appends)
        result, world, memory = crashed(
            tree, at, closing.enter_context(ledger_of(tree, folder, "crashed"))
        )
        if not alone:
            assert (result.status, result.steps, result.calls, result.output) == (
                want.status,
                want.steps,
                want.calls,
                want.output,
            )
            assert run_ids(memory) == run_ids(baseline)
        unknown = 0
        for run_id in run_ids(memory):
            unknown += check_record(memory, run_id, None if alone else baseline, world)
        # Ended, the top run is only read: the same result again.
        assert Process(tree, world, memory).go(False) == result
        if isinstance(memory, MemoryLedger):
            assert memory.claimed == set()
        return want, len(run_ids(memory)) - 1, unknown


def racy(tree: Tree) -> bool:
    """Whether a child's model cancels the token while calls of a batch run at once: which
    of them began before it is the scheduler's, in each process."""
    return tree.concurrency > 1 and tree.cancel_at is not None and tree.cancel_at[0] != "n"


def ledger_of(tree: Tree, folder: str, name: str) -> Any:
    """The tree's ledger: a SQLiteLedger in ``folder``, or a MemoryLedger."""
    if tree.sqlite:
        return SQLiteLedger(Path(folder) / f"{name}.db")
    return contextlib.nullcontext(MemoryLedger())


def run_ids(ledger: Any) -> list[str]:
    """The ids of every run ``ledger`` holds, sorted."""
    return sorted(ledger.headers if isinstance(ledger, MemoryLedger) else ledger.run_ids())


def ended_by(memory: MemoryLedger) -> list[str]:
    """What each recorded end of ``memory`` holds that ended the run: an exception's type."""
    ends = [
        orjson.loads(r.body)[-1] for rs in memory.records.values() for r in rs if r.kind == "end"
    ]
    return [end.get("exception", {}).get("type", end["on"]) for end in ends]


def _line(depth: int, driver: Driver) -> Tree:
    """A tree of ``depth`` generations, each calling the next once, on ``driver``."""
    node = Node("n" + ".0" * (depth - 1), (final("last"),), (), 2, 2, frozenset())
    for level in reversed(range(depth - 1)):
        script = (call("c1", "agent0", input="go on"), final(f"{level} done"))
        node = Node("n" + ".0" * level, script, (node,), 3, 2, frozenset())
    return Tree(node, driver, 1, 0, False, None, 0.0, "after")


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_child_read_back_keeps_its_own_children(driver: Driver) -> None:
    """Three generations: resumed once ended, and resumed after a crash at each append (a
    child found ended answers its call), the child holds its child as the live run kept it."""
    tree = _line(3, driver)
    memory = MemoryLedger()
    want = to_the_end(tree, World(), memory, start=True)
    grandchild = want.children["c1"].children["c1"]
    assert (grandchild.run_id, grandchild.output) == ("r1:c1:c1", "last")
    assert Process(tree, World(), memory).go(False) == want
    for at in range(1, memory.appends + 1):
        result, _, _ = crashed(attrs.evolve(tree, crash_point=(at - 1) / memory.appends), at)
        assert result == want, at


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_run_resumed_mid_batch_holds_the_children_its_batch_answered(driver: Driver) -> None:
    """A batch of two agent calls, each child asking a person: c1's child ended, c2's waits.
    Resumed in another process (read, then cancelled), the run holds both children."""
    child = Node("n.0", (call("c1", "effect", n=1), final("sent")), (), 3, 2, frozenset(["effect"]))
    two = batch(call("c1", "agent0", input="a"), call("c2", "agent0", input="b"))
    tree = Tree(
        Node("n", (two, final("done")), (child,), 3, 3, frozenset()),
        driver,
        1,
        0,
        False,
        None,
        0.0,
        "after",
    )
    memory, world = MemoryLedger(), World()
    first = Process(tree, world, memory).go(True)
    assert [p.key for p in first.pending] == [("c1", "c1")]
    second = Process(tree, world, memory).go(False, {("c1", "c1"): agentloop.approve()})
    assert [p.key for p in second.pending] == [("c2", "c1")]
    assert {k: c.status for k, c in second.children.items()} == {
        "c1": "finished",
        "c2": "awaiting_approval",
    }
    read = Process(tree, world, memory).go(False)
    assert read == second
    cancelled = Process(tree, world, memory).go(False, cancelled=True)
    assert {k: c.status for k, c in cancelled.children.items()} == {
        "c1": "finished",
        "c2": "cancelled",
    }
    assert Process(tree, world, memory).go(False) == cancelled
    assert [key for _, key in world.effects] == ["r1:c1:c1"]


def test_two_children_of_a_batch_wait_at_once_each_recorded_under_its_call() -> None:
    """asyncio, max_concurrency=2: each ``call_waits`` is keyed by its own call's first pending
    path (c1/c1, then c2/c1), not by the first of all (c1/c1 twice, refused by the ledger)."""
    child = Node("n.0", (call("c1", "effect", n=1), final("sent")), (), 3, 2, frozenset(["effect"]))
    two = batch(call("c1", "agent0", input="a"), call("c2", "agent0", input="b"))
    top = Node("n", (two, final("done")), (child,), 3, 3, frozenset())
    tree = Tree(top, "async", 2, 0, False, None, 0.0, "after")
    memory, world = MemoryLedger(), World()
    waiting = Process(tree, world, memory).go(True)
    assert [p.key for p in waiting.pending] == [("c1", "c1"), ("c2", "c1")]
    assert [r.key for r in memory.records["r1"] if r.kind == "call_waits"] == ["c1/c1", "c2/c1"]
    decisions = {p.key: agentloop.approve() for p in waiting.pending}
    result = Process(tree, world, memory).go(False, decisions)
    assert (result.status, result.output) == ("finished", "done")
    assert sorted(str(key) for _, key in world.effects) == ["r1:c1:c1", "r1:c2:c1"]
    assert Process(tree, world, memory).go(False) == result


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("depth", [2, 3])
def test_a_child_found_cancelled_ends_its_resumed_parents_cancelled(
    driver: Driver, depth: int
) -> None:
    """The deepest child's model cancels the token; the process dies right after that child's
    end (cancelled) is committed, before its parent's. The cancel was seen, and wins: resumed
    with a token never cancelled, every run above ends cancelled as it would have."""
    line = _line(depth, driver)
    deepest = "r1" + ":c1" * (depth - 1)
    tree = attrs.evolve(line, cancel_at=(names(line.top)[-1].name, 0))
    ordered = OrderedLedger()
    want = to_the_end(tree, World(), ordered, start=True)
    assert want.status == "cancelled"
    child_end = ordered.order.index((deepest, "end", "")) + 1
    memory, world = MemoryLedger(), World()
    with pytest.raises((Crash, LedgerError)):
        Process(tree, world, CrashingLedger(memory, child_end, "after")).go(True)
    assert [r.kind for r in memory.records[deepest]] == ["end"]
    assert [r.kind for r in memory.records["r1"]] == ["tool_started"]  # with its reply
    result = to_the_end(attrs.evolve(tree, cancel_at=None), world, memory, start=False)
    for run_id in run_ids(memory):
        check_record(memory, run_id, ordered, world)
    assert (result.status, result.steps, result.calls) == (want.status, want.steps, want.calls)


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_parent_cut_by_its_childs_cancel_reads_back_with_the_child(driver: Driver) -> None:
    """The call cut by the cancel is answered by the run's end, not by an outcome: read back,
    the ended parent still holds the child of that call."""
    line = _line(2, driver)
    tree = attrs.evolve(line, cancel_at=("n.0", 0))
    memory = MemoryLedger()
    want = to_the_end(tree, World(), memory, start=True)
    assert (want.status, want.children["c1"].status) == ("cancelled", "cancelled")
    read = Process(tree, World(), memory).go(False)
    assert read == want
    assert read.children["c1"].run_id == "r1:c1"


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("when", ["before", "after"])
def test_an_interrupt_as_a_child_writes_stops_its_parents_recording_too(
    driver: Driver, when: Literal["before", "after"]
) -> None:
    """Three generations; a KeyboardInterrupt as any record of the tree is written, before or
    after its commit. It stops the recording of the run that wrote and of every run above it
    (none writes its interruption as its end): resumed, the tree ends as it would have."""
    tree = attrs.evolve(_line(3, driver), crash_when=when)
    ordered = OrderedLedger()
    want = to_the_end(tree, World(), ordered, start=True)
    assert (want.status, want.output) == ("finished", "0 done")
    for at in range(1, len(ordered.order) + 1):
        memory, world = MemoryLedger(), World()
        with pytest.raises(KeyboardInterrupt):
            Process(tree, world, InterruptingLedger(memory, at, when)).go(True)
        assert memory.claimed == set(), at
        assert "KeyboardInterrupt" not in ended_by(memory), at  # no run wrote it as its end
        result = to_the_end(tree, world, memory, start=False)
        assert (result.status, result.steps, result.calls, result.output) == (
            want.status,
            want.steps,
            want.calls,
            want.output,
        ), at
        for run_id in run_ids(memory):
            check_record(memory, run_id, ordered, world)


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("cancels", [False, True])
def test_an_interrupt_as_a_waiting_childs_parent_writes_leaves_the_child_waiting(
    driver: Driver, when: Literal["before", "after"], cancels: bool
) -> None:
    """A child asks a person; a KeyboardInterrupt as any record is written (the parent's
    ``call_waits``, the child's end as its cancelled parent ends it): no run writes more in
    that process, the waiting child is not ended by its parent's unwinding, and the tree,
    resumed and decided, ends as it would have (finished, or cancelled as the person chose)."""
    child = Node("n.0", (call("c1", "effect", n=1), final("sent")), (), 3, 2, frozenset(["effect"]))
    top = Node("n", (call("c1", "agent0", input="a"), final("done")), (child,), 3, 2, frozenset())
    tree = Tree(top, driver, 1, 5, cancels, None, 0.0, when)  # seed 5: approve, or cancel
    ordered = OrderedLedger()
    want = to_the_end(tree, World(), ordered, start=True)
    assert want.status == ("cancelled" if cancels else "finished")
    for at in range(1, len(ordered.order) + 1):
        memory, world = MemoryLedger(), World()
        with contextlib.suppress(KeyboardInterrupt):
            to_the_end(tree, world, InterruptingLedger(memory, at, when), start=True)
        assert "KeyboardInterrupt" not in ended_by(memory), at  # no run wrote it as its end
        result = to_the_end(tree, world, memory, start=False)
        assert (result.status, result.steps, result.calls) == (
            want.status,
            want.steps,
            want.calls,
        ), at
        for run_id in run_ids(memory):
            check_record(memory, run_id, ordered, world)


def test_a_run_cut_mid_batch_reads_back_with_the_child_of_each_call_its_end_answered() -> None:
    """asyncio, calls at once: a grandchild's model cancels; its parent's batch is cut from
    above (the top's task), so the end answers both calls, naming neither. Read back, that
    run still holds the child of its agent call, as the live run kept it."""
    leaf = Node("n.0.0", (final("n.0.0 done"),), (), 1, 1, frozenset())
    two = batch(call("c1", "effect", n=1), call("c2", "agent0", input="deeper"))
    middle = Node("n.0", (two, final("n.0 done")), (leaf,), 2, 2, frozenset())
    top = Node(
        "n", (call("c1", "agent0", input="go"), final("n done")), (middle,), 2, 2, frozenset()
    )
    tree = Tree(top, "async", 2, 0, False, ("n.0.0", 0), 0.0, "after")
    memory, world = MemoryLedger(), World()
    want = to_the_end(tree, world, memory, start=True)
    kid = want.children["c1"]
    assert (want.status, kid.status, kid.children["c2"].status) == ("cancelled",) * 3
    assert [m["status"] for m in kid.transcript if m["kind"] == "tool_result"] == ["cancelled"] * 2
    assert not any(e.call_id == "c2" for e in kid.events)  # only the end answers it
    assert view_run(memory, "r1:c1").result.children["c2"] == kid.children["c2"]
    assert Process(tree, world, memory).go(False) == want
    for run_id in run_ids(memory):
        check_record(memory, run_id, None, world)


@pytest.mark.parametrize("interrupts", [False, True])
def test_a_crash_as_a_cut_child_writes_its_end_stops_the_tree(interrupts: bool) -> None:
    """asyncio, two agent calls at once; a grandchild's model cancels the token, and the
    process dies (or is interrupted) as c2's child, cut by it, writes its end. Nothing is
    written after: the parent does not end as though its cut child had ended."""
    leaf = Node("n.0.0", (final("n.0.0 done"),), (), 1, 1, frozenset())
    middle = Node(
        "n.0", (call("c1", "agent0", input="deeper"), final("n.0 done")), (leaf,), 1, 1, frozenset()
    )
    two = batch(call("c1", "agent0", input="a"), call("c2", "agent0", input="b"))
    top = Node("n", (two, final("n done")), (middle,), 1, 2, frozenset())
    tree = Tree(top, "async", 2, 0, False, ("n.0.0", 0), 0.0, "before", interrupts=interrupts)
    ordered = OrderedLedger()
    to_the_end(tree, World(), ordered, start=True)
    at = ordered.order.index(("r1:c2", "end", "")) + 1
    memory = MemoryLedger()
    kind = InterruptingLedger if interrupts else CrashingLedger
    with pytest.raises(KeyboardInterrupt if interrupts else Crash):
        Process(tree, World(), kind(memory, at, "before")).go(True)
    assert [r.kind for r in memory.records["r1"]] == ["tool_started", "tool_started"]


@pytest.mark.parametrize(("driver", "concurrency"), [("sync", 1), ("async", 1), ("async", 2)])
def test_a_child_begun_before_a_crash_ends_with_its_parent_cancelled_on_resume(
    driver: Driver, concurrency: int
) -> None:
    """The process dies inside a child, its first call started; the parent is resumed with
    its token cancelled, so the agent call never runs again. The child ends cancelled first,
    not left mid-batch under a parent that ended: as a resumed run the cancel stops before
    its started call runs again, its reply is rejected (no call without its result)."""
    child = Node("n.0", (call("c1", "effect", n=1), final("n.0 done")), (), 3, 3, frozenset())
    two = batch(call("c1", "agent0", input="go"), call("c2", "idem", n=1))
    top = Node("n", (two, final("n done")), (child,), 2, 2, frozenset())
    tree = Tree(top, driver, concurrency, 0, False, None, 0.0, "after")
    ordered = OrderedLedger()
    to_the_end(tree, World(), ordered, start=True)
    at = ordered.order.index(("r1:c1", "tool_started", "c1")) + 1
    memory, world = MemoryLedger(), World()
    with pytest.raises((Crash, LedgerError)):
        Process(tree, world, CrashingLedger(memory, at, "after")).go(True)
    gc.collect()
    result = Process(tree, world, memory).go(False, cancelled=True)
    assert (result.status, result.children["c1"].status) == ("cancelled", "cancelled")
    kid = view_run(memory, "r1:c1").result
    assert (kid.status, kid.steps, kid.calls, kid.transcript) == (
        "cancelled",
        1,
        1,
        [{"kind": "user", "text": "go"}],
    )
    assert [r.kind for r in memory.records["r1:c1"]] == ["tool_started", "end"]
    assert Process(tree, world, memory).go(False) == result
    for run_id in run_ids(memory):
        check_record(memory, run_id, None, world)
    assert memory.claimed == set()
