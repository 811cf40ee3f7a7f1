"""Fixtures shared by every suite: a movable clock and a real store per dialect."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support import stores
from tests.support.clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    """A clock the test moves by hand."""
    return ManualClock()


@pytest.fixture(params=stores.DIALECTS)
async def harness(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[stores.Harness]:
    """A fresh migrated store of each dialect, with raw SQL access for fault set-up."""
    async with stores.open_harness(request.param, tmp_path_factory) as opened:
        yield opened


@pytest.fixture
async def pg(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    """A fresh migrated PostgreSQL store alone, for the tests of the cluster's own paths."""
    async with stores.open_harness("postgres", tmp_path_factory) as opened:
        yield opened
