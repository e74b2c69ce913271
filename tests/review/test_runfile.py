"""Saved runs: the run file document, exact round trips, and refusing damaged files."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import pickle
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import CancelToken, JSONError, Loop, RunResult
from agentloop._cli.demo import QUESTION, demo_loop

# Private: the JSON intake check itself (public only through a run) and the demo's scenario;
# the run file's layout, to compare a damaged document with.
from agentloop._core.json import to_json
from agentloop._review.runencode import run_text
from agentloop.review import NotJSON, RecordedException, RunFileError
from agentloop.testing import ScriptedModel, batch
from tests.support.helpers import call, final

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

Doc = dict[str, Any]

# -- random runs -----------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
CALLS = st.builds(
    lambda i, n, a: {"kind": "call", "id": i, "name": n, "arguments": a},
    st.sampled_from(["c1", "c2", "c3"]),  # few ids, so repeats happen
    st.sampled_from(["add", "echo", "boom", "halt", "missing"]),
    st.dictionaries(st.sampled_from(["a", "b", "value"]), JSON_VALUES, max_size=2),
)
BATCHES = st.builds(
    lambda made, text: batch(*made, text=text),
    st.lists(CALLS, min_size=1, max_size=3),
    st.none() | st.text(max_size=8),
)
FINALS = st.builds(final, st.text(max_size=8))
GARBAGE: st.SearchStrategy[object] = st.sampled_from(
    [
        None,
        42,
        "text",
        {"kind": "call"},
        {"kind": "final", "text": "x", "extra": 1},
        {"kind": "final", "text": float("nan")},  # not JSON: rejected is kept by repr
        {"kind": "call", "id": "s", "name": "add", "arguments": {"a": {1, 2}}},  # a set
        ("final", "tuple"),
    ]
)
ERRORS = (
    st.builds(ValueError, st.text(max_size=5))
    | st.just(KeyError("k"))
    | st.just(KeyboardInterrupt())  # the model is interrupted: the run ends cancelled
)
REPLIES = st.one_of(CALLS, CALLS, BATCHES, BATCHES, FINALS, GARBAGE, ERRORS)


def tools() -> dict[str, Callable[..., Any]]:
    """Tools that add, echo their arguments, raise, and are interrupted (Ctrl-C)."""

    def add_or_zero(a: int = 0, b: int = 0) -> int:
        return a + b

    def echo(**arguments: Any) -> Any:
        return arguments

    def boom(**arguments: Any) -> None:
        raise RuntimeError("tool broke")

    def halt(**arguments: Any) -> None:
        raise KeyboardInterrupt

    return {"add": add_or_zero, "echo": echo, "boom": boom, "halt": halt}


def random_run(
    replies: list[object], max_steps: int, max_calls: int, cancel_after: int | None
) -> RunResult:
    """Drive a scripted run step by step, cancelling after ``cancel_after`` transitions."""
    script = ScriptedModel([*replies, *[final("end")] * 10])
    token = CancelToken()
    run = Loop(script, tools=tools(), max_steps=max_steps, max_calls=max_calls).start(
        "go", cancel=token
    )
    while not run.done:
        if len(run.events) == cancel_after:
            token.cancel()
        with contextlib.suppress(KeyboardInterrupt):  # the run records it, then re-raises
            run.step()
    return run.result()


def is_json(value: object) -> bool:
    try:
        to_json(value)
    except JSONError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(
    replies=st.lists(REPLIES, max_size=10),
    max_steps=st.integers(0, 7),
    max_calls=st.integers(0, 4),
    cancel_after=st.none() | st.integers(0, 12),
)
def test_random_runs_round_trip(
    replies: list[object], max_steps: int, max_calls: int, cancel_after: int | None
) -> None:
    """Every run loads back equal to itself, and saves again to the same text."""
    result = random_run(replies, max_steps, max_calls, cancel_after)
    event(f"status={result.status.value}")
    event(f"last={result.events[-1].trigger.value}")
    text = agentloop.review.run_to_json(result)
    loaded = agentloop.review.run_from_json(text)

    assert loaded == result  # a reply that was not JSON was kept as NotJSON from the start
    assert is_json(result.rejected_value) or isinstance(result.rejected_value, NotJSON)
    assert loaded.transcript == result.transcript
    assert [e.appended for e in loaded.events] == [e.appended for e in result.events]
    # Saving what was loaded writes the same document, exception records included.
    assert agentloop.review.run_to_json(loaded) == text
    for saved, live in zip(loaded.events, result.events, strict=True):
        assert (saved.exception is None) == (live.exception is None)
        if live.exception is not None:
            assert isinstance(saved.exception, RecordedException)
            assert saved.exception.type_name == type(live.exception).__name__
            assert saved.exception.message == str(live.exception)


# -- the document ----------------------------------------------------------------


@pytest.fixture(scope="module")
def demo() -> RunResult:
    """The demo's run: a batch of two calls, a call, and a final answer."""
    return demo_loop().run(QUESTION)


@pytest.fixture
def doc(demo: RunResult) -> Doc:
    """The demo run as a parsed document, fresh for each test to damage."""
    return orjson.loads(agentloop.review.run_to_json(demo))  # type: ignore[no-any-return]


def test_document_has_every_version_6_field(demo: RunResult, doc: Doc) -> None:
    """The header, the outcome, the budget, the transcript once, and each event only what it
    adds: its row, its times, and the calls it started; the transcript holds the inputs."""
    assert list(doc) == [
        "format",
        "version",
        "status",
        "output",
        "steps",
        "calls",
        "budget",
        "input",
        "transcript",
        "events",
    ]
    assert (doc["format"], doc["version"], doc["status"]) == ("agentloop.run", 6, "finished")
    assert (doc["steps"], doc["calls"], doc["input"]) == (3, 3, 1)
    assert doc["budget"] == {"max_steps": 5, "max_calls": 3}
    assert doc["transcript"] == demo.transcript
    assert len(doc["events"]) == len(demo.events) == 9
    times = [(e.at, e.took) for e in demo.events]
    began = times[0][0] - times[0][1]  # type: ignore[operator]  # a live run's, both set
    for record, (at, took) in zip(doc["events"], times, strict=True):
        assert at is not None
        assert record.pop("at") == round(took if record is doc["events"][0] else at - began, 6)  # type: ignore[arg-type]
        assert record.pop("took", None) == (None if took is None else round(took, 6))
    assert doc["events"] == [
        {"on": "model_replied"},  # its reply is the transcript's next message
        {"on": "validate"},
        {"on": "tool_returned", "if": "batch_open", "started": ["c1"]},  # its content too
        {"on": "tool_returned", "started": ["c2"]},
        {"on": "model_replied"},
        {"on": "validate"},
        {"on": "tool_returned", "started": ["c3"]},
        {"on": "model_replied"},
        {"on": "validate", "if": "reply_is_final"},
    ]


def test_each_message_and_each_event_is_one_line(demo: RunResult) -> None:
    """The top level is indented; a message or an event is one line, as orjson writes it."""
    lines = agentloop.review.run_to_json(demo).splitlines()
    start = lines.index('  "transcript": [')
    messages = lines[start + 1 : start + 1 + len(demo.transcript)]
    assert [orjson.loads(line.strip().rstrip(",")) for line in messages] == demo.transcript
    start = lines.index('  "events": [')
    events = lines[start + 1 : start + 1 + len(demo.events)]
    assert all(orjson.loads(line.strip().rstrip(","))["on"] for line in events)
    assert lines[start + 1 + len(demo.events)] == "  ]"


def test_exception_is_saved_as_type_and_message() -> None:
    """A model's exception is stored as {type, message} and loads as a RecordedException."""
    result = Loop(ScriptedModel([ValueError("model broke")])).run("go")
    doc = orjson.loads(agentloop.review.run_to_json(result))

    assert doc["events"][-1]["exception"] == {"type": "ValueError", "message": "model broke"}
    assert doc["error"] == "the model raised ValueError: model broke"
    loaded = agentloop.review.run_from_json(agentloop.review.run_to_json(result))
    exc = loaded.events[-1].exception
    assert isinstance(exc, RecordedException)
    assert (exc.type_name, exc.message, str(exc)) == ("ValueError", "model broke", "model broke")
    assert repr(exc) == "RecordedException('ValueError', 'model broke')"
    assert loaded == result


def test_a_loaded_run_copies_and_pickles() -> None:
    """A loaded run (recorded exceptions and NotJSON included) survives deepcopy and pickle."""
    failed = agentloop.review.run_from_json(
        agentloop.review.run_to_json(Loop(ScriptedModel([ValueError("broke")])).run("go"))
    )
    odd = agentloop.review.run_from_json(
        agentloop.review.run_to_json(
            Loop(ScriptedModel([{"kind": "final", "text": {1}}])).run("go")
        )
    )

    for loaded in (failed, odd):
        for again in (copy.deepcopy(loaded), pickle.loads(pickle.dumps(loaded))):
            assert again == loaded
            assert agentloop.review.run_to_json(again) == agentloop.review.run_to_json(loaded)
    assert repr(copy.deepcopy(failed.events[-1].exception)) == repr(failed.events[-1].exception)


def test_json_rejected_reply_is_saved_as_its_input() -> None:
    """A rejected reply that is JSON is its event's input (the transcript does not hold it),
    and the replay makes the rejected reply again."""
    reply = {"kind": "final", "text": "x", "extra": [1, 2.5]}
    result = Loop(ScriptedModel([reply])).run("go")
    doc = orjson.loads(agentloop.review.run_to_json(result))

    assert doc["events"][0]["input"] == reply
    assert "rejected" not in doc
    assert agentloop.review.run_from_json(agentloop.review.run_to_json(result)).rejected == reply


def test_non_json_rejected_reply_is_saved_as_its_repr() -> None:
    """A rejected reply that is not JSON is kept as {"repr", "problem"} and loads as NotJSON."""
    reply = {"kind": "final", "text": {1, 2}}
    result = Loop(ScriptedModel([reply])).run("go")
    doc = orjson.loads(agentloop.review.run_to_json(result))

    assert result.status == "malformed"
    problem = (
        "reply.text: expected a JSON value (dict, list, str, int, float, bool or None), got set"
    )
    assert doc["events"][0]["not_json"] == {
        "repr": "{'kind': 'final', 'text': {1, 2}}",
        "problem": problem,
    }
    assert "input" not in doc["events"][0]
    assert result.error == f"malformed reply: {problem}"
    loaded = agentloop.review.run_from_json(agentloop.review.run_to_json(result))
    assert loaded.rejected == NotJSON("{'kind': 'final', 'text': {1, 2}}", problem)
    assert repr(loaded.rejected) == repr(reply)
    assert agentloop.review.run_to_json(loaded) == agentloop.review.run_to_json(result)


def test_unprintable_rejected_reply_is_saved_with_a_placeholder() -> None:
    """A reply whose repr raises still saves; the placeholder names the failure."""

    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    result = Loop(ScriptedModel([{"kind": "final", "text": Broken()}])).run("go")

    assert orjson.loads(agentloop.review.run_to_json(result))["events"][0]["not_json"] == {
        "repr": "<unprintable: RuntimeError>",
        "problem": "reply.text: expected a JSON value (dict, list, str, int, float, bool or "
        "None), got Broken",
    }
    assert agentloop.review.run_from_json(agentloop.review.run_to_json(result)) == result


def test_save_and_load_a_file(demo: RunResult, tmp_path: Path) -> None:
    """save() writes the document (with a final newline) and load() reads it back equal."""
    path = tmp_path / "run.json"
    agentloop.review.save_run(demo, path)

    assert path.read_text(encoding="utf-8") == agentloop.review.run_to_json(demo) + "\n"
    assert agentloop.review.load_run(path) == demo
    assert agentloop.review.load_run(str(path)) == demo


def test_load_names_the_file_in_errors(tmp_path: Path) -> None:
    """A damaged file's error starts with its path; a missing one is an OSError."""
    path = tmp_path / "run.json"
    path.write_text('{"format": "agentloop.run", "version": 6}')

    with pytest.raises(RunFileError, match=r"^.*run\.json: \$: expected the field 'status'"):
        agentloop.review.load_run(path)
    with pytest.raises(FileNotFoundError):
        agentloop.review.load_run(tmp_path / "absent.json")


def test_run_file_error_is_a_value_error_with_its_parts(doc: Doc) -> None:
    """RunFileError is a ValueError and an AgentloopError, and carries where/expected/found."""
    doc["version"] = 1
    with pytest.raises(RunFileError) as caught:
        agentloop.review.run_from_json(orjson.dumps(doc))

    error = caught.value
    assert isinstance(error, ValueError)
    assert isinstance(error, agentloop.AgentloopError)
    assert error.where == "run file: $.version"
    assert error.expected == "version 6 (what this agentloop reads)"
    assert error.found == "integer 1"
    assert str(error) == f"{error.where}: expected {error.expected}, got {error.found}"


# -- damaged documents ---------------------------------------------------------------


def _set(path: str, value: object) -> Callable[[Doc], None]:
    """A mutation that sets a field, found by a dotted path with list indexes."""

    def mutate(doc: Doc) -> None:
        *parents, last = path.split(".")
        target: Any = doc
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[int(last) if last.isdigit() else last] = value

    return mutate


def _drop(path: str) -> Callable[[Doc], None]:
    def mutate(doc: Doc) -> None:
        *parents, last = path.split(".")
        target: Any = doc
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        del target[int(last) if last.isdigit() else last]

    return mutate


def _all(*mutations: Callable[[Doc], object]) -> Callable[[Doc], None]:
    def mutate(doc: Doc) -> None:
        for mutation in mutations:
            mutation(doc)

    return mutate


DAMAGE: list[tuple[str, Callable[[Doc], None], str, str]] = [
    # (what, mutation, where, a piece of the message)
    ("wrong format", _set("format", "other"), "$.format", "expected format 'agentloop.run'"),
    ("no format", _drop("format"), "$.format", "got no format field"),
    ("newer version", _set("version", 7), "$.version", "got integer 7"),
    ("version as text", _set("version", "2"), "$.version", "got string '2'"),
    ("version true", _set("version", True), "$.version", "got boolean True"),
    ("no version", _drop("version"), "$.version", "got no version field"),
    ("missing field", _drop("steps"), "$", "expected the field 'steps'"),
    ("extra field", _set("note", "hi"), "$", "an extra field 'note'"),
    ("text counter", _set("steps", "3"), "$.steps", "expected integer, got string '3'"),
    ("float counter", _set("steps", 3.0), "$.steps", "got number 3.0"),
    ("bool counter", _set("calls", True), "$.calls", "expected integer, got boolean True"),
    ("negative", _set("budget.max_calls", -1), "$.budget.max_calls", "a count from 0"),
    (
        "turn 0",
        _all(_set("conversation_id", "u"), _set("turn", 0)),
        "$.turn",
        "expected a count from 1 to 2**63 - 1, got integer 0",
    ),
    ("time taken", _set("events.2.took", -0.5), "$.events[2].took", "a number of at least 0"),
    ("unknown state", _set("status", "done"), "$.status", "got string 'done'"),
    ("unknown trigger", _set("events.0.on", "poke"), "$.events[0].on", "'poke'"),
    ("unknown guard", _set("events.0.if", "maybe"), "$.events[0].if", "'maybe'"),
    ("event field gone", _drop("events.1.on"), "$.events[1]", "the field 'on'"),
    ("event field unknown", _set("events.1.source", "x"), "$.events[1]", "field 'source'"),
    ("no events", _set("events", []), "$.events", "at least 1 item"),
    ("message kind", _set("transcript.0", {"text": "hi"}), "$.transcript[0]", "'kind'"),
    ("not a list", _set("transcript", {}), "$.transcript", "expected array, got object"),
    ("exception", _set("events.0.exception", "boom"), "$.events[0].exception", "got string"),
    ("not JSON", _set("events.0.not_json", {"repr": "1"}), "$.events[0].not_json", "'problem'"),
    (
        "row not the replay's",
        _set("events.8.if", "output_invalid"),
        "$.events[8]",
        "expected validating --validate [reply_is_final]--> finished, which the table takes "
        "here, got --validate [output_invalid]-->",
    ),
    (
        "an event gone",
        _drop("events.3"),
        "$.events[3]",
        "expected the model asked here, got --model_replied-->",
    ),
    ("steps disagree", _set("steps", 2), "$.steps", "expected 3, as replaying the run gives"),
    ("status disagrees", _set("status", "failed"), "$.status", "expected 'finished'"),
    ("reason disagrees", _set("reason", "max_steps"), "$.reason", "expected no such field"),
    (
        "over budget",
        _set("budget.max_steps", 2),
        "$.events[7]",
        "expected awaiting_model --ask_model [steps_exhausted]--> exhausted, which the table "
        "takes here, got --model_replied-->",
    ),
    (
        "first time moved",
        _set("events.0.at", 2.5),
        "$.events[0].at",
        "as replaying the run gives, got number 2.5",
    ),
    ("output edited", _set("output", "sunny"), "$.output", "expected 'Lisbon is warmer"),
    (
        "not JSON invented",
        _set("events.8.not_json", {"repr": "x", "problem": "y"}),
        "$.events[8].not_json",
        "no such field, as replaying the run gives",
    ),
    (
        "call named for nothing",
        _set("events.6.call", "c3"),
        "$.events[6].call",
        "no such field, as replaying the run gives",
    ),
    (
        # The status is what the tool reported, taken as given: the result it appended differs.
        "result status edited",
        _all(_set("events.2.status", "denied"), _set("events.2.input", {"city": "Lisbon"})),
        "$.transcript[2]",
        "as $.events[3] appended it",
    ),
    (
        "exception invented",
        _set("events.0.exception", {"type": "ValueError", "message": "x"}),
        "$.events[0].exception",
        "no such field, as replaying the run gives",
    ),
    (
        "message invented",
        lambda doc: doc["transcript"].insert(1, {"kind": "user", "text": "psst"}),
        "$.events[1]",  # the reply is taken where the replay looks: the user's message
        "expected validating --validate [reply_malformed]--> malformed",
    ),
    (
        "input a run refuses",
        _set("transcript.0", {"kind": "call", "id": "x", "name": "f", "arguments": {}}),
        "$.transcript",
        "got messages[0]: expected every call in the input to be followed by its tool_result",
    ),
    ("version 2.0", _set("version", 2.0), "$.version", "got number 2.0"),
    (
        "input past the transcript",
        _set("input", 99),
        "$.input",
        "expected at most the transcript's 7 messages, got integer 99",
    ),
    (
        "transcript edited",
        _set("transcript.2.id", "c9"),
        "$.events[2].input",
        "the outcome of 'c1' (input and status), as the transcript does not hold it",
    ),
    (
        "batch call invented",
        _set("events.3.call", "c9"),
        "$.events[3].input",
        "the outcome of 'c9' (input and status), as the transcript does not hold it",
    ),
    (
        "batch results reordered",
        lambda doc: doc["transcript"].insert(2, doc["transcript"].pop(3)),
        "$.events[2].input",
        "the outcome of 'c1' (input and status), as the transcript does not hold it",
    ),
    (
        "unfinished run",
        lambda doc: doc["events"].pop(),
        "$.events[7]",
        "a terminal state or awaiting_approval (where a saved run can stop), got a run left "
        "'validating'",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "where", "message"),
    [pytest.param(m, w, s, id=name) for name, m, w, s in DAMAGE],
)
def test_damaged_documents_are_refused(
    doc: Doc, mutate: Callable[[Doc], None], where: str, message: str
) -> None:
    """Each kind of damage raises RunFileError at the right place, saying what was expected."""
    mutate(doc)
    with pytest.raises(RunFileError) as caught:
        agentloop.review.run_from_json(orjson.dumps(doc))

    assert caught.value.where == f"run file: {where}"
    assert message in str(caught.value)
    assert " expected " in str(caught.value)
    assert ", got " in str(caught.value)


@pytest.mark.parametrize(
    ("text", "found"),
    [
        pytest.param("", "invalid JSON", id="empty"),
        pytest.param('{"format": "agentloop.run", "ver', "invalid JSON", id="truncated"),
        pytest.param('{"steps": NaN}', "invalid JSON", id="nan"),
        pytest.param("[1, 2]", "array [1, 2]", id="array"),
        pytest.param("null", "null", id="null"),
    ],
)
def test_text_that_is_not_a_run_file_is_refused(text: str, found: str) -> None:
    """Bad JSON, or JSON that is not an object, fails before any field is looked at."""
    with pytest.raises(RunFileError, match=r"^run file: expected ") as caught:
        agentloop.review.run_from_json(text)

    assert found in caught.value.found


def test_a_damaged_copy_does_not_touch_the_original(demo: RunResult, doc: Doc) -> None:
    """Refusing a document leaves nothing behind: the good one still loads equal."""
    bad = copy.deepcopy(doc)
    bad["events"][3]["steps"] = "many"
    with pytest.raises(RunFileError):
        agentloop.review.run_from_json(orjson.dumps(bad))

    assert agentloop.review.run_from_json(orjson.dumps(doc)) == demo


def test_huge_numbers_in_the_file_are_refused(doc: Doc) -> None:
    """A counter beyond 64 bits (read as a float by the parser) is not an integer."""
    text = orjson.dumps(doc).replace(
        b'"steps":3,"calls":3,"budget"', b'"steps":1' + b"0" * 30 + b',"calls":3,"budget"'
    )
    with pytest.raises(RunFileError, match=r"\$\.steps: expected integer, got number"):
        agentloop.review.run_from_json(text)


def test_calls_and_final_round_trip_exactly() -> None:
    """A run with tool results of every status loads back equal, field by field."""
    model = ScriptedModel(
        [call("c1", a=1, b=2), call("c2", name="boom"), call("c3", name="nope"), final("ok")]
    )
    result = Loop(model, tools=tools(), max_steps=5, max_calls=3).run("go")
    loaded = agentloop.review.run_from_json(agentloop.review.run_to_json(result))

    assert result.status == "finished"
    assert loaded == result
    assert [e.result_status for e in loaded.events if e.result_status] == [
        "ok",
        "error",
        "unknown_tool",
    ]
    assert loaded.events[5].exception is not None
    assert str(loaded.events[5].exception) == "tool broke"


def test_duplicate_fields_are_refused(demo: RunResult) -> None:
    """A field given twice is ambiguous (parsers keep either one): refused, naming it."""
    text = agentloop.review.run_to_json(demo).replace(
        '"status": "finished"', '"status": "failed", "status": "finished"'
    )
    with pytest.raises(RunFileError) as caught:
        agentloop.review.run_from_json(text)

    assert str(caught.value) == (
        "run file: expected each field once in an object, got 'status' twice"
    )


def _nested(depth: int) -> str:
    return "[" * depth + "0" + "]" * depth


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param('"status": "finished"', f'"status": {_nested(1000)}', id="status"),
        pytest.param('"on":"validate"', f'"input":{_nested(1000)},"on":"validate"', id="json"),
        pytest.param('"text":"Which', f'"deep":{_nested(300)},"text":"Which', id="transcript"),
    ],
)
def test_too_deep_nesting_is_refused(demo: RunResult, old: str, new: str) -> None:
    """JSON nested deeper than a run can hold is a RunFileError, never a RecursionError."""
    text = agentloop.review.run_to_json(demo)
    assert old in text
    with pytest.raises(RunFileError) as caught:
        agentloop.review.run_from_json(text.replace(old, new))

    assert str(caught.value) == (
        "run file: expected JSON nested at most 259 levels deep, got a document nested deeper"
    )


def test_deepest_messages_a_run_holds_save_and_load() -> None:
    """A call whose arguments are as deep as the engine accepts is saved and loaded back."""
    deep: Any = 0
    for _ in range(252):  # with the call and its arguments: 254 levels, the most JSON allows
        deep = [deep]
    result = Loop(
        ScriptedModel([call("c1", name="echo", a=deep), final("x")]), tools=tools(), max_calls=1
    ).run("go")
    assert result.status == "finished"

    assert agentloop.review.run_from_json(agentloop.review.run_to_json(result)) == result


async def test_cancelled_asyncio_tasks_round_trip() -> None:
    """Runs ended by a cancelled task (model or tool awaited) load back equal."""
    started = asyncio.Event()

    async def slow(**arguments: Any) -> None:
        started.set()
        await asyncio.sleep(3600)

    async def thinking(history: list[Any]) -> None:
        started.set()
        await asyncio.sleep(3600)

    for model in (ScriptedModel([call("c1", name="slow")]), thinking):
        started.clear()
        run = Loop(model, tools={"slow": slow}).astart("go")

        async def drive(run: agentloop.AsyncRun = run) -> None:
            async for _ in run:
                pass

        task = asyncio.create_task(drive())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        result = run.result()
        assert result.status == "cancelled"

        loaded = agentloop.review.run_from_json(agentloop.review.run_to_json(result))
        assert loaded == result
        assert agentloop.review.run_to_json(loaded) == agentloop.review.run_to_json(result)
    assert result.events[-1].trigger == "model_interrupted"


def _interrupted_tool() -> RunResult:
    def halt(**arguments: Any) -> None:
        raise KeyboardInterrupt("stop")

    run = Loop(ScriptedModel([call("c1", name="halt")]), tools={"halt": halt}).start("go")
    with pytest.raises(KeyboardInterrupt):
        run.step(), run.step(), run.step()
    return run.result()


RUNS: dict[str, Callable[[], RunResult]] = {
    "failed": lambda: Loop(ScriptedModel([ValueError("model broke")])).run("go"),
    "not JSON": lambda: Loop(ScriptedModel([{"kind": "final", "text": {1}}])).run("go"),
    "interrupted tool": _interrupted_tool,
}


@pytest.mark.parametrize(
    ("run", "mutate", "where", "message"),
    [
        pytest.param(
            "failed",
            _drop("events.0.exception"),
            "$.events[0].exception",
            "expected the exception raised here, got null",
            id="failed without its exception",
        ),
        pytest.param(
            "failed",
            _set("events.0.exception.type", "KeyError"),
            "$.error",
            "expected 'the model raised KeyError: model broke'",
            id="exception type edited",
        ),
        pytest.param(
            "not JSON",
            _set("error", "malformed reply: made up"),
            "$.error",
            "expected 'malformed reply: reply.text",
            id="not JSON, summary error edited",
        ),
        pytest.param(
            "not JSON",
            _drop("events.0.not_json"),
            "$.events[0].input",
            "expected the reply, as the transcript holds no message where the replay looks",
            id="not JSON, kept reply dropped",
        ),
        pytest.param(
            "interrupted tool",
            _drop("events.2.exception"),
            "$.events[2].exception",
            "expected the exception raised here, got null",
            id="interrupted without its exception",
        ),
        pytest.param(
            "interrupted tool",
            _all(_set("events.2.status", "ok"), _set("events.2.input", 1)),
            "$.events[2].status",
            "no such field, as replaying the run gives",
            id="interrupted tool said ok",
        ),
    ],
)
def test_damaged_documents_of_other_runs_are_refused(
    run: str, mutate: Callable[[Doc], None], where: str, message: str
) -> None:
    """Failed, non-JSON and interrupted runs load back, and damage to them is refused."""
    result = RUNS[run]()
    doc = orjson.loads(agentloop.review.run_to_json(result))
    assert agentloop.review.run_to_json(
        agentloop.review.run_from_json(orjson.dumps(doc))
    ) == agentloop.review.run_to_json(result)
    mutate(doc)
    with pytest.raises(RunFileError) as caught:
        agentloop.review.run_from_json(orjson.dumps(doc))

    assert caught.value.where == f"run file: {where}"
    assert message in str(caught.value)


def _paths(value: object, prefix: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """Every path into a parsed document, the root's children first."""
    children: Any = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, child in children:
        yield (*prefix, key)
        yield from _paths(child, (*prefix, key))


WRONG: list[object] = [None, 1, -1, 2.5, True, "x", [], [1], {}, {"kind": "user"}]


@pytest.mark.parametrize("run", [*RUNS, "demo"])
def test_any_value_anywhere_is_refused_or_loads_stably(run: str) -> None:
    """Each value replaced by one of every JSON type (or removed): RunFileError, or a run."""
    result = demo_loop().run("go") if run == "demo" else RUNS[run]()
    base = orjson.loads(agentloop.review.run_to_json(result))
    for path in _paths(base):
        for value in [*WRONG, _drop]:
            doc = copy.deepcopy(base)
            *parents, last = path
            target: Any = doc
            for part in parents:
                target = target[part]
            if value is _drop:
                del target[last]
            else:
                target[last] = value
            try:
                loaded = agentloop.review.run_from_json(orjson.dumps(doc))
            except RunFileError:
                continue
            # Accepted: a run the engine makes from these inputs, saved as it was read.
            assert agentloop.review.run_to_json(loaded).encode() == run_text(doc)


def test_a_nul_in_a_recorded_exception_type_loads() -> None:
    """A type name with a NUL (a hand-edited file) is only text: it loads, and saves the same."""
    result = Loop(ScriptedModel([ValueError("broke")])).run("go")
    text = agentloop.review.run_to_json(result).replace('"ValueError"', '"Value\\u0000Error"')
    text = text.replace("raised ValueError", "raised Value\\u0000Error")
    loaded = agentloop.review.run_from_json(text)
    assert loaded.error == "the model raised Value\x00Error: broke"
    assert agentloop.review.run_from_json(agentloop.review.run_to_json(loaded)) == loaded


def test_many_fields_with_one_duplicate_are_refused(demo: RunResult) -> None:
    """40,000 fields and one given twice: refused, naming it (linear: make bench times it)."""
    doc = orjson.loads(agentloop.review.run_to_json(demo))
    doc["transcript"][0]["meta"] = {f"k{i}": i for i in range(40_000)}
    text = orjson.dumps(doc).replace(b'"k0":0', b'"k0":0,"k0":1', 1)
    with pytest.raises(RunFileError, match="expected each field once in an object, got 'k0' twice"):
        agentloop.review.run_from_json(text)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_any_byte_level_damage_is_a_run_file_error_or_a_run(
    demo: RunResult, data: st.DataObject
) -> None:
    """Bytes flipped, cut or inserted anywhere: the loader refuses with RunFileError or loads a
    run that saves back to the text it was read from (never another exception)."""
    text = bytearray(agentloop.review.run_to_json(demo).encode())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text) - 1))
        how = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if how == "flip":
            text[at] = data.draw(st.integers(0, 255))
        elif how == "cut":
            del text[at : at + data.draw(st.integers(1, 64))]
        else:
            text[at:at] = data.draw(st.binary(min_size=1, max_size=8))
    try:
        loaded = agentloop.review.run_from_json(bytes(text))
    except RunFileError:
        return
    assert agentloop.review.run_from_json(agentloop.review.run_to_json(loaded)) == loaded


def _cancelled_at(row: str) -> RunResult:
    """A run cancelled at ``row``'s checkpoint: before asking, while the model worked, ..."""
    token = agentloop.CancelToken()

    def cancelling(reply: object) -> Any:
        def model(history: list[dict[str, Any]]) -> object:
            token.cancel()
            if isinstance(reply, Exception):
                raise reply
            return reply

        return model

    two = batch(call("c1", a=1, b=1), call("c2", a=2, b=2))

    def cancel_mid_batch(a: int, b: int) -> int:
        if row == "start_tool [cancel_requested_mid_batch]":
            token.cancel()
        return a + b

    replies: dict[str, list[object]] = {
        "model_replied [cancel_requested]": [cancelling(final("x"))],
        "model_raised [cancel_requested]": [cancelling(ValueError("x"))],
        "ask_model [cancel_requested]": [call("c1", a=1, b=1), final("x")],
        "start_tool [cancel_requested_mid_batch]": [two],
    }
    if row == "ask_model [cancel_requested]":

        def cancel_after(a: int, b: int) -> int:
            token.cancel()
            return a + b

        tools: dict[str, Any] = {"add": cancel_after}
    else:
        tools = {"add": cancel_mid_batch}
    result = Loop(ScriptedModel(replies[row]), tools=tools).run("go", cancel=token)
    last = result.events[-1]
    assert f"{last.trigger.value} [{last.guard.value if last.guard else ''}]" == row
    return result


@pytest.mark.parametrize(
    "row",
    [
        "model_replied [cancel_requested]",
        "model_raised [cancel_requested]",
        "ask_model [cancel_requested]",
        "start_tool [cancel_requested_mid_batch]",
    ],
)
def test_a_run_cancelled_at_each_checkpoint_reopens(row: str) -> None:
    """The replay cancels where the run was cancelled: before a checkpoint the engine fires,
    or while the model worked (seen right after its answer)."""
    result = _cancelled_at(row)
    assert agentloop.review.run_from_json(agentloop.review.run_to_json(result)) == result
