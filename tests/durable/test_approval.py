"""Human approval: a policy asks, the batch waits whole, a person decides, the batch runs.

Step by step on both drivers (status, counters, transcript and handler
effects together), the refusals of ``decide``, cancellation while waiting,
async policies, saving a paused run and going on from it in another process,
a paused durable run going on after its process is gone, and a Hypothesis
property over random batches, policy answers and decisions.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import (
    CancelToken,
    Decision,
    InvalidStateError,
    Loop,
    State,
    Tool,
    ToolRegistry,
    allow,
    approve,
    ask,
    deny,
)
from agentloop.engine import PreparedCall, Trigger
from agentloop.testing import ScriptedModel, batch, call, final
from tests.support.helpers import Driver, asking

if TYPE_CHECKING:
    from pathlib import Path

Message = dict[str, Any]


class Desk:
    """Tools that record what ran, and a policy that asks about ``pay`` and counts its calls."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []
        self.asked: list[str] = []
        self.registry = ToolRegistry(policy=self.policy)
        self.registry.add(Tool(self.pay, name="pay"))
        self.registry.add(Tool(self.look, name="look"))

    def policy(self, call: Message) -> Decision:
        self.asked.append(call["id"])
        if call["name"] == "pay":
            return ask(f"sends {call['arguments']['amount']} EUR")
        return allow()

    def pay(self, amount: int) -> str:
        self.ran.append(("pay", amount))
        return f"paid {amount}"

    def look(self, q: str) -> str:
        self.ran.append(("look", q))
        return f"saw {q}"


def three() -> Message:
    return batch(
        call("a", "look", q="rates"),
        call("b", "pay", amount=5),
        call("c", "pay", amount=7),
        text="checking, then paying",
    )


@pytest.mark.row(
    "dispatching --start_tool [batch_unreviewed]--> (stays)",
    "dispatching --approval_asked--> awaiting_approval",
    "awaiting_approval --await_approval--> (stays)",
    "awaiting_approval --approval_decided--> dispatching",
)
def test_a_batch_waits_whole_until_a_person_decides_each_pending_call() -> None:
    desk = Desk()
    run = Loop(ScriptedModel([three(), final("ok")]), tools=desk.registry).start("go")
    assert run.step().dest is State.VALIDATING
    assert run.step().dest is State.DISPATCHING
    asked = run.step()
    # Before any call of the batch ran: all three reserved and counted, nothing appended.
    assert (asked.source, asked.trigger, asked.dest) == (
        State.DISPATCHING,
        Trigger.APPROVAL_ASKED,
        State.AWAITING_APPROVAL,
    )
    assert (run.state, run.steps, run.calls) == (State.AWAITING_APPROVAL, 1, 3)
    assert desk.ran == []
    assert desk.asked == ["a", "b", "c"]
    assert run.transcript == [{"kind": "user", "text": "go"}]
    pending = run.pending
    assert [(p.call_id, p.name, p.arguments, p.reason) for p in pending] == [
        ("b", "pay", {"amount": 5}, "sends 5 EUR"),
        ("c", "pay", {"amount": 7}, "sends 7 EUR"),
    ]
    assert asked.pending == pending
    canonical = orjson.dumps(["pay", {"amount": 5}], option=orjson.OPT_SORT_KEYS)
    assert pending[0].fingerprint == hashlib.sha256(canonical).hexdigest()
    assert pending[0].fingerprint != pending[1].fingerprint
    # The run stops here: a step is refused, finish() returns the paused result.
    with pytest.raises(InvalidStateError, match=r"awaiting approval of calls \['b', 'c'\]"):
        run.step()
    paused = run.finish()
    assert paused.status == "awaiting_approval"
    assert paused.pending == pending
    assert paused.held == three()
    assert paused.output is None
    decided = run.decide({"b": pending[0].approve(), "c": pending[1].deny("over the limit")})
    assert (decided.trigger, decided.dest) == (Trigger.APPROVAL_DECIDED, State.DISPATCHING)
    assert [call_id for call_id, _ in decided.decisions] == ["b", "c"]
    assert desk.ran == []
    result = run.finish()
    # Each policy was asked once per call; the denied call never ran.
    assert desk.asked == ["a", "b", "c"]
    assert desk.ran == [("look", "rates"), ("pay", 5)]
    assert (result.status, result.output, result.steps, result.calls) == ("finished", "ok", 2, 3)
    assert [(m["id"], m["status"], m["content"]) for m in result.transcript[2:5]] == [
        ("a", "ok", "saw rates"),
        ("b", "ok", "paid 5"),
        ("c", "denied", "over the limit"),
    ]
    # The denied call was answered by the engine at the decision, never handed out.
    dispatched = [e for e in result.events if e.trigger is Trigger.TOOL_RETURNED]
    assert [(e.call_id, e.result_status) for e in dispatched] == [("a", "ok"), ("b", "ok")]
    assert result.pending == ()
    assert result.held is None


def bad_decisions(pending: tuple[agentloop.PendingCall, ...]) -> list[tuple[object, str]]:
    _b, c = pending
    return [
        ({"b": approve()}, r"missing: \['c'\]"),
        ({"b": approve(), "c": approve(), "a": approve()}, r"not pending: \['a'\]"),
        ({"b": c.approve(), "c": approve()}, "is bound to fingerprint .*, not to the pending"),
        ({"b": approve(), "c": ask("again")}, "approve\\(\\) or deny\\(reason\\)"),
        ({"b": True, "c": approve()}, "approve\\(\\) or deny\\(reason\\)"),
        ([("b", approve())], "a dict of call id"),
    ]


def test_decide_refuses_anything_but_one_decision_per_pending_call_and_changes_nothing() -> None:
    desk = Desk()
    run = Loop(ScriptedModel([three(), final("done")]), tools=desk.registry).start("go")
    paused = run.finish()
    for decisions, message in bad_decisions(paused.pending):
        with pytest.raises((TypeError, ValueError), match=message):
            run.decide(decisions)  # type: ignore[arg-type]
        assert run.state is State.AWAITING_APPROVAL
        assert run.events == paused.events
        assert run.pending == paused.pending
    assert desk.ran == []
    with pytest.raises(TypeError, match="non-empty str"):
        deny("")
    run.decide({"b": approve(), "c": approve()})
    with pytest.raises(InvalidStateError, match="not awaiting approval"):
        run.decide({"b": approve(), "c": approve()})
    assert run.finish().calls == 3
    assert len(desk.ran) == 3


@pytest.mark.row(
    "awaiting_approval --await_approval [cancel_requested]--> cancelled",
    "awaiting_approval --interrupted--> cancelled",
)
@pytest.mark.parametrize("how", ["token", "interrupt"])
def test_cancelled_while_waiting_every_call_is_answered_and_none_runs(how: str) -> None:
    desk = Desk()
    token = CancelToken()
    run = Loop(ScriptedModel([three()]), tools=desk.registry).start("go", cancel=token)
    assert run.finish().status == "awaiting_approval"
    if how == "token":
        token.cancel()
        result = run.finish()
        assert result.events[-1].trigger is Trigger.AWAIT_APPROVAL
    else:
        assert run._engine.interrupted(KeyboardInterrupt()) is not None
        result = run.result()
        assert result.events[-1].trigger is Trigger.INTERRUPTED
    assert (result.status, result.steps, result.calls) == ("cancelled", 1, 3)
    assert desk.ran == []
    answered = result.transcript[2:]
    assert [(m["id"], m["status"]) for m in answered] == [
        ("a", "cancelled"),
        ("b", "cancelled"),
        ("c", "cancelled"),
    ]
    assert result.transcript[1] == three()


@pytest.mark.row(
    "dispatching --start_tool [cancel_requested_mid_batch]--> cancelled",
    "dispatching --interrupted [batch_underway]--> cancelled",
)
@pytest.mark.parametrize("how", ["cancel, then decide", "decide, then cancel", "interrupt"])
def test_cancelled_after_the_decisions_every_held_call_is_answered_and_none_runs(
    how: str,
) -> None:
    # The ask put the batch's calls in the record: cut short before any of them ran,
    # the batch is appended with every call answered, as when cancelled while waiting.
    desk = Desk()
    token = CancelToken()
    run = Loop(ScriptedModel([three()]), tools=desk.registry).start("go", cancel=token)
    assert run.finish().status == "awaiting_approval"
    if how == "cancel, then decide":
        token.cancel()
    run.decide({"b": approve(), "c": approve()})
    if how == "decide, then cancel":
        token.cancel()
    if how == "interrupt":
        assert run._engine.interrupted(KeyboardInterrupt()) is not None
        result = run.result()
        assert result.events[-1].trigger is Trigger.INTERRUPTED
    else:
        result = run.finish()
        assert (result.events[-1].trigger, result.events[-1].guard) == (
            Trigger.START_TOOL,
            agentloop.engine.Guard.CANCEL_REQUESTED_MID_BATCH,
        )
    assert (result.status, result.steps, result.calls) == ("cancelled", 1, 3)
    assert desk.ran == []
    assert result.transcript[1] == three()
    assert [(m["id"], m["status"]) for m in result.transcript[2:]] == [
        ("a", "cancelled"),
        ("b", "cancelled"),
        ("c", "cancelled"),
    ]
    assert result.rejected is None
    agentloop.testing.assert_contract(result, [{"kind": "user", "text": "go"}])


async def test_async_policies_are_awaited_and_adecide_goes_on() -> None:
    ran: list[int] = []

    async def careful(call: Message) -> Decision:
        await asyncio.sleep(0)
        return ask("big") if call["arguments"]["amount"] > 10 else allow()

    async def pay(amount: int) -> int:
        ran.append(amount)
        return amount

    tools = ToolRegistry([Tool(pay, policy=careful)])
    replies = batch(
        call("x", "pay", amount=3), call("y", "pay", amount=30), call("z", "pay", amount=4)
    )
    loop = Loop(ScriptedModel([replies, final("done")]), tools=tools, max_concurrency=2)
    run = loop.astart("go")
    paused = await run.afinish()
    assert paused.status == "awaiting_approval"
    assert ran == []
    assert [p.call_id for p in run.pending] == ["y"]
    with pytest.raises(InvalidStateError, match="awaiting approval"):
        await run.astep()
    await run.adecide({"y": approve()})
    result = await run.afinish()
    assert sorted(ran) == [3, 4, 30]
    assert result.status == "finished"
    assert result.calls == 3


def test_a_sync_dispatch_with_an_async_policy_says_so_instead_of_running() -> None:
    """The registry on its own answers error, naming the driver (a Loop's run awaits it)."""

    async def careful(call: Message) -> Decision:
        return allow()

    ran: list[int] = []
    tools = ToolRegistry([Tool(lambda n: ran.append(n), name="f", policy=careful)])
    outcome = tools.dispatch(call("c", "f", n=1))
    assert outcome["status"] == "error"
    assert ran == []
    assert "is async; run the loop with the async driver" in outcome["content"]["message"]
    assert "0x" not in outcome["content"]["message"]  # no memory address reaches the model


def test_a_registry_on_its_own_answers_an_ask_denied() -> None:
    desk = Desk()
    outcome = desk.registry.dispatch(call("p", "pay", amount=9))
    assert outcome == {
        "status": "denied",
        "content": "this call needs a person's approval, which was not given: sends 9 EUR",
    }
    assert desk.ran == []
    prepared = desk.registry.review(call("p", "pay", amount=9))
    assert isinstance(prepared, PreparedCall)
    assert (prepared.tool.name, prepared.kwargs, prepared.decision) == (
        "pay",
        {"amount": 9},
        ask("sends 9 EUR"),
    )
    assert (prepared.asks, prepared.reason) == (True, "sends 9 EUR")
    # A call that cannot run gets its outcome from the review, as dispatch would answer.
    unknown = desk.registry.review(call("p", "nope"))
    assert unknown == desk.registry.dispatch(call("p", "nope"))
    assert isinstance(unknown, dict)
    assert unknown["status"] == "unknown_tool"


def test_without_asks_each_policy_is_asked_once_and_nothing_waits() -> None:
    desk = Desk()
    replies = batch(call("a", "look", q="x"), call("b", "look", q="y"))
    result = Loop(ScriptedModel([replies, final("done")]), tools=desk.registry).run("go")
    assert result.status == "finished"
    assert desk.asked == ["a", "b"]
    assert not any(e.trigger is Trigger.APPROVAL_ASKED for e in result.events)


# -- saved, and going on elsewhere ---------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import agentloop
    from agentloop import Loop, Tool, ToolRegistry, allow, ask

    effects = Path(sys.argv[1])

    def pay(amount: int) -> str:
        with effects.open("a") as f:
            f.write(f"pay {amount}\\n")
        return "paid"

    def policy(call):
        return ask("money") if call["arguments"]["amount"] > 5 else allow()

    def model(history):
        if history[-1]["kind"] == "user":
            return {"kind": "calls", "calls": [
                {"id": "s", "name": "pay", "arguments": {"amount": 1}},
                {"id": "l", "name": "pay", "arguments": {"amount": 50}},
            ]}
        return {"kind": "final", "text": "done"}

    tools = ToolRegistry([Tool(pay)], policy=policy)
    """
)


def child(tmp_path: Path, body: str) -> str:
    script = tmp_path / "child.py"
    script.write_text(CHILD + textwrap.dedent(body))
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "effects")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_paused_run_saved_to_a_file_goes_on_in_another_process(tmp_path: Path) -> None:
    child(
        tmp_path,
        f"""
        result = Loop(model, tools=tools).run("go")
        assert result.status == "awaiting_approval"
        agentloop.review.save_run(result, {str(tmp_path / "run.json")!r})
        """,
    )
    assert not (tmp_path / "effects").exists()  # nothing of the batch ran
    saved = agentloop.review.load_run(tmp_path / "run.json")
    assert [p.call_id for p in saved.pending] == ["l"]
    fingerprint = saved.pending[0].fingerprint
    out = child(
        tmp_path,
        f"""
        saved = agentloop.review.load_run({str(tmp_path / "run.json")!r})
        result = Loop(model, tools=tools).resume(
            saved, decisions={{"l": agentloop.approve(fingerprint={fingerprint!r})}}
        )
        print(result.status, result.calls, [m.get("status") for m in result.transcript[2:4]])
        """,
    )
    assert out.split("\n")[0] == "finished 2 ['ok', 'ok']"
    assert (tmp_path / "effects").read_text() == "pay 1\npay 50\n"


def test_a_paused_durable_run_goes_on_after_its_process_is_gone(tmp_path: Path) -> None:
    ledger = tmp_path / "runs.db"
    child(
        tmp_path,
        f"""
        loop = Loop(model, tools=tools, ledger=agentloop.ledger.SQLiteLedger({str(ledger)!r}))
        assert loop.run("go", run_id="r1").status == "awaiting_approval"
        """,
    )
    assert not (tmp_path / "effects").exists()
    out = child(
        tmp_path,
        f"""
        loop = Loop(model, tools=tools, ledger=agentloop.ledger.SQLiteLedger({str(ledger)!r}))
        paused = loop.resume("r1")
        print(paused.status, [p.call_id for p in paused.pending])
        result = loop.resume("r1", decisions={{"l": agentloop.deny("too much")}})
        print(result.status, result.transcript[3]["status"], result.transcript[3]["content"])
        print(loop.resume("r1").status)
        """,
    )
    assert out.splitlines() == [
        "awaiting_approval ['l']",
        "finished denied too much",
        "finished",
    ]
    assert (tmp_path / "effects").read_text() == "pay 1\n"
    records = agentloop.ledger.SQLiteLedger(ledger).read("r1")[1]
    kinds = [(r.kind, r.key) for r in records]
    assert ("approval_asked", "l") in kinds
    assert ("decision", "l") in kinds
    assert kinds.index(("decision", "l")) < kinds.index(("tool_started", "s"))
    # Each record ends with its report's event, as a run file encodes it.
    asked = orjson.loads(records[kinds.index(("approval_asked", "l"))].body)[-1]
    assert asked["asked"] == {"l": "money"}
    decided = orjson.loads(records[kinds.index(("decision", "l"))].body)[-1]
    assert decided["decided"] == {
        "l": {"allowed": False, "reason": "too much", "fingerprint": None}
    }


# -- the property --------------------------------------------------------------------------

ANSWERS = st.sampled_from(["allow", "deny", "ask"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    answers=st.lists(ANSWERS, min_size=1, max_size=4),
    approvals=st.lists(st.booleans(), min_size=4, max_size=4),
    driver=st.sampled_from(["sync", "async"]),
    concurrency=st.sampled_from([1, 3]),
)
def test_no_call_runs_before_it_is_approved_and_every_call_is_answered_once(
    answers: list[str], approvals: list[bool], driver: str, concurrency: int
) -> None:
    ran: list[str] = []
    ids = [f"c{i}" for i in range(len(answers))]
    said = dict(zip(ids, answers, strict=True))

    def policy(call: Message) -> Decision:
        answer = said[call["id"]]
        return allow() if answer == "allow" else deny("policy") if answer == "deny" else ask("?")

    def work(n: int) -> int:
        ran.append(f"c{n}")
        return n

    tools = ToolRegistry([Tool(work)], policy=policy)
    reply = batch(*(call(i, "work", n=n) for n, i in enumerate(ids)))
    loop = Loop(
        ScriptedModel([reply, final("done")]),
        tools=tools,
        max_concurrency=concurrency if driver == "async" else 1,
    )
    asks = [i for i in ids if said[i] == "ask"]
    decisions = {i: approve() if approvals[n] else deny("person") for n, i in enumerate(asks)}

    async def drive() -> agentloop.RunResult:
        run = loop.astart("go")
        first = await run.afinish()
        if asks:
            assert first.status == "awaiting_approval"
            assert ran == []
            await run.adecide(decisions)
        return await run.afinish()

    if driver == "sync":
        run = loop.start("go")
        first = run.finish()
        if asks:
            assert first.status == "awaiting_approval"
            assert ran == []
            assert [p.call_id for p in run.pending] == asks
            run.decide(decisions)
        result = run.finish()
    else:
        result = asyncio.run(drive())
    assert result.status == "finished"
    assert result.calls == len(ids)
    expected_to_run = [
        i for i in ids if said[i] == "allow" or (said[i] == "ask" and decisions[i].allowed)
    ]
    assert sorted(ran) == sorted(expected_to_run)
    results = [m for m in result.transcript if m["kind"] == "tool_result"]
    assert [m["id"] for m in results] == ids  # each answered once, in emission order
    for message in results:
        call_id = message["id"]
        if call_id in expected_to_run:
            assert message["status"] == "ok"
        else:
            reason = "policy" if said[call_id] == "deny" else "person"
            assert (message["status"], message["content"]) == ("denied", reason)
    # Saved and loaded, the run replays to itself.
    assert agentloop.review.run_from_json(agentloop.review.run_to_json(result)) == result


def test_show_and_the_report_list_pending_calls_and_decisions(tmp_path: Path) -> None:
    desk = Desk()
    run = Loop(ScriptedModel([three(), final("done")]), tools=desk.registry).start("go")
    paused = run.finish()
    agentloop.review.save_run(paused, tmp_path / "paused.json")
    shown = subprocess.run(
        [sys.executable, "-m", "agentloop", "show", str(tmp_path / "paused.json")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "batch of 3: checking, then paying" in shown
    assert "asks a person: pay#b (sends 5 EUR); pay#c (sends 7 EUR)" in shown
    assert 'pending  pay#b {"amount":5}: sends 5 EUR' in shown
    assert 'held     look#a {"q":"rates"}  (no person needed)' in shown  # the whole batch
    page = agentloop.review.report_html(paused, svg=False)
    assert '<h2 id="pending">Pending approval</h2>' in page
    assert page.count('<tr class="pending">') == 2
    # The whole batch, as show lists it: the call that needs no person runs with them.
    (held,) = [row for row in page.split("<tr") if row.startswith(' class="held"')]
    assert "<td>a</td><td>look</td>" in held
    assert "no person needed" in held
    assert "<td>pending: sends 5 EUR</td>" in page
    run.decide({"b": approve(), "c": deny("over the limit")})
    finished = run.finish()
    page = agentloop.review.report_html(finished, svg=False)
    assert 'id="pending"' not in page
    assert "approved pay#b; denied pay#c: over the limit" in page


# -- crashes at every record of a run that waits for a person ------------------------------


def banker(history: list[Message]) -> Message:
    """A model by history: the same replies in every "process"."""
    return three() if history[-1]["kind"] == "user" else final("done")


def until_done(loop: Loop) -> agentloop.RunResult:
    """Go on with the recorded run "r", deciding when it waits: approve b, deny c."""
    result = loop.resume("r")
    if result.status == "awaiting_approval":
        pending = {call.call_id: call for call in result.pending}
        decisions = {"b": pending["b"].approve(), "c": pending["c"].deny("no")}
        result = loop.resume("r", decisions=decisions)
        assert loop.resume("r") == result  # read back, bound decisions and all
    return result


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_at_any_record_of_an_approval_resumes_to_the_same_run(when: str) -> None:
    from tests.support.ledgers import Crash, CrashingLedger, MemoryLedger

    baseline_desk = Desk()
    baseline_memory = MemoryLedger()
    first = Loop(banker, tools=baseline_desk.registry, ledger=baseline_memory)
    assert first.run("go", run_id="r").status == "awaiting_approval"
    baseline = until_done(first)
    assert baseline_desk.ran == [("look", "rates"), ("pay", 5)]
    appends = baseline_memory.appends
    assert appends >= 7
    for at in range(1, appends + 1):
        memory, desk = MemoryLedger(), Desk()
        crashing = CrashingLedger(memory, at, when)  # type: ignore[arg-type]
        try:
            dying = Loop(banker, tools=desk.registry, ledger=crashing)
            if dying.run("go", run_id="r").status == "awaiting_approval":
                until_done(dying)
        except (Crash, agentloop.ledger.LedgerError):
            assert crashing.dead
        del dying
        gc.collect()  # the dead process's claim goes with it
        result = until_done(Loop(banker, tools=desk.registry, ledger=memory))
        kinds = [r.kind for r in memory.records["r"]]
        assert kinds.count("approval_asked") == 1  # asked once, recorded once
        assert kinds.count("decision") == 1
        assert result.status == "finished"
        assert result.calls == baseline.calls == 3
        for got, want in zip(result.transcript, baseline.transcript, strict=True):
            if got != want:  # only a call cut off by the crash: outcome unknown, never run twice
                assert got["content"]["type"] == "OutcomeUnknown", (at, got)
        assert desk.ran.count(("look", "rates")) <= 1
        assert desk.ran.count(("pay", 5)) <= 1
        assert ("pay", 7) not in desk.ran


def test_a_damaged_approval_record_is_a_ledger_error() -> None:
    """A record the engine refuses is the ledger's damage, not a decision the caller passed."""
    from tests.support.ledgers import MemoryLedger

    memory = MemoryLedger()
    loop = Loop(banker, tools=Desk().registry, ledger=memory)
    loop.run("go", run_id="r")
    until_done(loop)
    records = memory.records["r"]
    cases: list[tuple[str, str, dict[str, Any] | None]] = [
        ("decision", "decided", {"b": approve(fingerprint="0" * 64).record()}),
        ("approval_asked", "asked", None),  # b's reason made empty below
    ]
    for kind, field, value in cases:
        kept = list(records)
        at = next(i for i, r in enumerate(records) if r.kind == kind)
        body = orjson.loads(records[at].body)
        event = body[-1]
        if value is None:
            value = dict.fromkeys(event["asked"], "")
        event[field] = value
        records[at] = agentloop.ledger.LedgerRecord(kind, records[at].key, orjson.dumps(body))
        with pytest.raises(agentloop.ledger.LedgerError, match=r"its records do not replay"):
            loop.resume("r")
        records[:] = kept


def test_a_paused_run_file_is_checked() -> None:
    """A paused run's file is replayed like any other: an ask about a call the batch does not
    hold is refused, and the batch that waits is the replay's, equal to the run's."""
    desk = Desk()
    paused = Loop(ScriptedModel([three()]), tools=desk.registry).run("go")
    document = orjson.loads(agentloop.review.run_to_json(paused))
    assert "held" not in document
    assert document["events"][-1]["asked"] == {"b": "sends 5 EUR", "c": "sends 7 EUR"}
    loaded = agentloop.review.run_from_json(orjson.dumps(document))
    assert (loaded.held, loaded.pending) == (three(), paused.pending)
    document["events"][-1]["asked"] = {"zz": "why"}
    with pytest.raises(agentloop.review.RunFileError, match=r"\$\.events\[2\]: expected"):
        agentloop.review.run_from_json(orjson.dumps(document))


def test_a_denied_call_never_runs_whatever_goes_on_with_the_run(tmp_path: Path) -> None:
    """The engine answers a denial itself: a Loop with no policy (or a custom driver) going on
    from the paused run is never handed the denied call."""
    paused = Loop(ScriptedModel([three()]), tools=Desk().registry).run("go")
    ran: list[tuple[str, int]] = []

    def pay(amount: int) -> str:
        ran.append(("pay", amount))
        return "paid"

    careless = Loop(ScriptedModel([final("done")]), tools={"pay": pay, "look": lambda q: q})
    result = careless.resume(paused, decisions={"b": deny("no"), "c": deny("no")})
    assert ran == []
    assert [(m["id"], m["status"]) for m in result.transcript[2:5]] == [
        ("a", "ok"),
        ("b", "denied"),
        ("c", "denied"),
    ]
    # The engine, driven by hand: the denied call is never a RunTool.
    engine = agentloop.engine.Engine("go")
    engine.next()
    engine.replied(three())
    engine.next()
    engine.reviewed(asking({"a": "?", "c": "?"}))
    engine.decided({"a": deny("no"), "c": approve()})
    handed = []
    while not engine.done:
        need = engine.next()
        if isinstance(need, agentloop.engine.RunTool):
            handed.append(need.call["id"])
            engine.returned({"status": "ok", "content": need.call["id"]})
        elif isinstance(need, agentloop.engine.AskModel):
            engine.replied(final("done"))
    assert handed == ["b", "c"]
    assert [m["status"] for m in engine.result().transcript[2:5]] == ["denied", "ok", "ok"]


@pytest.mark.row("awaiting_approval --approval_decided [denials_answer_batch]--> awaiting_model")
def test_when_every_call_is_denied_the_model_is_asked_next() -> None:
    desk = Desk()
    only_payments = batch(call("b", "pay", amount=5), call("c", "pay", amount=7))
    run = Loop(ScriptedModel([only_payments, final("ok")]), tools=desk.registry).start("go")
    run.finish()
    decided = run.decide({"b": deny("no"), "c": deny("not either")})
    assert (decided.guard, decided.dest) == (
        agentloop.engine.Guard.DENIALS_ANSWER_BATCH,
        State.AWAITING_MODEL,
    )
    assert [m["content"] for m in decided.appended[1:]] == ["no", "not either"]
    result = run.finish()
    assert (result.status, result.steps, result.calls, desk.ran) == ("finished", 2, 2, [])
    assert agentloop.review.run_from_json(agentloop.review.run_to_json(result)) == result


def test_a_paused_durable_run_holds_no_claim(tmp_path: Path) -> None:
    """A Run that waits for a person frees the run: another process (or Loop) may decide;
    the Run that paused then refuses to go on, since the run went on elsewhere."""
    ledger = agentloop.ledger.SQLiteLedger(tmp_path / "runs.db")
    first = Loop(banker, tools=Desk().registry, ledger=ledger)
    run = first.start("go", run_id="r")
    assert run.finish().status == "awaiting_approval"
    elsewhere = Desk()
    second = Loop(
        banker, tools=elsewhere.registry, ledger=agentloop.ledger.SQLiteLedger(ledger.path)
    )
    result = second.resume("r", decisions={"b": approve(), "c": deny("no")})
    assert result.status == "finished"
    assert elsewhere.ran == [("look", "rates"), ("pay", 5)]
    with pytest.raises(agentloop.ledger.RunBusyError, match="went on in another process"):
        run.decide({"b": approve(), "c": approve()})
    assert run.state is State.AWAITING_APPROVAL  # nothing changed here
    # Paused again, the same Run goes on once decided, claiming the run back.
    again = first.start("go", run_id="r2")
    assert again.finish().status == "awaiting_approval"
    again.decide({"b": deny("no"), "c": deny("no")})
    assert again.finish().status == "finished"
    assert second.resume("r2") == again.result()


def test_a_tool_policy_that_denies_wins_over_a_registry_policy_that_asks() -> None:
    ran: list[int] = []
    registry = ToolRegistry(policy=lambda call: ask("every call needs a person"))

    @registry.tool(
        policy=lambda call: deny("over the limit") if call["arguments"]["n"] > 9 else allow()
    )
    def spend(n: int) -> int:
        ran.append(n)
        return n

    run = Loop(
        ScriptedModel([batch(call("s", "spend", n=99), call("t", "spend", n=1)), final("x")]),
        tools=registry,
    ).start("go")
    paused = run.finish()
    assert [p.call_id for p in paused.pending] == ["t"]  # the denied call is not put to a person
    run.decide({"t": approve()})
    result = run.finish()
    assert ran == [1]
    assert [(m["id"], m["status"], m["content"]) for m in result.transcript[2:4]] == [
        ("s", "denied", "over the limit"),
        ("t", "ok", 1),
    ]


@pytest.mark.row("dispatching --approval_asked [nobody_asked]--> (stays)")
@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_policy_that_raises_is_asked_once_and_the_call_fails_closed(driver: str) -> None:
    asked: list[str] = []
    ran: list[int] = []

    def flaky(call: Message) -> Decision:
        asked.append(call["id"])
        if len(asked) == 1:
            raise RuntimeError("policy store down")
        return allow()

    tools = ToolRegistry([Tool(lambda n: ran.append(n), name="f", policy=flaky)])
    loop = Loop(ScriptedModel([call("c", "f", n=1), final("x")]), tools=tools)
    result = loop.run("go") if driver == "sync" else asyncio.run(loop.arun("go"))
    assert asked == ["c"]
    assert ran == []
    answer = result.transcript[2]
    assert (answer["status"], answer["content"]["type"]) == ("error", "RuntimeError")


async def test_async_policies_about_a_batch_are_awaited_together() -> None:
    """Each policy waits until all three are asked: asked one after another, they would not."""
    arrived, everyone = [0], asyncio.Event()

    async def together(call: Message) -> Decision:
        arrived[0] += 1
        if arrived[0] == 3:
            everyone.set()
        await asyncio.wait_for(everyone.wait(), timeout=10)
        return allow()

    tools = ToolRegistry([Tool(lambda n: n, name="f", policy=together)])
    replies = batch(call("a", "f", n=1), call("b", "f", n=2), call("c", "f", n=3))
    result = await Loop(ScriptedModel([replies, final("x")]), tools=tools).arun("go")
    assert [m["status"] for m in result.transcript[2:5]] == ["ok", "ok", "ok"]


def test_messages_say_what_to_do(tmp_path: Path) -> None:
    """An async run names adecide, a sync one (which awaits async policies too) decide;
    deciding twice says so; a saved run resumed under another budget is refused, naming the
    field."""

    async def careful(call: Message) -> Decision:
        return ask("?")

    tools = ToolRegistry([Tool(lambda n: n, name="f", policy=careful)])
    paused_sync = Loop(ScriptedModel([call("c", "f", n=1)]), tools=tools).start("go")
    assert paused_sync.finish().status == "awaiting_approval"
    with pytest.raises(InvalidStateError, match=r"call run\.decide\("):
        paused_sync.step()

    async def paused_async() -> None:
        run = Loop(ScriptedModel([call("c", "f", n=1)]), tools=tools).astart("go")
        await run.afinish()
        with pytest.raises(InvalidStateError, match=r"call await run\.adecide\("):
            await run.astep()

    asyncio.run(paused_async())
    desk = Desk()
    run = Loop(ScriptedModel([three(), final("x")]), tools=desk.registry).start("go")
    paused = run.finish()
    run.decide({"b": approve(), "c": approve()})
    with pytest.raises(InvalidStateError, match="decisions were taken already"):
        run.decide({"b": approve(), "c": approve()})
    tighter = Loop(ScriptedModel([final("x")]), tools=desk.registry, max_calls=1)
    with pytest.raises(
        agentloop.ConfigurationMismatchError, match=r"budget\.max_calls: recorded 100, now 1"
    ):
        tighter.resume(paused, decisions={"b": approve(), "c": approve()})


def test_a_saved_result_that_ended_resumes_to_itself(tmp_path: Path) -> None:
    """As a durable run that ended is only read: nothing runs, and decisions for it raise."""
    desk = Desk()
    run = Loop(ScriptedModel([three(), final("x")]), tools=desk.registry).start("go")
    run.finish()
    run.decide({"b": approve(), "c": approve()})
    ended = run.finish()
    agentloop.review.save_run(ended, tmp_path / "run.json")
    token = agentloop.CancelToken()
    token.cancel()
    cancelled = Loop(ScriptedModel([])).run("go", cancel=token)
    ran = list(desk.ran)
    again = Loop(ScriptedModel([]), tools=desk.registry)  # a model that would fail if asked
    for saved in [agentloop.review.load_run(tmp_path / "run.json"), cancelled]:
        resumed = again.resume(saved)
        assert resumed is saved  # itself: a replay cannot give back its events' times
        assert (resumed.status, resumed.steps, resumed.calls) == (
            saved.status,
            saved.steps,
            saved.calls,
        )
        assert resumed.transcript == saved.transcript
    assert ended.status == "finished"
    assert desk.ran == ran  # no tool ran again
    with pytest.raises(InvalidStateError, match="the saved run ended 'finished': it awaits no"):
        again.resume(ended, decisions={"b": approve(), "c": approve()})


def test_an_unsaved_result_holding_live_exceptions_resumes_to_itself() -> None:
    """A result never saved keeps the exceptions raised: the replay takes their records."""

    def broken(q: str) -> str:
        raise ValueError(f"no {q}")

    desk = Desk()
    desk.registry.add(Tool(broken, name="broken"))
    script = ScriptedModel([call("x", "broken", q="rates"), call("b", "pay", amount=5)])
    paused = Loop(script, tools=desk.registry).run("go")
    assert paused.status == "awaiting_approval"
    # Not ended, it goes on: the replay feeds the engine the exception's record.
    again = Loop(ScriptedModel([RuntimeError("down")]), tools=desk.registry)
    ended = again.resume(paused, decisions={"b": approve()})
    assert (ended.status, ended.steps, ended.calls) == ("failed", 3, 2)
    assert ended.transcript[: len(paused.transcript)] == paused.transcript
    assert ended.events[: len(paused.events)] == paused.events  # its exception kept
    raised = [event.exception for event in ended.events if event.exception is not None]
    assert [type(exc) for exc in raised] == [ValueError, RuntimeError]
    assert desk.ran == [("pay", 5)]
    # Ended, it is returned itself, and nothing is asked or run again.
    never = Loop(ScriptedModel([]), tools=desk.registry)  # a model that fails if asked
    assert never.resume(ended) is ended
    assert asyncio.run(never.aresume(ended)) is ended
    assert desk.ran == [("pay", 5)]


def test_a_ledger_given_as_a_run_file_is_named(tmp_path: Path) -> None:
    ledger = agentloop.ledger.SQLiteLedger(tmp_path / "runs.db")
    Loop(ScriptedModel([final("x")]), ledger=ledger).run("go")
    with pytest.raises(agentloop.review.RunFileError, match="a SQLite database \\(a ledger\\?"):
        agentloop.review.load_run(tmp_path / "runs.db")


def test_a_reviewed_call_is_validated_and_converted_once(driver: Driver) -> None:
    """The review hands back a prepared call: its dispatch checks and converts nothing again.

    Each call's arguments are validated once and converted once, whether the
    policies allowed it or asked a person who approved it; the policies are
    asked once per call.
    """
    desk = Desk()
    checked: list[dict[str, Any]] = []
    converted: list[dict[str, Any]] = []

    def counted(tool: Tool) -> None:
        is_valid, convert = tool._is_valid, tool._convert

        def validating(arguments: dict[str, Any]) -> bool:
            checked.append(arguments)
            return is_valid(arguments)

        def converting(arguments: dict[str, Any]) -> dict[str, Any]:
            converted.append(arguments)
            return arguments if convert is None else convert(arguments)

        tool._is_valid, tool._convert = validating, converting  # type: ignore[assignment]

    for tool in desk.registry:
        counted(tool)
    run = driver.start(Loop(ScriptedModel([three(), final("ok")]), tools=desk.registry), "go")
    while run.state is not State.AWAITING_APPROVAL:
        run.step()
    assert checked == converted == [{"q": "rates"}, {"amount": 5}, {"amount": 7}]
    assert desk.ran == []
    run.decide({"b": approve(), "c": approve()})
    while not run.done:
        run.step()
    assert (run.result().status, desk.ran) == (
        "finished",
        [("look", "rates"), ("pay", 5), ("pay", 7)],
    )
    assert checked == converted == [{"q": "rates"}, {"amount": 5}, {"amount": 7}]
    assert desk.asked == ["a", "b", "c"]


# -- a policy's denial is the engine's answer, through a row, never a dispatch ----------


class Guarded:
    """Tools that record what ran; a policy that denies ``pay`` over 10 and asks about 10."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []
        self.registry = ToolRegistry(policy=self.policy)
        self.registry.add(Tool(self.pay, name="pay"))
        self.registry.add(Tool(self.look, name="look"))

    def policy(self, call: Message) -> Decision:
        amount = call["arguments"].get("amount", 0)
        if amount > 10:
            return deny(f"{amount} EUR is over the limit")
        return ask("exactly ten?") if amount == 10 else allow()

    def pay(self, amount: int) -> str:
        self.ran.append(("pay", amount))
        return f"paid {amount}"

    def look(self, q: str) -> str:
        self.ran.append(("look", q))
        return f"saw {q}"


@pytest.mark.row("dispatching --approval_asked [review_denies]--> dispatching")
def test_a_denied_call_of_a_batch_is_answered_at_the_review_and_never_handed_out(
    driver: Driver,
) -> None:
    """The review's denial is recorded and answered denied; the batch's other calls run."""
    guarded = Guarded()
    three = batch(
        call("a", "look", q="rates"), call("b", "pay", amount=50), call("c", "pay", amount=5)
    )
    model = ScriptedModel([three, final("ok")])
    run = driver.start(Loop(model, tools=guarded.registry), "go")
    run.step()
    run.step()
    reviewed = run.step()
    assert (reviewed.trigger, reviewed.guard, reviewed.dest) == (
        Trigger.APPROVAL_ASKED,
        agentloop.engine.Guard.REVIEW_DENIES,
        State.DISPATCHING,
    )
    assert reviewed.decisions == (("b", deny("50 EUR is over the limit")),)
    assert (reviewed.pending, reviewed.appended_json, run.calls) == ((), (), 3)
    for _ in run:
        pass
    result = run.result()
    assert (result.status, result.steps, result.calls) == ("finished", 2, 3)
    assert guarded.ran == [("look", "rates"), ("pay", 5)]
    assert [(m["id"], m["status"], m["content"]) for m in result.transcript[2:5]] == [
        ("a", "ok", "saw rates"),
        ("b", "denied", "50 EUR is over the limit"),
        ("c", "ok", "paid 5"),
    ]
    # Never handed out: no event started it, and no dispatcher answered it.
    assert [call_id for event in result.events for call_id in event.started] == ["a", "c"]
    dispatched = [e.call_id for e in result.events if e.trigger is Trigger.TOOL_RETURNED]
    assert dispatched == ["a", "c"]


@pytest.mark.row("dispatching --approval_asked [review_denies_all]--> awaiting_model")
def test_a_lone_denied_call_is_answered_and_appended_at_the_review(driver: Driver) -> None:
    """Every call of the batch denied: the batch is appended there, the model asked next."""
    guarded = Guarded()
    model = ScriptedModel([call("b", "pay", amount=50), final("ok")])
    result = driver.run(Loop(model, tools=guarded.registry), "go")

    assert (result.status, result.steps, result.calls) == ("finished", 2, 1)
    assert guarded.ran == []
    reviewed = result.events[2]
    assert (reviewed.trigger, reviewed.guard, reviewed.dest) == (
        Trigger.APPROVAL_ASKED,
        agentloop.engine.Guard.REVIEW_DENIES_ALL,
        State.AWAITING_MODEL,
    )
    assert (reviewed.call_id, reviewed.result_status, reviewed.calls) == ("b", "denied", 1)
    assert result.transcript[1:3] == [
        call("b", "pay", amount=50),
        {"kind": "tool_result", "id": "b", "name": "pay", "status": "denied",
         "content": "50 EUR is over the limit"},
    ]  # fmt: skip
    assert not any(event.started for event in result.events)


def test_a_denial_beside_an_ask_is_answered_before_the_person_decides() -> None:
    """Denied and asked in one review: the denial is the event's, the ask waits for a person."""
    guarded = Guarded()
    model = ScriptedModel(
        [batch(call("a", "pay", amount=10), call("b", "pay", amount=50)), final("ok")]
    )
    run = Loop(model, tools=guarded.registry).start("go")
    run.step()
    run.step()
    asked = run.step()
    assert (asked.guard, asked.dest) == (None, State.AWAITING_APPROVAL)
    assert [p.call_id for p in asked.pending] == ["a"]
    assert asked.decisions == (("b", deny("50 EUR is over the limit")),)
    decided = run.decide({"a": approve()})
    assert (decided.guard, decided.dest) == (None, State.DISPATCHING)
    result = run.finish()
    assert guarded.ran == [("pay", 10)]
    assert [(m["id"], m["status"]) for m in result.transcript[2:4]] == [
        ("a", "ok"),
        ("b", "denied"),
    ]
    assert [call_id for event in result.events for call_id in event.started] == ["a"]


def test_a_run_with_denials_replays_from_its_file_and_its_ledger(tmp_path: Path) -> None:
    """The denials are in the record: a run file and a ledger replay the same events."""
    guarded = Guarded()
    replies = [
        batch(call("a", "look", q="rates"), call("b", "pay", amount=50)),
        call("c", "pay", amount=70),
        final("ok"),
    ]
    ledger = agentloop.ledger.SQLiteLedger(tmp_path / "runs.db")
    loop = Loop(ScriptedModel(replies), tools=guarded.registry, ledger=ledger)
    result = loop.run("go", run_id="r1")
    assert result.status == "finished"
    assert agentloop.review.run_from_json(agentloop.review.run_to_json(result)) == result
    assert agentloop.ledger.view_run(ledger, "r1").result == result
    assert loop.resume("r1") == result
