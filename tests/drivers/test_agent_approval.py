"""Approval inside a child run (``Loop.as_tool``): pending in the parent under its path.

Step by step on both drivers: the parent's status, counters, pending calls
and transcript, the child's, and what the child's tool did, checked together.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import CancelToken, Loop, PendingCall, approve, ask, deny
from agentloop.__main__ import main
from agentloop.review import load_run, save_run
from agentloop.testing import (
    ScriptedModel,
    assert_contract,
    assert_paired,
    batch,
    call,
    final,
    with_usage,
)
from tests.conftest import capped, count
from tests.support.helpers import DRIVERS, AsyncDriver, Driver, kinds

ASKS = "mail leaves the house"


def mailer(script: list[Any] | None = None) -> tuple[Loop[Any], list[str]]:
    """A child Loop whose tool ``send`` needs a person's approval; ``sent`` records each send."""
    sent: list[str] = []

    def send(to: str) -> str:
        """Send a letter."""
        sent.append(to)
        return f"sent to {to}"

    tool = agentloop.Tool(send, policy=lambda call: ask(ASKS))
    script = script or [call("k1", "send", to="bob"), final("the letter went out")]
    return Loop(ScriptedModel(script), tools=[tool]), sent


def parent_of(child: Loop[Any], script: list[Any] | None = None, **options: Any) -> Loop[str]:
    """A parent Loop whose tool ``post`` is ``child``."""
    script = script or [call("c1", "post", input="write to bob"), final("done")]
    return Loop(ScriptedModel(script), tools=[child.as_tool("post", "Post a letter.")], **options)


def office_of_a_mailer() -> tuple[Loop[str], list[str]]:
    """Depth two: a parent whose agent ``office`` (call c1) has an agent ``post`` (call k2),
    the mailer, whose ``send`` (call k1) waits for a person; what it sent."""
    grandchild, sent = mailer()
    middle = Loop(
        ScriptedModel([call("k2", "post", input="to bob"), final("posted")]),
        tools=[grandchild.as_tool("post", "Post a letter.")],
    )
    top = Loop(
        ScriptedModel([call("c1", "office", input="post it"), final("all done")]),
        tools=[middle.as_tool("office", "Run the office.")],
    )
    return top, sent


def resume(driver: Driver, loop: Loop[Any], result: Any, **options: Any) -> Any:
    """``loop.resume`` on ``driver`` (``aresume`` under asyncio, its model awaited)."""
    if isinstance(driver, AsyncDriver):
        return driver.runner.run(driver.as_async(loop).aresume(result, **options))
    return loop.resume(result, **options)


def step_to_wait(run: Any) -> list[agentloop.Transition]:
    """Step ``run`` until it waits for a person; the transitions made."""
    made = []
    while run.state != "awaiting_approval":
        made.append(run.step())
    return made


@pytest.mark.row("dispatching --call_waits--> awaiting_approval")
@pytest.mark.row("dispatching --start_tool [call_resumes]--> (stays)")
@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_child_waits_parent_waits_under_its_path(driver: Driver) -> None:
    child, sent = mailer()
    run = driver.start(parent_of(child), "write")

    made = step_to_wait(run)
    waited = made[-1]
    assert [t.trigger for t in made] == ["model_replied", "validate", "call_waits"]
    assert (waited.source, waited.dest, waited.call_id) == (
        "dispatching",
        "awaiting_approval",
        "c1",
    )
    assert (run.steps, run.calls, sent) == (1, 1, [])
    (pending,) = run.pending
    assert (pending.call_id, pending.name, pending.path, pending.key) == (
        "k1",
        "send",
        ("c1",),
        ("c1", "k1"),
    )
    assert (pending.reason, pending.arguments) == (ASKS, {"to": "bob"})
    assert waited.pending == run.pending
    assert kinds(run.transcript) == ["user"]  # the batch waits, unappended
    kid = run.result().children["c1"]
    assert (kid.status, kid.steps, kid.calls, [p.key for p in kid.pending]) == (
        "awaiting_approval",
        1,
        1,
        ["k1"],
    )

    decided = run.decide({pending.key: pending.approve()})
    assert (decided.trigger, decided.dest) == ("approval_decided", "dispatching")
    assert decided.decisions == ((("c1", "k1"), pending.approve()),)
    returned = run.step()  # the call is handed out again; its child goes on and answers it
    assert (returned.trigger, returned.call_id, returned.started) == (
        "tool_returned",
        "c1",
        ("c1",),
    )
    assert returned.result_status == "ok"
    assert [run.step().dest for _ in range(2)] == ["validating", "finished"]
    result = run.result()
    assert (result.status, result.output) == ("finished", "done")
    assert (result.steps, result.calls, sent) == (2, 1, ["bob"])
    assert result.transcript[2] == {
        "kind": "tool_result",
        "id": "c1",
        "name": "post",
        "status": "ok",
        "content": "the letter went out",
    }
    kid = result.children["c1"]
    assert (kid.status, kid.steps, kid.calls, kid.output) == (
        "finished",
        2,
        1,
        "the letter went out",
    )
    assert kinds(kid.transcript) == ["user", "call", "tool_result:ok", "final"]
    assert [t.trigger for t in kid.events][2:4] == ["approval_asked", "approval_decided"]
    assert kid.events[3].decisions == (("k1", pending.approve()),)
    assert_contract(result, "write")
    assert_contract(kid, "write to bob")


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_resume_takes_decisions_by_path(driver: Driver) -> None:
    """``resume(result, decisions={p.key: ...})``: the child goes on from its waiting result."""
    child, sent = mailer()
    parent = parent_of(child)
    waiting = driver.run(parent, "write")
    assert (waiting.status, [p.key for p in waiting.pending], sent) == (
        "awaiting_approval",
        [("c1", "k1")],
        [],
    )
    assert waiting.children["c1"].status == "awaiting_approval"

    result = resume(
        driver, parent, waiting, decisions={p.key: p.approve() for p in waiting.pending}
    )
    assert (result.status, result.output, result.steps, result.calls) == ("finished", "done", 2, 1)
    assert sent == ["bob"]
    assert result.children["c1"].output == "the letter went out"
    assert [t.trigger for t in result.events] == [
        "model_replied",
        "validate",
        "call_waits",
        "approval_decided",
        "tool_returned",
        "model_replied",
        "validate",
    ]
    assert_contract(result, "write")


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_a_denial_in_the_child_answers_the_childs_call_not_the_parents(driver: Driver) -> None:
    child, sent = mailer([call("k1", "send", to="bob"), final("I could not send it")])
    run = driver.start(parent_of(child), "write")
    step_to_wait(run)
    (pending,) = run.pending
    run.decide({pending.key: pending.deny("not today")})
    while not run.done:
        run.step()
    result = run.result()

    assert (result.status, result.steps, result.calls, sent) == ("finished", 2, 1, [])
    assert result.transcript[2]["status"] == "ok"  # the parent's call: answered by its child
    assert result.transcript[2]["content"] == "I could not send it"
    kid = result.children["c1"]
    assert kid.transcript[2] == {
        "kind": "tool_result",
        "id": "k1",
        "name": "send",
        "status": "denied",
        "content": "not today",
    }
    assert (kid.status, kid.steps, kid.calls) == ("finished", 2, 1)


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_cancelling_while_a_child_waits_ends_both_cancelled(driver: Driver) -> None:
    """Neither record holds an unpaired call: the waiting call, and the child's, are cancelled."""
    child, sent = mailer()
    token = CancelToken()
    run = driver.start(parent_of(child), "write", cancel=token)
    step_to_wait(run)
    token.cancel()
    ended = run.step()
    result = run.result()

    assert (ended.source, ended.trigger, ended.guard, ended.dest) == (
        "awaiting_approval",
        "await_approval",
        "cancel_requested",
        "cancelled",
    )
    assert (result.status, result.steps, result.calls, sent) == ("cancelled", 1, 1, [])
    assert kinds(result.transcript) == ["user", "call", "tool_result:cancelled"]
    kid = result.children["c1"]
    assert (kid.status, kid.steps, kid.calls) == ("cancelled", 1, 1)
    assert kinds(kid.transcript) == ["user", "call", "tool_result:cancelled"]
    assert kid.events[-1].source == "awaiting_approval"
    assert_paired(result)
    assert_paired(kid)


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_a_resumed_run_cancelled_before_its_child_goes_on_ends_both(driver: Driver) -> None:
    """Resumed from its result with a cancelled token, decisions and all: the cancel checkpoint
    wins before the waiting call is handed out again; the child (and its own waiting child,
    held as results) end cancelled, unrun."""
    top, sent = office_of_a_mailer()
    waiting = top.run("write")
    token = CancelToken()
    token.cancel()
    decisions = {p.key: p.approve() for p in waiting.pending}
    result = resume(driver, top, waiting, cancel=token, decisions=decisions)

    assert (result.status, result.steps, result.calls, sent) == ("cancelled", 1, 1, [])
    assert [(t.trigger, t.guard) for t in result.events[-2:]] == [
        ("approval_decided", None),
        ("start_tool", "cancel_requested_mid_batch"),
    ]
    kid = result.children["c1"]
    grandkid = kid.children["k2"]
    assert (kid.status, grandkid.status) == ("cancelled", "cancelled")
    for run in (result, kid, grandkid):
        assert kinds(run.transcript)[-1] == "tool_result:cancelled"
        assert_paired(run)


def test_a_task_cancelled_while_a_child_waits_and_a_sibling_runs_ends_both() -> None:
    """asyncio: the parent's task is cancelled while c1's child waits and c2 runs; the parent
    ends cancelled with both calls answered, and the waiting child ends cancelled too."""
    child, sent = mailer()
    started = asyncio.Event()

    async def slow(q: str) -> str:
        """Look a question up, never done."""
        started.set()
        await asyncio.sleep(3600)
        return q

    script = [batch(call("c1", "post", input="to bob"), call("c2", "slow", q="a")), final("-")]
    parent = Loop(
        ScriptedModel(script),
        tools=[child.as_tool("post", "Post a letter."), slow],
        max_concurrency=2,
    )

    async def main() -> agentloop.AsyncRun[str]:
        run = parent.astart("write")
        task = asyncio.ensure_future(run.afinish())
        await started.wait()
        for _ in range(100):  # until c1's child waits (c2 runs on)
            if any(t.trigger == "call_waits" for t in run.events):
                break
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return run

    run = asyncio.run(main())
    result = run.result()
    assert (result.status, result.calls, sent) == ("cancelled", 2, [])
    assert kinds(result.transcript) == ["user", "calls", *["tool_result:cancelled"] * 2]
    kid = result.children["c1"]
    assert (kid.status, kinds(kid.transcript)) == (
        "cancelled",
        ["user", "call", "tool_result:cancelled"],
    )
    assert_paired(result)
    assert_paired(kid)


def test_decisions_are_keyed_by_path() -> None:
    """A child's call is decided under its key, never under its bare id: that is refused."""
    child, sent = mailer()
    run = parent_of(child).start("write")
    run.finish()
    with pytest.raises(ValueError, match=r"missing: \[\('c1', 'k1'\)\]; not pending: \['k1'\]"):
        run.decide({"k1": approve()})
    with pytest.raises(ValueError, match="bound to fingerprint"):
        run.decide({("c1", "k1"): approve(fingerprint="0" * 64)})
    assert (run.state, sent) == ("awaiting_approval", [])
    run.decide({("c1", "k1"): approve()})
    assert (run.finish().status, sent) == ("finished", ["bob"])


def test_a_childs_call_is_decided_by_its_path_as_pending_prints_it() -> None:
    """``"c1/k1"`` (``key_text``, the command line's key) is the path ``("c1", "k1")``;
    given both ways, the decision is refused with nothing decided."""
    child, sent = mailer()
    run = parent_of(child).start("write")
    run.finish()
    with pytest.raises(ValueError, match=r"got two for call \('c1', 'k1'\)"):
        run.decide({"c1/k1": approve(), ("c1", "k1"): deny("no")})
    assert (run.state, sent) == ("awaiting_approval", [])
    run.decide({"c1/k1": approve()})
    result = run.finish()
    assert (result.status, sent) == ("finished", ["bob"])
    assert [e.decisions for e in result.events if e.decisions] == [((("c1", "k1"), approve()),)]


@pytest.mark.row("dispatching --call_waits [calls_running]--> dispatching")
@pytest.mark.row("dispatching --tool_returned [waits_kept]--> awaiting_approval")
def test_a_sibling_runs_on_while_a_child_waits() -> None:
    """asyncio, max_concurrency=2: the batch hands out nothing new while the child waits; the
    parent waits once its running sibling returns, and the third call starts after the decision."""
    child, sent = mailer()
    events: list[str] = []
    waited = asyncio.Event()

    async def slow(q: str) -> str:
        """Look a question up, slowly."""
        await asyncio.wait_for(waited.wait(), 5)  # until the child's call waits
        events.append(f"slow {q}")
        return q

    def fast(q: str) -> str:
        """Look a question up."""
        events.append(f"fast {q}")
        return q

    def heard(transition: agentloop.Transition) -> None:
        if transition.trigger == "call_waits":
            events.append("c1 waits")
            waited.set()

    script = [
        batch(
            call("c1", "post", input="to bob"), call("c2", "slow", q="a"), call("c3", "fast", q="b")
        ),
        final("done"),
    ]
    parent = Loop(
        ScriptedModel(script),
        tools=[child.as_tool("post", "Post a letter."), slow, fast],
        max_concurrency=2,
        listeners=[heard],
    )

    async def main() -> agentloop.RunResult[str]:
        run = parent.astart("write")
        made = []
        while run.state != "awaiting_approval":
            made.append(await run.astep())
        assert [(t.trigger, t.guard, t.dest, t.call_id) for t in made[2:]] == [
            ("call_waits", "calls_running", "dispatching", "c1"),
            ("tool_returned", "waits_kept", "awaiting_approval", "c2"),
        ]
        assert (events, run.calls, [p.key for p in run.pending]) == (
            ["c1 waits", "slow a"],
            3,
            [("c1", "k1")],
        )
        await run.adecide({("c1", "k1"): approve()})
        return await run.afinish()

    result = asyncio.run(main())
    assert (result.status, result.steps, result.calls) == ("finished", 2, 3)
    assert (events, sent) == (["c1 waits", "slow a", "fast b"], ["bob"])
    assert kinds(result.transcript) == ["user", "calls", *["tool_result:ok"] * 3, "final"]
    assert [m["id"] for m in result.transcript[2:5]] == ["c1", "c2", "c3"]
    assert_contract(result, "write")


def test_two_children_wait_together_and_are_decided_at_once() -> None:
    """asyncio, max_concurrency=2: both children's calls are pending, each under its call."""
    child, sent = mailer([call("k1", "send", to="bob"), final("sent")])
    other, other_sent = mailer([call("k1", "send", to="amy"), final("sent")])
    script = [batch(call("c1", "post", input="bob"), call("c2", "post2", input="amy")), final("ok")]
    parent = Loop(
        ScriptedModel(script),
        tools=[child.as_tool("post", "Post."), other.as_tool("post2", "Post again.")],
        max_concurrency=2,
    )

    async def main() -> tuple[agentloop.RunResult[str], tuple[PendingCall, ...]]:
        run = parent.astart("write")
        waiting = await run.afinish()
        assert [t.guard for t in waiting.events if t.trigger == "call_waits"] == [
            "calls_running",
            None,
        ]
        pending = run.pending
        await run.adecide({p.key: p.approve() for p in pending})
        return await run.afinish(), pending

    result, pending = asyncio.run(main())
    assert [p.key for p in pending] == [("c1", "k1"), ("c2", "k1")]
    assert (result.status, result.calls, sent, other_sent) == ("finished", 2, ["bob"], ["amy"])
    assert {r.status for r in result.children.values()} == {"finished"}
    assert_contract(result, "write")


def test_a_grandchilds_call_is_pending_at_the_top_under_two_calls() -> None:
    """Depth two: the key is (parent's call, child's call, grandchild's call)."""
    top, sent = office_of_a_mailer()
    waiting = top.run("write")
    assert [(p.key, p.path) for p in waiting.pending] == [(("c1", "k2", "k1"), ("c1", "k2"))]
    assert waiting.children["c1"].children["k2"].status == "awaiting_approval"

    result = top.resume(waiting, decisions={p.key: p.approve() for p in waiting.pending})
    assert (result.status, result.output, sent) == ("finished", "all done", ["bob"])
    assert result.children["c1"].children["k2"].output == "the letter went out"
    assert result.children["c1"].events[3].decisions[0][0] == ("k2", "k1")


def test_a_waiting_parent_saved_to_a_file_resumes_from_it(tmp_path: Any) -> None:
    """A run file keeps the paths and the waiting child: the loaded run resumes to its end.

    A result that does not hold the child its call waits on is refused, unrun.
    """
    child, sent = mailer()
    parent = parent_of(child)
    waiting = parent.run("write")
    save_run(waiting, tmp_path / "w.json")
    loaded = load_run(tmp_path / "w.json")
    assert (loaded.status, loaded.pending) == ("awaiting_approval", waiting.pending)
    assert loaded.children["c1"].status == "awaiting_approval"
    with pytest.raises(ValueError, match=r"calls \['c1'\], which this result does not hold"):
        parent.resume(loaded._replace(children={}), decisions={("c1", "k1"): approve()})
    assert sent == []
    result = parent.resume(loaded, decisions={("c1", "k1"): approve()})
    assert (result.status, result.output, sent) == ("finished", "done", ["bob"])
    save_run(result, tmp_path / "done.json")
    again = load_run(tmp_path / "done.json")
    assert again.events[3].decisions == result.events[3].decisions
    assert again.children["c1"].output == "the letter went out"


def test_a_child_waits_under_a_parent_whose_own_policy_asked_first() -> None:
    """The parent's own ask (its tool's policy) and the child's, one after the other."""
    child, sent = mailer()
    tool = child.as_tool("post", "Post a letter.", policy=lambda call: ask("a child runs"))
    parent = Loop(ScriptedModel([call("c1", "post", input="bob"), final("done")]), tools=[tool])
    first = parent.run("write")
    assert [p.key for p in first.pending] == ["c1"]
    second = parent.resume(first, decisions={"c1": approve()})
    assert [p.key for p in second.pending] == [("c1", "k1")]
    result = parent.resume(second, decisions={("c1", "k1"): deny("no")})
    assert (result.status, sent) == ("finished", [])
    assert result.children["c1"].transcript[2]["status"] == "denied"


def test_a_fork_where_a_call_waits_on_its_child_is_refused() -> None:
    """As a cut while a call runs: the waiting call's child would be neither run's."""
    child, _ = mailer()
    parent = parent_of(child)
    waiting = parent.run("write")
    at = len(waiting.events)  # just after call_waits
    with pytest.raises(ValueError, match=r"calls \['c1'\] of a batch are running \(or wait"):
        parent.fork(waiting, at=at)
    other, sent = mailer()
    fork = parent_of(other, [final("done")]).fork(waiting, at=2).finish()  # before c1 starts
    assert (fork.status, [p.key for p in fork.pending], sent) == (
        "awaiting_approval",
        [("c1", "k1")],
        [],
    )
    assert fork.children["c1"].status == "awaiting_approval"  # a child of the fork's own


@attrs.frozen
class Shape:
    """A parent's batch of agent calls (each child asks a person or not), a plain call or none,
    the driver and its concurrency, and what the person does at each wait."""

    asks: tuple[bool, ...]
    plain: bool
    asyncio: bool
    concurrency: int
    verdicts: tuple[bool, ...]  # approve each pending call in turn, or deny it
    cancel_at: int | None  # the wait at which the token is cancelled instead


SHAPES = st.builds(
    Shape,
    asks=st.lists(st.booleans(), min_size=1, max_size=3).map(tuple),
    plain=st.booleans(),
    asyncio=st.booleans(),
    concurrency=st.integers(1, 3),
    verdicts=st.lists(st.booleans(), min_size=4, max_size=4).map(tuple),
    cancel_at=st.none() | st.integers(0, 2),
)


@capped(settings(max_examples=count(25, 300), deadline=None))
@given(SHAPES)
def test_any_batch_of_waiting_children_keeps_the_contract(shape: Shape) -> None:
    """Every record (parent and children) is paired and chained, a call waits until decided,
    each approved send ran once and no denied one ran, and the parent's record replays."""
    sent: list[str] = []
    tools: list[Any] = []
    calls = []
    for i, asks in enumerate(shape.asks):

        def send(to: str) -> str:
            """Send a letter."""
            sent.append(to)
            return to

        policy = (lambda call: ask(ASKS)) if asks else (lambda call: agentloop.allow())
        child = Loop(
            ScriptedModel([call(f"k{i}", "send", to=f"p{i}"), final(f"done {i}")]),
            tools=[agentloop.Tool(send, policy=policy)],
        )
        tools.append(child.as_tool(f"agent{i}", "An agent."))
        calls.append(call(f"c{i}", f"agent{i}", input=f"go {i}"))

    def note(q: str) -> str:
        """Note something."""
        return q

    if shape.plain:
        tools.append(note)
        calls.append(call("n", "note", q="x"))
    token = CancelToken()
    parent = Loop(
        ScriptedModel([batch(*calls), final("end")]),
        tools=tools,
        max_concurrency=shape.concurrency if shape.asyncio else 1,
    )
    approved: set[str] = set()
    verdicts = iter(shape.verdicts * 3)

    def decisions(pending: tuple[PendingCall, ...]) -> dict[Any, agentloop.Decision]:
        chosen = {p.key: p.approve() if next(verdicts) else p.deny("no") for p in pending}
        approved.update(p.arguments["to"] for p in pending if chosen[p.key].allowed)
        return chosen

    waits = 0
    if shape.asyncio:

        async def main() -> agentloop.RunResult[str]:
            nonlocal waits
            run = parent.astart("write", cancel=token)
            result = await run.afinish()
            while result.status == "awaiting_approval":
                assert all(len(p.path) == 1 for p in result.pending)
                if waits == shape.cancel_at:
                    token.cancel()
                else:
                    await run.adecide(decisions(run.pending))
                waits += 1
                result = await run.afinish()
            return result

        result = asyncio.run(main())
    else:
        run = parent.start("write", cancel=token)
        result = run.finish()
        while result.status == "awaiting_approval":
            assert all(len(p.path) == 1 for p in result.pending)
            if waits == shape.cancel_at:
                token.cancel()
            else:
                run.decide(decisions(run.pending))
            waits += 1
            result = run.finish()

    cancelled = token.cancelled
    assert result.status == ("cancelled" if cancelled else "finished")
    assert result.calls == len(calls)
    assert sorted(sent) == sorted(
        approved | {f"p{i}" for i, asks in enumerate(shape.asks) if not asks}
        if not cancelled
        else set(sent)
    )
    assert approved <= set(sent)  # an approved call ran; a denied one never did
    assert_contract(result, "write")
    results = {m["id"]: m for m in result.transcript if m["kind"] == "tool_result"}
    for i, _ in enumerate(shape.asks):
        kid = result.children.get(f"c{i}")
        if kid is None:  # never started: the run was cancelled first
            assert cancelled
            assert results[f"c{i}"]["status"] == "cancelled"
            continue
        assert_paired(kid)
        assert kid.status in (("finished", "cancelled") if cancelled else ("finished",))
        if kid.status == "finished":
            assert results[f"c{i}"]["content"] == f"done {i}"
    if not cancelled:
        replayed = Loop(ScriptedModel([]), tools=tools).resume(result)
        assert replayed == result  # an ended run is only read, once its replay checked it


def test_show_names_a_childs_call_by_its_path(tmp_path: Any) -> None:
    """``agentloop show``: the wait asks about send#c1/k1, and the decision approves it."""
    child, _ = mailer()
    parent = parent_of(child)
    waiting = parent.run("write")
    result = parent.resume(waiting, decisions={("c1", "k1"): approve()})
    save_run(result, tmp_path / "run.json")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["show", str(tmp_path / "run.json")]) == 0
    rows = [line.split() for line in out.getvalue().splitlines() if "post#c1" in line]
    assert [row[4] for row in rows] == [
        "validate",
        "call_waits",
        "approval_decided",
        "tool_returned",
    ]
    assert rows[1][-5:] == ["send#c1/k1", "(mail", "leaves", "the", "house)"]
    assert rows[2][-2:] == ["approved", "send#c1/k1"]


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_an_interrupt_inside_a_call_a_person_approved_answers_it_cancelled(driver: Driver) -> None:
    """The call ran (its effect happened), then the run was interrupted inside it: the call is
    in the history with a cancelled result, never dropped with its batch."""
    sent: list[str] = []

    def send(to: str) -> str:
        """Send a letter."""
        sent.append(to)
        raise KeyboardInterrupt

    tool = agentloop.Tool(send, policy=lambda call: ask(ASKS))
    loop = Loop(ScriptedModel([call("k1", "send", to="bob"), final("sent")]), tools=[tool])
    run = driver.start(loop, "write")
    step_to_wait(run)
    run.decide({"k1": approve()})
    with pytest.raises(KeyboardInterrupt):
        run.step()
    result = run.result()
    assert (result.status, result.steps, result.calls, sent) == ("cancelled", 1, 1, ["bob"])
    assert kinds(result.transcript) == ["user", "call", "tool_result:cancelled"]
    assert [(t.trigger, t.dest) for t in result.events[-2:]] == [
        ("approval_decided", "dispatching"),
        ("tool_interrupted", "cancelled"),
    ]
    assert_paired(result)


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_a_cancel_inside_an_approved_agent_call_answers_it_and_keeps_its_child(
    driver: Driver,
) -> None:
    """Approved, the agent call's child cancels the run's token as it runs: the parent ends
    cancelled with that call answered, its child kept under it, and its run file reads back."""
    token = CancelToken()

    def cancelling(history: list[dict[str, Any]]) -> dict[str, Any]:
        token.cancel()
        return final("the child's answer")

    child = Loop(cancelling)
    tools = agentloop.ToolRegistry(
        [child.as_tool("post", "Post a letter.")], policy=lambda call: ask(ASKS)
    )
    parent = Loop(ScriptedModel([call("c1", "post", input="x"), final("done")]), tools=tools)
    waiting = driver.run(parent, "write")
    assert waiting.status == "awaiting_approval"
    result = resume(driver, parent, waiting, cancel=token, decisions={"c1": approve()})
    assert (result.status, result.steps, result.calls) == ("cancelled", 1, 1)
    assert kinds(result.transcript) == ["user", "call", "tool_result:cancelled"]
    assert list(result.children) == ["c1"]
    assert_paired(result)
    assert agentloop.review.run_from_json(agentloop.review.run_to_json(result)) == result


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_a_waiting_childs_call_whose_deps_fail_on_going_on_keeps_its_tokens(
    driver: Driver, tmp_path: Any
) -> None:
    """``as_tool(deps=f)``'s f raises when the approved call is handed out again: the call is
    answered with its error and the child ends cancelled, nothing sent; the tokens the child
    spent before it waited are on the call's outcome and the parent's usage, and the result's
    run file loads back equal."""
    sent: list[str] = []

    def send(to: str) -> str:
        """Send a letter."""
        sent.append(to)
        return "sent"

    made: list[str] = []

    def connection(ctx: agentloop.RunContext[Any]) -> str:
        made.append("a connection")
        if len(made) > 1:
            raise RuntimeError("the pool is exhausted")
        return "a connection"

    child = Loop(
        ScriptedModel([with_usage(call("k1", "send", to="bob"), 30, 5), final("went")]),
        tools=[agentloop.Tool(send, policy=lambda call: ask(ASKS))],
    )
    parent = Loop(
        ScriptedModel([call("c1", "post", input="w"), final("I could not post it.")]),
        tools=[child.as_tool("post", "Post a letter.", deps=connection)],
    )
    waiting = driver.run(parent, "write")
    assert [p.key for p in waiting.pending] == [("c1", "k1")]
    result = resume(driver, parent, waiting, decisions={("c1", "k1"): approve()})
    assert (result.status, result.output, sent) == ("finished", "I could not post it.", [])
    assert result.transcript[2]["content"] == {
        "type": "RuntimeError",
        "message": "the pool is exhausted",
    }
    assert result.children["c1"].status == "cancelled"
    assert result.usage == result.children["c1"].usage == agentloop.Usage(30, 5, 0)
    assert_contract(result, "write")
    save_run(result, tmp_path / "run.json")
    assert load_run(tmp_path / "run.json") == result
