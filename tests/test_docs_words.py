"""The README and the docs speak of the library alone, never of how or when they were written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]

# Not "may": "a run may 2 ..." is English, and a diary in May is rare enough.
MONTHS = "january|february|march|april|june|july|august|september|october|november|december"
#: Words about the writing, not the library: the sittings it was written in, the
#: dates of a diary ("measured on 2026-11-30", "on 30 November"), and the library's
#: history ("previously", "in earlier versions", "before these checks").
WRITING = re.compile(
    r"\bpreviously\b|\b(earlier|older|former) versions?\b|\bbefore these\b|\bstrict now\b"
    r"|\b(first|second|third|fourth|fifth|sixth|this|earlier|later|previous|last|next)"
    r"(\s|-)+(session|sitting)s?\b"
    r"|\b(session|sitting)s?\b"
    r"|\b\d{4}-\d{2}-\d{2}\b"
    rf"|\b\d{{1,2}}\s+({MONTHS})\b|\b({MONTHS})\s+\d{{1,2}}(st|nd|rd|th)?\b",
    re.IGNORECASE,
)


#: Inline code names an API (another library's `Session`), not the writing.
CODE = re.compile(r"`[^`]*`")


def writing_words(text: str, where: str) -> list[str]:
    """Each line of ``text`` that speaks of its writing, as ``where:line: the words``."""
    return [
        f"{where}:{number}: {found.group(0)!r} in {line.strip()[:100]!r}"
        for number, line in enumerate(text.splitlines(), start=1)
        for found in WRITING.finditer(CODE.sub("``", line))
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_no_page_speaks_of_how_it_was_written(page: Path) -> None:
    """No session or sitting words and no diary dates, named by file and line if found."""
    found = writing_words(page.read_text(), str(page.relative_to(ROOT)))
    assert not found, "the docs speak of how they were written:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "text",
    [
        "measured in the fifth session",
        "(fourth session), the others in the sessions before",
        "this session's bench",
        "as the last sitting left it",
        "On 2026-11-30, on the shared machine",
        "measured on 30 November, quiet",
        "measured on November 30th",
        "so that a run recorded before these checks still reopens",
        "(strict now, so that loosening later breaks nobody)",
        "previously it raised",
        "as in earlier versions",
    ],
)
def test_the_scan_finds_words_about_the_writing(text: str) -> None:
    """Each kind of phrase the scan is for is found, with its file and line."""
    assert writing_words(f"fine\n{text}\n", "docs/x.md")[0].startswith("docs/x.md:2: ")


@pytest.mark.parametrize(
    "text",
    [
        "Draft 2020-12 validation",
        "a run may wait for days, in another process",
        "a tool may 2 times over",
        "the SDK's max_retries and timeout",
        "conversation memory in a `SQLiteSession`",
    ],
)
def test_the_scan_passes_words_about_the_library(text: str) -> None:
    """A JSON Schema draft, or a sentence about runs, is not a diary."""
    assert writing_words(text, "README.md") == []
