"""The edge dialect: one SQLite file and its daemon lock."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters import dialect
from qinglong_dispatcher.adapters.sqlite import store
from qinglong_dispatcher.adapters.sqlite_file import authority, reserve
from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.ports import action_tables


class SqliteDialect:
    """`dialect.Dialect` for SQLite."""

    def __init__(self, tables: action_tables.BuiltInTables) -> None:
        self.tables = tables  # the built-in actions', lent to every store it opens

    async def open_store(self, settings: dialect.Configured, *, create: bool) -> ports.Store:
        """See `dialect.Dialect.open_store`."""
        return await store.SqliteStore.open(
            settings.sqlite_path,
            tables=self.tables,
            busy_timeout_s=settings.sqlite_busy_timeout_seconds,
            self_approval=settings.self_approval,
            api_self_approval=settings.api_self_approval,
            create=create,
            envelopes=dialect.envelopes(settings),
            reserve_bytes=settings.sqlite_reserve_mib * reserve.MIB,
        )

    async def move_installation(
        self, settings: dialect.Configured, to: str
    ) -> tuple[str, list[str]]:
        """Refused: a SQLite file has no roles to move."""
        raise errors.ConfigurationError("--move-to: SQLite has no roles (PostgreSQL only)")

    @contextlib.contextmanager
    def sole_daemon(self, settings: dialect.Configured) -> Iterator[None]:
        """The file's daemon lock (`authority.sole_daemon`): one authority per file."""
        with authority.sole_daemon(settings.sqlite_path):
            yield

    def wakeup(self, settings: dialect.Configured) -> ports.WakeupListener | None:
        """None: one daemon per file, and its cadence is the only waker."""
        return None
