"""The window: one run's messages as a context policy reads them, and the view that fits.

``Window`` keeps, for one run, each message's JSON and token count (counted
once, when the message enters) and where each turn starts, so that finding
the view for a request (its ``Plan``) is a binary search over running sums,
and making it one ``bytes.join`` of the kept messages. What a view keeps, and
why, is ``context_policy.py``'s account; the policies themselves are there too.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from agentloop._core.context_policy import SUMMARY_PROMPT, Seen
from agentloop._core.json import kept

if TYPE_CHECKING:
    from collections.abc import Iterable

    from agentloop._core.context_policy import Counter
    from agentloop._core.state import RunState

__all__ = ["Plan", "Summary", "Window", "context_plan", "summary_message"]


class Summary(NamedTuple):
    """The summary in force: the turns it stands for, its message's JSON and tokens."""

    #: Turns ``[0, turns)`` are folded into it.
    turns: int
    #: The transcript range it stands for.
    span: tuple[int, int]
    message: bytes
    tokens: int
    #: What the summariser wrote (carried into a conversation's next turn with ``turns``).
    text: str


def summary_message(text: str, span: tuple[int, int]) -> bytes:
    """The message a summary is sent as: a user message right after the head."""
    return kept(
        orjson.dumps(
            {
                "kind": "user",
                "text": (
                    f"[Summary of the earlier conversation (messages {span[0]}-{span[1] - 1}), "
                    f"written to fit the context window]\n{text}"
                ),
            }
        )
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
        # The turns the summary in force stands for: never folded again, whether or not it
        # fits this request (another summary of them would be no shorter).
        covered = 0 if summary is None else summary.turns
        if summary is not None and fixed + summary.tokens + newest > tokens:
            summary = None  # the summary does not fit beside the newest turn: sent without it
        extra = 0 if summary is None else summary.tokens
        start = 0 if summary is None else summary.turns
        total = sums[count]
        # The first turn from which on the rest fits: sums[j] >= total + fixed + extra - tokens.
        first = bisect.bisect_left(
            sums, total + fixed + extra - tokens, start, max(count - 1, start)
        )
        fold = covered
        if folding and first > covered:
            # Fold down to ``keep`` tokens of turns, so that a fold is not needed every step.
            last = max(count - 1, covered)
            fold = max(first, bisect.bisect_left(sums, total - keep, covered, last))
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
            return Plan(None, seen, covered, fold)  # nothing left out: the history as it is
        parts: list[bytes | bytearray]
        if buffer is not None:  # each kept range is one slice of the history's own buffer
            starts = self.starts
            parts = [buffer[starts[a] : starts[b] - 1] for a, b in kept]
        else:
            parts = [b",".join(self.messages[a:b]) for a, b in kept]
        if summary is not None:
            parts.insert(1, summary.message)
        return Plan(b"[%b]" % b",".join(part for part in parts if part), seen, covered, fold)

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
        return Summary(fold, span, message, self.counter(message), text)


def context_plan(run: RunState) -> Plan | str:
    """The view for the request about to be made (found once a request), or why none fits."""
    policy, context = run.policy, run.context
    assert policy is not None, "a context policy is set"
    assert context is not None, "a policy has its window"
    window, read = context
    history = run.history
    for index in range(read[0], len(history)):
        window.add(history.message_json(index))
    read[0] = len(history)
    cached, summary = run.plan, run.summary
    if cached is not None and cached[0] == len(window.messages) and cached[1] is summary:
        return cached[2]
    plan = window.plan(
        policy.tokens,
        summary,
        policy.summariser is not None,
        policy.keep_tokens,
        run.history.buffer,
    )
    run.plan = (len(window.messages), summary, plan)
    return plan
