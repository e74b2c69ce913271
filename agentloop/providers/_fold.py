"""Each message converted once: an adapter's request as a fold over the history's messages.

An adapter's conversion is a ``Fold``: it takes the messages in order
(``add``) and ``made()`` gives the request's part. A history the caller
passes as a list is converted whole, by a fresh fold. The record itself
(``Messages``, what the drivers give the built-in adapters) keeps its fold in
the run's cache, so a step converts only the messages recorded since the last
one: the cost of a step does not grow with the history. What a request
holds is never changed afterwards: ``made()`` gives each request its own
lists, and a fold copies a turn a request holds before it grows it.

A request shares its earlier messages with the run's cache (copying them all
would cost what the cache saves), but its last message is a deep copy of its
own: a client that marks the last message in place (a prompt-cache
breakpoint, say) changes that request alone.
"""

from __future__ import annotations

import copy
import threading
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from agentloop._core.requests import Messages

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop.providers._convert import Message

__all__ = ["Fold", "Turns", "folded", "last_own"]

_Made = TypeVar("_Made")


def last_own(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``items`` in a list of its own whose last item is a deep copy (see the module's notes)."""
    made = [*items]
    if made:
        made[-1] = copy.deepcopy(made[-1])
    return made


class Fold(Generic[_Made]):
    """One conversion of a history, grown a message at a time (``count`` so far)."""

    __slots__ = ("count", "lock")

    def __init__(self) -> None:
        self.count = 0
        # A run asks one model at a time, but a model call cut off in a thread may still
        # be converting when the next begins: one fold at a time.
        self.lock = threading.Lock()

    def add(self, index: int, message: Message) -> None:
        """Convert message ``index``, the next one."""
        raise NotImplementedError

    def made(self) -> _Made:
        """The request's part for the messages added so far, in lists of its own."""
        raise NotImplementedError


def folded(
    history: list[Message] | Messages, key: object, make: Callable[[], Fold[_Made]]
) -> _Made:
    """What ``make()``'s fold makes of ``history``: the record's kept under ``key``."""
    if not isinstance(history, Messages):
        fold = make()
        for index, message in enumerate(history):
            fold.add(index, message)
            fold.count = index + 1
        return fold.made()
    cache, count = history.cache, len(history)
    kept: Fold[_Made] | None = cache.get(key)
    if kept is None:
        kept = cache.setdefault(key, make())
    with kept.lock:
        if count < kept.count:  # a request made before the last one, converted late
            return folded([history.decoded(index) for index in range(count)], key, make)
        try:
            for index in range(kept.count, count):
                kept.add(index, history.decoded(index))
                kept.count = index + 1
        except BaseException:
            del cache[key]  # a message it cannot convert may have left it half-grown
            raise
        return kept.made()


class Turns(Fold[tuple[list[dict[str, Any]], list[str]]]):
    """A fold into turns of alternating roles (Anthropic's ``messages``, Gemini's ``contents``).

    Each turn is ``{'role': ..., blocks: [...]}``; ``system`` collects the
    system messages' texts. A turn a request was given is copied before it
    changes (``blocks``), so the request keeps its own.
    """

    __slots__ = ("_owned", "blocks_key", "system", "turns")

    def __init__(self, blocks_key: str) -> None:
        super().__init__()
        self.blocks_key = blocks_key
        self.turns: list[dict[str, Any]] = []
        self.system: list[str] = []
        self._owned: set[int] = set()  # turns no request holds yet

    def turn(self, role: str) -> list[dict[str, Any]]:
        """The blocks of the last turn if it is ``role``'s, else of a new one (roles alternate)."""
        turns = self.turns
        if turns and turns[-1]["role"] == role:
            return self.blocks(len(turns) - 1)
        turns.append({"role": role, self.blocks_key: []})
        self._owned.add(len(turns) - 1)
        return turns[-1][self.blocks_key]  # type: ignore[no-any-return]

    def blocks(self, at: int) -> list[dict[str, Any]]:
        """Turn ``at``'s blocks, to change: copied first if a request holds the turn."""
        turn = self.turns[at]
        if at not in self._owned:
            turn = self.turns[at] = {
                "role": turn["role"],
                self.blocks_key: [*turn[self.blocks_key]],
            }
            self._owned.add(at)
        return turn[self.blocks_key]  # type: ignore[no-any-return]

    def made(self) -> tuple[list[dict[str, Any]], list[str]]:
        """The turns and system texts, in lists of the request's own; a request holds each turn."""
        self._owned.clear()
        return last_own(self.turns), [*self.system]
