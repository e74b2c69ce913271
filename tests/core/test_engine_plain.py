"""The engine is a plain interpreter of its table: its guards and effects are methods that run."""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Any

from agentloop import Loop, State
from agentloop._core.intake import take_reply
from agentloop._core.values import Usage
from agentloop.engine import Budget, Effect, Engine, Guard, RunTool
from agentloop.review import load_run, save_run
from agentloop.testing import ScriptedModel, call, final
from tests.support import ROOT
from tests.support.helpers import add

if TYPE_CHECKING:
    from pathlib import Path
    from types import FrameType

    import pytest

PACKAGE = ROOT / "agentloop"


def test_a_replaced_effect_is_the_one_that_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Patching Engine._keep_result changes what a whole run records."""
    kept: list[str] = []
    original = Engine._keep_result

    def keep_result(self: Engine) -> None:
        kept.append(self._draft.call[0])  # type: ignore[index]
        original(self)

    monkeypatch.setattr(Engine, "_keep_result", keep_result)
    model = ScriptedModel([call("c1", "add", a=1, b=2), call("c2", "add", a=2, b=2), final("7")])
    result = Loop(model, tools={"add": add}).run("go")

    assert result.status == "finished"
    assert kept == ["c1", "c2"]


def test_a_trace_in_a_guard_hits() -> None:
    """sys.settrace sees Engine._calls_exhausted's own code run: a breakpoint there would hit."""
    hits: list[int] = []
    code = Engine._calls_exhausted.__code__

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


def test_a_subclass_guard_decides_the_row() -> None:
    """A guard overridden in a subclass is the one the table consults."""

    class NoBudget(Engine):
        __slots__ = ()

        def _calls_exhausted(self) -> bool:
            return True

    engine = NoBudget("go", budget=Budget(max_steps=2, max_calls=5))
    engine.next()
    engine.replied(call("c1", "add", a=1, b=2))
    transition = engine.next()

    assert engine.state is State.EXHAUSTED
    assert transition.reason == "max_calls"  # type: ignore[union-attr]


def test_every_guard_and_effect_is_a_method_of_an_engine_without_a_dict() -> None:
    """Each feature's rows are mixins of the engine: each name is found, no instance dict."""
    engine = Engine("go")
    names = [f"_{guard.value}" for guard in Guard] + [f"_{effect.value}" for effect in Effect]
    missing = [name for name in names if not callable(getattr(engine, name, None))]

    assert missing == []
    assert not hasattr(engine, "__dict__")  # the slots are RunState's alone, the mixins add none


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
