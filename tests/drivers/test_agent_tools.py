"""Agents as tools (``Loop.as_tool``): a child run answers a parent's call, on both drivers.

Each test checks parent and child together: status, counters, transcript,
usage and what their handlers did.
"""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import CancelToken, Loop
from agentloop.ledger import SQLiteLedger
from agentloop.review import run_from_json, run_to_json
from agentloop.streaming import Nested, TextDelta, chunked
from agentloop.testing import (
    ScriptedModel,
    assert_contract,
    assert_paired,
    batch,
    call,
    cancel,
    final,
    with_usage,
)
from tests.conftest import capped
from tests.support.helpers import DRIVERS, Driver, kinds


@attrs.frozen
class City:
    name: str
    people: int


def researcher(script: list[Any], **options: Any) -> tuple[Loop[Any], list[str]]:
    """A child Loop whose one tool, ``lookup``, records each question it is asked."""
    asked: list[str] = []

    def lookup(q: str) -> str:
        """Look a question up."""
        asked.append(q)
        return f"found {q}"

    return Loop(ScriptedModel(script), tools=[lookup], **options), asked


def writer(child: Loop[Any], script: list[Any], **options: Any) -> Loop[str]:
    """A parent Loop whose one tool is ``child``, as ``research``."""
    tool = child.as_tool("research", "Research one question.")
    return Loop(ScriptedModel(script), tools=[tool], **options)


def result_of(driver: Driver, loop: Loop[Any], cancel: CancelToken | None = None) -> Any:
    return driver.run(loop, "write", cancel=cancel)


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_child_output_is_the_calls_result(driver: Driver) -> None:
    child, asked = researcher(
        [
            with_usage(call("k1", "lookup", q="capital"), 10, 2),
            with_usage(final({"name": "Paris", "people": 2}), 5, 1),
        ],
        output=City,
    )
    parent = writer(
        child,
        [with_usage(call("c1", "research", input="capital?"), 3, 1), with_usage(final("ok"), 4, 1)],
    )
    result = result_of(driver, parent)

    assert (result.status, result.output, result.steps, result.calls) == ("finished", "ok", 2, 1)
    assert asked == ["capital"]
    assert result.transcript[2] == {
        "kind": "tool_result",
        "id": "c1",
        "name": "research",
        "status": "ok",
        "content": {"name": "Paris", "people": 2},
    }
    kid = result.children["c1"]
    assert (kid.status, kid.output, kid.steps, kid.calls) == ("finished", City("Paris", 2), 2, 1)
    assert kid.transcript[0] == {"kind": "user", "text": "capital?"}
    assert kinds(kid.transcript) == ["user", "call", "tool_result:ok", "final"]
    # The child's tokens roll into the parent's: on the event that answers the call.
    assert kid.usage == agentloop.Usage(15, 3, 0)
    assert result.usage == agentloop.Usage(22, 5, 0)
    answered = next(e for e in result.events if e.trigger == "tool_returned")
    assert answered.usage == kid.usage
    assert_contract(result, "write")
    assert_contract(kid, "capital?")


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_a_child_that_ends_exhausted_answers_an_error_naming_its_status(driver: Driver) -> None:
    child, asked = researcher(
        [call("k1", "lookup", q="a"), call("k2", "lookup", q="b")], max_steps=1
    )
    parent = writer(child, [call("c1", "research", input="go"), final("sorry")])
    result = result_of(driver, parent)

    assert (result.status, result.steps, result.calls) == ("finished", 2, 1)
    assert asked == ["a"]
    answer = result.transcript[2]
    assert answer["status"] == "error"
    assert answer["content"] == {
        "type": "ChildRunEnded",
        "message": "agent 'research' ended exhausted (max_steps)",
        "status": "exhausted",
    }
    kid = result.children["c1"]
    assert (kid.status, kid.reason, kid.steps, kid.calls) == ("exhausted", "max_steps", 1, 1)
    assert_contract(result, "write")


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_a_child_that_fails_answers_an_error(driver: Driver) -> None:
    child, _ = researcher([{"kind": "nonsense"}], max_steps=3, retry=None)
    parent = writer(child, [call("c1", "research", input="go"), final("sorry")])
    result = result_of(driver, parent)

    kid = result.children["c1"]
    assert kid.status == "malformed"
    assert result.status == "finished"
    content = result.transcript[2]["content"]
    assert (content["type"], content["status"]) == ("ChildRunEnded", "malformed")
    assert content["message"].startswith("agent 'research' ended malformed (")


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_the_parents_token_limit_bounds_the_child(driver: Driver) -> None:
    child, asked = researcher(
        [with_usage(call("k1", "lookup", q="a"), 6, 4), final("never asked")],
        max_total_tokens=1000,
    )
    parent = writer(
        child,
        [with_usage(call("c1", "research", input="go"), 10, 2), final("never asked")],
        max_total_tokens=20,
    )
    result = result_of(driver, parent)

    kid = result.children["c1"]
    assert kid.budget.max_total_tokens == 8  # what the parent had left when it started
    assert (kid.status, kid.reason, kid.steps, kid.calls) == ("exhausted", "max_total_tokens", 1, 1)
    assert asked == ["a"]
    # 12 of its own and 10 of the child's: past 20, so the parent asks no model again.
    assert result.usage.total == 22
    assert (result.status, result.reason, result.steps, result.calls) == (
        "exhausted",
        "max_total_tokens",
        1,
        1,
    )
    assert result.transcript[2]["content"]["status"] == "exhausted"
    assert_contract(result, "write")


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
@pytest.mark.parametrize("where", ["child_model", "child_tool"])
def test_cancelling_the_parent_cancels_the_child(driver: Driver, where: str) -> None:
    token = CancelToken()
    effects: list[str] = []

    def lookup(q: str) -> str:
        """Look a question up."""
        effects.append(q)
        if where == "child_tool":
            token.cancel()
        return "found"

    script: list[Any] = [call("k1", "lookup", q="a"), call("k2", "lookup", q="b"), final("x")]
    if where == "child_model":
        script.insert(1, cancel(token))
    child = Loop(ScriptedModel(script), tools=[lookup])
    parent = writer(child, [call("c1", "research", input="go"), final("never")])
    result = result_of(driver, parent, token)

    kid = result.children["c1"]
    assert effects == ["a"]  # the child's second call never ran
    assert (kid.status, kid.steps, kid.calls) == (
        "cancelled",
        2 if where == "child_model" else 1,
        1,
    )
    assert (result.status, result.steps, result.calls) == ("cancelled", 1, 1)
    assert result.transcript[2]["id"] == "c1"
    assert result.transcript[2]["status"] == "cancelled"
    assert kid.transcript[2]["status"] == "ok"
    assert_paired(result)
    assert_paired(kid)
    assert_contract(result, "write")
    assert_contract(kid, "go")


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_child_items_reach_the_parents_delta_listeners_nested(driver: Driver) -> None:
    grandchild = Loop(ScriptedModel([chunked(final("deep"), 2)]))
    child = Loop(
        ScriptedModel([call("g1", "dig", input="down"), chunked(final("mid"), 2)]),
        tools=[grandchild.as_tool("dig", "Dig deeper.")],
    )
    parent = writer(child, [call("c1", "research", input="go"), final("top")])
    heard: list[Any] = []
    run = driver.start(parent, "write")
    run.subscribe_deltas(heard.append)
    list(run)

    texts = [
        (item.path, item.item.text)
        for item in heard
        if type(item) is Nested and type(item.item) is TextDelta
    ]
    assert texts == [(("c1", "g1"), "de"), (("c1", "g1"), "ep"), (("c1",), "mi"), (("c1",), "d")]
    ends = [
        (item.path, item.item.dest)
        for item in heard
        if type(item) is Nested
        and isinstance(item.item, agentloop.Transition)
        and item.item.dest == "finished"
    ]
    assert ends == [(("c1", "g1"), "finished"), (("c1",), "finished")]
    assert all(type(item) is Nested for item in heard)  # the parent's own model does not stream
    result = run.result()
    assert result.children["c1"].children["g1"].output == "deep"
    assert result.transcript[2]["content"] == "mid"


def test_child_items_reach_an_async_listener() -> None:
    child = Loop(ScriptedModel([chunked(final("mid"), 2)]))
    parent = writer(child, [call("c1", "research", input="go"), final("top")])
    heard: list[Any] = []

    async def hear(item: Any) -> None:
        await asyncio.sleep(0)
        heard.append(item)

    async def main() -> agentloop.RunResult[str]:
        run = parent.astart("write")
        run.subscribe_deltas(hear)
        return await run.afinish()

    result = asyncio.run(main())
    assert result.output == "top"
    assert [i.item.text for i in heard if type(i.item) is TextDelta] == ["mi", "d"]


def test_the_agent_tool_publishes_one_input_string() -> None:
    child, _ = researcher([])
    tool = child.as_tool("research", "Research one question.")
    assert tool.parameters == {
        "type": "object",
        "properties": {"input": {"type": "string", "description": "What to ask the agent."}},
        "required": ["input"],
        "additionalProperties": False,
    }
    assert (tool.name, tool.description) == ("research", "Research one question.")


def test_a_child_loop_with_its_own_ledger_is_refused(tmp_path: Any) -> None:
    """A child records in its parent's ledger: one with a ledger of its own is refused."""
    with SQLiteLedger(tmp_path / "runs.db") as ledger:
        durable_child = Loop(ScriptedModel([]), ledger=ledger)
        with pytest.raises(ValueError, match="its Loop has a ledger") as refused:
            durable_child.as_tool("research", "Research.")
        assert "agent tool 'research'" in str(refused.value)
        assert "parent's ledger" in str(refused.value)
        assert list(ledger.run_ids()) == []


def counting(tokens: list[int], text: str) -> Any:
    """A model that calls once for each of ``tokens`` but the last, then answers ``text``.

    Each reply reports its number of input tokens, and one output token. A
    function of the history, so that one Loop can be run again and again.
    """

    def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        done = sum(1 for message in history if message["kind"] == "tool_result")
        if done < len(tokens) - 1:
            arguments = {"q": "a"} if text == "x" else {"input": "a"}
            reply = call(f"k{done}", "lookup" if text == "x" else "research", **arguments)
        else:
            reply = final(text)
        return with_usage(reply, tokens[done], 1)

    return model


@given(
    own=st.lists(st.integers(0, 50), min_size=1, max_size=3),
    kid=st.lists(st.integers(0, 50), min_size=1, max_size=3),
)
@capped(settings(max_examples=100))
def test_usage_is_the_parents_own_plus_the_childs(own: list[int], kid: list[int]) -> None:
    def lookup(q: str) -> str:
        """Look a question up."""
        return q

    child = Loop(counting(kid, "x"), tools=[lookup])
    parent = Loop(counting(own, "y"), tools=[child.as_tool("research", "Research.")])
    result = parent.run("write")
    children = result.children.values()
    assert len(children) == len(own) - 1
    assert all(c.usage == agentloop.Usage(sum(kid), len(kid), 0) for c in children)
    assert result.usage == agentloop.Usage(
        sum(own) + (len(own) - 1) * sum(kid), len(own) + (len(own) - 1) * len(kid), 0
    )
    assert_contract(result, "write")


def test_agent_calls_of_a_batch_run_at_once_under_asyncio() -> None:
    """With max_concurrency=2, two children are under way together; both answer their calls."""
    under_way: list[int] = []
    running = 0

    async def lookup(q: str) -> str:
        """Look a question up."""
        nonlocal running
        running += 1
        under_way.append(running)
        await asyncio.sleep(0.01)
        running -= 1
        return q

    def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        question = history[0]["text"]
        if len(history) == 1:
            return call("k1", "lookup", q=question)
        return final(f"found {question}")

    child = Loop(model, tools=[lookup])
    parent = Loop(
        ScriptedModel(
            [
                batch(call("c1", "research", input="a"), call("c2", "research", input="b")),
                final("both"),
            ]
        ),
        tools=[child.as_tool("research", "Research.")],
        max_concurrency=2,
    )
    result = asyncio.run(parent.arun("write"))
    assert result.status == "finished"
    assert max(under_way) == 2
    assert {c: r.output for c, r in result.children.items()} == {"c1": "found a", "c2": "found b"}
    assert [m["content"] for m in result.transcript if m["kind"] == "tool_result"] == [
        "found a",
        "found b",
    ]
    assert_contract(result, "write")


def test_a_parents_run_file_replays_with_its_childs_usage() -> None:
    """The usage on the event that answers an agent call is recorded, and replays; the
    child's run is a run file inside the parent's, under its call id."""
    from agentloop.review import run_from_json, run_to_json

    child, _ = researcher([with_usage(final("x"), 7, 3)])
    parent = writer(child, [call("c1", "research", input="go"), with_usage(final("y"), 2, 1)])
    result = parent.run("write")
    loaded = run_from_json(run_to_json(result))
    assert loaded.usage == result.usage == agentloop.Usage(9, 4, 0)
    assert loaded.events == result.events
    assert loaded.children == result.children
    assert loaded.children["c1"].usage == agentloop.Usage(7, 3, 0)
    assert loaded == result
    assert run_to_json(loaded) == run_to_json(result)


@pytest.mark.parametrize(
    ("path", "value", "said"),
    [
        (("events",), None, "$.children.c1.events: expected array, got null"),
        (("version",), 5, "$.children.c1.version: expected 6, got integer 5"),
        (  # the reply is the transcript's: another answer than the file's output
            ("transcript", 1, "text"),
            "other",
            "$.children.c1.output: expected 'other', as replaying the run gives, got string 'x'",
        ),
        (("transcript", 1, "kind"), "call", "$.children.c1.events[1]: expected validating"),
        (("output",), "z", "$.children.c1.output: expected 'x', as replaying the run gives"),
    ],
)
def test_a_damaged_child_run_is_refused_where_it_is_in_its_parents_file(
    path: tuple[str | int, ...], value: object, said: str
) -> None:
    """A child's run file is checked as any run file, and named by its place in the parent's."""
    from agentloop.review import RunFileError, run_from_json, run_to_json

    child, _ = researcher([final("x")])
    parent = writer(child, [call("c1", "research", input="go"), final("y")])
    document = orjson.loads(run_to_json(parent.run("write")))
    target = document["children"]["c1"]
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    with pytest.raises(RunFileError) as caught:
        run_from_json(orjson.dumps(document))
    assert str(caught.value).startswith(f"run file: {said}")


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_the_child_gets_the_parents_deps_and_token(driver: Driver) -> None:
    """A child's tool reads the deps given to the parent's run, and the parent's token."""
    seen: list[Any] = []

    def lookup(ctx: agentloop.RunContext[dict[str, int]], q: str) -> int:
        """Look a question up in the deps."""
        seen.append((ctx.deps, ctx.cancel, ctx.call_id))
        return ctx.deps[q]

    child = Loop(ScriptedModel([call("k1", "lookup", q="a"), final("x")]), tools=[lookup])
    parent = writer(child, [call("c1", "research", input="go"), final("y")])
    deps, token = {"a": 1}, CancelToken()
    if driver.name == "sync":
        result = parent.run("write", deps=deps, cancel=token)
    else:
        as_async = driver.as_async(parent)  # type: ignore[union-attr]
        result = driver.runner.run(as_async.arun("write", deps=deps, cancel=token))  # type: ignore[union-attr]
    assert result.status == "finished"
    assert len(seen) == 1
    assert seen[0][0] is deps
    assert seen[0][1] is token
    assert seen[0][2] == "k1"
    assert result.children["c1"].transcript[2]["content"] == 1


def test_a_child_that_wants_other_deps_answers_an_error() -> None:
    """The child's deps are checked as any run's: the mismatch is the call's error."""

    def lookup(ctx: agentloop.RunContext[int], q: str) -> int:
        """Look a question up."""
        return ctx.deps

    child = Loop(ScriptedModel([final("never")]), tools=[lookup], deps_type=int)
    parent = writer(child, [call("c1", "research", input="go"), final("y")])
    result = parent.run("write", deps="not an int")
    assert result.status == "finished"
    assert result.transcript[2]["status"] == "error"
    assert result.transcript[2]["content"]["type"] == "TypeError"
    assert "c1" not in result.children  # no child run began


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_a_parent_cut_by_a_cancel_in_its_child_loads_back_from_its_run_file(
    driver: Driver,
) -> None:
    """The child's call is answered ``cancelled`` by the run's end, not by an outcome: the
    run file's check still finds the call it was handed out under, and loads it back equal."""
    token = CancelToken()
    child = Loop(ScriptedModel([cancel(token), final("never")]))
    parent = writer(child, [call("c1", "research", input="go"), final("never")])
    result = result_of(driver, parent, token)
    assert (result.status, result.transcript[2]["status"]) == ("cancelled", "cancelled")
    assert result.children["c1"].status == "cancelled"
    loaded = run_from_json(run_to_json(result))
    assert loaded == result
    assert loaded.children["c1"].transcript == result.children["c1"].transcript


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_cancel_during_a_childs_async_tool_ends_both_paired(concurrency: int) -> None:
    """Under asyncio the token cuts the child's awaited tool; every call of both is answered."""
    token = CancelToken()
    effects: list[tuple[str, str]] = []

    async def lookup(q: str) -> str:
        """Look a question up, slowly."""
        effects.append(("start", q))
        if q == "a":
            await asyncio.sleep(0.01)
            token.cancel()
        await asyncio.sleep(5)
        effects.append(("end", q))
        return q

    def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        question = history[0]["text"]
        return call("k1", "lookup", q=question) if len(history) == 1 else final(question)

    child = Loop(model, tools=[lookup])
    parent = Loop(
        ScriptedModel(
            [
                batch(call("c1", "research", input="a"), call("c2", "research", input="b")),
                final("x"),
            ]
        ),
        tools=[child.as_tool("research", "Research.")],
        max_concurrency=concurrency,
    )
    result = asyncio.run(parent.arun("write", cancel=token))

    assert (result.status, result.steps, result.calls) == ("cancelled", 1, 2)
    answers = [(m["id"], m["status"]) for m in result.transcript if m["kind"] == "tool_result"]
    assert answers == [("c1", "cancelled"), ("c2", "cancelled")]
    started = ["a"] if concurrency == 1 else ["a", "b"]  # c2 never began with one at a time
    assert effects == [("start", q) for q in started]
    assert sorted(result.children) == ["c1", "c2"][: len(started)]
    for kid in result.children.values():
        assert kid.status == "cancelled"
        assert kid.transcript[2]["status"] == "cancelled"
        assert_paired(kid)
    assert_contract(result, "write")


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_childs_model_that_cancels_beside_a_sibling_ends_the_parent_cancelled(
    concurrency: int,
) -> None:
    """asyncio: the child's model cancels the parent's token while a plain sibling call is out.
    The child ends cancelled, and its call answers ``cancelled`` as the run ends so: with
    calls at once, the call's task ends in ``TokenCancelled`` (a ``CancelledError``), which is
    the token's cut, not a task cancelled by its tool."""
    token = CancelToken()
    effects: list[int] = []

    async def note(n: int) -> int:
        """Note a number."""
        await asyncio.sleep(0)
        effects.append(n)
        return n

    async def cancelling(history: list[dict[str, Any]]) -> dict[str, Any]:
        await asyncio.sleep(0)  # the sibling's task starts meanwhile
        token.cancel()
        return final("never")

    child = Loop(cancelling)
    parent = Loop(
        ScriptedModel(
            [batch(call("c1", "research", input="a"), call("c2", "note", n=1)), final("x")]
        ),
        tools=[child.as_tool("research", "Research."), note],
        max_concurrency=concurrency,
    )
    result = asyncio.run(parent.arun("write", cancel=token))

    assert (result.status, result.steps, result.calls) == ("cancelled", 1, 2)
    answers = [(m["id"], m["status"]) for m in result.transcript if m["kind"] == "tool_result"]
    assert answers == [("c1", "cancelled"), ("c2", "cancelled")]
    kid = result.children["c1"]
    assert (kid.status, kid.steps, kid.calls) == ("cancelled", 1, 0)
    assert effects == []  # c2 never ran, or was cut as it awaited
    assert_paired(kid)
    assert_contract(result, "write")


@attrs.frozen
class Query:
    topic: str
    depth: int = 1


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_a_typed_input_is_published_and_given_to_the_child(driver: Driver) -> None:
    """``input=Query`` publishes Query's schema; the child starts from prompt(query) or its JSON."""
    shown: list[Query] = []

    def prompt(query: Query) -> str:
        shown.append(query)
        return f"research {query.topic} to depth {query.depth}"

    for asked, expected in [
        (prompt, "research heat to depth 2"),
        (None, '{"topic":"heat","depth":2}'),
    ]:
        child = Loop(ScriptedModel([final("found")]))
        tool = child.as_tool("research", "Research.", input=Query, prompt=asked)
        assert tool.parameters["properties"].keys() == {"topic", "depth"}
        assert tool.parameters["required"] == ["topic"]
        parent = Loop(
            ScriptedModel([call("c1", "research", topic="heat", depth=2), final("y")]),
            tools=[tool],
        )
        result = result_of(driver, parent)
        assert result.children["c1"].transcript[0] == {"kind": "user", "text": expected}
        assert result.transcript[2]["content"] == "found"
    assert shown == [Query("heat", 2)]


def test_a_typed_input_refuses_what_is_not_an_object() -> None:
    child, _ = researcher([])
    with pytest.raises(TypeError, match="expected input= to be a type whose JSON is an object"):
        child.as_tool("research", "Research.", input=int)
    with pytest.raises(TypeError, match="agent tool 'research': expected input= to be a type"):
        child.as_tool("research", "Research.", input="str")  # no type at all: input= is named
    with pytest.raises(TypeError, match=r"given with input=, got .* without input="):
        child.as_tool("research", "Research.", prompt=str)
    parent = writer(child, [call("c1", "research", input=3), final("y")])
    result = parent.run("write")  # the default {"input": str} is checked as any schema is
    assert result.transcript[2]["status"] == "invalid_arguments"
    assert "c1" not in result.children


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_deps_maps_the_parents_context_to_the_childs_deps(driver: Driver) -> None:
    """``as_tool(deps=f)``: the child's deps are ``f(ctx)`` of the parent's call."""
    seen: list[Any] = []

    def lookup(ctx: agentloop.RunContext[str], q: str) -> str:
        """Look a question up."""
        seen.append(ctx.deps)
        return q

    child = Loop(ScriptedModel([call("k1", "lookup", q="a"), final("x")]), tools=[lookup])
    tool = child.as_tool(
        "research", "Research.", deps=lambda ctx: f"{ctx.deps['db']}/{ctx.call_id}"
    )
    parent = Loop(ScriptedModel([call("c1", "research", input="go"), final("y")]), tools=[tool])
    if driver.name == "sync":
        result = parent.run("write", deps={"db": "main"})
    else:
        as_async = driver.as_async(parent)  # type: ignore[union-attr]
        result = driver.runner.run(as_async.arun("write", deps={"db": "main"}))  # type: ignore[union-attr]
    assert result.status == "finished"
    assert seen == ["main/c1"]
    with pytest.raises(TypeError, match="expected deps to be a function"):
        child.as_tool("research", "Research.", deps="main")  # type: ignore[arg-type]


def streamed_family() -> tuple[Loop[Any], Loop[Any]]:
    """A parent whose streaming model calls a child whose streaming model answers."""
    child = Loop(ScriptedModel([chunked(final("mid"), 2)]))
    parent = Loop(
        ScriptedModel([chunked(call("c1", "research", input="go"), 2), chunked(final("top"), 2)]),
        tools=[child.as_tool("research", "Research one question.")],
    )
    return parent, child


def shown(items: list[Any]) -> list[tuple[Any, ...]]:
    """What a stream yielded, each item as (kind, path, what): in the order yielded."""
    out: list[tuple[Any, ...]] = []
    for item in items:
        path, inner = ((), item) if type(item) is not Nested else (item.path, item.item)
        if isinstance(inner, agentloop.Transition):
            out.append(("transition", path, inner.trigger.value, inner.dest.value))
        elif type(inner) is TextDelta:
            out.append(("text", path, inner.text))
    return out


STREAMED = [
    ("transition", (), "model_replied", "validating"),
    ("transition", (), "validate", "dispatching"),
    ("text", ("c1",), "mi"),
    ("text", ("c1",), "d"),
    ("transition", ("c1",), "model_replied", "validating"),
    ("transition", ("c1",), "validate", "finished"),
    ("transition", (), "tool_returned", "awaiting_model"),
    ("text", (), "to"),
    ("text", (), "p"),
    ("transition", (), "model_replied", "validating"),
    ("transition", (), "validate", "finished"),
]


def test_a_child_run_reaches_the_parents_stream_before_its_calls_transition() -> None:
    parent, _ = streamed_family()
    run = parent.start("write")
    heard: list[Any] = []
    run.subscribe_deltas(heard.append)
    items = list(run.stream())

    assert shown(items) == STREAMED
    assert [item for item in items if type(item) is Nested] == [
        item for item in heard if type(item) is Nested
    ]  # the same items the listeners heard, in the same order
    result = run.result()
    assert result.status == "finished"
    assert (result.steps, result.calls) == (2, 1)
    assert result.transcript[2]["content"] == "mid"
    assert result.children["c1"].output == "mid"
    assert_paired(result)
    assert_paired(result.children["c1"])


def test_a_child_run_reaches_the_parents_astream_before_its_calls_transition() -> None:
    parent, _ = streamed_family()

    async def main() -> tuple[list[Any], Any]:
        run = parent.astart("write")
        items = [item async for item in run.astream()]
        return items, run.result()

    items, result = asyncio.run(main())
    assert shown(items) == STREAMED
    assert result.status == "finished"
    assert (result.steps, result.calls) == (2, 1)
    assert result.children["c1"].output == "mid"
    assert_paired(result)


def test_a_fork_past_an_agent_call_carries_its_child_and_one_before_runs_a_new_one() -> None:
    def answering(script: list[Any]) -> Any:
        return lambda history: script[sum(m["kind"] in ("call", "calls") for m in history)]

    asked: list[str] = []

    def look(q: str) -> str:
        """Look."""
        asked.append(q)
        return "seen"

    kid = Loop(answering([call("k1", "look", q="b"), final("kid out")]), tools=[look])
    parent = Loop(
        answering([call("c1", "post", input="w"), final("y")]),
        tools=[kid.as_tool("post", "Post.")],
    )
    whole = parent.run("t")
    returned = next(i for i, e in enumerate(whole.events) if e.trigger == "tool_returned")
    carried = parent.fork(whole, at=returned + 1).finish()
    assert (list(carried.children), carried.children["c1"]) == (["c1"], whole.children["c1"])
    assert asked == ["b"]  # carried, not run again
    fresh = parent.fork(whole, at=1).finish()  # before the agent call: a child of its own
    assert fresh.children["c1"].output == "kid out"
    assert asked == ["b", "b"]
