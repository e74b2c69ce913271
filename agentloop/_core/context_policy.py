"""Long conversations: the context policies, their counters and their records.

A policy says what the model is sent, reduced to a token budget in whole turns.

The history itself is never cut: the record keeps every message. What a model
request carries is a *view* of it, made by the ``fit_context`` effect of the
``ask_model`` row (``table.py``): the head (every message up to and including
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

Finding that view is ``window.py``'s (``Window``); here are the policies
(``ContextPolicy``), the counters, what a request was sent (``Seen``), the
summariser's request (``Summarise``) and a policy read back from a record.
"""

from __future__ import annotations

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
    "FilterHistory",
    "Seen",
    "Summarise",
    "approx_tokens",
    "keep_last",
    "policy_from_record",
    "summarise",
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
    # At most 2**63 - 1: a run file and a ledger keep 64-bit integers.
    if type(value) is not int or not 1 <= value <= 2**63 - 1:
        raise (TypeError if type(value) is not int else ValueError)(
            f"expected {attribute.name} to be an int from 1 to 2**63 - 1, got {value!r:.40}"
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
    made again; another is found among ``counters``. A record that is not a
    policy's raises ``ValueError`` (or ``TypeError``, as ``ContextPolicy`` does).
    """
    if (
        type(record) is not dict
        or record.get("policy") not in ("keep_last", "summarise")
        or "tokens" not in record
        or type(record.get("counter")) is not str
        or type(record.get("keep_tokens")) is not int
        or not 0 <= record["keep_tokens"] <= 2**63 - 1
    ):
        raise ValueError(
            "expected a context policy's record {'policy': 'keep_last' or 'summarise', "
            f"'tokens', 'counter': a name, 'keep_tokens': a count}}, got {record!r:.120}"
        )
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


class FilterHistory(Summarise):
    """The engine's request: ask a handoff's filter what the next agent ``to`` is sent.

    ``model`` is the filter, given a copy of the history; it answers the
    view, a list of messages. Reported as a summariser's reply is:
    ``replied(view)``, ``raised(exc)``, ``interrupted(exc)``.
    """

    __slots__ = ("to",)

    def __init__(self, model: Callable[..., Any], history_json: bytes, to: str) -> None:
        super().__init__(model, history_json)
        self.to = to

    def __repr__(self) -> str:
        return f"FilterHistory(to={self.to!r}, <history of {len(self.history_json)} bytes>)"


def keep_last(*, tokens: int, counter: Counter = approx_tokens) -> ContextPolicy:
    """Send the head, the system messages and the newest whole turns that fit ``tokens``.

    The oldest turns are left out of the request (never out of the record).
    ``counter`` counts a message's tokens from its JSON: ``approx_tokens`` (the
    default, no download) or ``tiktoken_tokens('o200k_base')`` (the extra).
    """
    return ContextPolicy(tokens=tokens, counter=counter)


def summarise(
    model: Callable[..., Any],
    *,
    tokens: int,
    keep_tokens: int | None = None,
    counter: Counter = approx_tokens,
) -> ContextPolicy:
    """Like ``keep_last``, but the turns left out are first folded into one summary.

    ``model`` is a model callback (the Loop's own will do): it is called with a
    system message (``SUMMARY_PROMPT``) and a user message holding the summary so
    far and the turns to fold, and answers a final answer, whose text is the
    summary. Each summary is a step (under ``max_steps``; its usage counts
    toward ``max_total_tokens``). A fold leaves at most ``keep_tokens`` of the
    newest turns (half of ``tokens`` unless told), so that it is not needed at
    every step.
    """
    if not callable(model):
        raise TypeError(
            f"expected model to be a model callback that writes the summary, "
            f"got {type(model).__name__}"
        )
    if keep_tokens is None:
        keep_tokens = tokens // 2 if type(tokens) is int else 0
    if type(keep_tokens) is not int or keep_tokens < 0:
        raise ValueError(f"expected keep_tokens to be a non-negative int, got {keep_tokens!r:.40}")
    if type(tokens) is int and keep_tokens >= tokens:  # (tokens itself: ContextPolicy checks)
        raise ValueError(
            f"expected keep_tokens to be less than tokens={tokens}, got {keep_tokens}: a fold "
            "that keeps as much as a request holds would have to fold again at every step"
        )
    return ContextPolicy(tokens=tokens, counter=counter, summariser=model, keep_tokens=keep_tokens)
