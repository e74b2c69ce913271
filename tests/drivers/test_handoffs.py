"""Handoffs: one agent hands the run to another, step by step, on both drivers."""

from __future__ import annotations

import asyncio
import copy
from typing import TYPE_CHECKING, Any
from unittest.mock import ANY

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import Loop
from agentloop._core.messages import input_messages
from agentloop.engine import Engine
from agentloop.handoff_filters import last_turns, without_tools
from agentloop.ledger import SQLiteLedger
from agentloop.review import load_run, run_from_json, run_to_json, save_run
from agentloop.testing import assert_contract, batch
from tests.conftest import capped, count
from tests.support.helpers import Recorder, call, final

if TYPE_CHECKING:
    from pathlib import Path

Message = dict[str, Any]

#: What a triage run is given: its system prompt, then the customer's message.
SENT = [
    {"kind": "system", "text": "Route the customer."},
    {"kind": "user", "text": "I was charged twice"},
]
BOTH = pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])


class Team:
    """A triage agent and two specialists whose models answer from one script, in turn.

    Each request is noted as ``(agent, system prompt, tools offered, messages sent)``.
    """

    def __init__(self, script: list[Message], *, asynchronous: bool, **budget: Any) -> None:
        self.script, self.asked = list(script), list[tuple[str, str | None, list[str], int]]()
        self.refund, self.diagnose = Recorder(lambda: "refunded"), Recorder(lambda: "rebooted")
        self.lookup = Recorder(lambda **_: "customer 7")
        self.billing = Loop(
            self.model("billing", asynchronous),
            name="billing",
            system="You handle billing.",
            tools={"refund": self.refund},
        )
        self.tech = Loop(
            self.model("tech", asynchronous),
            name="tech",
            system="You fix connections.",
            tools={"diagnose": self.diagnose},
        )
        self.triage = Loop(
            self.model("triage", asynchronous),
            name="triage",
            system="Route the customer.",
            tools={"lookup": self.lookup},
            handoffs=[
                agentloop.handoff(self.billing, description="Billing questions"),
                agentloop.handoff(self.tech),
            ],
            **budget,
        )
        self.billing.add_handoff(agentloop.handoff(self.triage))

    def model(self, name: str, asynchronous: bool) -> Any:
        def answer(history: list[Message], tools: list[Message]) -> Message:
            system = history[0]["text"] if history[0]["kind"] == "system" else None
            self.asked.append((name, system, [tool["name"] for tool in tools], len(history)))
            return self.script.pop(0)

        async def aanswer(history: list[Message], tools: list[Message]) -> Message:
            return answer(history, tools)

        return aanswer if asynchronous else answer

    def run(self, asynchronous: bool, text: str = "I was charged twice") -> agentloop.RunResult:
        result: agentloop.RunResult = (
            asyncio.run(self.triage.arun(text)) if asynchronous else self.triage.run(text)
        )
        return result


def model_events(result: agentloop.RunResult) -> list[str | None]:
    return [event.agent for event in result.events if event.trigger == "model_replied"]


@BOTH
@pytest.mark.row("validating --validate [handoff_alone]--> awaiting_model")
def test_handoff_switches_agent_and_carries_budgets(asynchronous: bool) -> None:
    """Taken alone: answered ok; the next request is billing's (prompt, tools); counters go on."""
    script = [
        call("c1", "lookup"),
        call("c2", "transfer_to_billing"),
        call("c3", "refund"),
        final("refunded"),
    ]
    team = Team(script, asynchronous=asynchronous)
    result = team.run(asynchronous)

    assert (result.status, result.output, result.agent) == ("finished", "refunded", "billing")
    assert (result.steps, result.calls) == (4, 3)  # one run: the handoff is a call
    assert team.asked == [
        ("triage", "Route the customer.", ["lookup", "transfer_to_billing", "transfer_to_tech"], 2),
        ("triage", "Route the customer.", ["lookup", "transfer_to_billing", "transfer_to_tech"], 4),
        ("billing", "You handle billing.", ["refund", "transfer_to_triage"], 6),
        ("billing", "You handle billing.", ["refund", "transfer_to_triage"], 8),
    ]
    assert model_events(result) == ["triage", "triage", "billing", "billing"]
    handed = next(event for event in result.events if event.guard == "handoff_alone")
    assert (handed.call_id, handed.tool, handed.result_status, handed.agent) == (
        "c2",
        "transfer_to_billing",
        "ok",
        "billing",
    )
    assert (handed.steps, handed.calls) == (2, 2)
    assert handed.appended[1]["content"] == {"handed_off_to": "billing"}
    assert (len(team.refund.calls), result.transcript[0]["text"]) == (1, "Route the customer.")
    assert_contract(result, SENT)


@BOTH
@pytest.mark.row("validating --validate [handoff_in_batch]--> dispatching")
def test_handoff_beside_other_calls_is_refused(asynchronous: bool) -> None:
    """Beside another call the handoff is answered error, unrun; the other call runs."""
    script = [batch(call("c1", "lookup"), call("c2", "transfer_to_tech")), final("sorted")]
    team = Team(script, asynchronous=asynchronous)
    result = team.run(asynchronous)

    assert (result.status, result.agent, result.calls) == ("finished", "triage", 2)
    results = [m for m in result.transcript if m["kind"] == "tool_result"]
    assert [(m["id"], m["status"]) for m in results] == [("c1", "ok"), ("c2", "error")]
    assert results[1]["content"]["type"] == "HandoffRefused"
    assert [name for name, *_ in team.asked] == ["triage", "triage"]
    assert model_events(result) == ["triage", "triage"]
    assert_contract(result, SENT)


@BOTH
@pytest.mark.parametrize(
    "beside", [[], [call("c4", "lookup", order="A-7")]], ids=["", "and_a_call"]
)
def test_a_handoff_beside_calls_the_loop_guard_refuses_is_refused(
    asynchronous: bool, beside: list[Message]
) -> None:
    """Beside a call past max_identical_calls, a handoff is refused as a handoff, unrun and not
    taken; a call that is neither runs."""
    script = [
        call("c1", "lookup"),
        batch(call("c2", "lookup"), call("c3", "transfer_to_billing"), *beside),
        final("stayed"),
    ]
    team = Team(script, asynchronous=asynchronous, max_identical_calls=1)
    result = team.run(asynchronous)

    assert (result.status, result.agent, result.steps, result.calls) == (
        "finished",
        "triage",
        3,
        3 + len(beside),
    )
    results = {m["id"]: m for m in result.transcript if m["kind"] == "tool_result"}
    said = [(results[i]["status"], results[i]["content"]) for i in ("c2", "c3")]
    assert said == [
        ("error", {"type": "IdenticalCall", "message": ANY}),
        ("error", {"type": "HandoffRefused", "message": ANY}),
    ]
    assert [name for name, *_ in team.asked] == ["triage", "triage", "triage"]
    assert team.lookup.calls == [{}, *({"order": "A-7"} for _ in beside)]
    refused = next(e for e in result.events if e.guard and e.guard.startswith("identical"))
    assert refused.guard == ("identical_calls_some" if beside else "identical_calls_only")
    assert_contract(result, SENT)


@BOTH
def test_a_handoff_the_loop_guard_refuses_keeps_the_loop_guards_answer(asynchronous: bool) -> None:
    """A handoff made again past max_identical_calls, beside a call, is the loop guard's: its
    answer says so (and a repeat of it is then the guard's repeated call); the call runs."""
    script = [
        call("c1", "transfer_to_billing"),
        call("c2", "transfer_to_triage"),
        batch(call("c3", "transfer_to_billing"), call("c4", "lookup")),
        final("stayed"),
    ]
    team = Team(script, asynchronous=asynchronous, max_identical_calls=1)
    result = team.run(asynchronous)

    assert (result.status, result.agent, result.steps, result.calls) == (
        "finished",
        "triage",
        4,
        4,
    )
    results = {m["id"]: m for m in result.transcript if m["kind"] == "tool_result"}
    assert (results["c3"]["status"], results["c3"]["content"]["type"]) == (
        "error",
        "IdenticalCall",
    )
    assert (results["c4"]["status"], team.lookup.calls) == ("ok", [{}])
    assert model_events(result) == ["triage", "billing", "triage", "triage"]
    assert_contract(result, SENT)


@BOTH
@pytest.mark.row("validating --validate [handoffs_only]--> awaiting_model")
def test_two_handoffs_at_once_are_both_refused(asynchronous: bool) -> None:
    """Two handoffs in one reply: neither is taken, both answered error, the agent stays."""
    script = [
        batch(call("c1", "transfer_to_billing"), call("c2", "transfer_to_tech")),
        final("stayed"),
    ]
    team = Team(script, asynchronous=asynchronous)
    result = team.run(asynchronous)

    assert (result.status, result.agent, result.steps, result.calls) == ("finished", "triage", 2, 2)
    refused = next(event for event in result.events if event.guard == "handoffs_only")
    assert [m["status"] for m in refused.appended[1:]] == ["error", "error"]
    assert [name for name, *_ in team.asked] == ["triage", "triage"]
    assert_contract(result, SENT)


@BOTH
def test_handoff_past_max_calls_exhausts(asynchronous: bool) -> None:
    """A handoff that would pass max_calls ends the run exhausted, as any call does."""
    team = Team(
        [call("c1", "lookup"), call("c2", "transfer_to_billing")],
        asynchronous=asynchronous,
        max_calls=1,
    )
    result = team.run(asynchronous)

    assert (result.status, result.reason, result.calls, result.agent) == (
        "exhausted",
        "max_calls",
        1,
        "triage",
    )
    assert not any(event.guard == "handoff_alone" for event in result.events)
    assert_contract(result, SENT)


@BOTH
def test_final_beats_call_budget_across_a_handoff(asynchronous: bool) -> None:
    """The handoff spends the last call; the next agent's final is still accepted."""
    team = Team(
        [call("c1", "transfer_to_billing"), final("refunded")],
        asynchronous=asynchronous,
        max_calls=1,
    )
    result = team.run(asynchronous)

    assert (result.status, result.output, result.calls, result.agent) == (
        "finished",
        "refunded",
        1,
        "billing",
    )
    assert_contract(result, SENT)


def test_a_handoff_to_an_agent_not_offered_is_an_unknown_tool() -> None:
    """tech has no handoffs: a transfer_to_billing it calls is a tool it lacks, unknown_tool."""
    script = [call("c1", "transfer_to_tech"), call("c2", "transfer_to_billing"), final("ok")]
    team = Team(script, asynchronous=False)
    result = team.run(False)

    assert (result.status, result.agent) == ("finished", "tech")
    assert [m["status"] for m in result.transcript if m["kind"] == "tool_result"] == [
        "ok",
        "unknown_tool",
    ]


def test_a_run_with_a_handoff_replays_from_its_file(tmp_path: Path) -> None:
    """load_run replays the events (the agents in them) and gives back the run; resume reads it."""
    script = [call("c1", "transfer_to_billing"), call("c2", "refund"), final("refunded")]
    team = Team(script, asynchronous=False)
    result = team.run(False)
    path = tmp_path / "run.json"
    save_run(result, path)

    loaded = load_run(path)
    assert loaded == result
    assert (loaded.agent, loaded.agents) == ("billing", result.agents)
    assert run_from_json(run_to_json(result)).events == result.events
    assert team.triage.resume(loaded) == result  # ended: only read, replayed under the team


def test_resume_with_another_team_is_refused(tmp_path: Path) -> None:
    """A durable run with a handoff resumes with the right agent; a changed team is refused."""
    ledger = SQLiteLedger(tmp_path / "runs.db")
    script = [call("c1", "transfer_to_billing"), call("c2", "refund"), final("refunded")]
    team = Team(script, asynchronous=False)
    team.triage.ledger = ledger
    run = team.triage.start("I was charged twice")
    while not any(e.trigger == "tool_returned" and e.call_id == "c2" for e in run.events):
        run.step()
    assert run.state == "awaiting_model"
    assert [e.agent for e in run.events if e.trigger == "model_replied"] == ["triage", "billing"]
    run_id = run.run_id
    assert run_id is not None
    del run

    other = Team([final("nope")], asynchronous=False)
    other.triage.ledger = ledger
    other.billing.system = "Another prompt."
    with pytest.raises(agentloop.ConfigurationMismatchError):
        other.triage.resume(run_id)

    again = Team([final("refunded")], asynchronous=False)
    again.triage.ledger = ledger
    result = again.triage.resume(run_id)
    assert (result.status, result.output, result.agent, result.steps) == (
        "finished",
        "refunded",
        "billing",
        3,
    )
    assert [name for name, *_ in again.asked] == ["billing"]


def test_agents_share_one_output_type_and_deps_type() -> None:
    """Loop(...) refuses a handoff to an agent whose output or deps differ, naming both."""
    answers = Loop(lambda history: final("x"), name="answers")
    typed = Loop(lambda history: final("1"), name="typed", output=int)
    with pytest.raises(TypeError, match="share one output type"):
        Loop(lambda history: final("x"), name="first", handoffs=[agentloop.handoff(typed)])
    with pytest.raises(TypeError, match="share one deps_type"):
        Loop(lambda history: final("x"), deps_type=int, handoffs=[agentloop.handoff(answers)])
    with pytest.raises(TypeError, match="expected target to be a Loop"):
        agentloop.handoff("answers")  # type: ignore[arg-type]


def test_two_agents_of_one_name_are_refused() -> None:
    one = Loop(lambda history: final("x"), name="twin")
    two = Loop(lambda history: final("x"), name="twin")
    first = Loop(lambda history: final("x"), name="first", handoffs=[agentloop.handoff(one)])
    first.add_handoff(agentloop.handoff(two, tool_name="transfer_to_other_twin"))
    with pytest.raises(ValueError, match="different names"):
        first.run("go")


def test_an_agent_with_policies_in_its_tools_is_refused_naming_it() -> None:
    """A team's agent whose tools have policies is refused when the run starts, its name
    quoted once."""
    tools = agentloop.ToolRegistry(policy=lambda call: agentloop.allow())
    tools.add(add_one)
    guarded = Loop(lambda history: final("x"), name="b", tools=tools)
    first = Loop(lambda history: final("x"), name="a", handoffs=[agentloop.handoff(guarded)])
    with pytest.raises(ValueError, match="without policies") as refused:
        first.run("go")
    assert str(refused.value) == (
        "expected the agents of a team to have tools without policies, got policies in the "
        "tools of 'b': a team's approval is not supported yet"
    )


def add_one(n: int) -> int:
    """Add one."""
    return n + 1


def test_two_unnamed_targets_on_one_model_are_refused_saying_to_name_them() -> None:
    """A Loop without name= takes its model's; handing off to two such namesakes is refused
    naming the name and the way out (name=), not tool_name=, which would not be enough."""

    def helpdesk(history: list[Message]) -> Message:
        return final("x")

    one, two = Loop(helpdesk), Loop(helpdesk)
    assert (one.name, agentloop.handoff(one).tool_name) == ("helpdesk", "transfer_to_helpdesk")
    with pytest.raises(ValueError, match="different names") as refused:
        Loop(helpdesk, name="desk", handoffs=[agentloop.handoff(one), agentloop.handoff(two)])
    assert str(refused.value) == (
        "expected the agents 'desk' hands to to have different names, got two named "
        "'helpdesk' (a Loop without name= takes its model's name): pass name= to Loop(...)"
    )


def test_the_engine_knows_the_agent_in_force_after_an_interruption() -> None:
    """settle() finds the agent in force from the events."""
    from agentloop._core.agents import Agents

    agents = Agents("a", {"a": {"transfer_to_b": "b"}, "b": {}})
    engine = Engine("go", agents=agents)
    engine.next()
    engine.replied(call("c1", "transfer_to_b"))
    engine.next()
    assert engine.agent == "b"
    engine.next()
    engine.interrupted(KeyboardInterrupt())
    assert (engine.state, engine.agent) == ("cancelled", "b")


def test_handoff_resumes_with_the_right_agent(tmp_path: Path) -> None:
    """Killed (SIGKILL) in billing's tool after the handoff: the resume goes on with billing."""
    import signal
    import subprocess
    import sys

    from tests.support import ROOT, handoff_team

    child = subprocess.run(
        [sys.executable, "-m", "tests.support.handoff_team", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
    assert (tmp_path / "effects").read_text() == "refund A-7\n"

    asked: list[str] = []
    result = handoff_team.team(tmp_path, kill=False, asked=asked).resume(handoff_team.RUN_ID)

    assert (result.status, result.output, result.agent) == ("finished", "Refunded.", "billing")
    assert asked == ["billing"]  # the recorded replies are fed, not asked again
    assert (tmp_path / "effects").read_text() == "refund A-7\n"  # not run a second time
    assert [e.agent for e in result.events if e.trigger == "model_replied"] == [
        "triage",
        "billing",
        "billing",
    ]


def test_report_names_the_agent() -> None:
    """show's text and the HTML report name the agents in turn, each model step's, the handoff."""
    from agentloop._review.text import run_lines
    from agentloop.review import report_html

    script = [call("c1", "transfer_to_billing"), call("c2", "refund"), final("refunded")]
    result = Team(script, asynchronous=False).run(False)
    text = "\n".join(run_lines(result, title="run", limit=None))
    assert "agents   triage → billing" in text
    assert "handed off to billing" in text
    replied = [line.split()[-1] for line in text.splitlines() if "model_replied" in line]
    assert replied == ["triage", "billing", "billing"]  # who was asked, at each step
    assert 'id="summary-agents">triage → billing<' in report_html(result)


def test_a_team_wraps_up_with_the_agent_in_force() -> None:
    """on_exhausted='answer' on every agent: the wrap-up asks the agent in force, tools disabled."""
    choices: list[object] = []

    def billing_model(history: list[Message], tools: Any = (), tool_choice: Any = None) -> Message:
        choices.append(tool_choice)
        return final("wrapped") if tool_choice == "none" else call("c2", "refund")

    billing = Loop(
        billing_model, name="billing", tools={"refund": lambda: "ok"}, on_exhausted="answer"
    )
    triage = Loop(
        lambda history: call("c1", "transfer_to_billing"),
        name="triage",
        handoffs=[agentloop.handoff(billing)],
        max_steps=2,
        on_exhausted="answer",
    )
    result = triage.run("go")
    assert (result.status, result.output, result.agent, result.reason) == (
        "finished",
        "wrapped",
        "billing",
        "max_steps",
    )
    assert choices == [None, "none"]

    mixed = Loop(billing_model, name="other", tools={"refund": lambda: "ok"})
    with pytest.raises(ValueError, match="share on_exhausted"):
        Loop(
            lambda history: final("x"),
            handoffs=[agentloop.handoff(mixed)],
            on_exhausted="answer",
        ).run("go")


def test_a_fork_after_the_handoff_goes_on_with_the_agent_handed_to() -> None:
    """fork(result, at=k) replays the handoff under the Loop's team: billing answers anew."""
    script = [call("c1", "transfer_to_billing"), final("refunded")]
    result = Team(script, asynchronous=False).run(False)
    at = next(i for i, e in enumerate(result.events) if e.guard == "handoff_alone") + 1

    again = Team([final("refunded again")], asynchronous=False)
    forked = again.triage.fork(result, at=at).finish()
    assert (forked.status, forked.output, forked.agent) == ("finished", "refunded again", "billing")
    assert [name for name, *_ in again.asked] == ["billing"]


_NAMES = [
    "lookup",
    "refund",
    "diagnose",
    "transfer_to_billing",
    "transfer_to_tech",
    "transfer_to_triage",
]


@st.composite
def _replies(draw: st.DrawFn) -> list[Message]:
    """A script of replies: calls and batches among the team's tools and handoffs, then finals."""
    ids = iter(range(1, 100))
    script: list[Message] = []
    for _ in range(draw(st.integers(0, 6))):
        names = draw(st.lists(st.sampled_from(_NAMES), min_size=1, max_size=3))
        calls = [call(f"c{next(ids)}", name) for name in names]
        script.append(calls[0] if len(calls) == 1 else batch(*calls))
    return [*script, final("done")]


@capped(settings(max_examples=200, deadline=None))
@given(
    script=_replies(),
    max_calls=st.integers(1, 6),
    max_steps=st.integers(1, 8),
    filtered=st.booleans(),
)
def test_any_script_keeps_the_contract_and_replays(
    script: list[Message], max_calls: int, max_steps: int, filtered: bool
) -> None:
    """Handoffs taken, refused or unknown, under any budget: the contract holds, it replays."""
    team = Team(script, asynchronous=False, max_calls=max_calls, max_steps=max_steps)
    if filtered:  # the handoff to billing goes through its filter
        team.triage.handoffs[0].filter = last_user
    result = team.run(False)
    assert_contract(result, SENT)
    assert run_from_json(run_to_json(result)) == result
    assert result.agents is not None
    assert result.agent == result.agents.in_turn(result.events)[-1]
    for (agent, *_), event in zip(
        team.asked, [e for e in result.events if e.trigger == "model_replied"], strict=True
    ):
        assert event.agent == agent  # each model event names the agent that was asked


# -- a handoff with a filter: what the next agent is sent is the filter's view, recorded


def last_user(history: list[Message], to: str) -> list[Message]:
    """A filter: the first message and the customer's last words, with a note of who takes over."""
    said = [m for m in history if m["kind"] == "user"][-1]
    return [history[0], {"kind": "user", "text": f"(for {to}) {said['text']}"}]


def filtered_team(
    script: list[Message], filter: Any, *, asynchronous: bool = False, **budget: Any
) -> Team:
    """The team, whose handoff to billing has ``filter``."""
    team = Team(script, asynchronous=asynchronous, **budget)
    team.triage.handoffs[0].filter = filter
    return team


@BOTH
@pytest.mark.row("validating --validate [handoff_filtered]--> handing_off")
@pytest.mark.row("handing_off --hand_off--> (stays)")
@pytest.mark.row("handing_off --handed_off--> awaiting_model")
def test_handoff_filter_view_is_recorded_and_replayed(asynchronous: bool, tmp_path: Path) -> None:
    """Billing is sent the filter's view and what follows; the view is on the event; a replay
    of the run file does not call the filter."""
    asked: list[tuple[list[Message], str]] = []

    def counted(history: list[Message], to: str) -> list[Message]:
        asked.append((history, to))
        return last_user(history, to)

    script = [
        call("c1", "lookup"),
        call("c2", "transfer_to_billing"),
        call("c3", "refund"),
        final("refunded"),
    ]
    team = filtered_team(script, counted, asynchronous=asynchronous)
    result = team.run(asynchronous)

    assert (result.status, result.agent, result.steps, result.calls) == (
        "finished",
        "billing",
        4,
        3,
    )
    assert len(asked) == 1
    assert asked[0][1] == "billing"
    # The history so far: the handoff's call is appended with its answer, after the filter.
    assert [m["kind"] for m in asked[0][0]] == ["system", "user", "call", "tool_result"]
    assert [(name, length) for name, _, _, length in team.asked] == [
        ("triage", 2),
        ("triage", 4),
        ("billing", 2),  # the view alone
        ("billing", 4),  # the view, then billing's call and its result
    ]
    handed = next(e for e in result.events if e.trigger == "handed_off")
    assert (handed.call_id, handed.result_status, handed.agent) == ("c2", "ok", "billing")
    assert handed.input_json is not None
    assert orjson.loads(handed.input_json)[1]["text"] == "(for billing) I was charged twice"
    assert len(result.transcript) == 9  # the record keeps the whole history
    assert_contract(result, SENT)

    path = tmp_path / "run.json"
    save_run(result, path)
    assert load_run(path) == result
    assert len(asked) == 1  # the replay fed the recorded view back


@BOTH
@pytest.mark.row("handing_off --filter_raised--> awaiting_model")
def test_filter_that_raises_answers_error(asynchronous: bool) -> None:
    """A filter that raises (or answers no history): the call is answered error, triage stays."""

    def broken(history: list[Message], to: str) -> list[Message]:
        raise ValueError("no view today")

    for filter in (broken, lambda history, to: [{"kind": "call", "id": "x", "name": "y"}]):
        team = filtered_team(
            [call("c1", "transfer_to_billing"), final("stayed")], filter, asynchronous=asynchronous
        )
        result = team.run(asynchronous)
        assert (result.status, result.agent, result.calls) == ("finished", "triage", 1)
        failed = next(e for e in result.events if e.trigger == "filter_raised")
        assert (failed.call_id, failed.result_status) == ("c1", "error")
        assert failed.appended[1]["content"]["type"] == "HandoffFilterFailed"
        assert [name for name, *_ in team.asked] == ["triage", "triage"]
        assert_contract(result, SENT)
        assert run_from_json(run_to_json(result)) == result


@pytest.mark.row("handing_off --hand_off [cancel_requested]--> cancelled")
def test_cancel_in_handing_off() -> None:
    """Cancelled before the filter is asked: the call is answered cancelled; no filter runs."""
    asked: list[str] = []

    def noted(history: list[Message], to: str) -> list[Message]:
        asked.append(to)
        return last_user(history, to)

    team = filtered_team([call("c1", "transfer_to_billing")], noted)
    token = agentloop.CancelToken()
    run = team.triage.start("I was charged twice", cancel=token)
    while run.state != "handing_off":
        run.step()
    token.cancel()
    result = run.finish()
    assert (result.status, result.calls, asked) == ("cancelled", 1, [])
    assert result.transcript[-1]["status"] == "cancelled"
    assert_contract(result, SENT)


@pytest.mark.row("handing_off --filter_interrupted--> cancelled")
def test_an_interrupted_filter_ends_the_run_cancelled() -> None:
    """KeyboardInterrupt in the filter: the run ends cancelled, the call answered, it propagates."""

    def interrupted(history: list[Message], to: str) -> list[Message]:
        raise KeyboardInterrupt

    team = filtered_team([call("c1", "transfer_to_billing")], interrupted)
    run = team.triage.start("I was charged twice")
    with pytest.raises(KeyboardInterrupt):
        run.finish()
    result = run.result()
    assert (result.status, result.events[-1].trigger) == ("cancelled", "filter_interrupted")
    assert result.transcript[-1]["status"] == "cancelled"
    assert_contract(result, SENT)


@pytest.mark.row("handing_off --interrupted--> cancelled")
def test_interrupted_between_checkpoints_in_handing_off() -> None:
    """An interruption in handing_off with nothing outstanding ends the run, the call answered."""
    from agentloop._core.agents import Agents

    agents = Agents(
        "a", {"a": {"transfer_to_b": "b"}, "b": {}}, frozenset({("a", "transfer_to_b")})
    )
    engine = Engine("go", agents=agents)
    engine.next()
    engine.replied(call("c1", "transfer_to_b"))
    accepted = engine.next()
    assert isinstance(accepted, agentloop.Transition)
    assert accepted.dest == "handing_off"
    made = engine.interrupted(KeyboardInterrupt())
    assert made is not None
    assert (made.trigger, engine.state, engine.agent) == ("interrupted", "cancelled", "a")
    assert [m["status"] for m in engine.history() if m["kind"] == "tool_result"] == ["cancelled"]


def test_a_filtered_handoff_resumes_from_the_ledger(tmp_path: Path) -> None:
    """Stopped after the handoff: a resume feeds the recorded view back, never the filter."""
    team = filtered_team([call("c1", "transfer_to_billing")], last_user)
    team.triage.ledger = SQLiteLedger(tmp_path / "runs.db")
    run = team.triage.start("I was charged twice")
    while not any(event.trigger == "handed_off" for event in run.events):
        run.step()
    run_id = run.run_id
    assert run_id is not None
    del run

    def never(history: list[Message], to: str) -> list[Message]:
        raise AssertionError("the recorded view is fed back")

    again = filtered_team([final("refunded")], never)
    again.triage.ledger = team.triage.ledger
    result = again.triage.resume(run_id)
    assert (result.status, result.agent, result.output) == ("finished", "billing", "refunded")
    assert again.asked == [("billing", "You handle billing.", ["refund", "transfer_to_triage"], 2)]


def test_report_names_a_filtered_handoff() -> None:
    """A handoff through its filter is 'handed off to billing' in show's text too."""
    from agentloop._review.text import run_lines

    team = filtered_team([call("c1", "transfer_to_billing"), final("refunded")], last_user)
    text = "\n".join(run_lines(team.run(False), title="run", limit=None))
    handed = [line for line in text.splitlines() if "handed_off" in line]
    assert len(handed) == 1
    assert handed[0].endswith("handed off to billing")
    assert "agents   triage → billing" in text


# -- the ready-made filters (agentloop.handoff_filters)

#: Before the customer's complaint, a first exchange: two user turns in all.
EARLIER = [
    {"kind": "user", "text": "Hello"},
    {"kind": "final", "text": "Hi, how can I help?"},
    {"kind": "user", "text": "I was charged twice"},
]


@BOTH
@pytest.mark.parametrize("name", ["without_tools", "last_turns"])
def test_ready_made_filters_send_billing_their_view(asynchronous: bool, name: str) -> None:
    """Each filter's view is what billing is sent first (then what follows), and is recorded."""
    filter = {"without_tools": without_tools, "last_turns": last_turns(1)}[name]
    script = [
        batch(call("c1", "lookup"), text="Looking you up."),
        call("c2", "transfer_to_billing"),
        call("c3", "refund"),
        final("refunded"),
    ]
    team = filtered_team(script, filter, asynchronous=asynchronous)
    result = asyncio.run(team.triage.arun(EARLIER)) if asynchronous else team.triage.run(EARLIER)

    assert (result.status, result.agent, result.steps, result.calls) == (
        "finished",
        "billing",
        4,
        3,
    )
    view = {
        "without_tools": [
            {"kind": "system", "text": "Route the customer."},
            *EARLIER,
            {"kind": "final", "text": "Looking you up."},  # said beside the call: kept
        ],
        "last_turns": [
            {"kind": "system", "text": "Route the customer."},
            EARLIER[2],
            result.transcript[4],  # the lookup, with its result: the last turn, whole
            result.transcript[5],
        ],
    }[name]
    handed = next(e for e in result.events if e.trigger == "handed_off")
    assert handed.input_json is not None
    assert orjson.loads(handed.input_json) == view
    assert [(who, length) for who, _, _, length in team.asked] == [
        ("triage", 4),
        ("triage", 6),
        ("billing", len(view)),
        ("billing", len(view) + 2),  # then billing's call and its result
    ]
    assert len(team.refund.calls) == 1
    assert len(result.transcript) == 11  # the record keeps the whole history
    assert_contract(result, [{"kind": "system", "text": "Route the customer."}, *EARLIER])


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """A valid history: system, user and final messages, and calls each answered, in any order
    and with user messages (``and then``) between a call and its result."""
    history: list[Message] = []
    made = 0
    for _ in range(draw(st.integers(0, 10))):
        step = draw(st.sampled_from(["system", "user", "final", "call", "calls"]))
        if step in ("system", "user", "final"):
            history.append({"kind": step, "text": draw(st.sampled_from(["go", "ok", "done"]))})
            continue
        ids = [
            f"c{made + number}"
            for number in range(1 if step == "call" else draw(st.integers(1, 3)))
        ]
        made += len(ids)
        elements = [{"id": id, "name": "read", "arguments": {}} for id in ids]
        if step == "call":
            history.append({"kind": "call", **elements[0]})
        else:
            text = draw(st.sampled_from([None, "", "Reading."]))
            history.append(
                {"kind": "calls", "calls": elements} | ({} if text is None else {"text": text})
            )
        answered = draw(st.permutations(ids))
        for at, id in enumerate(answered, 1):
            history.append(
                {"kind": "tool_result", "id": id, "name": "read", "status": "ok", "content": 1}
            )
            if at < len(answered) and draw(st.integers(0, 4)) == 0:
                history.append({"kind": "user", "text": "and then"})  # a user message mid-batch
    return history


@settings(max_examples=count(60, 500))
@given(history=histories(), n=st.integers(1, 4))
def test_every_filters_view_is_a_history_the_engine_accepts(history: list[Message], n: int) -> None:
    """Whatever the history, each filter's view keeps every call with its result (the engine's
    check of a view, held to a new run's, accepts it), and keeps what it promises."""
    input_messages(history, strict=True)  # the strategy's histories are valid ones
    said = [m for m in history if m["kind"] in ("system", "user", "final")]

    bare = without_tools(copy.deepcopy(history), "billing")
    input_messages(bare, strict=True)
    assert {m["kind"] for m in bare} <= {"system", "user", "final"}
    assert [m for m in bare if m not in said] == [
        {"kind": "final", "text": m["text"]}
        for m in history
        if m["kind"] == "calls" and m.get("text")
    ]

    kept = last_turns(n)(copy.deepcopy(history), "billing")
    input_messages(kept, strict=True)
    # The view is the system messages before some cut, then everything from the cut on;
    # the cut is the start (a user message with no call waiting) or where a turn starts,
    # with n turns from it (or every turn, when there are no more).
    assert any(
        kept == [m for m in history[:at] if m["kind"] == "system"] + history[at:]
        and (at == 0 or (history[at]["kind"] == "user" and history[at]["text"] != "and then"))
        and turns(history[at:]) == min(n, turns(history))
        for at in range(len(history))
    ) or (history == kept == [])


def turns(history: list[Message]) -> int:
    """The turns of a history of ``histories()``: its user messages but those mid-batch."""
    return sum(m["kind"] == "user" and m["text"] != "and then" for m in history)


def test_last_turns_refuses_a_count_below_one() -> None:
    for wrong in (0, -1, 1.5, "2"):
        with pytest.raises(ValueError, match="n an int of 1 or more"):
            last_turns(wrong)  # type: ignore[arg-type]


def replying(asynchronous: bool, *script: Message) -> Any:
    """A model that answers ``script`` in turn, plain or ``async def``."""
    replies = iter(script)
    if not asynchronous:
        return lambda history: next(replies)

    async def amodel(history: list[Message]) -> Message:
        return next(replies)

    return amodel


def run_either(
    asynchronous: bool, loop: Loop[str], text: str, **options: Any
) -> agentloop.RunResult[str]:
    """``loop.run(text, ...)``, or ``loop.arun(text, ...)`` under asyncio."""
    if asynchronous:
        return asyncio.run(loop.arun(text, **options))
    return loop.run(text, **options)


@BOTH
def test_an_agent_handed_to_whose_tools_take_a_context_gets_the_runs_token_and_deps(
    asynchronous: bool,
) -> None:
    """Only billing's tools take a RunContext: its ctx.cancel is the run's token (cancelling it
    stops the run, the call after it answered cancelled), and a run without the deps its
    RunContext[Bank] names is refused before anything runs, naming the tool."""

    class Bank:
        """What billing's refund needs."""

    def stop(ctx: agentloop.RunContext[Bank]) -> str:
        """Refund, then stop the run."""
        assert isinstance(ctx.deps, Bank)
        assert ctx.cancel is not None  # the run's, always there
        ctx.cancel.cancel()
        return "refunded"

    def team() -> Loop[str]:
        billing = Loop(
            replying(asynchronous, batch(call("b1", "stop"), call("b2", "stop"))),
            name="billing",
            tools=[stop],
            deps_type=Bank,
        )
        return Loop(
            replying(asynchronous, call("t1", "transfer_to_billing")),
            name="triage",
            handoffs=[agentloop.handoff(billing)],
            deps_type=Bank,
        )

    result = run_either(asynchronous, team(), "refund me", deps=Bank())
    assert result.status == "cancelled"
    assert [(m["id"], m["status"]) for m in result.transcript if m["kind"] == "tool_result"] == [
        ("t1", "ok"),
        ("b1", "ok"),
        ("b2", "cancelled"),
    ]
    with pytest.raises(TypeError, match=r"expected deps= \(a [\w.<>]*Bank\)"):
        run_either(asynchronous, team(), "refund me")


@BOTH
def test_the_starting_loops_tool_timeout_bounds_every_agents_tools(asynchronous: bool) -> None:
    """front's tool_timeout cuts billing's async tool on either driver (billing's own is not
    used), and a plain tool of billing's it could not interrupt is refused when the run starts."""

    async def wait() -> str:
        """Take longer than the run allows."""
        await asyncio.sleep(5)
        return "too late"

    def slow() -> str:
        """A plain tool: it cannot be interrupted."""
        return "never run"

    def team(tool: Any) -> Loop[str]:
        name = tool.__name__
        own = 9.0 if name == "wait" else None  # billing's own tool_timeout: not the run's
        billing = Loop(
            replying(asynchronous, call("b1", name), final("sorry")),
            name="billing",
            tools=[tool],
            tool_timeout=own,
        )
        return Loop(
            replying(asynchronous, call("t1", "transfer_to_billing")),
            name="triage",
            handoffs=[agentloop.handoff(billing)],
            tool_timeout=0.02,
        )

    result = run_either(asynchronous, team(wait), "hi")
    assert (result.status, result.transcript[4]["status"]) == ("finished", "error")
    assert result.transcript[4]["content"]["type"] == "TimeoutError"
    with pytest.raises(
        ValueError, match=r"tool_timeout=0.02 cannot interrupt the plain tool 'slow'"
    ):
        run_either(asynchronous, team(slow), "hi")
