"""The skew guard against the real PostgreSQL clock (and a system clock that is made to lie)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from qinglong_dispatcher.adapters.postgres import store as postgres_store
from qinglong_dispatcher.lifecycle import skew
from tests.support import stores

pytestmark = pytest.mark.postgres


@pytest.fixture
async def store() -> AsyncIterator[postgres_store.PostgresStore]:
    async with stores.fresh_database() as database:
        opened = await stores.open_postgres(stores.runtime_url(database), max_size=1)
        try:
            yield opened
        finally:
            await opened.close()


async def test_database_now_is_the_servers_wall_clock(store: postgres_store.PostgresStore) -> None:
    before = time.time() * 1000
    now = await store.database_now_ms()
    after = time.time() * 1000
    # Same host: the server's clock is the system clock, within scheduling noise.
    assert before - 1000 <= now <= after + 1000


async def test_a_synchronised_clock_allows_claiming(store: postgres_store.PostgresStore) -> None:
    guard = skew.SkewGuard(2.0)
    reading = await guard.check(store)
    assert reading.allowed
    assert abs(reading.skew_seconds) < 1
    assert guard.last_skew_seconds == reading.skew_seconds
    assert guard.refusals == 0


@pytest.mark.parametrize("offset", [5.0, -5.0])
async def test_a_skewed_system_clock_stops_claiming_until_it_recovers(
    store: postgres_store.PostgresStore, offset: float
) -> None:
    lie = {"offset": offset}
    guard = skew.SkewGuard(2.0, wall_clock=lambda: time.time() + lie["offset"])
    first = await guard.check(store)
    assert not first.allowed
    assert first.skew_seconds == pytest.approx(-offset, abs=1)
    assert guard.refusals == 1
    assert not (await guard.check(store)).allowed
    assert guard.refusals == 2
    lie["offset"] = 0.0
    assert (await guard.check(store)).allowed
    assert guard.refusals == 2  # a count of refusals, not a state
    assert abs(guard.last_skew_seconds) < 1


async def test_the_round_trip_counts_against_the_bound() -> None:
    class SlowDatabase:
        async def database_now_ms(self) -> int:
            return int(clock["now"] * 1000)

    clock = {"now": 1000.0}
    ticks = iter([999.0, 1001.0])  # a 2 s round trip around an exact answer
    guard = skew.SkewGuard(0.5, wall_clock=lambda: next(ticks))
    reading = await guard.check(SlowDatabase())
    assert reading.skew_seconds == 0
    assert reading.round_trip_seconds == 2
    assert not reading.allowed


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        skew.SkewGuard(0)
