"""A decision or an ask the record cannot take is refused where it is made, and changes nothing.

A decision or an ask whose reason the record cannot take is refused where
it is made; a report the engine refuses leaves the run, its ledger and its
run file as they were; a batch asked about twice across a restart waits
only for the calls not decided; and on DBOS, ``decide`` checks before it
sends. Then two Hypothesis properties: bad decisions, reasons and policy
answers interleaved with good ones leave exactly the run the good ones make
alone, through ``Loop`` (live, resumed by id, resumed from a run file) and
through the engine itself.
"""

from __future__ import annotations

import gc
import re
import tempfile
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import (
    Decision,
    Loop,
    State,
    allow,
    approve,
    ask,
    deny,
)
from agentloop.engine import Engine
from agentloop.ledger import SQLiteLedger
from agentloop.testing import ScriptedModel, batch, call, final
from tests.support.helpers import asking
from tests.support.ledgers import decisions_of
from tests.support.payments import Desk, records, script, state_of, two

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from pathlib import Path


Message = dict[str, Any]
LONE = "bad \ud800 reason"


class Reason(str):
    """A ``str`` subclass: text whose methods are user code, which no record takes."""

    __slots__ = ()


def forged(decision: Decision, reason: object) -> Decision:
    """``decision`` with its reason changed after it was made, past ``Decision``'s checks."""
    object.__setattr__(decision, "reason", reason)
    return decision


# -- what the record cannot take is refused where it is made ---------------------------


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: deny(LONE), ValueError, "a denial's reason to be valid Unicode text"),
        (lambda: ask("\udfff"), ValueError, "an ask's reason to be valid Unicode text"),
        (lambda: deny(Reason("no")), TypeError, "a denial's reason to be a non-empty str, got a"),
        (lambda: ask(Reason("moves money")), TypeError, "got a Reason (a str subclass)"),
        (lambda: approve(fingerprint="\ud800"), ValueError, "Decision.fingerprint to be valid"),
        (lambda: approve(fingerprint=Reason("ab")), TypeError, "Decision.fingerprint to be a str"),
        (lambda: Decision(allowed=True, reason=Reason("")), TypeError, "Decision.reason"),
    ],
)
def test_a_decision_the_record_cannot_take_is_refused_when_made(
    make: Callable[[], Decision], error: type[Exception], message: str
) -> None:
    """A lone surrogate or a ``str`` subclass in a reason or fingerprint raises, saying what."""
    with pytest.raises(error, match="expected .*" + re.escape(message)):
        make()


@pytest.mark.parametrize("ledger", [False, True])
def test_a_decision_with_a_bad_reason_raises_before_the_run_changes(
    ledger: bool, tmp_path: Path
) -> None:
    """The issue's steps: the bad denial raises, c1 is not left denied, and both then run."""
    desk = Desk()
    store = SQLiteLedger(tmp_path / "runs.db") if ledger else None
    run = Loop(script(), tools=desk.registry, ledger=store).start("pay")
    assert run.finish().status == "awaiting_approval"
    before = state_of(run)
    with pytest.raises(ValueError, match="a denial's reason to be valid Unicode"):
        run.decide({"c1": deny("not this one"), "c2": deny(LONE)})
    assert state_of(run) == before
    run.decide({"c1": approve(), "c2": approve()})
    result = run.finish()
    assert (result.status, desk.ran) == ("finished", ["pay 10", "pay 1"])
    assert [m["status"] for m in result.transcript if m["kind"] == "tool_result"] == ["ok", "ok"]
    assert agentloop.review.run_from_json(agentloop.review.run_to_json(result)) == result


@pytest.mark.parametrize("ledger", [False, True])
@pytest.mark.parametrize("bad", [LONE, Reason("not this one"), ""])
def test_decide_refuses_a_decision_changed_after_it_was_made(
    bad: object, ledger: bool, tmp_path: Path
) -> None:
    """The engine checks each decision as ``Decision`` does: nothing is half-applied."""
    desk = Desk()
    store = SQLiteLedger(tmp_path / "runs.db") if ledger else None
    loop = Loop(script(), tools=desk.registry, ledger=store)
    run = loop.start("pay", run_id="r1" if ledger else None)
    run.finish()
    before = state_of(run)
    kept = records(store, "r1") if store else None
    with pytest.raises((TypeError, ValueError), match="expected a denial's reason"):
        run.decide({"c1": deny("not this one"), "c2": forged(deny("fine"), bad)})
    assert state_of(run) == before
    assert (records(store, "r1") if store else None) == kept
    run.decide({"c1": approve(), "c2": deny("person")})
    result = run.finish()
    assert desk.ran == ["pay 10"]
    assert [m["status"] for m in result.transcript if m["kind"] == "tool_result"] == [
        "ok",
        "denied",
    ]
    (decided,) = [event for event in result.events if event.decisions]
    assert decided.decisions == (("c1", approve()), ("c2", deny("person")))


class Fickle(dict[str, Decision]):
    """Decisions that answer ``approve()`` when first read, and a denial after."""

    def __init__(self, ids: list[str]) -> None:
        super().__init__((call_id, approve()) for call_id in ids)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Decision:
        if key in self.read:
            return deny("changed after it was checked")
        self.read.add(key)
        return super().__getitem__(key)


@pytest.mark.parametrize("ledger", [False, True])
def test_decide_keeps_the_decisions_it_checked(ledger: bool, tmp_path: Path) -> None:
    """Each decision is read once: the run keeps (and records) the one it checked."""
    desk = Desk()
    store = SQLiteLedger(tmp_path / "runs.db") if ledger else None
    loop = Loop(script(), tools=desk.registry, ledger=store)
    run = loop.start("pay", run_id="r1" if ledger else None)
    run.finish()
    run.decide(Fickle(["c1", "c2"]))
    result = run.finish()
    assert (result.status, desk.ran) == ("finished", ["pay 10", "pay 1"])
    if store is not None:
        (decided,) = [r.body for r in store.read("r1")[1] if r.kind == "decision"]
        assert [d["allowed"] for d in decisions_of(decided).values()] == [True, True]


@pytest.mark.parametrize("ledger", [False, True])
@pytest.mark.parametrize("bad", [LONE, Reason("moves money")], ids=["surrogate", "subclass"])
def test_a_policys_ask_the_record_cannot_take_fails_closed(
    bad: str, ledger: bool, tmp_path: Path
) -> None:
    """The README's promise: the ask raises inside the policy, and the call gets an ``error``."""
    desk = Desk(lambda call: ask(bad) if call["id"] == "c1" else allow())
    store = SQLiteLedger(tmp_path / "runs.db") if ledger else None
    loop = Loop(script(), tools=desk.registry, ledger=store)
    result = loop.run("pay", run_id="r1" if ledger else None)
    assert (result.status, desk.ran, desk.asked) == ("finished", ["pay 1"], ["c1", "c2"])
    first = next(m for m in result.transcript if m["kind"] == "tool_result")
    assert (first["id"], first["status"]) == ("c1", "error")
    assert "expected an ask's reason" in first["content"]["message"]
    path = tmp_path / "run.json"
    agentloop.review.save_run(result, path)
    assert agentloop.review.load_run(path) == result
    if store is not None:
        resumed = Loop(ScriptedModel([]), tools=desk.registry, ledger=store).resume("r1")
        assert (resumed.status, resumed.transcript) == (result.status, result.transcript)


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ({"c1": LONE}, ValueError),
        ({"c1": Reason("moves money")}, TypeError),
        ({"c1": ""}, TypeError),
        ({"c3": "why"}, ValueError),
        ([("c1", "why")], TypeError),
    ],
)
def test_a_review_that_asks_refuses_a_reason_the_record_cannot_take(
    bad: object, error: type[Exception]
) -> None:
    """A driver's bad ask raises ``expected ..., got ...`` and the engine is as it was."""
    engine = Engine("pay")
    engine.next()
    engine.replied(two())
    engine.next()  # accepted: dispatching, none started
    before = (engine.state, engine.events(), engine.history(), engine.pending, engine.unstarted)
    with pytest.raises(error, match="expected"):
        engine.reviewed(asking(bad))
    assert (engine.state, engine.events(), engine.history(), engine.pending) == before[:4]
    assert engine.unstarted == before[4]
    engine.reviewed(asking({"c1": "moves money"}))
    assert [p.reason for p in engine.pending] == ["moves money"]


def test_a_refused_ask_leaves_the_batch_to_be_reviewed_again() -> None:
    """An ask the engine refused is no answer: the next step asks the policies again.

    It used to leave the batch marked reviewed, so the call was answered
    ``denied`` at dispatch without any person being asked.
    """
    answers = [forged(ask("moves money"), LONE), ask("moves money")]
    desk = Desk(lambda call: answers.pop(0) if call["id"] == "c1" else allow())
    run = Loop(script(), tools=desk.registry).start("pay")
    with pytest.raises(ValueError, match="call 'c1': expected an ask's reason to be valid Unicode"):
        run.finish()
    assert (run.state, desk.ran) == (State.DISPATCHING, [])
    assert run.finish().status == "awaiting_approval"
    assert [p.call_id for p in run.pending] == ["c1"]
    assert desk.ran == []


# -- a second ask in one batch after a restart -------------------------------------------


def test_a_second_ask_after_a_restart_waits_only_for_the_calls_not_decided(
    tmp_path: Path,
) -> None:
    """c1 asked and approved; restarted, a stricter policy asks about c2: c2 alone is decided.

    It used to wedge: every resume showed ``['c1', 'c2']`` pending, deciding c2
    alone was refused (``missing: ['c1']``) and deciding both too (c1's record).
    """
    ledger = SQLiteLedger(tmp_path / "runs.db")
    lenient = Desk(lambda call: ask("big") if call["arguments"]["cents"] > 5 else allow())
    run = Loop(script(), tools=lenient.registry, ledger=ledger).start("pay", run_id="r1")
    assert [p.call_id for p in run.finish() and run.pending] == ["c1"]
    run.decide({"c1": approve()})
    del run  # the process stops before the first call
    gc.collect()
    strict = Desk()
    loop = Loop(ScriptedModel([final("done")]), tools=strict.registry, ledger=ledger)
    assert [p.call_id for p in loop.resume("r1").pending] == ["c2"]
    assert strict.asked == ["c2"]  # c1 was decided: no policy is asked about it again
    assert [p.call_id for p in loop.resume("r1").pending] == ["c2"]  # and not after a restart
    assert strict.asked == ["c2"]
    result = loop.resume("r1", decisions={"c2": approve()})
    assert (result.status, lenient.ran + strict.ran) == ("finished", ["pay 10", "pay 1"])
    kinds = [(kind, key) for kind, key, _ in records(ledger, "r1")]
    asks = [key for kind, key in kinds if kind in ("approval_asked", "decision")]
    assert asks == ["c1", "c1", "c2", "c2"]
    again = loop.resume("r1")
    assert (again.status, again.transcript) == (result.status, result.transcript)


# -- the property: bad values interleaved with good ones change nothing -----------------

#: How many runs the property draws (each makes two runs, on SQLite or in memory).
PROPERTY_EXAMPLES = 40

ANSWERS = st.sampled_from(["allow", "deny", "ask", "ask", "bad"])
BAD_DECISIONS = st.sampled_from(
    [
        "not a dict",
        "missing",
        "extra",
        "an ask",
        "not a decision",
        "other fingerprint",
        "lone surrogate",
        "str subclass",
        "empty denial",
        "allowed not a bool",
    ]
)


def bad_ask(call_id: str) -> str:
    """A reason no record takes: a lone surrogate or a ``str`` subclass, by the call."""
    return LONE if call_id.endswith(("0", "2")) else Reason(f"asks about {call_id}")


def refusal(call_id: str) -> Exception:
    """What ``ask`` raises for the call's bad reason: the same type and message, made again."""
    try:
        ask(bad_ask(call_id))
    except (TypeError, ValueError) as exc:
        return type(exc)(str(exc))
    raise AssertionError("ask() took a reason no record can take")


def planned_policy(plan: dict[str, str], *, good_only: bool) -> Callable[[Message], Decision]:
    """The policy of a plan; ``good_only``: a bad ask is the exception it raises, raised."""

    def policy(call: Message) -> Decision:
        answer = plan[call["id"]]
        if answer == "allow":
            return allow()
        if answer == "deny":
            return deny("the policy says no")
        if answer == "ask":
            return ask(f"asks about {call['id']}")
        if good_only:
            raise refusal(call["id"])
        return ask(bad_ask(call["id"]))

    return policy


def spoiled(kind: str, good: dict[str, Decision]) -> object:
    """``good`` decisions made bad in one way: a caller's mistake the run must refuse."""
    ids = list(good)
    if kind == "not a dict":
        return list(good.items())
    if kind == "missing":
        return {i: good[i] for i in ids[1:]}
    if kind == "extra":
        return {**good, "zz": approve()}
    if kind == "an ask":
        return {**good, ids[0]: ask("?")}
    if kind == "not a decision":
        return {**good, ids[-1]: True}
    if kind == "other fingerprint":
        return {**good, ids[0]: approve(fingerprint="0" * 64)}
    if kind == "allowed not a bool":
        changed = deny("x")
        object.__setattr__(changed, "allowed", 1)
        return {**good, ids[0]: changed}
    bad = {"lone surrogate": LONE, "str subclass": Reason("x"), "empty denial": ""}[kind]
    return {**good, ids[-1]: forged(deny("x"), bad)}


def named(exc: BaseException) -> tuple[str, str]:
    """An exception as a run file keeps it (a replayed one is a ``RecordedException``)."""
    return getattr(exc, "type_name", type(exc).__name__), str(exc)


def event_rows(events: Sequence[agentloop.Transition]) -> list[tuple[Any, ...]]:
    """Events as compared: every field but the times; an exception by its type and message."""
    return [
        (
            e.source,
            e.dest,
            e.trigger,
            e.guard,
            e.steps,
            e.calls,
            e.call_id,
            e.tool,
            e.result_status,
            e.reason,
            e.error,
            None if e.exception is None else named(e.exception),
            e.appended_json,
            e.usage,
            e.pending,
            e.decisions,
        )
        for e in events
    ]


class Driven:
    """One run of a plan: live while it can be, resumed by id or from its saved file after."""

    def __init__(self, plan: list[dict[str, str]], ledger: SQLiteLedger | None) -> None:
        answers = {call_id: answer for batch_ in plan for call_id, answer in batch_.items()}
        self.plan, self.ledger = plan, ledger
        self.desk = Desk()
        self.bad = Desk(planned_policy(answers, good_only=False))
        self.good = Desk(planned_policy(answers, good_only=True))
        self.run: agentloop.Run | None = None
        self.result: agentloop.RunResult | None = None

    def loop(self, desk: Desk, replies: int) -> Loop:
        script = [batch(*(call(i, "pay", cents=n) for n, i in enumerate(b))) for b in self.plan] + [
            final("done")
        ]
        model = ScriptedModel(script[len(script) - replies :])
        return Loop(model, tools=desk.registry, max_calls=20, ledger=self.ledger)

    def start(self, desk: Desk) -> agentloop.RunResult:
        loop = self.loop(desk, len(self.plan) + 1)
        self.run = loop.start("pay", run_id="r1" if self.ledger else None)
        self.result = self.run.finish()
        return self.result

    def replies_left(self) -> int:
        assert self.result is not None
        return len(self.plan) + 1 - self.result.steps

    def decide(self, desk: Desk, decisions: object, live: bool) -> agentloop.RunResult:
        """Decide on the live run, or resume with ``decisions=`` (by id, or from the file)."""
        if live and self.run is not None:
            self.run.decide(decisions)  # type: ignore[arg-type]  # bad ones on purpose
            self.result = self.run.finish()
            return self.result
        assert self.result is not None
        loop = self.loop(desk, self.replies_left())
        saved = agentloop.review.run_from_json(agentloop.review.run_to_json(self.result))
        self.result = loop.resume("r1" if self.ledger else saved, decisions=decisions)  # type: ignore[arg-type]
        self.run = None  # the run goes on from the record from now on
        return self.result

    def seen(self) -> tuple[Any, ...]:
        """What a refused input must leave as it was: the run, its file, its ledger."""
        assert self.result is not None
        live = None if self.run is None else state_of(self.run)
        kept = None if self.ledger is None else records(self.ledger, "r1")
        return live, agentloop.review.run_to_json(self.result), kept


@settings(
    max_examples=PROPERTY_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    plan=st.lists(st.lists(ANSWERS, min_size=1, max_size=3), min_size=1, max_size=3),
    data=st.data(),
    durable=st.booleans(),
)
def test_bad_values_interleaved_with_good_ones_leave_the_run_of_the_good_ones(
    plan: list[list[str]], data: st.DataObject, durable: bool
) -> None:
    """Refused decisions (``decide``, ``resume(decisions=)``) and asks change nothing.

    Each pause draws bad decisions, each refused through the live run or a
    resume, then the good ones; a policy's bad ask fails its call closed, as
    a policy that raised. The run equals the run of the good values alone:
    status, counters, transcript, pending, events, and its ledger's records.
    """
    batches = [{f"b{b}c{c}": answer for c, answer in enumerate(row)} for b, row in enumerate(plan)]
    with tempfile.TemporaryDirectory() as where:
        ledgers = [SQLiteLedger(f"{where}/{name}.db") if durable else None for name in "ab"]
        tested, reference = Driven(batches, ledgers[0]), Driven(batches, ledgers[1])
        result, expected = tested.start(tested.bad), reference.start(reference.good)
        while result.status is State.AWAITING_APPROVAL:
            assert expected.status is State.AWAITING_APPROVAL
            assert result.pending == expected.pending
            pending = result.pending
            approvals = data.draw(st.lists(st.booleans(), min_size=len(pending)))

            def good(pending: Any = pending, approvals: list[bool] = approvals) -> dict[str, Any]:
                """The person's decisions, made afresh (a spoiled copy changes its own)."""
                return {
                    p.call_id: approve() if yes else deny(f"no to {p.call_id}")
                    for p, yes in zip(pending, approvals, strict=False)
                }

            for kind, live in data.draw(st.lists(st.tuples(BAD_DECISIONS, st.booleans()))):
                before = tested.seen()
                with pytest.raises((TypeError, ValueError), match="expected"):
                    tested.decide(tested.bad, spoiled(kind, good()), live)
                assert tested.seen() == before
            result = tested.decide(tested.bad, good(), data.draw(st.booleans()))
            expected = reference.decide(reference.good, good(), live=True)
        assert (result.status, result.steps, result.calls) == (
            expected.status,
            expected.steps,
            expected.calls,
        )
        assert result.transcript == expected.transcript
        assert event_rows(result.events) == event_rows(expected.events)
        assert tested.bad.ran == reference.good.ran  # the same calls ran, once each
        assert agentloop.review.run_from_json(agentloop.review.run_to_json(result)) == result
        if durable:
            assert records(ledgers[0], "r1") == records(ledgers[1], "r1")  # type: ignore[arg-type]


BAD_REASONS = st.sampled_from([LONE, Reason("why"), "", None, 3, b"why"]) | st.text().map(
    lambda text: text + "\udc80"
)


def engine_seen(engine: Engine) -> tuple[Any, ...]:
    """What a refused report must leave as it was: the whole engine as its readers see it."""
    return (
        engine.state,
        engine.steps,
        engine.calls,
        engine.outstanding,
        engine.unstarted,
        engine.pending,
        engine.history(),
        engine.events(),
    )


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None)
@given(
    plan=st.lists(st.lists(st.booleans(), min_size=1, max_size=3), min_size=1, max_size=3),
    data=st.data(),
)
def test_bad_reports_to_the_engine_change_nothing(
    plan: list[list[bool]], data: st.DataObject
) -> None:
    """A driver's bad asks and decisions, between good ones, leave the engine of the good ones.

    ``plan`` says, per batch, which calls a policy asks about; each ask and
    each decision is preceded by bad ones (an id not in the batch, a reason
    that is no record's: a lone surrogate, a ``str`` subclass, empty, not a
    str; decisions changed after they were made), each refused unchanged.
    """
    replies = [
        batch(*(call(f"b{b}c{c}", "pay", cents=c) for c in range(len(row))))
        for b, row in enumerate(plan)
    ] + [final("done")]
    engines = [Engine("pay", budget=agentloop.engine.Budget(max_calls=20)) for _ in "ab"]
    for engine in engines:
        engine.next()
        engine.replied(replies[0])
    batch_at, reviewed_at = 0, -1
    while not engines[0].done:
        tested, reference = engines
        asks = plan[batch_at] if tested.state is State.DISPATCHING else []
        if (
            tested.state is State.DISPATCHING
            and any(asks)
            and tested.unstarted == len(asks)
            and reviewed_at != batch_at
        ):
            reviewed_at = batch_at
            good = {f"b{batch_at}c{c}": f"why c{c}" for c, a in enumerate(asks) if a}
            for reason, where in data.draw(
                st.lists(st.tuples(BAD_REASONS, st.sampled_from([*sorted(good), "zz"])))
            ):
                before = engine_seen(tested)
                with pytest.raises((TypeError, ValueError), match="expected"):
                    tested.reviewed(asking({**good, where: reason}))
                assert engine_seen(tested) == before
            for engine in engines:
                engine.reviewed(asking(good))
        needs = [engine.next() for engine in engines]
        need = needs[0]
        if isinstance(need, agentloop.engine.AwaitApproval):
            yes = data.draw(st.lists(st.booleans(), min_size=len(need.pending)))
            good_ = {
                p.call_id: approve() if ok else deny(f"no to {p.call_id}")
                for p, ok in zip(need.pending, [*yes, *[True] * 3], strict=False)
            }
            for kind in data.draw(st.lists(BAD_DECISIONS)):
                before = engine_seen(tested)
                with pytest.raises((TypeError, ValueError), match="expected"):
                    tested.decided(spoiled(kind, dict(good_)))  # type: ignore[arg-type]
                assert engine_seen(tested) == before
            for engine in engines:
                engine.decided(dict(good_))
        elif isinstance(need, agentloop.engine.RunTool):
            for engine, made in zip(engines, needs, strict=True):
                assert isinstance(made, agentloop.engine.RunTool)
                engine.returned({"status": "ok", "content": made.call["arguments"]["cents"]})
        elif isinstance(need, agentloop.engine.AskModel):
            batch_at += 1
            for engine in engines:
                engine.replied(replies[batch_at])
    tested, reference = engines
    assert event_rows(tested.events()) == event_rows(reference.events())
    assert (tested.state, tested.history()) == (State.FINISHED, reference.history())
    asked = [event.pending for event in tested.events() if event.pending]
    assert len(asked) == sum(any(row) for row in plan)  # every planned ask was taken


# -- DBOS: decide() checks before it sends, and the worker never half-applies ------------


@pytest.fixture
def dbos_launched(tmp_path: Path) -> Iterator[Any]:
    """DBOS launched in this process on a fresh SQLite system database, for one test.

    Last in this module, and for one test only: DBOS's threads are gone
    before any Hypothesis test of the module runs.
    """
    pytest.importorskip("dbos")
    from dbos import DBOS

    import agentloop.dbos

    config: Any = {
        "name": "agentloop-refusals",
        "log_level": "WARNING",
        "notification_listener_polling_interval_sec": 0.01,
        "system_database_url": f"sqlite:///{tmp_path}/sys.sqlite",
    }
    DBOS(config=config)
    DBOS.launch()
    try:
        yield agentloop.dbos
    finally:
        DBOS.destroy(workflow_completion_timeout_sec=0)


def test_on_dbos_a_bad_decision_is_refused_before_it_is_sent_or_taken(dbos_launched: Any) -> None:
    """``decide`` refuses a changed decision unsent; a bad message sent anyway changes nothing.

    The worker used to take ``c1``'s denial from a message whose ``c2`` it
    then failed on, and drop the message: ``c1`` never ran, its event said
    ``allowed=True``.
    """
    from dbos import DBOS

    dbos = dbos_launched
    desk = Desk()
    runs = dbos.DBOSLoop(Loop(script(), tools=desk.registry), name="refusals")
    try:
        handle = runs.start("pay", run_id="r1")
        waiting = dbos.pending("r1", timeout_seconds=30)
        assert [p.call_id for p in waiting] == ["c1", "c2"]
        with pytest.raises(ValueError, match="a denial's reason to be valid Unicode"):
            dbos.decide("r1", {"c1": deny("not this one"), "c2": forged(deny("fine"), LONE)})
        bad = {"c1": deny("not this one").record(), "c2": {**deny("x").record(), "reason": LONE}}
        DBOS.send("r1", {"decisions": bad}, dbos.APPROVAL_TOPIC)
        dbos.decide("r1", {"c1": approve(), "c2": approve()})
        result = handle.get_result()
    finally:
        runs.close()
    assert (result.status, desk.ran) == ("finished", ["pay 10", "pay 1"])
    (decided,) = [event for event in result.events if event.decisions]
    assert decided.decisions == (("c1", approve()), ("c2", approve()))
