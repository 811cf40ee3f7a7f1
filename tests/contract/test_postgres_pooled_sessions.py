"""PostgreSQL: a pooled connection goes back to the pool with the session it was opened with.

The pool runs no reset query when a connection is released (`database._transaction_state_only`):
every transaction of the store sets only transaction-local state. These tests run such
transactions on a pool of one connection and read the session afterwards on that same
connection (the same backend pid). The migration runner's session, which holds a session
advisory lock, is reset in full.
"""

from __future__ import annotations

from typing import Any

import pytest

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.postgres import store as postgres_store
from tests.support import repositories, stores, tools
from tests.support.clock import ManualClock

pytestmark = pytest.mark.postgres

_SESSION = (
    "SELECT pg_backend_pid() AS pid, current_user, session_user, "
    "current_setting('statement_timeout') AS statement_timeout, "
    "current_setting('lock_timeout') AS lock_timeout, "
    "current_setting('idle_in_transaction_session_timeout') AS idle_timeout, "
    "current_setting('application_name') AS application_name, "
    "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
    " AND pid = pg_backend_pid()) AS advisory_locks"
)


async def _session(store: postgres_store.PostgresStore) -> dict[str, Any]:
    async def read(conn: Any) -> dict[str, Any]:
        return dict(await conn.fetchrow(_SESSION))

    return await store.db.read(read)


async def _one_connection(url: str) -> postgres_store.PostgresStore:
    store = await stores.open_postgres(url, max_size=1)
    assert isinstance(store, postgres_store.PostgresStore)
    return store


async def test_a_tool_start_barrier_leaves_its_timeouts_in_its_own_transaction(
    pg: stores.Harness, clock: ManualClock
) -> None:
    run = await tools.live_run(pg, clock)
    command = (await tools.started_tool(pg, clock, run)).command()
    database = str(await pg.scalar("SELECT current_database()"))
    store = await _one_connection(stores.runtime_url(database))
    try:
        opened = await _session(store)
        assert opened["statement_timeout"] != "5s"  # the barrier's own bound differs
        result = await repositories.steps(store).prepare(command)
        assert result.outcome is ports.StartOutcome.CREATED
        assert await _session(store) == opened
    finally:
        await store.close()


async def test_the_migration_runners_session_is_reset_before_the_pool_lends_it_again(
    pg: stores.Harness,
) -> None:
    database = str(await pg.scalar("SELECT current_database()"))
    store = await _one_connection(stores.pg_url(database))
    try:
        opened = await _session(store)
        async with store.db.session() as conn:
            await conn.execute("SELECT pg_catalog.set_config('lock_timeout', '1234ms', false)")
            await conn.execute("SELECT pg_catalog.pg_advisory_lock(4242)")
        assert await _session(store) == opened
    finally:
        await store.close()
