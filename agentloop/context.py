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

from agentloop._core.context_policy import (
    SUMMARY_PROMPT,
    ContextPolicy,
    Counter,
    Seen,
    Summarise,
    approx_tokens,
    keep_last,
    summarise,
    tiktoken_tokens,
)
from agentloop._names import publish as _publish

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


_publish(__name__, globals(), ["keep_last", "summarise", "ContextPolicy", "Seen", "Summarise"])
