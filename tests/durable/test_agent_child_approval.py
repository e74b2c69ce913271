"""Approval under a path, durable: a child that asks a person makes its durable parent wait.

The parent's record holds ``call_waits`` (keyed by its child's first pending call's
path key, ``c1/k1``) and ends ``awaiting_approval`` with the child's calls
pending under their paths. ``loop.resume(run_id, decisions={("c1", "k1"): ...})``
in another process (here: new Loops over the same ledger) records the decision
in the parent, resumes the child from the ledger by its derived id and decides
there. A waiting child's end is committed before its parent's.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import agentloop
from agentloop.ledger import LedgerError, decide_run, view_run
from agentloop.testing import assert_contract, call, final
from tests.durable.test_agent_children import Family, OrderedLedger
from tests.durable.test_durable import DRIVERS, Driver, World, by_history
from tests.support.ledgers import Crash as _Cut
from tests.support.ledgers import CrashingLedger as _Crashing
from tests.support.ledgers import MemoryLedger


def asking(world: World, ledger: Any, driver: Driver) -> Family:
    """The family whose child's ``effect`` asks a person each time (k1, then k3)."""
    family = Family(world, ledger, driver)
    child = family.loop.dispatcher["research"].loop  # type: ignore[index]
    child.dispatcher["effect"].policy = lambda call: agentloop.ask("moves money")
    return family


def resume(family: Family, decisions: dict[Any, agentloop.Decision] | None) -> agentloop.RunResult:
    if family.driver == "sync":
        return family.loop.resume("r1", decisions=decisions)
    return asyncio.run(family.loop.aresume("r1", decisions=decisions))


def records(ledger: OrderedLedger, since: int = 0) -> list[tuple[str, str, str]]:
    return ledger.order[since:]


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_durable_parent_waits_under_the_childs_path_and_is_decided_in_another_process(
    driver: Driver,
) -> None:
    """Step by step: waits (both records paused, unclaimed), decided from the parent twice,
    each decision recorded in the parent by path key and in the child by its own id."""
    ledger, world = OrderedLedger(), World()
    waiting = asking(world, ledger, driver).run()
    assert (waiting.status, [p.key for p in waiting.pending]) == (
        "awaiting_approval",
        [("c1", "k1")],
    )
    assert (waiting.pending[0].name, waiting.pending[0].reason) == ("effect", "moves money")
    assert records(ledger) == [
        ("r1", "tool_started", "c1"),  # with the reply that asked for it
        ("r1:c1", "approval_asked", "k1"),  # with the reply that asked for k1
        ("r1", "call_waits", "c1/k1"),  # the child's wait is committed first
    ]
    assert (view_run(ledger, "r1").state, view_run(ledger, "r1:c1").state) == (
        "awaiting_approval",
        "awaiting_approval",
    )
    assert (world.effects, ledger.claimed) == ([], set())

    at = len(ledger.order)
    second = resume(asking(world, ledger, driver), {("c1", "k1"): agentloop.approve()})
    assert (second.status, [p.key for p in second.pending]) == ("awaiting_approval", [("c1", "k3")])
    assert records(ledger, at)[:3] == [
        ("r1", "decision", "c1/k1"),
        ("r1:c1", "decision", "k1"),
        ("r1:c1", "tool_started", "k1"),
    ]
    assert records(ledger)[-1] == ("r1", "call_waits", "c1/k3")
    assert [key for _, key in world.effects] == ["r1:c1:k1"]

    family = asking(world, ledger, driver)
    result = resume(family, {("c1", "k3"): agentloop.deny("not today")})
    assert (result.status, result.output) == ("finished", "done")
    assert [key for _, key in world.effects] == ["r1:c1:k1", "r1:c1:k2"]  # k3 denied
    child = result.children["c1"]
    assert (child.status, child.run_id, child.output) == ("finished", "r1:c1", "found it")
    assert result.transcript[2]["content"] == "found it"
    assert (family.child_model.asked, family.parent_model.asked) == (1, 1)  # nothing asked twice
    assert ledger.claimed == set()
    assert_contract(view_run(ledger, "r1").result, "go")
    assert_contract(view_run(ledger, "r1:c1").result, "look it up")
    again = asking(World(), ledger, driver).resume()
    assert (again.transcript, again.children["c1"].transcript) == (
        result.transcript,
        child.transcript,
    )


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_live_durable_parent_is_decided_by_path_key(driver: Driver) -> None:
    """run.decide on the Run that waits: the child resumed from the ledger, decided there."""
    ledger, world = OrderedLedger(), World()
    loop = asking(world, ledger, driver).loop
    decisions: list[dict[Any, agentloop.Decision]] = [
        {("c1", "k1"): agentloop.approve()},
        {("c1", "k3"): agentloop.approve()},
    ]
    if driver == "sync":
        run = loop.start("go", run_id="r1")
        for decided in decisions:
            assert run.finish().status == "awaiting_approval"
            run.decide(decided)
        result = run.finish()
    else:

        async def go() -> agentloop.RunResult:
            run = loop.astart("go", run_id="r1")
            for decided in decisions:
                assert (await run.afinish()).status == "awaiting_approval"
                await run.adecide(decided)
            return await run.afinish()

        result = asyncio.run(go())
    assert (result.status, result.children["c1"].output) == ("finished", "found it")
    assert sorted(str(key) for _, key in world.effects) == ["r1:c1:k1", "r1:c1:k2", "r1:c1:k3"]
    assert [key for _, kind, key in ledger.order if kind == "decision"] == [
        "c1/k1",
        "k1",
        "c1/k3",
        "k3",
    ]
    assert ledger.claimed == set()
    assert_contract(view_run(ledger, "r1").result, "go")


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_crash_after_the_childs_decision_goes_on_from_it(driver: Driver) -> None:
    """Killed after the child recorded the decision, before the parent went on: the resume
    decides nothing twice, and the child's recorded decision is the parent's."""
    ledger, world = OrderedLedger(), World()
    asking(world, ledger, driver).run()
    cut = CutAfter(ledger, ("r1:c1", "decision", "k1"))
    with pytest.raises(_Cut):
        resume(asking(world, cut, driver), {("c1", "k1"): agentloop.approve()})
    assert records(ledger)[-2:] == [("r1", "decision", "c1/k1"), ("r1:c1", "decision", "k1")]
    ledger.claimed.clear()  # the process died: its claims with it
    at = len(ledger.order)
    result = resume(asking(world, ledger, driver), None)
    assert (result.status, [p.key for p in result.pending]) == ("awaiting_approval", [("c1", "k3")])
    assert [kind for _, kind, _ in records(ledger, at)].count("decision") == 0
    assert [key for _, key in world.effects] == ["r1:c1:k1"]


def test_a_childs_decision_that_disagrees_with_its_parents_is_refused() -> None:
    """The child's record holds an approval bound to the call's fingerprint where the parent's
    holds a plain one (a record written otherwise): LedgerError, nothing run."""
    ledger, world = OrderedLedger(), World()
    (pending,) = asking(world, ledger, "sync").run().pending
    cut = CutAfter(ledger, ("r1:c1", "decision", "k1"))
    with pytest.raises(_Cut):
        asking(world, cut, "sync").loop.resume("r1", decisions={("c1", "k1"): agentloop.approve()})
    ledger.claimed.clear()
    record = ledger.records["r1:c1"][-1]
    bound = f'"fingerprint":"{pending.fingerprint}"'.encode()
    body = record.body.replace(b'"fingerprint":null', bound)
    assert body != record.body
    ledger.records["r1:c1"][-1] = record._replace(body=body)
    with pytest.raises(LedgerError, match="disagree") as caught:
        asking(world, ledger, "sync").loop.resume("r1")
    assert "the records of 'r1' and 'r1:c1' disagree about call k1" in str(caught.value)
    assert world.effects == []


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("live", [True, False], ids=["live", "resumed"])
def test_a_cancelled_parent_ends_its_waiting_child_first(driver: Driver, live: bool) -> None:
    """Live, and resumed from the ledger: the child's end is committed before the parent's."""
    ledger, world = OrderedLedger(), World()
    token = agentloop.CancelToken()
    loop = asking(world, ledger, driver).loop
    if live and driver == "sync":
        run = loop.start("go", run_id="r1", cancel=token)
        assert run.finish().status == "awaiting_approval"
        token.cancel()
        result = run.finish()
    elif live:

        async def go() -> agentloop.RunResult:
            run = loop.astart("go", run_id="r1", cancel=token)
            assert (await run.afinish()).status == "awaiting_approval"
            token.cancel()
            return await run.afinish()

        result = asyncio.run(go())
    else:
        assert asking(world, ledger, driver).run().status == "awaiting_approval"
        token.cancel()
        loop = asking(world, ledger, driver).loop
        result = (
            loop.resume("r1", cancel=token)
            if driver == "sync"
            else asyncio.run(loop.aresume("r1", cancel=token))
        )
    assert (result.status, result.children["c1"].status) == ("cancelled", "cancelled")
    ends = [run_id for run_id, kind, _ in ledger.order if kind == "end"]
    assert ends == ["r1:c1", "r1"]
    assert view_run(ledger, "r1:c1").state == "cancelled"
    assert_contract(view_run(ledger, "r1").result, "go")
    assert_contract(view_run(ledger, "r1:c1").result, "look it up")
    assert (world.effects, ledger.claimed) == ([], set())


def test_deciding_on_a_child_its_parent_waits_on_is_refused() -> None:
    """One place decides: the parent. The refusal names it and the keys to give it."""
    ledger = MemoryLedger()
    asking(World(), ledger, "sync").run()
    with pytest.raises(agentloop.InvalidStateError, match=r"child of 'r1'.*c1/k1=") as caught:
        decide_run(ledger, "r1:c1", {"k1": agentloop.approve()})
    assert "r1:c1" in str(caught.value)
    decide_run(ledger, "r1", {("c1", "k1"): agentloop.approve()})
    assert view_run(ledger, "r1").decided


class CutAfter:
    """``ledger``, raising ``_Cut`` right after the append of ``(run, kind, key)``."""

    def __init__(self, ledger: OrderedLedger, after: tuple[str, str, str]) -> None:
        self.ledger, self.after, self.dead = ledger, after, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ledger, name)

    def create(self, run_id: str, header: bytes) -> Any:
        return _CutWriter(self, self.ledger.create(run_id, header))

    def claim(self, run_id: str) -> Any:
        return _CutWriter(self, self.ledger.claim(run_id))


class _CutWriter:
    def __init__(self, cut: CutAfter, inner: Any) -> None:
        self.cut, self.inner = cut, inner

    def append(self, record: Any) -> None:
        if self.cut.dead:  # nothing more is written by a dead process
            raise LedgerError("the process is dead")
        self.inner.append(record)
        if (self.inner.inner.run_id, record.kind, record.key) == self.cut.after:
            self.cut.dead = True
            raise _Cut("the process died")

    def release(self) -> None:
        self.inner.release()


def test_a_grandchilds_call_is_decided_from_the_top_and_cancelled_innermost_first() -> None:
    """Depth two: pending at the top as c1/k2/k1; each level records the decision under its own
    path, innermost last; a cancel ends the grandchild, then the child, then the parent."""
    sent: list[str] = []

    def send(to: str) -> str:
        """Send a letter."""
        sent.append(to)
        return "sent"

    def family(ledger: OrderedLedger) -> agentloop.Loop:
        grandchild = agentloop.Loop(
            by_history([call("k1", "send", to="bob"), final("sent it")]),
            tools=[agentloop.Tool(send, policy=lambda call: agentloop.ask("a letter"))],
        )
        child = agentloop.Loop(
            by_history([call("k2", "dig", input="x"), final("dug")]),
            tools=[grandchild.as_tool("dig", "Dig.")],
        )
        return agentloop.Loop(
            by_history([call("c1", "research", input="y"), final("done")]),
            tools=[child.as_tool("research", "Research.")],
            ledger=ledger,
        )

    ledger = OrderedLedger()
    waiting = family(ledger).run("go", run_id="r1")
    assert [p.key for p in waiting.pending] == [("c1", "k2", "k1")]
    result = family(ledger).resume("r1", decisions={("c1", "k2", "k1"): agentloop.approve()})
    assert (result.status, result.output, sent) == ("finished", "done", ["bob"])
    assert [(run, key) for run, kind, key in ledger.order if kind == "decision"] == [
        ("r1", "c1/k2/k1"),
        ("r1:c1", "k2/k1"),
        ("r1:c1:k2", "k1"),
    ]
    assert [run for run, kind, _ in ledger.order if kind == "end"] == ["r1:c1:k2", "r1:c1", "r1"]

    ledger = OrderedLedger()
    family(ledger).run("go", run_id="r1")
    token = agentloop.CancelToken()
    token.cancel()
    assert family(ledger).resume("r1", cancel=token).status == "cancelled"
    assert [run for run, kind, _ in ledger.order if kind == "end"] == ["r1:c1:k2", "r1:c1", "r1"]
    assert (sent, ledger.claimed) == (["bob"], set())


def _answering(script: list[Any]) -> Any:
    """A model that answers by how many of its replies the history holds (any run, any time)."""
    return lambda history: script[sum(m["kind"] in ("call", "calls") for m in history)]


def _clerks(
    sent: list[str], parent_script: list[Any], *more: agentloop.Tool, **options: Any
) -> agentloop.Loop:
    """A parent whose agent tool ``post``'s child asks a person before each ``send``."""

    async def send(to: str) -> str:
        """Send."""
        sent.append(to)
        return "sent"

    clerk = agentloop.Loop(
        _answering([call("k1", "send", to="bob"), final("posted")]),
        tools=[agentloop.Tool(send, policy=lambda c: agentloop.ask("sends mail"))],
    )
    return agentloop.Loop(
        _answering(parent_script), tools=[clerk.as_tool("post", "Post."), *more], **options
    )


def test_two_children_waiting_at_once_under_a_durable_parent_are_decided_together() -> None:
    """Each waiting call's record is named by its own path: the second wait is no repeat."""
    sent: list[str] = []
    script = [agentloop.testing.batch(call("c1", "post", input="a"), call("c2", "post", input="b"))]
    script.append(final("done"))
    ledger = MemoryLedger()
    waiting = asyncio.run(
        _clerks(sent, script, ledger=ledger, max_concurrency=2).arun("t", run_id="r")
    )
    assert (waiting.status, sorted(p.key for p in waiting.pending)) == (
        "awaiting_approval",
        [("c1", "k1"), ("c2", "k1")],
    )
    waits = sorted(r.key for r in ledger.records["r"] if r.kind == "call_waits")
    assert waits == ["c1/k1", "c2/k1"]
    decided = asyncio.run(
        _clerks(sent, script, ledger=ledger, max_concurrency=2).aresume(
            "r", decisions={("c1", "k1"): agentloop.approve(), ("c2", "k1"): agentloop.approve()}
        )
    )
    assert (decided.status, decided.calls, sent) == ("finished", 2, ["bob", "bob"])
    assert_contract(decided, "t")


def test_two_children_decided_together_and_cut_by_a_crash_each_go_on_once() -> None:
    """A crash at each append once both are decided: the resume runs each waiting call once
    (it was handed out twice in the record, before its wait and after the decisions), each
    child goes on from its records, and the run ends as the uncrashed one did."""
    script = [agentloop.testing.batch(call("c1", "post", input="a"), call("c2", "post", input="b"))]
    script.append(final("done"))
    decisions = {("c1", "k1"): agentloop.deny("no"), ("c2", "k1"): agentloop.approve()}

    def clerks(ledger: Any, sent: list[str]) -> agentloop.Loop:
        """Each child sends (once a person approves) and looks in one batch, then answers."""

        def send(to: str) -> str:
            """Send."""
            sent.append(to)
            return "sent"

        def look() -> str:
            """Look."""
            return "seen"

        asks = agentloop.Tool(send, policy=lambda c: agentloop.ask("sends mail"))
        both = agentloop.testing.batch(call("k1", "send", to="bob"), call("k2", "look"))
        clerk = agentloop.Loop(
            _answering([both, final("posted")]),
            tools=[asks, look],
        )
        return agentloop.Loop(
            _answering(script),
            tools=[clerk.as_tool("post", "Post.")],
            ledger=ledger,
            max_concurrency=3,
        )

    whole, sent = MemoryLedger(), list[str]()
    asyncio.run(clerks(whole, sent).arun("t", run_id="r"))
    waited = whole.appends
    uncrashed = asyncio.run(clerks(whole, sent).aresume("r", decisions=decisions))
    assert (uncrashed.status, sent) == ("finished", ["bob"])
    for at in range(1, whole.appends - waited + 1):
        ledger, sent = MemoryLedger(), list[str]()
        asyncio.run(clerks(ledger, sent).arun("t", run_id="r"))
        with pytest.raises((_Cut, LedgerError)):
            asyncio.run(clerks(_Crashing(ledger, at), sent).aresume("r", decisions=decisions))
        resumed = asyncio.run(clerks(ledger, sent).aresume("r"))
        if resumed.status == "awaiting_approval":  # cut before the decisions were recorded
            resumed = asyncio.run(clerks(ledger, sent).aresume("r", decisions=decisions))
        assert resumed.status == "finished", at
        assert resumed.transcript == uncrashed.transcript, at
        assert sent == ["bob"], at  # c2's child sent once, c1's never (denied)


def test_a_run_call_whose_id_has_a_slash_is_not_a_childs_path() -> None:
    """The parent's own call ``c1/k1`` and its child's ``("c1", "k1")`` are two keys."""
    sent: list[str] = []
    wiped: list[str] = []

    def wipe(what: str) -> str:
        """Wipe."""
        wiped.append(what)
        return "wiped"

    script = [
        agentloop.testing.batch(call("c1/k1", "wipe", what="all"), call("c1", "post", input="a")),
        final("done"),
    ]
    ledger = MemoryLedger()

    def parent() -> agentloop.Loop:
        asked = agentloop.Tool(wipe, policy=lambda c: agentloop.ask("wipes"))
        return _clerks(sent, script, asked, ledger=ledger)

    first = parent().run("t", run_id="r")
    assert (first.status, [p.key for p in first.pending]) == ("awaiting_approval", ["c1/k1"])
    second = parent().resume("r", decisions={"c1/k1": agentloop.approve()})
    assert [p.key for p in second.pending] == [("c1", "k1")]
    done = parent().resume("r", decisions={("c1", "k1"): agentloop.deny("no mail")})
    assert (done.status, wiped, sent) == ("finished", ["all"], [])
    keys = [r.key for r in ledger.records["r"] if r.kind == "decision"]
    assert keys == ["c1%2Fk1", "c1/k1"]


def test_a_waiting_parent_resumed_without_decisions_holds_its_waiting_child() -> None:
    sent: list[str] = []
    ledger = MemoryLedger()
    script = [call("c1", "post", input="a"), final("done")]
    first = _clerks(sent, script, ledger=ledger).run("t", run_id="r")
    again = _clerks(sent, script, ledger=ledger).resume("r")
    assert (again.status, [p.key for p in again.pending]) == ("awaiting_approval", [("c1", "k1")])
    assert list(again.children) == list(first.children) == ["c1"]
    assert again.children["c1"].status == "awaiting_approval"
    assert sent == []
