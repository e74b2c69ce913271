"""The two test tiers: make test (Hypothesis capped, slow tests left out) and make test-all."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import conftest
from tests.conftest import FAST_EXAMPLES, LONG

DRAWN: list[int] = []


@settings(max_examples=400, deadline=None, database=None)
@given(st.integers())
def test_a_drawing_test_that_asks_for_400_examples(n: int) -> None:
    """A Hypothesis test with an explicit count above the fast tier's cap (read below)."""
    DRAWN.append(n)


def test_the_fast_tier_caps_hypothesis_and_the_long_tier_does_not() -> None:
    """make test draws at most FAST_EXAMPLES examples a test; make test-all what it asks for."""
    drawing: Any = test_a_drawing_test_that_asks_for_400_examples
    chosen = drawing._hypothesis_internal_use_settings
    assert chosen.max_examples == (400 if LONG else FAST_EXAMPLES)
    assert conftest.capped(settings(max_examples=300)).max_examples == (300 if LONG else 25)
    assert conftest.capped(settings(max_examples=10)).max_examples == 10
    assert settings.get_current_profile_name() == conftest.TIER


@pytest.mark.slow
def test_a_slow_test_runs_only_in_the_long_tier() -> None:
    """Marked slow: make test leaves it out, make test-all runs it."""
    assert LONG


def test_the_fast_tier_leaves_out_every_slow_test(request: pytest.FixtureRequest) -> None:
    """No test marked slow is in a fast session (this module's is left out); all run in the
    long tier."""
    slow = [item.nodeid for item in request.session.items if item.get_closest_marker("slow")]
    if LONG:
        assert conftest.LEFT_OUT == []
    else:
        assert slow == []
    assert conftest.count(3, 500) == (500 if LONG else 3)


def test_an_unknown_tier_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """AGENTLOOP_TESTS takes fast or all; anything else says so."""
    monkeypatch.setenv("AGENTLOOP_TESTS", "quick")
    expected = "expected AGENTLOOP_TESTS to be fast or all, got 'quick'"
    with pytest.raises(pytest.UsageError, match=expected):
        conftest._tier()
    monkeypatch.setenv("AGENTLOOP_TESTS", "")
    assert conftest._tier() == "fast"
