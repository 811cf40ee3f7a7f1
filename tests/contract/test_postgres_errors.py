"""PostgreSQL faults reach callers as typed errors: retries, timeouts, lost connections."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import asyncpg
import pytest

from qinglong_dispatcher.adapters.postgres import store as postgres_store
from qinglong_dispatcher.domain import errors
from tests.support import stores
from tests.support.actions import submit_runs, submit_runs_as_approver
from tests.support.clock import ManualClock

pytestmark = pytest.mark.postgres

LEASE_MS = 30_000


@pytest.fixture
async def database() -> AsyncIterator[str]:
    async with stores.fresh_database() as name:
        yield name


async def _runtime(database: str, **options: Any) -> postgres_store.PostgresStore:
    return await stores.open_postgres(stores.runtime_url(database), max_size=2, **options)


async def _flaky_event_inserts(database: str, failures: int, sqlstate: str) -> None:
    """The next `failures` inserts into execution_events raise `sqlstate`; then they succeed.

    A sequence counts the attempts because sequences are not rolled back with the failed
    transaction; the function runs as its (superuser) owner so the runtime needs no grant.
    """
    await stores.raw(database, "CREATE SEQUENCE qinglong.test_flaky")
    await stores.raw(
        database,
        "CREATE FUNCTION qinglong.test_flaky() RETURNS trigger LANGUAGE plpgsql "
        "SECURITY DEFINER AS $$ BEGIN "
        f"IF nextval('qinglong.test_flaky') <= {failures} THEN "
        f"RAISE EXCEPTION 'injected' USING ERRCODE = '{sqlstate}'; END IF; "
        "RETURN NEW; END $$",
    )
    await stores.raw(
        database,
        "CREATE TRIGGER test_flaky BEFORE INSERT ON qinglong.execution_events "
        "FOR EACH ROW EXECUTE FUNCTION qinglong.test_flaky()",
    )


@pytest.mark.parametrize("sqlstate", ["40001", "40P01"])
async def test_serialization_failure_and_deadlock_are_retried_up_to_three_times(
    database: str, clock: ManualClock, sqlstate: str
) -> None:
    store = await _runtime(database)
    try:
        await submit_runs_as_approver(database, clock, 2)
        await _flaky_event_inserts(database, 2, sqlstate)
        batch = await store.claim_due(now_ms=clock.now_ms(), owner="w1", limit=1, lease_ms=LEASE_MS)
        assert len(batch.claimed) == 1  # the third attempt committed
        # Now every attempt fails: three attempts, then a typed, retryable refusal.
        await stores.raw(database, "ALTER SEQUENCE qinglong.test_flaky RESTART")
        await stores.raw(
            database,
            "CREATE OR REPLACE FUNCTION qinglong.test_flaky() RETURNS trigger "
            "LANGUAGE plpgsql SECURITY DEFINER AS $$ BEGIN "
            "PERFORM nextval('qinglong.test_flaky'); "
            f"RAISE EXCEPTION 'injected' USING ERRCODE = '{sqlstate}'; END $$",
        )
        with pytest.raises(errors.StoreBusy) as caught:
            await store.claim_due(now_ms=clock.now_ms(), owner="w1", limit=1, lease_ms=LEASE_MS)
        assert caught.value.retryable
        attempts = await stores.raw(database, "SELECT last_value FROM qinglong.test_flaky")
        assert attempts[0]["last_value"] == 3
        rows = await stores.raw(
            database,
            "SELECT count(*) AS n FROM qinglong.approved_action_dispatch_executions "
            "WHERE status = 'leased'",
        )
        assert rows[0]["n"] == 1  # the refused batch rolled back whole
    finally:
        await store.close()


async def test_a_lock_wait_beyond_lock_timeout_is_store_busy(
    database: str, clock: ManualClock
) -> None:
    store = await _runtime(database, lock_timeout_s=0.2)
    holder = await asyncpg.connect(stores.pg_url(database))
    try:
        (consumed,) = await submit_runs_as_approver(database, clock, 1)
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute(
            "SELECT 1 FROM qinglong.approved_action_dispatch_executions "
            "WHERE dispatch_id = $1 FOR UPDATE",
            consumed.dispatch_id,
        )
        started = time.monotonic()
        with pytest.raises(errors.StoreBusy):
            await store.claim(
                consumed.dispatch_id,
                now_ms=clock.now_ms(),
                owner="w1",
                token="t1",
                lease_ms=LEASE_MS,
            )
        assert time.monotonic() - started < 5
        # claim_due skips the locked row instead of waiting for it.
        batch = await store.claim_due(now_ms=clock.now_ms(), owner="w1", limit=8, lease_ms=LEASE_MS)
        assert batch.observed == 0
        await transaction.rollback()
    finally:
        await holder.close()
        await store.close()


async def test_a_statement_beyond_statement_timeout_is_store_busy(
    database: str, clock: ManualClock
) -> None:
    store = await _runtime(database, statement_timeout_s=0.2)
    try:
        await stores.raw(
            database,
            "CREATE FUNCTION qinglong.test_slow() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN PERFORM pg_sleep(2); RETURN NEW; END $$",
        )
        await stores.raw(
            database,
            "CREATE TRIGGER test_slow BEFORE INSERT ON qinglong.action_plans "
            "FOR EACH ROW EXECUTE FUNCTION qinglong.test_slow()",
        )
        with pytest.raises(errors.StoreBusy):
            await submit_runs(store, clock, 1)
    finally:
        await store.close()


async def test_a_connection_lost_mid_transaction_is_store_unavailable_and_the_pool_recovers(
    database: str, clock: ManualClock
) -> None:
    store = await _runtime(database)
    holder = await asyncpg.connect(stores.pg_url(database))
    try:
        (consumed,) = await submit_runs_as_approver(database, clock, 1)
        # An idle pooled connection that dies is replaced silently on the next acquire.
        await _terminate_runtime_sessions(database)
        assert (await store.counts(now_ms=clock.now_ms())).due == 1
        # One that dies inside a transaction cannot be: the caller learns it, typed.
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute(
            "SELECT 1 FROM qinglong.approved_action_dispatch_executions "
            "WHERE dispatch_id = $1 FOR UPDATE",
            consumed.dispatch_id,
        )
        failures: list[errors.StoreError] = []

        async def claim() -> None:
            try:
                await store.claim(
                    consumed.dispatch_id,
                    now_ms=clock.now_ms(),
                    owner="w1",
                    token="t1",
                    lease_ms=LEASE_MS,
                )
            except errors.StoreError as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(claim)
            await anyio.sleep(0.3)  # the claim now waits for the row lock
            await _terminate_runtime_sessions(database)
        await transaction.rollback()
        assert [type(f) for f in failures] == [errors.StoreUnavailable]
        assert failures[0].retryable
        assert (await store.counts(now_ms=clock.now_ms())).due == 1
    finally:
        await holder.close()
        await store.close()


async def _terminate_runtime_sessions(database: str) -> None:
    await stores.raw(
        database,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        f"WHERE datname = '{database}' AND usename = '{stores.RUNTIME_LOGIN}'",
    )
    await anyio.sleep(0.05)  # let the client notice the closed socket


async def test_an_unreachable_server_and_an_unknown_database_are_store_unavailable() -> None:
    await stores.require_server()
    with pytest.raises(errors.StoreUnavailable):
        await stores.open_postgres("postgresql://nobody@127.0.0.1:1/none", connect_timeout_s=2)
    with pytest.raises(errors.StoreUnavailable):
        await stores.open_postgres(stores.pg_url("qinglong_no_such_database"))


async def test_a_constraint_violation_is_typed_and_nothing_leaks(database: str) -> None:
    store = await _runtime(database)
    try:
        await stores.raw(
            database,
            "ALTER TABLE qinglong.action_plans ADD CONSTRAINT test_never CHECK (false) NOT VALID",
        )
        with pytest.raises(errors.StoreError) as caught:
            await submit_runs(store, ManualClock(), 1)
        assert caught.value.code == "constraint_violation"
        assert "asyncpg" not in type(caught.value).__module__
        assert caught.value.__cause__ is not None  # the driver error is chained, not lost
    finally:
        await store.close()


@pytest.mark.parametrize("level", ["off", "local"])
async def test_durability_refuses_asynchronous_commit_unless_allowed(
    database: str, level: str
) -> None:
    await stores.raw(database, f"ALTER DATABASE {database} SET synchronous_commit = {level}")
    strict = await _runtime(database)
    relaxed = await stores.open_postgres(
        stores.runtime_url(database), max_size=1, allow_async_commit=True
    )
    try:
        with pytest.raises(errors.DurabilityRefused, match="synchronous_commit"):
            await strict.check_durability()
        await relaxed.check_durability()
    finally:
        await strict.close()
        await relaxed.close()


async def test_durability_accepts_the_default(database: str) -> None:
    store = await _runtime(database)
    try:
        await store.check_durability()
    finally:
        await store.close()
