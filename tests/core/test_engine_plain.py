"""The engine is a plain interpreter of its table: its guards and effects are functions that run."""

from __future__ import annotations

import re
import sys
import typing
from typing import TYPE_CHECKING, Any

import pytest

from agentloop import Loop, State
from agentloop._core import requests
from agentloop._core.build import table_for
from agentloop._core.intake import take_reply
from agentloop._core.register import EFFECTS, GUARDS, MEMBERS
from agentloop._core.rows import (
    basic,
    context,
    handoff,
    loopguard,
    nested_approval,
    output,
    retry,
    review,
    wrapup,
)
from agentloop._core.values import NotJSON, Usage
from agentloop.engine import Budget, Effect, Engine, Guard, RunTool
from agentloop.review import load_run, save_run
from agentloop.testing import ScriptedModel, call, final
from tests.support import ROOT
from tests.support.helpers import add

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path
    from types import FrameType

    from agentloop import Transition
    from agentloop._core.state import RunState

PACKAGE = ROOT / "agentloop"


@pytest.fixture
def rebuilt() -> Iterator[None]:
    """Tables built afresh for the test, from the functions registered then, and after it."""
    table_for.cache_clear()
    yield
    table_for.cache_clear()


def test_a_replaced_effect_is_the_one_that_runs(
    monkeypatch: pytest.MonkeyPatch, rebuilt: None
) -> None:
    """The function registered for an effect is what a table built then runs, a whole run long."""
    kept: list[str] = []

    def keep_result(run: RunState) -> None:
        kept.append(run.draft.call[0])  # type: ignore[index]
        basic.keep_result(run)

    monkeypatch.setitem(EFFECTS, Effect.KEEP_RESULT, keep_result)
    model = ScriptedModel([call("c1", "add", a=1, b=2), call("c2", "add", a=2, b=2), final("7")])
    result = Loop(model, tools={"add": add}).run("go")

    assert result.status == "finished"
    assert kept == ["c1", "c2"]


def test_a_replaced_guard_decides_the_row(monkeypatch: pytest.MonkeyPatch, rebuilt: None) -> None:
    """The function registered for a guard is the one the table consults."""
    monkeypatch.setitem(GUARDS, Guard.CALLS_EXHAUSTED, lambda run: True)
    engine = Engine("go", budget=Budget(max_steps=2, max_calls=5))
    engine.next()
    engine.replied(call("c1", "add", a=1, b=2))
    transition = engine.next()

    assert engine.state is State.EXHAUSTED
    assert transition.reason == "max_calls"  # type: ignore[union-attr]


def test_a_trace_in_a_guard_hits() -> None:
    """sys.settrace sees calls_exhausted's own code run: a breakpoint there would hit."""
    hits: list[int] = []
    code = basic.calls_exhausted.__code__

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code is code and event == "call":
            hits.append(frame.f_lineno)
        return tracer

    engine = Engine("go", budget=Budget(max_steps=2, max_calls=1))
    engine.next()
    engine.replied(call("c1", "add", a=1, b=2))
    sys.settrace(tracer)
    try:
        need = engine.next()  # validate: the call budget is checked
    finally:
        sys.settrace(None)

    assert hits == [code.co_firstlineno]
    assert engine.state is State.DISPATCHING
    assert not isinstance(need, RunTool)  # the accepting transition, made by the engine


def test_every_guard_and_effect_has_one_function_in_its_features_module() -> None:
    """Each member is registered once, by a function of a rows module; the rows name them all."""
    assert set(GUARDS) == set(Guard)
    assert set(EFFECTS) == set(Effect)
    for member, function in [*GUARDS.items(), *EFFECTS.items()]:
        assert function.__module__.startswith("agentloop._core.rows."), (member, function)
        assert function.__name__ == member.value, (member, function)
    named = {
        MEMBERS[function]
        for module in (
            basic,
            output,
            loopguard,
            wrapup,
            context,
            retry,
            review,
            handoff,
            nested_approval,
        )
        for row in module.ROWS
        for function in [*row.get("conditions", ()), *row.get("before", ())]
    }
    assert named == set(Guard) | set(Effect)


def test_the_state_and_the_engine_have_no_instance_dict() -> None:
    """One plain state class of slots, and an engine of slots: no attribute can be made up."""
    engine = Engine("go")
    assert not hasattr(engine, "__dict__")
    assert not hasattr(engine._run, "__dict__")


def test_no_generated_code_anywhere_in_the_package() -> None:
    """No source reading, ast, compile or exec in agentloop: what runs is what is written."""
    forbidden = re.compile(
        r"^\s*(import ast|from ast )|(?<![.\w])compile\(|\bexec\("
        r"|inspect\.getsource|types\.FunctionType",
        re.MULTILINE,
    )
    found = [
        f"{path.relative_to(PACKAGE)}: {match.group(0).strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for match in forbidden.finditer(path.read_text())
    ]
    assert found == []


def test_reply_intake_is_a_value_the_guards_read() -> None:
    """take_reply gives the JSON, a copy, the problem, the usage and the batch's calls."""
    reply = {
        "kind": "calls",
        "calls": [
            {"id": "a", "name": "add", "arguments": {}},
            {"id": "b", "name": "add", "arguments": {}},
        ],
        "usage": {"input_tokens": 3, "output_tokens": 1, "cached_tokens": 0},
    }
    taken = take_reply(reply, Usage())

    assert taken.problem is None
    assert taken.usage == Usage(3, 1, 0)
    assert taken.calls == (("a", "add"), ("b", "add"))
    assert "usage" not in taken.value
    assert not taken.final
    assert take_reply({"kind": "final", "text": "x"}, Usage()).final
    assert take_reply({"kind": "nope"}, Usage()).problem is not None


def test_usage_that_would_sum_past_64_bits_is_refused_when_it_enters(tmp_path: Path) -> None:
    """Each count in range, the run's sum past 2**63 - 1: that reply is malformed; the run saves."""
    half = {"input_tokens": 2**62, "output_tokens": 0, "cached_tokens": 0}
    model = ScriptedModel(
        [{**call("c1", "add", a=1, b=1), "usage": half}, {**final("2"), "usage": half}]
    )
    result = Loop(model, tools={"add": add}, max_steps=5, max_calls=5).run("go")

    assert (result.status, result.steps, result.calls) == ("malformed", 2, 1)
    assert result.error == (
        "malformed reply: expected the run's summed usage to stay within 2**63 - 1 for each "
        "count, got input_tokens past it once this reply's usage is added"
    )
    assert result.usage == Usage(2**62, 0, 0)  # the refused reply's bill is not counted
    assert result.rejected == {**final("2"), "usage": half}
    path = tmp_path / "run.json"
    save_run(result, path)
    assert load_run(path) == result


#: The driver protocol: Engine's public members, all of them.
PROTOCOL = {
    # what the run needs, and the reports
    "next",
    "replied",
    "returned",
    "raised",
    "waited",
    "reviewed",
    "output_checked",
    "decided",
    "interrupted",
    "call_waits",
    # what a driver reads (reviews and output_check are set, by a driver that reviews or checks)
    "state",
    "done",
    "delegated",
    "steps",
    "calls",
    "usage",
    "budget",
    "context",
    "outstanding",
    "running",
    "unstarted",
    "pending",
    "reviews",
    "output_check",
    "agent",
    "run_id",
    "continues",
    "conversation",
    "summary",
    "model_index",
    "history",
    "events",
    "result",
}


def test_the_engines_public_members_are_the_driver_protocol_and_its_docstring_names_them() -> None:
    """Nothing else is public, and the class docstring names every member."""
    assert {name for name in dir(Engine) if not name.startswith("_")} == PROTOCOL
    doc = Engine.__doc__ or ""
    assert [name for name in sorted(PROTOCOL) if f"``{name}" not in doc] == []


def test_the_engines_docstring_lists_every_answer_of_next() -> None:
    """The bullets of the docstring are exactly the types next()'s annotation returns."""
    annotation = Engine.next.__annotations__["return"]
    needs = {need.__name__ for need in typing.get_args(requests.Need)}  # Need: the requests
    returned = {name.strip() for name in str(annotation).split("|")} - {"Need"} | needs
    listed = set(re.findall(r"^    \* ``(\w+)``:", Engine.__doc__ or "", re.MULTILINE))
    assert returned == listed == {
        "AskModel", "Summarise", "RunTool", "ReviewCalls", "AwaitApproval", "Wait", "CheckOutput",
        "Transition",
    }  # fmt: skip


@pytest.mark.parametrize("name", ["steps", "calls", "run_id", "continues", "model_index"])
def test_the_counters_and_the_runs_ids_are_read_only(name: str) -> None:
    """A driver reads them; only the engine's own rows (or its constructor) set them."""
    engine = Engine("go", run_id="r1", continues="p0")
    with pytest.raises(AttributeError):
        setattr(engine, name, 7)
    assert (engine.steps, engine.calls, engine.run_id, engine.continues) == (0, 0, "r1", "p0")
    assert engine.model_index == 0


def test_a_run_id_of_the_wrong_kind_is_refused() -> None:
    """run_id and continues are text or None: else a TypeError naming the parameter."""
    with pytest.raises(TypeError, match="expected run_id to be a str or None, got int"):
        Engine("go", run_id=7)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected continues to be a str or None, got bytes"):
        Engine("go", continues=b"p")  # type: ignore[arg-type]


def test_nothing_outside_the_core_reaches_into_the_engine() -> None:
    """No module outside agentloop/_core reads or writes a private attribute of an engine."""
    reaching = re.compile(r"\bengine\._[a-z]|\._engine\._[a-z]")
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "_core" not in path.relative_to(PACKAGE).parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if reaching.search(line)
    ]
    assert found == []


def test_a_commit_hook_sees_each_transition_before_it_counts_and_may_refuse_it() -> None:
    """A refused transition is not made: the run is as it was, and the report can come again."""
    seen: list[Transition] = []
    refuse = [False]

    def commit(transition: Transition, rejected: object) -> None:
        if refuse[0]:
            raise OSError("the disk is full")
        seen.append(transition)

    engine = Engine("go", budget=Budget(max_steps=3, max_calls=2), commit=commit)
    engine.next()
    refuse[0] = True
    before = (engine.state, engine.steps, engine.calls, engine.history(), engine.outstanding)
    with pytest.raises(OSError, match="the disk is full"):
        engine.replied(call("c1", "add", a=1, b=2))
    assert (
        engine.state,
        engine.steps,
        engine.calls,
        engine.history(),
        engine.outstanding,
    ) == before
    assert engine.events() == ()
    refuse[0] = False
    made = engine.replied(call("c1", "add", a=1, b=2))
    assert seen == [made] == list(engine.events())
    # After an interruption the refusal does not show: the interruption propagates.
    refuse[0] = True
    assert engine.interrupted(KeyboardInterrupt()) is None
    assert (engine.state, engine.events()) == (State.VALIDATING, (made,))


def test_the_commit_hook_is_given_a_reply_that_was_not_json() -> None:
    """A reply the record cannot hold in its event comes with it, as the hook's second part."""
    given: list[object] = []
    engine = Engine("go", commit=lambda transition, rejected: given.append(rejected))
    engine.next()
    engine.replied({"kind": "final", "text": float("nan")})
    assert type(given[0]) is NotJSON
    assert given[0].problem
