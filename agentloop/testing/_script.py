"""Scripts of replies: ``ScriptedModel`` and the functions that build its entries."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs
import orjson

from agentloop._core.table import State
from agentloop._core.values import CancelToken
from agentloop._tools.results import is_pydantic_model, json_form

Message = dict[str, Any]
_ACCEPT: Final = (State.VALIDATING, State.DISPATCHING)

# -- building replies -----------------------------------------------------------


def call(call_id: str, name: str, /, **arguments: Any) -> Message:
    """A call reply: ``{'kind': 'call', 'id', 'name', 'arguments'}``.

    ``call_id`` and ``name`` are positional-only, so a tool may have parameters
    called ``id`` or ``name``: ``call('c1', 'greet', name='Ada')``.
    """
    for what, value in (("call_id", call_id), ("name", name)):
        if type(value) is not str:
            raise TypeError(f"call() takes {what} as a str, got {value!r:.80}")
    return {"kind": "call", "id": call_id, "name": name, "arguments": arguments}


def batch(*calls: Message, text: str | None = None) -> Message:
    """A batch reply: ``{'kind': 'calls', 'calls': [...], 'text': text}`` from ``call(...)`` s.

    ``batch(call('c1', 'add', a=1), call('c2', 'add', a=2), text='both')``;
    ``text`` (the model's commentary beside the calls) is left out when None.
    """
    elements = []
    for index, made in enumerate(calls):
        if not (isinstance(made, dict) and made.get("kind") == "call"):
            raise TypeError(
                f"batch() takes replies made by call(); argument {index} is {made!r:.80}"
            )
        elements.append({key: made[key] for key in ("id", "name", "arguments") if key in made})
    reply: Message = {"kind": "calls", "calls": elements}
    if text is not None:
        reply["text"] = text
    return reply


def with_usage(
    reply: Message, input_tokens: int, output_tokens: int, cached_tokens: int = 0
) -> Message:
    """``reply`` reporting token usage, as a provider adapter's replies do.

    ``with_usage(final('ok'), 120, 8)`` makes ``max_total_tokens`` testable
    with no provider; the usage goes on the reply's event, not the transcript.
    """
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cached_tokens": cached_tokens,
    }
    return {**reply, "usage": usage}


def final(text: object) -> Message:
    """A final reply: ``{'kind': 'final', 'text': text}``.

    For a typed output, ``text`` may be the value itself (a dict, a list, a
    dataclass, an attrs instance or a pydantic model): its JSON is the text.
    """
    if type(text) is not str:
        if not isinstance(text, (dict, list)) and not _is_structured(text):
            raise TypeError(
                "final() takes the answer's text (a str), or for a typed output a dict, a "
                f"list, a dataclass, an attrs instance or a pydantic model, got {text!r:.80}"
            )
        text = orjson.dumps(json_form(text, "final()")).decode()
    return {"kind": "final", "text": text}


def _is_structured(value: object) -> bool:
    """A dataclass, attrs or pydantic instance: a value with a JSON form of fields."""
    kind = type(value)
    return dataclasses.is_dataclass(kind) or attrs.has(kind) or is_pydantic_model(kind)


@attrs.frozen
class Cancel:
    """A script marker: cancel ``token``, then answer with the script's next entry.

    Made by ``cancel(token)``. The cancellation lands while the model works,
    so the engine sees it right after the reply (or the exception) the next
    entry gives: the run ends ``cancelled`` with that reply as ``rejected``.
    """

    token: CancelToken


def cancel(token: CancelToken) -> Cancel:
    """A script entry that cancels ``token`` and then gives the next entry's reply."""
    if not isinstance(token, CancelToken):
        raise TypeError(f"expected a CancelToken, got {type(token).__name__}")
    return Cancel(token)


# -- the scripted model ---------------------------------------------------------


class ScriptExhausted(BaseException):
    """The scripted model was asked for a reply after its script ran out.

    A ``BaseException`` (as pytest's own ``Failed`` is) on purpose: an
    ``Exception`` from the model is a legitimate outcome (the run ends
    ``failed``), which a test that accepts any ending would not notice. This
    one is an interruption instead: the run ends ``cancelled`` and the
    exception propagates out of ``run()``/``arun()``/``step()``, failing the test.
    """


class _Script:
    """What both scripted models share: the entries, the cursor and ``seen``."""

    def __init__(self, replies: Iterable[object]) -> None:
        # One reply is a dict (or a str): iterating it would make its keys the replies.
        if isinstance(replies, Mapping | str | bytes) or not isinstance(replies, Iterable):
            raise TypeError(
                f"expected replies to be a list of replies (e.g. [final('done')]), "
                f"got {type(replies).__name__}"
            )
        entries = list(replies)
        for index, entry in enumerate(entries):
            if isinstance(entry, type) and issubclass(entry, BaseException):
                raise TypeError(
                    f"replies[{index}]: expected an exception to raise as an instance "
                    f"({entry.__name__}('...')), got the class {entry.__name__}"
                )
            if isinstance(entry, Cancel) and (
                index + 1 == len(entries) or isinstance(entries[index + 1], Cancel)
            ):
                found = "the end of the script" if index + 1 == len(entries) else "another cancel"
                raise ValueError(
                    f"replies[{index}]: expected cancel(token) to be followed by the reply to "
                    f"give once cancelled, got {found}"
                )
        self._entries = entries
        self._next = 0
        #: How many replies the script holds (``cancel`` markers are not replies).
        self.size: int = sum(not isinstance(entry, Cancel) for entry in entries)
        #: Every history the model was given, in order (each a fresh copy from the engine).
        self.seen: list[list[Message]] = []

    def __repr__(self) -> str:
        replies = "reply" if self.size == 1 else "replies"
        return f"{type(self).__name__}(<{self.size} {replies}, {self.remaining} left>)"

    @property
    def remaining(self) -> int:
        """Replies not given yet."""
        return sum(not isinstance(entry, Cancel) for entry in self._entries[self._next :])

    def _take(self, history: list[Message]) -> object:
        """Record ``history``; the next entry, after cancelling for a marker."""
        self.seen.append(history)
        if self._next >= len(self._entries):
            calls, replies = ("call", "reply") if self.size == 1 else ("calls", "replies")
            raise ScriptExhausted(
                f"expected at most {self.size} model {calls} (the script has {self.size} "
                f"{replies}), got call {len(self.seen)}; end the script with final(...) "
                "or add the replies this run needs (a script plays once: make a new one for "
                "each run)"
            )
        entry = self._entries[self._next]
        self._next += 1
        if isinstance(entry, Cancel):
            entry.token.cancel()
            entry = self._entries[self._next]  # the constructor checked there is one
            self._next += 1
        if isinstance(entry, BaseException):
            raise entry
        return entry


class ScriptedModel(_Script):
    """A deterministic model for the synchronous driver: replays ``replies`` in order.

    Each entry is a reply (any object: a well-formed dict from ``call`` or
    ``final``, or something malformed on purpose), an exception instance to
    raise, a callable that gets the history and returns the reply, or a
    ``cancel(token)`` marker. ``seen`` holds every history it was given. Asked
    once more than it has replies, it raises ``ScriptExhausted``.
    """

    def __call__(self, history: list[Message]) -> object:
        entry = self._take(history)
        return entry(history) if callable(entry) else entry


class AsyncScriptedModel(_Script):
    """``ScriptedModel`` as an ``async def`` model, for ``loop.arun``/``loop.astart``.

    It yields to the event loop once before each reply, as a provider call
    would; a callable entry may be ``async`` too. It makes the same
    transitions as ``ScriptedModel`` on the same script.
    """

    async def __call__(self, history: list[Message]) -> object:
        # Yield before taking the entry, never after a cancel: the token is then
        # seen after the reply in both drivers, rather than interrupting this await.
        await asyncio.sleep(0)
        entry = self._take(history)
        if not callable(entry):
            return entry
        reply = entry(history)
        return await reply if inspect.isawaitable(reply) else reply
