"""A result cut to ``max_result_chars``: one rule for the registry that cuts and a reader.

The registry cuts a call's content (``_tools/registry.py``); a run file's
check of an agent tool's child (``_review/runchildren.py``) tells a cut of
the child's answer from another answer by the same rule (``cut_of``).
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

__all__ = ["cut_marker", "cut_of", "cut_to"]

#: The limit a cut content's marker names (``cut_marker``'s last words).
_LIMIT: Final = re.compile(r"max_result_chars=([0-9]{1,18})\]\Z")


def cut_marker(kept: int, size: int, limit: int) -> str:
    """What ends a result cut to ``max_result_chars``: how much was cut, of how much."""
    return (
        f"\n[... cut: {size - kept} of {size} characters; the result was longer than "
        f"max_result_chars={limit}]"
    )


def cut_to(outcome: dict[str, Any], limit: int | None) -> dict[str, Any]:
    """``outcome`` with content longer than ``limit`` characters cut, ending with a marker.

    A str is measured as it is; other JSON by its text (which the cut content
    then is). The marker says how many characters were cut, of how many, so the
    record (and the model) know the result is not whole.
    """
    if limit is None:
        return outcome
    content = outcome["content"]
    text = content if type(content) is str else None
    if text is None:
        if type(content) in (int, float, bool) or content is None:
            return outcome  # a scalar is short
        text = orjson.dumps(content).decode()
    if len(text) <= limit:
        return outcome
    return {**outcome, "content": text[:limit] + cut_marker(limit, len(text), limit)}


def cut_of(content: object, whole: object) -> bool:
    """Whether ``content`` is ``whole`` cut to the ``max_result_chars`` its marker names."""
    found = _LIMIT.search(content) if type(content) is str else None
    if found is None:
        return False
    made: object = cut_to({"content": whole}, int(found[1]))["content"]
    return made == content
