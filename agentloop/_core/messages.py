"""Message shapes: the reply, the input history, tool results, and the history buffer.

The history is one ``orjson`` byte buffer: handing the model a fresh copy of
it on every step is a few ``orjson.loads`` calls (one a ``CHUNK`` of JSON),
about 3x faster than a recursive Python copier and 10x faster than
``copy.deepcopy`` (see ``make bench``). Every message enters it already
encoded by ``to_json``.
"""

from __future__ import annotations

import bisect
from array import array
from typing import Any, Final

import orjson

from agentloop._core.json import JSON, describe, kept, to_json

__all__ = [
    "CHUNK",
    "CUT_OFF",
    "DISPATCH_STATUSES",
    "NOT_STARTED",
    "SIGNATURE",
    "History",
    "batch_of",
    "check_new_input",
    "ids_of",
    "input_messages",
    "reply_problem",
    "tool_result_json",
]

#: The statuses a dispatcher can give a call. The engine adds ``cancelled`` for a call
#: the run was cancelled or interrupted before it finished, so every call is paired.
DISPATCH_STATUSES: Final = frozenset({"ok", "error", "denied", "invalid_arguments", "unknown_tool"})
#: The statuses a tool result can have.
RESULT_STATUSES: Final = DISPATCH_STATUSES | {"cancelled"}

#: How much JSON a fresh copy of the history decodes at once (``History.decoded``).
CHUNK: Final = 16 * 1024

_CALL_FIELDS: Final = frozenset({"kind", "id", "name", "arguments"})
_ELEMENT_FIELDS: Final = frozenset({"id", "name", "arguments"})
#: A call's optional key: an opaque token its provider gave with it, to be sent back with it
#: (Gemini's thought signature). The record keeps it; no adapter but its provider's reads it.
SIGNATURE: Final = "signature"
_CALLS_FIELDS: Final = frozenset({"kind", "calls", "text"})
_FINAL_FIELDS: Final = frozenset({"kind", "text"})

#: The content of a result for a call that never started because the run was cancelled first.
NOT_STARTED: Final = "never started: the run was cancelled before this call could run"
#: The content of a result for a call still out when cancellation was seen at a checkpoint
#: (calls at once under asyncio, or an agent tool's waiting child): its outcome is dropped.
CUT_OFF: Final = "cancelled while it ran: the run was cancelled, and its outcome was dropped"


def reply_problem(reply: dict[str, Any] | object) -> str | None:
    """Say why ``reply`` (a decoded copy) is not a well-formed call, batch or final, or None."""
    if type(reply) is not dict:
        return f"expected the reply to be a dict, got {type(reply).__name__}"
    kind = reply.get("kind")
    if kind == "call":
        return _call_problem(reply, _CALL_FIELDS, "a 'call' reply")
    if kind == "calls":
        if not reply.keys() <= _CALLS_FIELDS or "calls" not in reply:
            return _fields_problem(reply, _CALLS_FIELDS, "a 'calls' reply", optional={"text"})
        if "text" in reply and type(reply["text"]) is not str:
            return f"expected 'text' to be a str, got {type(reply['text']).__name__}"
        calls = reply["calls"]
        if type(calls) is not list or not calls:
            got = "an empty list" if calls == [] else type(calls).__name__
            return f"expected 'calls' to be a list of one or more calls, got {got}"
        for index, call in enumerate(calls):
            if type(call) is not dict:
                return f"calls[{index}]: expected a dict, got {type(call).__name__}"
            problem = _call_problem(call, _ELEMENT_FIELDS, "each element of 'calls'")
            if problem is not None:
                return f"calls[{index}]: {problem}"
        return None
    if kind == "final":
        if reply.keys() != _FINAL_FIELDS:
            return _fields_problem(reply, _FINAL_FIELDS, "a 'final' reply")
        if type(reply["text"]) is not str:
            return f"expected 'text' to be a str, got {type(reply['text']).__name__}"
        return None
    return f"expected 'kind' to be 'call', 'calls' or 'final', got {kind!r:.80}"


def _call_problem(call: dict[str, Any], fields: frozenset[str], what: str) -> str | None:
    keys = call.keys()
    if keys != fields and keys != fields | {SIGNATURE}:
        return _fields_problem(call, fields | {SIGNATURE}, what, optional={SIGNATURE})
    for field in ("id", "name"):
        value = call[field]
        if type(value) is not str or not value:
            return f"expected {field!r} to be a non-empty str, got {value!r:.80}"
    arguments = call["arguments"]
    if type(arguments) is not dict and type(arguments) is not str:
        # A str is the provider's raw text that did not parse: the call is still
        # accepted and answered invalid_arguments, so the model can correct itself.
        return (
            "expected 'arguments' to be a dict (or the raw text of arguments that did "
            f"not parse, a str), got {type(arguments).__name__}"
        )
    signature = call.get(SIGNATURE, "-")
    if type(signature) is not str or not signature:
        return f"expected {SIGNATURE!r} to be a non-empty str, got {signature!r:.80}"
    return None


def _fields_problem(
    value: dict[str, Any], fields: frozenset[str], what: str, optional: set[str] | None = None
) -> str:
    required = fields - (optional or set())
    missing, extra = required - value.keys(), value.keys() - fields
    if missing:
        return f"{what} needs {sorted(required)}; missing {sorted(missing)}"
    return f"{what} has exactly {sorted(fields)}; unexpected {sorted(extra)}"


def batch_of(reply: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The (id, name) of each call in a well-formed call or calls ``reply``, in order."""
    if reply["kind"] == "call":
        return ((reply["id"], reply["name"]),)
    return tuple((call["id"], call["name"]) for call in reply["calls"])


def ids_of(message: dict[str, Any]) -> list[str]:
    """The ids of the calls a recorded message makes (none unless a ``call`` or ``calls``)."""
    kind = message.get("kind")
    if kind == "call":
        return [message["id"]]
    if kind == "calls":
        return [call["id"] for call in message["calls"]]
    return []


def tool_result_json(call_id: str, name: str, status: str, content_json: bytes) -> bytes:
    """A tool_result message's JSON, around content already checked by ``to_json``."""
    return b"".join(
        (
            b'{"kind":"tool_result","id":',
            orjson.dumps(call_id),
            b',"name":',
            orjson.dumps(name),
            b',"status":',
            orjson.dumps(status),
            b',"content":',
            content_json,
            b"}",
        )
    )


def input_messages(messages: object, *, strict: bool = False) -> tuple[list[bytes], set[str]]:
    """Check and serialize the caller's input history, and collect its call ids.

    Each message is a dict with a str ``kind``; each call has a non-empty str
    ``id`` used once, and is answered by a ``tool_result`` with that id later on.
    ``strict`` (a new run's input) also holds it to what ``assert_contract``
    asks of a transcript: a call has a name and arguments, and is answered before
    any ``final``, by a result naming its tool, with a known status and a
    content; a result answers an earlier unanswered call; user, system and final
    messages have text. Not strict, only the call ids: a recorded history reopens as it
    is. Raises ``TypeError``/``ValueError`` naming the message at fault.
    """
    if type(messages) is str:
        try:
            # Our own dict of one exact str: orjson writes it as it is or raises (a lone
            # surrogate), so the round trip ``to_json`` makes to check it is not needed.
            return [kept(orjson.dumps({"kind": "user", "text": messages}))], set()
        except orjson.JSONEncodeError:
            return [to_json({"kind": "user", "text": messages}, "messages")], set()  # explains
    if type(messages) is not list:
        raise TypeError(
            "expected the input to be a str or a list of message dicts, "
            f"got {type(messages).__name__}"
        )
    encoded: list[bytes] = []
    open_calls: dict[str, tuple[str, str]] = {}  # id -> (where, tool name), until answered
    seen: set[str] = set()
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if type(message) is not dict or type(message.get("kind")) is not str:
            if type(message) is dict and "kind" not in message:
                keys = ", ".join(repr(key) for key in list(message)[:6])
                raise TypeError(
                    f"{where}: expected a dict with a str 'kind' (system, user, call, calls, "
                    f"tool_result or final), got a dict with keys {keys or 'none'}"
                    + (
                        ": a user message is {'kind': 'user', 'text': ...}"
                        if "role" in message
                        else ""
                    )
                )
            raise TypeError(f"{where}: expected a dict with a str 'kind', got {describe(message)}")
        kind, text = message["kind"], message.get("text")  # a text not a str is named first
        if strict and kind in ("user", "system", "final") and not isinstance(text, str):
            raise ValueError(
                f"{where}: expected a {kind!r} message's 'text' to be a str, got {describe(text)}"
            )
        data = to_json(message, where)
        encoded.append(data)
        plain = orjson.loads(data)  # from here on, only our own copy is read
        call_id = plain.get("id")
        if kind == "call":
            _open_call(plain, where, seen, open_calls, strict)
        elif kind == "calls":
            calls = plain.get("calls")
            if type(calls) is not list or not calls:
                raise ValueError(
                    f"{where}: expected a 'calls' message's 'calls' to be a non-empty list, "
                    f"got {describe(calls)}"
                )
            for number, call in enumerate(calls):
                inner = f"{where}.calls[{number}]"
                if type(call) is not dict:
                    raise TypeError(f"{inner}: expected a dict, got {describe(call)}")
                _open_call(call, inner, seen, open_calls, strict)
            if strict and type(plain.get("text", "")) is not str:
                raise ValueError(
                    f"{where}: expected a 'calls' message's 'text', if any, to be a str, "
                    f"got {describe(plain['text'])}"
                )
        elif kind == "tool_result":
            if type(call_id) is not str:
                raise ValueError(
                    f"{where}: expected a tool_result's 'id' to be a str, got {call_id!r:.80}"
                )
            answered = open_calls.pop(call_id, None)
            if strict:
                _check_result(plain, where, answered, call_id in seen)
        elif strict:
            _check_other(plain, where, open_calls)
    if open_calls:
        call_id, (where, _) = next(iter(open_calls.items()))
        raise ValueError(
            f"{where}: expected every call in the input to be followed by its "
            f"tool_result, got call {call_id!r} without one"
        )
    return encoded, seen


def _open_call(
    call: dict[str, Any],
    where: str,
    seen: set[str],
    open_calls: dict[str, tuple[str, str]],
    strict: bool,
) -> None:
    """Note an input call: its id must be new, and answered later in the input."""
    call_id, name = call.get("id"), call.get("name")
    if type(call_id) is not str or not call_id:
        raise ValueError(
            f"{where}: expected a call's 'id' to be a non-empty str, got {call_id!r:.80}"
        )
    if strict and (type(name) is not str or not name):
        raise ValueError(
            f"{where}: expected a call's 'name' to be a non-empty str, got {describe(name)}"
        )
    arguments = call.get("arguments")
    if strict and type(arguments) is not dict and type(arguments) is not str:
        raise ValueError(
            f"{where}: expected a call's 'arguments' to be a dict (or the raw text of "
            f"arguments that did not parse, a str), got {describe(arguments)}"
        )
    signature = call.get(SIGNATURE, "-")
    if strict and (type(signature) is not str or not signature):
        raise ValueError(
            f"{where}: expected a call's {SIGNATURE!r}, if any, to be a non-empty str, "
            f"got {describe(signature)}"
        )
    if call_id in seen:
        raise ValueError(f"{where}: expected each call id once, got {call_id!r} again")
    seen.add(call_id)
    open_calls[call_id] = (where, str(name))


def _check_result(
    result: dict[str, Any], where: str, answered: tuple[str, str] | None, seen: bool
) -> None:
    """A new run's input tool_result answers an earlier unanswered call, naming its tool."""
    call_id, status = result["id"], result.get("status")
    if answered is None:
        why = "it was answered already" if seen else "no earlier call has that id"
        raise ValueError(
            f"{where}: expected a tool_result to answer an earlier unanswered call, "
            f"got one for {call_id!r:.80} ({why})"
        )
    at, name = answered
    if result.get("name") != name:
        raise ValueError(
            f"{where}: expected the tool_result of call {call_id!r} ({at}) to name its tool "
            f"{name!r}, got {describe(result.get('name'))}"
        )
    if status not in RESULT_STATUSES or "content" not in result:
        raise ValueError(
            f"{where}: expected a tool_result with a 'status' of {sorted(RESULT_STATUSES)} "
            f"and a 'content', got status {describe(status)}"
            + ("" if "content" in result else " and no content")
        )


def _check_other(
    message: dict[str, Any], where: str, open_calls: dict[str, tuple[str, str]]
) -> None:
    """A new run's input user message has more than white space; no final leaves a call open."""
    kind, text = message["kind"], message.get("text")
    if kind == "user" and not text.strip():  # type: ignore[union-attr]  # a str: checked first
        raise ValueError(
            f"{where}: expected a user message's 'text' to hold more than white space "
            f"(every provider refuses an empty one), got {text!r:.40}"
        )
    if kind == "final" and open_calls:
        call_id, (at, _) = next(iter(open_calls.items()))
        raise ValueError(
            f"{where}: expected call {call_id!r} ({at}) to be answered before a final, "
            "got the final first"
        )


def check_new_input(messages: object) -> None:
    """A new run's input history, held to the contract (``input_messages(strict=True)``).

    A ``str`` is one user message. Nothing for the model to answer is refused
    too: an empty list, an empty (or blank) str or user message, which every
    provider refuses. Called where a run starts, before anything is made or
    recorded; an engine checks only what it needs.
    """
    if type(messages) is str:
        if not messages.strip():
            raise ValueError(
                "expected the input to be the user's message (a str with text) or a list of "
                f"messages, got {f'a blank str {messages!r:.40}' if messages else 'an empty str'}"
            )
    elif type(messages) is list:
        if not messages:
            raise ValueError(
                "expected the input to be the user's message (a str with text) or a list of "
                "one or more messages, got an empty list"
            )
        input_messages(messages, strict=True)


class History:
    """An append-only list of messages, kept as one JSON array in bytes.

    ``copy()`` decodes a fresh, independent list: what the caller or the model
    does to it never reaches the record. ``extend`` is one slice assignment, so
    a transition's messages enter together or not at all. It keeps where
    each message ends (the comma or bracket after it), so a message, or a run
    of them, is read without decoding the rest. ``cache`` is the run's own
    place for what the built-in adapters make of its messages (``Messages``):
    a message never changes once recorded, so nor does what is made of it.
    """

    __slots__ = ("_buffer", "_ends", "cache")

    def __init__(self, encoded: list[bytes]) -> None:
        # One bytes copy fewer than b"[" + joined + b"]".
        self._buffer = bytearray(b"[%b]" % b",".join(encoded))
        self._ends = array("Q")
        self._mark(1, encoded)
        self.cache: dict[object, Any] = {}

    def _mark(self, start: int, encoded: list[bytes] | tuple[bytes, ...]) -> None:
        ends = self._ends
        for data in encoded:
            start += len(data)
            ends.append(start)
            start += 1

    def __len__(self) -> int:
        return len(self._ends)

    def extend(self, encoded: tuple[bytes, ...]) -> None:
        """Append messages, given as their JSON bytes, in one step."""
        if encoded:
            joined = b",".join(encoded)
            buffer = self._buffer
            start = len(buffer)  # the next message starts where the closing bracket is
            buffer[-1:] = (b"," + joined if len(buffer) > 2 else joined) + b"]"
            self._mark(start if start > 2 else 1, encoded)

    def request(self) -> tuple[History, int]:
        """The history and its length in bytes now: what ``AskModel`` reads when asked."""
        return self, len(self._buffer)

    @property
    def buffer(self) -> bytearray:
        """The JSON array itself, for slicing (never to be changed or held)."""
        return self._buffer

    @property
    def ends(self) -> array[int]:
        """Where each message ends in ``buffer`` (only ever appended to)."""
        return self._ends

    def cut(self, count: int) -> History:
        """The first ``count`` messages: this one if it holds just them (whole), else a new one."""
        ends = self._ends
        if len(ends) == count and len(self._buffer) == (ends[-1] + 1 if count else 2):
            return self
        cut = History([])
        if count:
            cut._buffer, cut._ends = self._buffer[: ends[count - 1] + 1], ends[:count]
            cut._buffer[-1] = 0x5D  # ]
        return cut

    def count(self, size: int) -> int:
        """How many messages the first ``size`` bytes hold (as ``request()`` gave them)."""
        return bisect.bisect_right(self._ends, size - 1)

    def message_json(self, index: int) -> bytes:
        """Message ``index``'s JSON."""
        ends = self._ends
        return bytes(self._buffer[ends[index - 1] + 1 if index else 1 : ends[index]])

    def decoded(self, count: int) -> list[dict[str, JSON]]:
        """A fresh copy of the first ``count`` messages, decoded ``CHUNK`` bytes at a time.

        One ``orjson.loads`` of the whole array needs scratch space many times
        the JSON's size (yyjson sizes its value pool from the input): 11.7 MiB
        for a 1 MiB history. Decoded in chunks at message ends, the scratch is
        one chunk's, and a copy's peak is about the copy itself.
        """
        buffer, ends = self._buffer, self._ends
        if count == len(ends) and len(buffer) <= CHUNK:
            return orjson.loads(buffer)  # type: ignore[no-any-return]  # whole, in one chunk
        out: list[dict[str, JSON]] = []
        first, begin = 0, 0  # the chunk's first message, and the byte before it
        while first < count:
            # The messages that end within a chunk from here on (one at least, however big).
            last = max(bisect.bisect_right(ends, begin + CHUNK, first, count), first + 1)
            end = ends[last - 1]
            chunk = buffer[begin : end + 1]  # "[" or "," before, "," or "]" after: one copy
            chunk[0], chunk[-1] = 0x5B, 0x5D  # [ and ]
            out += orjson.loads(chunk)
            first, begin = last, end
        return out

    def copy(self) -> list[dict[str, JSON]]:
        """Return a fresh copy of every message."""
        return self.decoded(len(self._ends))

    def to_json(self) -> bytes:
        """The whole history as one JSON array."""
        return bytes(self._buffer)
