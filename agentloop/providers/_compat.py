"""OpenAI-compatible servers: the switches for what they do differently, and the call ids.

``Compat`` is what ``openai_chat(..., compat=...)`` takes: the departures from
Chat Completions that no automatic repair can safely cover. The repairs that
are safe for every server (a call without an id, arguments sent as an object,
a stream without indexes, usage in other fields, other finish reasons) are
always on, in ``_openai_reply`` and ``_openai_stream``.

The call ids a reply's calls get are decided here (``CallIds``), the same way
whole and streamed: the server's own, unless it sent none, or one that an
earlier call of the same reply has, or ``Compat(fresh_ids=True)`` says the
server's ids mean nothing across replies; then one of agentloop's making
(``fresh_id``), unique across runs. The reply records it, so a resumed or
replayed run keeps it.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import Final

import attrs

__all__ = [
    "DEFAULT",
    "SKIP_SIGNATURE",
    "CallIds",
    "Compat",
    "ShortIds",
    "extra",
    "fresh_id",
    "short_ids",
    "thought_signature",
]


def _flag(_: object, attribute: attrs.Attribute[bool], value: object) -> None:
    if type(value) is not bool:
        raise TypeError(
            f"Compat() expected {attribute.name} to be True or False, got {value!r:.40}"
        )


@attrs.frozen(kw_only=True)
class Compat:
    """How an OpenAI-compatible server departs from Chat Completions, where a switch is needed.

    ``openai_chat(client, model, compat=Compat(...))``. Every field off is
    OpenAI's own behaviour (the default). The Providers page's table says
    which servers need which.
    """

    __module__ = "agentloop.providers.openai"  # where it is imported from

    #: Give every call an id of agentloop's making and drop the server's: for servers whose
    #: ids repeat from one reply to the next (counted per reply, or from the history sent).
    fresh_ids: bool = attrs.field(default=False, validator=_flag)
    #: Send each ``tool`` message with the tool's ``name`` beside its ``tool_call_id``: for
    #: servers that refuse a tool message without one.
    tool_names: bool = attrs.field(default=False, validator=_flag)
    #: Ask a stream for its usage (``stream_options={'include_usage': True}``); off for
    #: servers that refuse ``stream_options`` (their usage, if any, is read all the same).
    stream_usage: bool = attrs.field(default=True, validator=_flag)
    #: Send every call id as nine letters and digits (an id of another form is replaced, the
    #: same way in the call and in its result): for servers that refuse any other id.
    short_ids: bool = attrs.field(default=False, validator=_flag)
    #: Send each call's thought signature back as Gemini's endpoint wants it
    #: (``extra_content.google.thought_signature``), and Google's documented stand-in on the
    #: first call of a step of the current turn that has none: Gemini 3 refuses such a step.
    thought_signatures: bool = attrs.field(default=False, validator=_flag)


#: What ``openai_chat`` does when no ``compat`` is given: OpenAI's own Chat Completions.
DEFAULT: Final = Compat()
#: The thought signature Google documents for a call that Gemini did not make.
SKIP_SIGNATURE: Final = "skip_thought_signature_validator"


def extra(value: object, name: str) -> object:
    """A field the SDK's model does not declare but kept as it came (a server's own), or None.

    Read from pydantic's ``model_extra``: asking the model for a missing
    attribute costs an exception, several microseconds a delta.
    """
    extras = getattr(value, "model_extra", None)
    return extras.get(name) if extras else None


def thought_signature(call: object) -> str | None:
    """The thought signature Gemini's endpoint sends with a tool call, if any.

    In the call's ``extra_content.google.thought_signature`` (a field of
    Gemini's own, which the SDK keeps as it came); only Gemini sends it.
    """
    content = extra(call, "extra_content")
    google = content.get("google") if type(content) is dict else None
    found = google.get("thought_signature") if type(google) is dict else None
    return found if type(found) is str and found else None


def fresh_id() -> str:
    """A call id of agentloop's making: ``call_`` and 24 hex digits (96 random bits)."""
    return f"call_{secrets.token_hex(12)}"


class CallIds:
    """The ids of one reply's calls, in order: the server's, or a fresh one where it will not do.

    A fresh id replaces the server's when there is none (``None`` or empty),
    when an earlier call of the same reply has it (two calls, one id: the
    second is another call, so it gets another id), or always, with
    ``fresh``. Used the same way for a whole reply and for a stream (at each
    call's start), so that both give one reply.
    """

    __slots__ = ("fresh", "given")

    def __init__(self, fresh: bool) -> None:
        self.fresh = fresh
        self.given: set[str] = set()

    def __call__(self, server_id: object) -> str:
        if self.fresh or type(server_id) is not str or not server_id or server_id in self.given:
            made = fresh_id()
            while made in self.given:  # 96 random bits: never, but never is cheap to check
                made = fresh_id()
        else:
            made = server_id
        self.given.add(made)
        return made


_SHORT: Final = re.compile(r"[A-Za-z0-9]{9}")
_DIGITS: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def short_ids(ids: list[str]) -> dict[str, str]:
    """Each of ``ids`` as nine letters and digits: itself when it already is, else a digest.

    The digest (SHA-256, in base 62) is the same in every request, so a
    call and its result keep one id; two ids that would share one (a chance
    of one in 10**16 a pair) get different ones, in order (``ShortIds``).
    """
    wire = ShortIds()
    for one in ids:
        wire(one)
    return wire.given


class ShortIds:
    """Call ids made short as a history grows: an id keeps its short form once it has one.

    Decided in the history's order, so the ids of a request already sent
    never change when the history grows: a digest avoids the short forms
    given before it, and an id that is already short stays itself unless an
    earlier id's digest took it (then it gets a digest too).
    """

    __slots__ = ("given", "taken")

    def __init__(self) -> None:
        self.given: dict[str, str] = {}
        self.taken: set[str] = set()

    def __call__(self, one: str) -> str:
        short = self.given.get(one)
        if short is not None:
            return short
        short = one
        salt = 0
        while not _SHORT.fullmatch(short) or short in self.taken:
            number = int.from_bytes(hashlib.sha256(f"{salt}:{one}".encode()).digest()[:8])
            short = "".join(_DIGITS[(number // 62**at) % 62] for at in range(9))
            salt += 1
        self.taken.add(short)
        self.given[one] = short
        return short
