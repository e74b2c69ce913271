"""A run file's child runs answer their calls: a child whose output is not its call's answer
is refused, named by its place in the file.

An agent tool answers its call with its child run's output (``ok``, a typed
output as its JSON), or, for a child that ended otherwise than finished,
with an ``error`` naming its status and why (``ChildRunEnded``); either cut
to ``max_result_chars`` as any result. A saved run file is edited so that a
call's answer and its child disagree, each file otherwise whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import orjson
import pytest

from agentloop import CancelToken, Loop, Tool
from agentloop.review import RunFileError, load_run, run_to_json, save_run
from agentloop.testing import ScriptedModel, call, final

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


@attrs.frozen
class City:
    name: str
    people: int


def lookup(q: str) -> str:
    """Look a question up."""
    return f"found {q}"


def family(child: Loop[Any], **tool: Any) -> Loop[Any]:
    """A parent whose call ``c1`` runs ``child`` as its tool ``research``, then finishes."""
    return Loop(
        ScriptedModel([call("c1", "research", input="go"), final("done")]),
        tools=[child.as_tool("research", "Research.", **tool)],
    )


def finished() -> Loop[Any]:
    return family(Loop(ScriptedModel([final("found it")])))


def typed() -> Loop[Any]:
    return family(Loop(ScriptedModel([final({"name": "Oslo", "people": 700_000})]), output=City))


def exhausted() -> Loop[Any]:
    script = [call("k1", "lookup", q="a"), call("k2", "lookup", q="b")]
    return family(Loop(ScriptedModel(script), tools=[lookup], max_steps=1))


def cut() -> Loop[Any]:
    return family(Loop(ScriptedModel([final("found it " * 10)])), max_result_chars=12)


def grandchild() -> Loop[Any]:
    """``c1``'s child calls an agent tool ``dig`` of its own (``k1``)."""
    deep = Loop(ScriptedModel([final("deep")]))
    middle = Loop(
        ScriptedModel([call("k1", "dig", input="x"), final("mid")]),
        tools=[deep.as_tool("dig", "Dig.")],
    )
    return family(middle)


def saved(loop: Loop[Any], path: Path) -> dict[str, Any]:
    """``loop``'s run saved to ``path``, which loads as it was; its document."""
    result = loop.run("write")
    save_run(result, path)
    assert run_to_json(load_run(path)) == run_to_json(result)  # a typed output as its JSON
    document: dict[str, Any] = orjson.loads(path.read_bytes())
    return document


def answer_of(document: dict[str, Any], call_id: str = "c1") -> dict[str, Any]:
    """The tool result that answers ``call_id`` in ``document``'s transcript."""
    return next(
        m for m in document["transcript"] if m["kind"] == "tool_result" and m["id"] == call_id
    )


def _other_text(d: dict[str, Any]) -> str:
    answer_of(d)["content"] = "found nothing"
    return "$.children.c1: expected a child whose output its call's outcome holds (ok \"found "


def _other_field(d: dict[str, Any]) -> str:
    answer_of(d)["content"]["people"] = 7
    return "$.children.c1: expected a child whose output its call's outcome holds (ok {"


def _other_status(d: dict[str, Any]) -> str:
    answer_of(d)["content"]["message"] = "agent 'research' ended exhausted (max_calls)"
    return "$.children.c1: expected a child whose end (exhausted) its call's outcome holds"


def _ok_for_an_error(d: dict[str, Any]) -> str:
    answer_of(d).update(status="ok", content="all found")
    return "$.children.c1: expected a child whose end (exhausted) its call's outcome holds (ok"


def _other_cut(d: dict[str, Any]) -> str:
    answer = answer_of(d)
    answer["content"] = answer["content"].replace("found it fou", "found it all", 1)
    return "$.children.c1: expected a child whose output its call's outcome holds (ok"


def _uncut_text(d: dict[str, Any]) -> str:
    answer = answer_of(d)
    answer["content"] = answer["content"].replace("max_result_chars=12", "max_result_chars=13")
    return "$.children.c1: expected a child whose output its call's outcome holds (ok"


def _grandchilds_answer(d: dict[str, Any]) -> str:
    answer_of(d["children"]["c1"], "k1")["content"] = "shallow"
    return "$.children.c1.children.k1: expected a child whose output its call's outcome holds"


@pytest.mark.parametrize(
    ("make", "edit"),
    [
        (finished, _other_text),
        (typed, _other_field),
        (exhausted, _other_status),
        (exhausted, _ok_for_an_error),
        (cut, _other_cut),
        (cut, _uncut_text),
        (grandchild, _grandchilds_answer),
    ],
    ids=[
        "another text",
        "a typed output's field",
        "another end",
        "ok for a child that ended exhausted",
        "a cut of another text",
        "a cut marker naming another limit",
        "a grandchild's",
    ],
)
def test_a_child_whose_output_is_not_its_calls_answer_is_refused(
    tmp_path: Path, make: Callable[[], Loop[Any]], edit: Callable[[dict[str, Any]], str]
) -> None:
    """The parent's record is whole (its replay takes the edited answer as the tool's),
    and so is the child's: only the two disagree."""
    path = tmp_path / "run.json"
    document = saved(make(), path)
    said = edit(document)
    path.write_bytes(orjson.dumps(document))
    with pytest.raises(RunFileError) as caught:
        load_run(path)
    assert str(caught.value).startswith(f"{path}: {said}")
    assert caught.value.where == f"{path}: {said.split(':')[0]}"


def test_the_answers_of_children_load_as_they_were_saved(tmp_path: Path) -> None:
    """Each way a child answers: its text, its typed output's JSON, its end, a cut, a
    grandchild's; and a child cancelled with its parent, whose call the cancel answers."""
    for make in (finished, typed, exhausted, cut, grandchild):
        document = saved(make(), tmp_path / f"{make.__name__}.json")
        child = document["children"]["c1"]
        content = answer_of(document)["content"]
        if make is typed:
            assert content == {"name": "Oslo", "people": 700_000} == orjson.loads(child["output"])
        if make is exhausted:
            assert (content["type"], content["status"]) == ("ChildRunEnded", "exhausted")
        if make is cut:
            assert content.startswith("found it fou\n[... cut: 78 of 90 characters")

    def stop(q: str) -> str:
        """Cancel the run."""
        token.cancel()
        return "stopped"

    token = CancelToken()
    child = Loop(ScriptedModel([call("k1", "stop", q="a"), final("x")]), tools=[Tool(stop)])
    result = family(child).run("write", cancel=token)
    assert (result.status, result.children["c1"].status) == ("cancelled", "cancelled")
    save_run(result, tmp_path / "cancelled.json")
    assert run_to_json(load_run(tmp_path / "cancelled.json")) == run_to_json(result)
