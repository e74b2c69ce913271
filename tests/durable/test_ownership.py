"""Nobody can rewrite the record: the model, the tools and the caller all get copies."""

from __future__ import annotations

from typing import Any

from agentloop import Loop
from agentloop.testing import ScriptedModel
from tests.support.helpers import Driver, Recorder, call, drive, final, kinds

Message = dict[str, Any]


def test_model_rewriting_its_history_changes_nothing(driver: Driver) -> None:
    """A model that clears or rewrites the history it was given leaves the record intact."""

    def vandal(history: list[Message]) -> Message:
        for message in history:
            if message["kind"] == "call":
                message["id"] = "forged"
                message["arguments"]["a"] = 999
        history.clear()
        return final("ok")

    model = ScriptedModel([call("c1", a=1, b=2), vandal])
    run = driver.start(Loop(model, tools={"add": Recorder()}), "go")
    drive(run)
    transcript = run.result().transcript

    assert transcript[1] == call("c1", a=1, b=2)
    assert kinds(transcript) == ["user", "call", "tool_result:ok", "final"]


def test_each_step_gets_a_fresh_history(driver: Driver) -> None:
    """What the model did to one step's copy is not seen on the next step."""

    def scribble(history: list[Message]) -> Message:
        history.append({"kind": "user", "text": "injected"})
        history[0]["text"] = "rewritten"
        return call("c1", a=1, b=1)

    model = ScriptedModel([scribble, final()])
    driver.run(Loop(model, tools={"add": Recorder()}), "original")

    assert model.seen[1][0] == {"kind": "user", "text": "original"}
    assert kinds(model.seen[1]) == ["user", "call", "tool_result:ok"]


def test_reply_is_copied_on_intake(driver: Driver) -> None:
    """A model that mutates its reply after returning it cannot change the recorded call."""
    kept: list[Message] = []

    def sneaky(history: list[Message]) -> Message:
        reply = call("c1", a=1, b=1)
        kept.append(reply)
        return reply

    run = driver.start(Loop(ScriptedModel([sneaky, final()]), tools={"add": Recorder()}), "go")
    run.step()
    kept[0]["arguments"]["a"] = 100
    kept[0]["id"] = "other"
    drive(run)

    assert run.result().transcript[1] == call("c1", a=1, b=1)


def test_handler_gets_a_copy_of_the_arguments(driver: Driver) -> None:
    """A handler mutating its arguments does not change the recorded call."""

    def mutate(items: list[int]) -> int:
        items.append(4)
        return len(items)

    model = ScriptedModel([call("c1", name="mutate", items=[1, 2, 3]), final()])
    result = driver.run(Loop(model, tools={"mutate": mutate}), "go")

    assert result.transcript[1]["arguments"] == {"items": [1, 2, 3]}
    assert result.transcript[2]["content"] == 4


def test_result_content_is_copied_on_intake(driver: Driver) -> None:
    """A tool that keeps and later mutates what it returned cannot change the record."""
    returned: list[list[int]] = []

    def leaky() -> list[int]:
        value = [1, 2]
        returned.append(value)
        return value

    model = ScriptedModel([call("c1", name="leaky"), final()])
    run = driver.start(Loop(model, tools={"leaky": leaky}), "go")
    drive(run)
    returned[0].append(3)

    assert run.result().transcript[2]["content"] == [1, 2]


def test_input_is_copied_at_start(driver: Driver) -> None:
    """Mutating the caller's input list after start changes nothing recorded."""
    messages: list[Message] = [{"kind": "user", "text": "hi", "meta": {"tag": "a"}}]
    run = driver.start(Loop(ScriptedModel([final()])), messages)
    messages[0]["meta"]["tag"] = "b"
    messages.append({"kind": "user", "text": "late"})
    drive(run)

    assert run.result().transcript[0] == {"kind": "user", "text": "hi", "meta": {"tag": "a"}}
    assert len(run.result().transcript) == 2


def test_every_transcript_handed_out_is_a_fresh_copy(driver: Driver) -> None:
    """run.transcript, result.transcript, transition.appended and rejected are all copies."""
    run = driver.start(
        Loop(
            ScriptedModel([call("c1", a=1, b=1), call("c1", a=1, b=1)]), tools={"add": Recorder()}
        ),
        "go",
    )
    drive(run)
    result = run.result()

    run.transcript.clear()
    result.transcript[0]["text"] = "changed"
    returned = next(e for e in result.events if e.trigger == "tool_returned")
    returned.appended[0]["id"] = "changed"
    result.rejected["id"] = "changed"

    assert result.transcript[0]["text"] == "go"
    assert len(run.transcript) == 3
    assert result.rejected["id"] == "c1"
    assert [m["id"] for m in result.transcript[1:]] == ["c1", "c1"]
    assert returned.appended[0]["id"] == "c1"
    assert run.transcript is not run.transcript
