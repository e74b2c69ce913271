"""The history buffer: where each message ends, and fresh copies decoded in chunks."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop._core.messages import CHUNK, History
from agentloop._core.requests import AskModel

texts = st.text(max_size=40)
#: Any JSON a message may hold; sizes from a few bytes to past a chunk.
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
messages = st.one_of(
    st.builds(lambda text: {"kind": "user", "text": text}, texts),
    st.builds(lambda value: {"kind": "tool_result", "content": value}, values),
    # bigger than a chunk on its own
    st.builds(lambda n: {"kind": "final", "text": "x" * (CHUNK + n)}, st.integers(-2, 3000)),
)
# A history appended a few messages at a time, as the engine appends a transition's.
batches = st.lists(st.lists(messages, max_size=4), max_size=8)


def containers(value: Any) -> list[int]:
    """The ids of every list and dict in ``value``."""
    found, stack = [], [value]
    while stack:
        item = stack.pop()
        if type(item) is dict:
            found.append(id(item))
            stack.extend(item.values())
        elif type(item) is list:
            found.append(id(item))
            stack.extend(item)
    return found


def history_of(first: list[dict[str, Any]], rest: list[list[dict[str, Any]]]) -> History:
    history = History([orjson.dumps(message) for message in first])
    for batch in rest:
        history.extend(tuple(orjson.dumps(message) for message in batch))
    return history


@settings(max_examples=60, deadline=None)
@given(st.lists(messages, max_size=3), batches)
def test_a_chunked_copy_equals_one_decode_of_the_buffer(
    first: list[dict[str, Any]], rest: list[list[dict[str, Any]]]
) -> None:
    history = history_of(first, rest)
    whole = [*first, *(message for batch in rest for message in batch)]
    assert orjson.loads(history.to_json()) == whole
    assert len(history) == len(whole)
    need = AskModel(*history.request())
    assert need.history == whole
    assert orjson.loads(need.history_json) == whole
    for index, message in enumerate(whole):
        assert orjson.loads(history.message_json(index)) == message
        assert history.decoded(index) == whole[:index]
    # Two copies share no list or dict, with each other or within themselves.
    one, two = need.history, need.history
    ids = containers(one) + containers(two)
    assert len(ids) == len(set(ids))


def test_a_request_reads_only_what_the_history_held_when_it_was_made() -> None:
    history = history_of([{"kind": "user", "text": "go"}], [])
    need = AskModel(*history.request())
    history.extend((orjson.dumps({"kind": "final", "text": "x" * CHUNK}),))
    assert need.history == [{"kind": "user", "text": "go"}]
    assert need.history_json == b'[{"kind":"user","text":"go"}]'
    assert AskModel(*history.request()).history[1]["text"] == "x" * CHUNK


def test_history_json_decodes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    history = history_of([{"kind": "user", "text": "go"}], [[{"kind": "final", "text": "x" * 9}]])
    need = AskModel(*history.request())

    def refuse(data: Any) -> Any:
        raise AssertionError("history_json decoded the record")

    monkeypatch.setattr(orjson, "loads", refuse)
    assert need.history_json == history.to_json()
    monkeypatch.undo()
    assert orjson.loads(need.history_json)[1] == {"kind": "final", "text": "x" * 9}
