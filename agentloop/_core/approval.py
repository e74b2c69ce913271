"""Decisions about calls: a policy's ``allow``/``deny``/``ask``; a person's ``approve``/``deny``.

A policy answers every valid call with a ``Decision``. ``ask(reason)`` is the
one that stops the run: the batch waits in ``awaiting_approval`` until a
person decides each call it asked about. A ``PendingCall`` is what that person
sees; its ``fingerprint`` (a hash of the tool's name and its canonical
arguments) ties a decision to exactly the call that was shown.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, NamedTuple

import attrs
import orjson

from agentloop._core.json import kept

__all__ = [
    "Decision",
    "DecisionKey",
    "Decisions",
    "PendingCall",
    "Policy",
    "allow",
    "approve",
    "ask",
    "call_fingerprint",
    "deny",
    "key_text",
]


def _shown(value: object) -> str:
    """A refused value for a message: a str subclass's own ``repr`` is user code, never run."""
    if type(value) in (str, bool, int, float) or value is None:
        return f"{value!r:.80}"
    if isinstance(value, str):  # the subclass's name, and the text as a plain str shows it
        return f"a {type(value).__name__} (a str subclass) {str.__repr__(value)[:80]}"
    return type(value).__name__


def _check_text(text: str, what: str) -> None:
    """Refuse text the record cannot take (``ValueError``): a lone surrogate has no UTF-8 form.

    The one rule for the text of an ask and a decision, wherever it enters.
    """
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"expected {what} to be valid Unicode text (it is recorded as UTF-8), got a str "
            f"with a lone surrogate at index {exc.start}"
        ) from None


#: What a decision about a pending call is keyed by: its call id, or, for a call of a
#: child run (an agent tool's), its path of call ids, the outermost first.
DecisionKey = str | tuple[str, ...]


@attrs.frozen
class Decision:
    """A policy's or a person's answer about one call.

    ``allow()``/``approve()`` let it run; ``deny(reason)`` refuses it (the
    reason is the ``denied`` result the model reads); ``ask(reason)``, from a
    policy only, waits for a person. ``fingerprint``, when set, is the
    ``PendingCall.fingerprint`` the decision was made about: ``run.decide``
    refuses it for any other call.
    """

    allowed: bool
    reason: str = ""
    asks: bool = False
    fingerprint: str | None = None

    def __attrs_post_init__(self) -> None:
        # Checked here, so that a policy cannot answer with a truthy "no" or an empty denial.
        if type(self.allowed) is not bool:
            raise TypeError(f"expected Decision.allowed to be a bool, got {self.allowed!r:.80}")
        if type(self.asks) is not bool or (self.asks and self.allowed):
            raise TypeError(
                "expected Decision.asks to be a bool, and False when allowed, "
                f"got {self.asks!r:.80}"
            )
        # An exact str of valid Unicode: what the run file and the ledger can record and
        # read back (a str subclass is refused there, a lone surrogate cannot be encoded).
        # Refused here, a policy's bad answer fails inside the policy (closed, an ``error``
        # outcome) and a person's before anything of the run changes.
        what = "Decision.reason" if self.allowed else ("an ask's" if self.asks else "a denial's")
        what += "" if self.allowed else " reason"
        if type(self.reason) is not str or not (self.allowed or self.reason):
            empty = "" if self.allowed else "non-empty "
            raise TypeError(f"expected {what} to be a {empty}str, got {_shown(self.reason)}")
        _check_text(self.reason, what)
        if self.fingerprint is not None:
            if type(self.fingerprint) is not str:
                raise TypeError(
                    "expected Decision.fingerprint to be a str or None, "
                    f"got {_shown(self.fingerprint)}"
                )
            _check_text(self.fingerprint, "Decision.fingerprint")

    def record(self) -> dict[str, Any]:
        """A person's decision as run files and ledgers keep it; ``Decision(**record)`` again."""
        return {"allowed": self.allowed, "reason": self.reason, "fingerprint": self.fingerprint}


_ALLOW: Final = Decision(allowed=True)


def key_text(key: DecisionKey) -> str:
    """A decision's key as text: the call id, or a child's call's path joined by ``/``.

    ``("c1", "k1")`` is ``"c1/k1"``; each id's ``%`` is written ``%25`` and its
    ``/`` ``%2F``, a run's own call id's too, so that no two keys read the same
    (a call ``"c1/k1"`` of the run is ``"c1%2Fk1"``; provider ids have neither).
    """
    if type(key) is str:
        return key.replace("%", "%25").replace("/", "%2F")
    return "/".join(part.replace("%", "%25").replace("/", "%2F") for part in key)


def allow() -> Decision:
    """The policy answer that lets a call run."""
    return _ALLOW


def deny(reason: str, *, fingerprint: str | None = None) -> Decision:
    """The answer that refuses a call; ``reason`` becomes the ``denied`` content.

    A policy's answer, or a person's decision about a pending call (bound to
    its ``fingerprint`` when given).
    """
    return Decision(allowed=False, reason=reason, fingerprint=fingerprint)


def ask(reason: str) -> Decision:
    """The policy answer that stops the batch until a person decides; ``reason`` says why."""
    return Decision(allowed=False, reason=reason, asks=True)


def approve(*, fingerprint: str | None = None) -> Decision:
    """A person's decision that lets a pending call run (bound to ``fingerprint`` when given)."""
    return _ALLOW if fingerprint is None else Decision(allowed=True, fingerprint=fingerprint)


def call_fingerprint(name: str, arguments: object) -> str:
    """A hash of a call's tool name and canonical arguments (sorted keys, compact JSON)."""
    canonical = orjson.dumps([name, arguments], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


class PendingCall(NamedTuple):
    """A call that waits for a person's decision, as ``run.pending`` lists it.

    A call of a child run (an agent tool's, ``Loop.as_tool``) is pending in
    its parent too, under its ``path``: the call ids it is reached through,
    the parent's first. ``key`` is what a decision about it is keyed by.
    """

    call_id: str
    name: str
    #: The arguments' JSON; ``arguments`` decodes a fresh copy.
    arguments_json: bytes
    #: Why the policy asked.
    reason: str
    #: ``call_fingerprint(name, arguments)``: what a bound decision must match.
    fingerprint: str
    #: The calls of the runs it is reached through, the outermost first: ``()`` in its own run.
    path: tuple[str, ...] = ()

    @property
    def key(self) -> DecisionKey:
        """What ``decide`` takes its decision under: ``call_id``, or ``(*path, call_id)``."""
        return (*self.path, self.call_id) if self.path else self.call_id

    def under(self, call_id: str) -> PendingCall:
        """The same call as the parent whose call ``call_id`` runs its run lists it."""
        return self._replace(path=(call_id, *self.path))

    @property
    def arguments(self) -> Any:
        """The call's arguments (a fresh copy)."""
        return orjson.loads(self.arguments_json)

    def record(self) -> dict[str, Any]:
        """The pending call as run files and DBOS keep it: ``from_record`` reads it back."""
        record: dict[str, Any] = {
            "call_id": self.call_id,
            "name": self.name,
            "arguments": self.arguments,
            "reason": self.reason,
            "fingerprint": self.fingerprint,
        }
        if self.path:  # a child's call: written only then
            record["path"] = list(self.path)
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> PendingCall:
        """The pending call a ``record()`` holds."""
        return cls(
            record["call_id"],
            record["name"],
            kept(orjson.dumps(record["arguments"])),
            record["reason"],
            record["fingerprint"],
            tuple(record.get("path", ())),
        )

    def approve(self) -> Decision:
        """``approve()`` bound to this call's fingerprint."""
        return approve(fingerprint=self.fingerprint)

    def deny(self, reason: str) -> Decision:
        """``deny(reason)`` bound to this call's fingerprint."""
        return deny(reason, fingerprint=self.fingerprint)

    def __repr__(self) -> str:
        path = f", path={self.path!r}" if self.path else ""
        return (
            f"PendingCall(call_id={self.call_id!r}, name={self.name!r}, "
            f"arguments={self.arguments!r}, reason={self.reason!r}{path})"
        )


#: A permission policy: sees a copy of the call, answers (or, ``async``, awaits) a ``Decision``.
#: Here, beside ``Decision``, so that a ``Tool`` can name it (``agentloop._tools.policy``
#: imports ``Tool``). One may take the call's ``RunContext`` too, as a parameter annotated
#: with it (so the type says no more than a callable).
Policy = Callable[..., Decision | Awaitable[Decision]]

#: A person's decisions, as ``run.decide`` and ``resume(decisions=...)`` take them: each
#: pending call's ``key`` (its id, or a child's call's path) -> ``approve()`` or ``deny(reason)``.
#: The keys are checked when decided (a ``Mapping`` is invariant in its keys, so that a
#: literal keyed by ``("c1", "k1")`` type-checks, they are ``Any`` here).
Decisions = Mapping[Any, Decision]
