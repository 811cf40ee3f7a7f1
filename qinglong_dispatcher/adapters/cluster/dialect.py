"""The cluster dialect: a pooled PostgreSQL store, its wake-up listener, and moving a database
to another installation's roles."""

from __future__ import annotations

import contextlib

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters import dialect
from qinglong_dispatcher.adapters.cluster import moving, wakeup
from qinglong_dispatcher.adapters.postgres import store
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
            envelopes=dialect.envelopes(settings),
        )

    async def move_installation(
        self, settings: dialect.Configured, to: str
    ) -> tuple[str, list[str]]:
        """See `moving.move_installation`, on a pool of one; needs an administrator connection."""
        opened = await store.PostgresStore.open(
            settings.database_url, tables=self.tables, max_size=1
        )
        try:
            async with opened.db.session() as conn:
                return await moving.move_installation(conn, to=to)
        finally:
            await opened.close()

    def sole_daemon(self, settings: dialect.Configured) -> contextlib.AbstractContextManager[None]:
        """Nothing to hold: replicas share the database under fenced leases."""
        return contextlib.nullcontext()

    def wakeup(self, settings: dialect.Configured) -> ports.WakeupListener | None:
        """`LISTEN` on the due channel (migration 0010)."""
        return wakeup.PostgresWakeup(settings.database_url)
