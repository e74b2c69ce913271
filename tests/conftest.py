"""Shared fixtures: semantics tests run against both drivers."""

from __future__ import annotations

import pytest

from .helpers import DRIVERS, Driver


@pytest.fixture(params=DRIVERS, ids=lambda d: d.name)
def driver(request: pytest.FixtureRequest) -> Driver:
    """The synchronous driver, then the asyncio driver."""
    return request.param  # type: ignore[no-any-return]
