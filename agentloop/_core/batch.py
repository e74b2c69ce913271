"""The accepted batch in hand: its calls, the results kept so far, and who decided what.

A batch is the calls of one accepted reply (a lone ``call`` is a batch of
one). Its calls are handed out in emission order, run one at a time or
several at once, and each result is kept here until the batch is answered
whole: then the reply and every result enter the history together, so the
history never holds a call without its result.
"""

from __future__ import annotations

from typing import Any, Final

import attrs
import orjson

from agentloop._core.approval import Decision, DecisionKey, PendingCall, call_fingerprint, key_text
from agentloop._core.intake import Reply, not_json
from agentloop._core.json import kept
from agentloop._core.messages import CUT_OFF, NOT_STARTED, tool_result_json

__all__ = ["Batch", "check_decisions"]

_NOT_STARTED: Final = orjson.dumps(NOT_STARTED)
_CUT_OFF: Final = orjson.dumps(CUT_OFF)


@attrs.define(eq=False)
class Batch:
    """The batch of calls of the reply ``reply``, from its acceptance until it is answered."""

    reply: Reply
    #: Each call's ``(id, name)``, in emission order.
    calls: tuple[tuple[str, str], ...] = attrs.field(init=False)
    #: Each answered call's tool_result JSON, by its index in the batch.
    results: dict[int, bytes] = attrs.field(factory=dict)
    #: The calls handed out to run and not yet answered: id -> index.
    running: dict[str, int] = attrs.field(factory=dict)
    #: How far down the batch calls were handed out (a call a person denied is skipped).
    started: int = 0
    #: How many calls were handed out: none, and the batch can still wait for a person.
    handed: int = 0
    #: The calls a policy asked a person about, and each decision taken, by id.
    pending: tuple[PendingCall, ...] = ()
    decided: dict[str, Decision] = attrs.field(factory=dict)
    #: What the driver's review answered about each call, by id (None: not reviewed).
    review: dict[str, object] | None = None
    #: The calls whose child run (an agent tool's) waits for a person: id -> its pending
    #: calls, each under that id. No call is handed out while one of them is undecided.
    waiting: dict[str, tuple[PendingCall, ...]] = attrs.field(factory=dict)
    #: A person's decisions about a waiting call's child's calls, by the call's id, keyed
    #: as the child keys them: set once decided, and read when the call is handed out again.
    resumes: dict[str, dict[DecisionKey, Decision]] = attrs.field(factory=dict)
    #: Those decisions of each waiting call handed out again, read by its child's resume.
    resumed: dict[str, dict[DecisionKey, Decision]] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        self.calls = self.reply.calls

    @property
    def underway(self) -> bool:
        """Whether the record shows a call of the batch: started, answered, or held for a person.

        Cut short, such a batch is answered whole and appended: a call the
        events name is never missing from the transcript.
        """
        return bool(self.results or self.running or self.waiting or self.pending)

    @property
    def unstarted(self) -> int:
        """How many calls are still to be handed out (none while a wait is undecided)."""
        results, waiting = self.results, self.waiting
        if waiting and len(self.resumes) < len(waiting):
            return 0
        return len(waiting) + sum(i not in results for i in range(self.started, len(self.calls)))

    def next_index(self) -> int | None:
        """The index of the next call to hand out, or None.

        A waiting call a person decided about comes first; then the calls not
        yet handed out (one already answered is skipped).
        """
        for call_id in self.resumes:
            return self.index(call_id)
        index, results = self.started, self.results
        while index in results:
            index += 1
        return index if index < len(self.calls) else None

    def index(self, call_id: str) -> int:
        """The index of the call ``call_id`` in the batch."""
        return next(i for i, (found, _) in enumerate(self.calls) if found == call_id)

    def call(self, index: int) -> dict[str, Any]:
        """A fresh copy of call ``index``, as a ``call`` message."""
        reply = self.reply
        if reply.value["kind"] == "call":  # a lone call: the reply itself
            return orjson.loads(reply.json)  # type: ignore[no-any-return]
        element = reply.value["calls"][index]
        return {"kind": "call", **orjson.loads(orjson.dumps(element))}

    def to_review(self) -> list[dict[str, Any]]:
        """Fresh copies of the calls a review is to answer about.

        Those no person decided, and that the engine did not answer already
        (the loop guard's refusals never run, so no policy is shown them).
        """
        decided, results = self.decided, self.results
        return [
            self.call(index)
            for index, (call_id, _) in enumerate(self.calls)
            if call_id not in decided and index not in results
        ]

    def handed_out(self, index: int) -> tuple[dict[str, Any], object, Decision | None]:
        """Call ``index`` as it is handed out: a fresh copy, its review's answer, its decision."""
        call_id = self.calls[index][0]
        review = None if self.review is None else self.review.get(call_id)
        return self.call(index), review, self.decided.get(call_id)

    def answer(self, index: int, status: str, content_json: bytes) -> None:
        """Keep call ``index``'s result."""
        call_id, name = self.calls[index]
        self.results[index] = tool_result_json(call_id, name, status, content_json)

    def answer_rest(self, cut: bytes = _CUT_OFF) -> None:
        """Answer each call without a result ``cancelled``: ``cut`` if it ran, else not started."""
        running, waiting = self.running, self.waiting
        for index, (call_id, _) in enumerate(self.calls):
            if index not in self.results:
                ran = call_id in running or call_id in waiting
                self.answer(index, "cancelled", cut if ran else _NOT_STARTED)
        running.clear()
        waiting.clear()
        self.resumes.clear()

    def asked(self, reasons: object) -> tuple[PendingCall, ...]:
        """The calls ``{call_id: reason}`` asks a person about, in emission order; or a raise."""
        if not isinstance(reasons, dict) or not reasons:
            raise TypeError(
                "expected reasons to be a non-empty dict of call id -> reason, "
                f"got {not_json(reasons).text:.80}"
            )
        ids = [call_id for call_id, _ in self.calls]
        # Read once: what is checked is what is kept (a dict subclass may answer twice).
        taken = dict(list(reasons.items()))
        for call_id, reason in taken.items():
            if call_id not in ids or call_id in self.decided:
                where = "was decided already" if call_id in self.decided else "is not in it"
                raise ValueError(
                    f"expected the id of a call of the batch that waits (its calls: {ids}) "
                    f"that no person decided, got {not_json(call_id).text:.80}, which {where}"
                )
            if type(reason) is not str or not reason:
                raise TypeError(
                    f"expected the reason for call {call_id!r} to be a non-empty str, "
                    f"got {not_json(reason).text:.80}"
                    + (f" (a {type(reason).__name__})" if isinstance(reason, str) else "")
                )
            try:  # the one rule of an ask's reason: text the record can take
                Decision(allowed=False, reason=reason, asks=True)
            except ValueError as exc:
                raise ValueError(f"call {call_id!r}: {exc}") from None
        pending: list[PendingCall] = []
        for index, (call_id, name) in enumerate(self.calls):
            if call_id in taken:
                arguments = self.call(index)["arguments"]
                pending.append(
                    PendingCall(
                        call_id,
                        name,
                        kept(orjson.dumps(arguments)),
                        taken[call_id],
                        call_fingerprint(name, arguments),
                    )
                )
        return tuple(pending)

    def messages(self) -> tuple[bytes, ...]:
        """The reply and each result, in emission order: what the history gets at the end."""
        results = self.results
        return (self.reply.json, *[results[i] for i in range(len(self.calls))])


def check_decisions(
    pending: tuple[PendingCall, ...], decisions: object
) -> tuple[tuple[DecisionKey, Decision], ...]:
    """A person's decisions, one per pending call in its order; else what is wrong, raised.

    Each is keyed by its pending call's ``key``: its id, or, for a child run's
    call, its path of call ids (a tuple) or that path as ``pending`` and the
    command line print it (``"c1/k1"``, ``key_text``). A run's own call id is
    never read as a path.
    """
    ids = [call.key for call in pending]
    if not isinstance(decisions, dict):
        raise TypeError(
            "expected decisions to be a dict of call id (or a child's call's path, "
            "PendingCall.key) -> approve() or deny(reason), "
            f"got {not_json(decisions).text:.80}"
        )
    decisions = _keyed_by_path(ids, decisions)
    missing = [call_id for call_id in ids if call_id not in decisions]
    extra = [call_id for call_id in decisions if call_id not in ids]
    if missing or extra:
        raise ValueError(
            f"expected a decision for each pending call {ids}, and for no other"
            + (f"; missing: {missing}" if missing else "")
            + (f"; not pending: {extra}" if extra else "")
        )
    checked: list[tuple[DecisionKey, Decision]] = []
    for call in pending:
        # Read once: what is checked is what is kept (a dict subclass may answer twice).
        decision = decisions[call.key]
        if type(decision) is not Decision or decision.asks:
            raise TypeError(
                f"expected the decision for call {call.key!r} to be approve() or "
                f"deny(reason), got {not_json(decision).text:.80}"
            )
        # Made again, so the one rule of a Decision holds even for one changed after it was
        # made (object.__setattr__): what is kept below can be recorded, and nothing fails later.
        Decision(decision.allowed, decision.reason, decision.asks, decision.fingerprint)
        if decision.fingerprint not in (None, call.fingerprint):
            raise ValueError(
                f"expected the decision for call {call.key!r} to be bound to that call or "
                f"to none, got one that is bound to fingerprint "
                f"{decision.fingerprint[:80]!r}, not to the pending call's "
                f"{call.fingerprint!r}: {call.name}({call.arguments_json.decode()[:80]})"
            )
        checked.append((call.key, decision))
    return tuple(checked)


def _keyed_by_path(ids: list[DecisionKey], decisions: dict[Any, Any]) -> dict[Any, Any]:
    """``decisions`` with each child's call given as text (``"c1/k1"``) keyed by its path.

    Read once, into a plain dict: what is checked is what is kept. A call given
    both ways is refused, as is any key that is no pending call's (later).
    """
    own = {key for key in ids if type(key) is str}
    paths = {key_text(key): key for key in ids if type(key) is tuple}
    paths = {text: key for text, key in paths.items() if text not in own}
    keyed: dict[Any, Any] = {}
    for given, decision in list(decisions.items()):
        key = paths.get(given, given) if type(given) is str else given
        if key in keyed:
            raise ValueError(
                f"expected one decision for each pending call, got two for call {key!r} "
                f"(as {given!r} and as {key if type(given) is str else key_text(key)!r})"
            )
        keyed[key] = decision
    return keyed
