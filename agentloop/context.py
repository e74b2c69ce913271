"""agentloop.context: long conversations, fitted to a context window in whole turns.

``Loop(model, context=keep_last(tokens=N))`` sends each model request the
head of the history (its system messages and first user message), every
system message, and the newest whole turns that fit ``N`` tokens;
``summarise(writer, tokens=N)`` folds the oldest turns into one summary that
``writer`` (a model callback) writes, on a row and a step of its own. A turn
is a message from outside, or a model reply with every result that answers
it, so a call is never sent without its result. The history itself is never
cut: the record keeps every message, and each event answering a model
request says what it was sent (``Transition.context``, a ``Seen``). When even
the newest turn cannot fit, the run ends ``exhausted`` with reason
``'context'`` and nothing is sent. See the docs' "Long conversations" page.
"""

from __future__ import annotations

import typing as _typing

from agentloop._core.context_policy import (
    SUMMARY_PROMPT,
    ContextPolicy,
    Counter,
    Seen,
    Summarise,
    approx_tokens,
    tiktoken_tokens,
)
from agentloop._names import publish as _publish

if _typing.TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = [
    "SUMMARY_PROMPT",
    "ContextPolicy",
    "Counter",
    "Seen",
    "Summarise",
    "approx_tokens",
    "keep_last",
    "summarise",
    "tiktoken_tokens",
]


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


_publish(__name__, globals(), ["keep_last", "summarise", "ContextPolicy", "Seen", "Summarise"])
