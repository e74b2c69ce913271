"""Shared fixtures (semantics tests run against both drivers) and the two test tiers.

``make test`` runs the fast tier: every behaviour, each at a small count.
``make test-all`` (``AGENTLOOP_TESTS=all``) adds the long tier: the tests marked
``slow`` (the report in Chromium, DBOS on Postgres), the random kill loops at
their full count, and Hypothesis at the example counts the tests ask for (the
fast tier caps them at ``FAST_EXAMPLES``).
"""

from __future__ import annotations

import gc
import importlib
import os
from typing import Final

import pytest
from hypothesis import settings

from agentloop.engine import ROWS
from tests.support.helpers import DRIVERS, Driver

TIERS: Final = ("fast", "all")


def _tier() -> str:
    tier = os.environ.get("AGENTLOOP_TESTS") or "fast"
    if tier not in TIERS:
        raise pytest.UsageError(f"expected AGENTLOOP_TESTS to be fast or all, got {tier!r}")
    return tier


#: "fast" (``make test``) or "all" (``make test-all``).
TIER: Final = _tier()
#: True in the long tier: tests read it for their counts (``count(fast, full)``).
LONG: Final = TIER == "all"
#: The most examples a Hypothesis test draws in the fast tier.
FAST_EXAMPLES: Final = 25
#: The node ids of the tests the fast tier left out (marked slow).
LEFT_OUT: list[str] = []

# No deadline: an example's time says how loaded the machine is, not whether the property
# holds (the project measures time only in `make bench`); a deadline made tests flaky on busy cores.
settings.register_profile("fast", max_examples=FAST_EXAMPLES, deadline=None)
settings.register_profile("all", max_examples=100, deadline=None)
settings.load_profile(TIER)


def count(fast: int, full: int) -> int:
    """How many times a loop runs: ``fast`` in the fast tier, ``full`` in the long one."""
    return full if LONG else fast


def capped(chosen: settings) -> settings:
    """A test's own Hypothesis settings, with at most ``FAST_EXAMPLES`` in the fast tier."""
    if LONG or chosen.max_examples <= FAST_EXAMPLES:
        return chosen
    return settings(chosen, max_examples=FAST_EXAMPLES)


def pytest_report_header() -> str:
    """Say which tier runs, and how to run the other."""
    if LONG:
        return "agentloop tests: every tier (AGENTLOOP_TESTS=all)"
    return "agentloop tests: the fast tier (make test-all, or AGENTLOOP_TESTS=all, adds the long)"


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect: a test's settings stay consistent
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In the fast tier: leave out the tests marked slow, and cap Hypothesis's examples."""
    if LONG:
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        LEFT_OUT.extend(item.nodeid for item in slow)
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
    for item in items:
        # An explicit @settings(max_examples=...) overrides any profile, so the fast tier
        # lowers it where Hypothesis reads it: the attribute its own pytest plugin sets too.
        test = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
        chosen = getattr(test, "_hypothesis_internal_use_settings", None)
        if isinstance(chosen, settings):
            test._hypothesis_internal_use_settings = capped(chosen)  # type: ignore[union-attr]
        case = getattr(item, "cls", None)
        machine = getattr(case, "settings", None)
        if isinstance(machine, settings):  # a stateful test's TestCase
            case.settings = capped(machine)  # type: ignore[union-attr]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Each ``@pytest.mark.row`` names a row of the table (``Row.name``): a typo stops the run.

    Then what collection made is frozen out of the garbage collector (``gc.freeze``):
    the test modules, the SDKs they import and the collected items, half a million
    objects alive until the session ends. A test's ``gc.collect()`` (a dropped run giving
    up its claim) then walks what the tests made, not them too: 0.3 s a collection less.
    """
    names = {row.name for row in ROWS}
    for item in session.items:
        for mark in item.iter_markers("row"):
            unknown = [name for name in mark.args if name not in names]
            if unknown or not mark.args:
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.row expected names of rows of the table, "
                    f"such as {ROWS[0].name!r}, got {unknown or 'none'}"
                )
    gc.collect()
    gc.freeze()


@pytest.fixture(params=DRIVERS, ids=lambda d: d.name)
def driver(request: pytest.FixtureRequest) -> Driver:
    """The synchronous driver, then the asyncio driver."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def no_pygraphviz(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import pygraphviz`` fail, as on a machine without the svg extra."""
    real = importlib.import_module

    def refuse(name: str, package: str | None = None) -> object:
        if name == "pygraphviz":
            raise ModuleNotFoundError("No module named 'pygraphviz'")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", refuse)
