"""The cluster dialect: a pooled PostgreSQL store, its wake-up listener, the bench's databases."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters import dialect
from qinglong_dispatcher.adapters.postgres import bench, server_costs, store, wakeup
from qinglong_dispatcher.plan_keys import envelopes as plan_envelopes
from qinglong_dispatcher.ports import action_tables


class PostgresDialect:
    """`dialect.Dialect` for PostgreSQL."""

    def __init__(self, tables: action_tables.BuiltInTables) -> None:
        self.tables = tables  # the built-in actions', lent to every store it opens

    async def open_store(self, settings: dialect.Configured, *, create: bool) -> ports.Store:
        """See `dialect.Dialect.open_store` (`create` concerns SQLite files only)."""
        # Executes in flight each hold a connection for their effect transaction; renewals and
        # the next claim need a few more.
        return await store.PostgresStore.open(
            settings.database_url,
            tables=self.tables,
            allow_async_commit=settings.allow_async_commit,
            require_sync_standby=settings.require_sync_standby,
            max_size=settings.concurrency + 4,
            installation=settings.installation,
            envelopes=plan_envelopes.from_keyring(
                settings.plan_keyring_file,
                group_readable=settings.plan_keyring_group_readable,
            ),
        )

    async def move_installation(
        self, settings: dialect.Configured, to: str
    ) -> tuple[str, list[str]]:
        """See `store.PostgresStore.move_installation`, on a pool of one."""
        moving = await store.PostgresStore.open(
            settings.database_url, tables=self.tables, max_size=1
        )
        try:
            return await moving.move_installation(to)
        finally:
            await moving.close()

    def sole_daemon(self, settings: dialect.Configured) -> contextlib.AbstractContextManager[None]:
        """Nothing to hold: replicas share the database under fenced leases."""
        return contextlib.nullcontext()

    def wakeup(self, settings: dialect.Configured) -> ports.WakeupListener | None:
        """`LISTEN` on the due channel (migration 0010)."""
        return wakeup.PostgresWakeup(settings.database_url)

    @contextlib.asynccontextmanager
    async def scratch_database(self, settings: dialect.Configured) -> AsyncIterator[str]:
        """A database created through `database_url` (an administrator URL), then dropped."""
        url = await bench.create_scratch(settings.database_url)
        try:
            await server_costs.track_functions(url)
            yield url
        finally:
            await bench.drop_scratch(settings.database_url, url)

    async def raw_commits(
        self, settings: dialect.Configured, seconds: float
    ) -> tuple[float, float | None]:
        """One asyncpg connection's commit loop; there is no second driver to compare."""
        return await bench.raw_commits_per_s(settings.database_url, seconds), None

    async def seed_terminal_rows(
        self, settings: dialect.Configured, seeded: ports.Store, rows: int, now_ms: int
    ) -> None:
        """See `bench.seed_terminal_rows` (through the administrator URL, not `seeded`)."""
        await bench.seed_terminal_rows(settings.database_url, rows, now_ms)

    async def server_counters(self, settings: dialect.Configured) -> dict[str, Any] | None:
        """See `server_costs.snapshot` (`settings.database_url` is the scratch database)."""
        return await server_costs.snapshot(settings.database_url)
