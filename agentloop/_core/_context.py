"""Long conversations: what the model is sent, reduced to a token budget in whole turns.

The history itself is never cut: the record keeps every message. What a model
request carries is a *view* of it, made by the ``fit_context`` effect of the
``ask_model`` row (``_table.py``): the head (every message up to and including
the first user message), every system message, and the newest turns that fit
the policy's ``tokens``. A turn is the unit the view keeps or leaves out:

* one message from outside (a user's, a final answer), or
* one model reply that made calls, with every result that answers them (a
  batch is never separated from its results, since no turn ends while one of
  its calls is unanswered).

The newest turn is always kept: when the head and the system messages with
it do not fit, the run ends ``exhausted`` with reason ``'context'`` and
nothing is sent. Under ``summarise`` the oldest turns are instead folded into
one summary (a user message right after the head) that a model callback
writes, on its own row (``summarising``), before the request that needs it.

``Window`` keeps, for one run, each message's JSON and token count (counted
once, when the message enters) and where each turn starts, so that finding
the view for a request is a binary search over running sums, and making it
one ``bytes.join`` of the kept messages.
"""

from __future__ import annotations

import bisect
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol

import attrs
import orjson

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "SUMMARY_PROMPT",
    "ContextPolicy",
    "Counter",
    "Plan",
    "Seen",
    "Summarise",
    "Summary",
    "Window",
    "approx_tokens",
    "policy_from_record",
    "summary_message",
    "tiktoken_tokens",
]

#: The reason a run ends ``exhausted`` when even its newest turn cannot be sent.
OVERFLOW: Final = "context"

#: What the summariser is told, as the system message of its request.
SUMMARY_PROMPT: Final = (
    "You compress the early part of a conversation between a user, an assistant and its "
    "tools. Write a short summary of it that keeps every fact, decision, result and open "
    "question the assistant needs to go on. Answer with the summary only."
)


class Counter(Protocol):
    """Counts the tokens of one message, given its JSON; ``name`` is recorded with the run."""

    @property
    def name(self) -> str:
        """Names the counter in a run file (``'approx'``, ``'tiktoken:o200k_base'``)."""
        ...

    def __call__(self, message_json: bytes, /) -> int:
        """The message's tokens."""
        ...


@attrs.frozen
class _Approx:
    """The default counter: a third of the message's JSON bytes, plus 4 for its framing.

    OpenAI's encodings make about 3.5 to 4 bytes a token of English prose and
    JSON, fewer of code: a third errs on the side of a request that fits (``make
    bench`` measures it against ``o200k_base`` and ``cl100k_base``).
    """

    name: str = "approx"

    def __call__(self, message_json: bytes, /) -> int:
        return (len(message_json) + 2) // 3 + 4


#: The default counter: no download, no dependency (see the docs for its accuracy).
approx_tokens: Final[Counter] = _Approx()


class _Encoded:
    """A counter by a BPE encoding: the tokens of the message's JSON text, plus 4 for framing."""

    __slots__ = ("_encode", "name")

    def __init__(self, encoding: Any, name: str) -> None:
        self._encode = encoding.encode
        self.name = name

    def __call__(self, message_json: bytes, /) -> int:
        # Special tokens are counted as the text they are: a message may mention one.
        return len(self._encode(message_json.decode(), disallowed_special=())) + 4

    def __repr__(self) -> str:
        return f"<counter {self.name}>"


def tiktoken_tokens(encoding: object = "o200k_base") -> Counter:
    """A counter by a ``tiktoken`` encoding: its name (say ``'o200k_base'``), or the encoding.

    Needs the ``tiktoken`` extra (``pip install agentloop[tiktoken]``); tiktoken
    downloads an encoding's file the first time it is used, and caches it.
    An encoding object given (with ``name`` and tiktoken's ``encode``) is used as it is.
    """
    if isinstance(encoding, str):
        try:  # an optional extra, loaded when asked for
            tiktoken = importlib.import_module("tiktoken")
        except ImportError:
            raise ImportError(
                "tiktoken_tokens needs the tiktoken extra: pip install 'agentloop[tiktoken]'"
            ) from None
        encoding = tiktoken.get_encoding(encoding)
    name = getattr(encoding, "name", None)
    if not callable(getattr(encoding, "encode", None)) or type(name) is not str:
        raise TypeError(
            "expected encoding to be an encoding's name or a tiktoken Encoding (with "
            f"'name' and 'encode'), got {type(encoding).__name__}"
        )
    return _Encoded(encoding, f"tiktoken:{name}")


class Seen(NamedTuple):
    """What one model request was sent: a compact reference into the transcript.

    On the event answering a request (``model_replied``, ``model_raised``,
    ``model_interrupted``; ``summary_*`` for the summariser's). ``kept`` are
    ``[start, end)`` ranges of transcript indexes sent as they are;
    ``summary`` is the range a summary stood in for (its text is the last
    ``summary_written`` event's ``input``), or None; ``tokens`` what the
    counter made of the whole request.
    """

    kept: tuple[tuple[int, int], ...]
    summary: tuple[int, int] | None
    tokens: int

    def record(self) -> dict[str, Any]:
        """As a run file keeps it."""
        return {
            "kept": [list(span) for span in self.kept],
            "summary": None if self.summary is None else list(self.summary),
            "tokens": self.tokens,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Seen:
        """From a run file's ``context`` field (its shape checked by the schema)."""
        summary = record["summary"]
        return cls(
            tuple((int(a), int(b)) for a, b in record["kept"]),
            None if summary is None else (int(summary[0]), int(summary[1])),
            record["tokens"],
        )

    def describe(self) -> str:
        """``messages 0-2, summary of 3-40, 41-57 (1234 tokens)``, for ``show`` and the report."""
        parts = [f"{a}" if b - a == 1 else f"{a}-{b - 1}" for a, b in self.kept]
        if self.summary is not None:
            a, b = self.summary
            parts.insert(min(1, len(parts)), f"summary of {a}-{b - 1}")
        return f"messages {', '.join(parts)} ({self.tokens} tokens)"


def _positive(_: object, attribute: attrs.Attribute[int], value: object) -> None:
    if type(value) is not int or value < 1:
        raise (TypeError if type(value) is not int else ValueError)(
            f"expected {attribute.name} to be an int of 1 or more, got {value!r:.40}"
        )


def _counter(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not callable(value) or type(getattr(value, "name", None)) is not str:
        raise TypeError(
            "expected counter to be a callable taking a message's JSON bytes, with a str "
            f"'name' (say agentloop.context.approx_tokens), got {type(value).__name__}"
        )


@attrs.frozen(kw_only=True)
class ContextPolicy:
    """How a run's requests are fitted to ``tokens``: ``keep_last`` or ``summarise``.

    Made by ``agentloop.context.keep_last`` and ``agentloop.context.summarise``.
    """

    #: The most tokens (by ``counter``) a model request may carry.
    tokens: int = attrs.field(validator=_positive)
    #: Counts one message's tokens from its JSON.
    counter: Counter = attrs.field(default=approx_tokens, validator=_counter)
    #: The model callback that writes summaries (None: the oldest turns are dropped).
    summariser: Callable[..., Any] | None = attrs.field(default=None, eq=False)
    #: Under ``summarise``: the most tokens of turns kept after a fold (the rest is folded).
    keep_tokens: int = attrs.field(default=0)

    @property
    def kind(self) -> str:
        """``'keep_last'`` or ``'summarise'``."""
        return "keep_last" if self.summariser is None else "summarise"

    def __reduce__(self) -> tuple[Any, ...]:
        # A copy (a pickle: a DBOS workflow's result) keeps what a replay needs; the
        # summariser stays behind (the summaries are in the events), as in a run file.
        return _remade, (self.tokens, self.counter, self.summariser is not None, self.keep_tokens)

    def record(self) -> dict[str, Any]:
        """As a run file keeps it: what a replay needs (the summaries are in the events)."""
        return {
            "policy": self.kind,
            "tokens": self.tokens,
            "counter": self.counter.name,
            "keep_tokens": self.keep_tokens,
        }


def _unwritten(history: object) -> object:
    raise RuntimeError("this run's summaries were recorded: it is replayed, never summarised anew")


def _remade(tokens: int, counter: Counter, summarises: bool, keep_tokens: int) -> ContextPolicy:
    """A policy unpickled: its summaries are recorded, so it writes none."""
    return ContextPolicy(
        tokens=tokens,
        counter=counter,
        summariser=_unwritten if summarises else None,
        keep_tokens=keep_tokens,
    )


def policy_from_record(
    record: dict[str, Any], counters: Iterable[Counter] = ()
) -> ContextPolicy | None:
    """A recorded policy made again, or None when its counter is not known here.

    A run file names its counter: ``approx`` and ``tiktoken:<encoding>`` are
    made again; another is found among ``counters``.
    """
    name = record["counter"]
    counter: Counter | None = next((c for c in counters if c.name == name), None)
    if counter is None and name == approx_tokens.name:
        counter = approx_tokens
    elif counter is None and name.startswith("tiktoken:"):
        try:
            counter = tiktoken_tokens(name.removeprefix("tiktoken:"))
        except Exception:  # noqa: BLE001 - not installed, or its encoding cannot be loaded
            return None
    if counter is None:
        return None
    return ContextPolicy(
        tokens=record["tokens"],
        counter=counter,
        summariser=_unwritten if record["policy"] == "summarise" else None,
        keep_tokens=record["keep_tokens"],
    )


class Summarise:
    """The engine's request: call ``model`` with ``history`` (the turns to fold), report its reply.

    Reported like a model's reply: ``replied(reply)`` with a final answer, whose
    text is the summary; ``raised(exc)``; ``interrupted(exc)``.
    """

    __slots__ = ("_json", "model")

    def __init__(self, model: Callable[..., Any], history_json: bytes) -> None:
        self.model = model
        self._json = history_json

    @property
    def history(self) -> list[dict[str, Any]]:
        """A fresh copy of the summariser's request."""
        return orjson.loads(self._json)  # type: ignore[no-any-return]

    @property
    def history_json(self) -> bytes:
        """The request as one JSON array."""
        return self._json

    def __repr__(self) -> str:
        return f"Summarise(<request of {len(self._json)} bytes>)"


class Summary(NamedTuple):
    """The summary in force: the turns it stands for, its message's JSON and tokens."""

    #: Turns ``[0, turns)`` are folded into it.
    turns: int
    #: The transcript range it stands for.
    span: tuple[int, int]
    message: bytes
    tokens: int


def summary_message(text: str, span: tuple[int, int]) -> bytes:
    """The message a summary is sent as: a user message right after the head."""
    return orjson.dumps(
        {
            "kind": "user",
            "text": (
                f"[Summary of the earlier conversation (messages {span[0]}-{span[1] - 1}), "
                f"written to fit the context window]\n{text}"
            ),
        }
    )


class Plan(NamedTuple):
    """What the view for the next request is, found once per request."""

    #: The messages it holds (a summary included), as one JSON array; None: the whole history.
    view: bytes | None
    seen: Seen
    #: Turns ``[folded, fold)`` are to be folded first (``summarise``); equal: none.
    folded: int
    fold: int


class Window:
    """One run's messages as the context policy reads them: sizes, turns, running sums."""

    __slots__ = (
        "_closed",
        "_head_done",
        "_open",
        "_sums",
        "counter",
        "head",
        "head_tokens",
        "kept_tokens",
        "messages",
        "sizes",
        "starts",
        "system",
        "turn_tokens",
        "turns",
    )

    def __init__(self, counter: Counter, encoded: Iterable[bytes] = ()) -> None:
        self.counter = counter
        #: Every message's JSON, and its tokens.
        self.messages: list[bytes] = []
        #: Where each message starts in the history's buffer (``[m0,m1,...]``), and one more.
        self.starts: list[int] = [1]
        self.sizes: list[int] = []
        #: Messages ``[0, head)`` are the head; its tokens.
        self.head = 0
        self.head_tokens = 0
        self._head_done = False
        #: Where each turn after the head starts, and its tokens.
        self.turns: list[int] = []
        self.turn_tokens: list[int] = []
        #: The turns that are system messages (always sent), and their tokens in all.
        self.system: list[int] = []
        self.kept_tokens = 0
        self._open: set[str] = set()
        # _sums[i]: the tokens of the droppable turns before turn i, for turns closed so far.
        self._sums: list[int] = [0]
        self._closed = 0
        for data in encoded:
            self.add(data)
        # An input with no user message: its head is the whole input, and turns follow.
        self._head_done = self._head_done or not self._open

    def add(self, data: bytes) -> None:
        """A message entered the history."""
        size = self.counter(data)
        index = len(self.messages)
        self.messages.append(data)
        self.sizes.append(size)
        self.starts.append(self.starts[-1] + len(data) + 1)
        message = orjson.loads(data)
        kind = message.get("kind")
        if not self._head_done:
            self.head, self.head_tokens = index + 1, self.head_tokens + size
            self._track(message, kind)
            self._head_done = kind == "user" and not self._open
            return
        if not self._open:
            self.turns.append(index)
            self.turn_tokens.append(0)
            if kind == "system":
                self.system.append(len(self.turns) - 1)
        self.turn_tokens[-1] += size
        if self.system and self.system[-1] == len(self.turns) - 1:
            self.kept_tokens += size
        self._track(message, kind)

    def _track(self, message: dict[str, Any], kind: object) -> None:
        if kind == "call":
            self._open.add(message.get("id"))  # type: ignore[arg-type]
        elif kind == "calls":
            self._open.update(call.get("id") for call in message.get("calls", ()))
        elif kind == "tool_result":
            self._open.discard(message.get("id"))

    def _close(self) -> list[int]:
        """The running sums over every turn, now that none is open (at a request)."""
        sums, system = self._sums, set(self.system)
        for turn in range(self._closed, len(self.turns)):
            sums.append(sums[-1] + (0 if turn in system else self.turn_tokens[turn]))
        self._closed = len(self.turns)
        return sums

    def plan(
        self,
        tokens: int,
        summary: Summary | None,
        folding: bool,
        keep: int,
        buffer: bytearray | None = None,
    ) -> Plan | str:
        """The view that fits ``tokens``, or why none does (the newest turn alone is too big).

        ``buffer`` is the history's own (``History``), whose messages are this
        window's: the view is then made of slices of it, one a kept range.
        """
        sums, turns = self._close(), self.turns
        count = len(turns)
        fixed = self.head_tokens + self.kept_tokens
        newest = 0 if not count or count - 1 in self.system else self.turn_tokens[-1]
        if fixed + newest > tokens:
            if not count:
                return (
                    f"the history cannot fit the context budget of {tokens} tokens: its head "
                    f"(the system messages and the first user message) is {fixed} tokens"
                )
            return (
                f"the history cannot fit the context budget of {tokens} tokens: its newest "
                f"turn ({newest} tokens) with the head and the system messages ({fixed} "
                f"tokens) is {fixed + newest} tokens"
            )
        if summary is not None and fixed + summary.tokens + newest > tokens:
            summary = None  # the summary does not fit beside the newest turn: sent without it
        extra = 0 if summary is None else summary.tokens
        start = 0 if summary is None else summary.turns
        total = sums[count]
        # The first turn from which on the rest fits: sums[j] >= total + fixed + extra - tokens.
        first = bisect.bisect_left(
            sums, total + fixed + extra - tokens, start, max(count - 1, start)
        )
        fold = first
        if folding and first > start:
            # Fold down to ``keep`` tokens of turns, so that a fold is not needed every step.
            fold = max(first, bisect.bisect_left(sums, total - keep, start, max(count - 1, start)))
        kept = [(0, self.head)]
        # A system turn is one message; those among the turns left out are sent all the same.
        kept.extend((turns[turn], turns[turn] + 1) for turn in self.system if turn < first)
        if first < count:
            kept.append((turns[first], len(self.messages)))
        merged: list[tuple[int, int]] = []
        for a, b in kept:
            if merged and merged[-1][1] == a:
                merged[-1] = (merged[-1][0], b)
            elif b > a:
                merged.append((a, b))
        used = fixed + extra + total - sums[first]
        seen = Seen(tuple(merged), None if summary is None else summary.span, used)
        if summary is None and first == 0:
            return Plan(None, seen, start, fold)  # nothing left out: the history as it is
        parts: list[bytes | bytearray]
        if buffer is not None:  # each kept range is one slice of the history's own buffer
            starts = self.starts
            parts = [buffer[starts[a] : starts[b] - 1] for a, b in kept]
        else:
            parts = [b",".join(self.messages[a:b]) for a, b in kept]
        if summary is not None:
            parts.insert(1, summary.message)
        return Plan(b"[%b]" % b",".join(part for part in parts if part), seen, start, fold)

    def fold_request(self, start: int, fold: int, summary: Summary | None) -> tuple[bytes, Seen]:
        """The summariser's request for turns ``[start, fold)`` (and the summary so far)."""
        turns, system = self.turns, set(self.system)
        spans = [
            (turns[turn], turns[turn + 1]) for turn in range(start, fold) if turn not in system
        ]
        lines = [self.messages[index].decode() for a, b in spans for index in range(a, b)]
        earlier = ""
        if summary is not None:
            earlier = f"The summary so far:\n{orjson.loads(summary.message)['text']}\n\n"
        text = f"{earlier}The conversation to fold in, one JSON message a line:\n" + "\n".join(
            lines
        )
        request = [
            orjson.dumps({"kind": "system", "text": SUMMARY_PROMPT}),
            orjson.dumps({"kind": "user", "text": text}),
        ]
        used = sum(self.counter(data) for data in request)
        merged: list[tuple[int, int]] = []
        for a, b in spans:
            if merged and merged[-1][1] == a:
                merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        seen = Seen(tuple(merged), None if summary is None else summary.span, used)
        return b"[%b]" % b",".join(request), seen

    def summary(self, fold: int, text: str) -> Summary:
        """The summary of turns ``[0, fold)`` whose text is ``text``."""
        span = (self.head, self.turns[fold] if fold < len(self.turns) else len(self.messages))
        message = summary_message(text, span)
        return Summary(fold, span, message, self.counter(message))
