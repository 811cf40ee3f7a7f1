"""What the bench needs of a database engine beyond the store: a scratch database, raw commit
loops, bench-only rows and the server's counters. The bench's own code, beside the dialect
adapters it reaches into; `of` imports the chosen dialect's module only, so the edge bench
never loads the PostgreSQL one (nor asyncpg)."""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

from qinglong_dispatcher import ports
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import errors


class DialectBench(Protocol):
    """The bench's tools on one dialect, for the settings it was made with."""

    def scratch_database(self) -> contextlib.AbstractAsyncContextManager[str]:
        """A fresh, empty database: its URL, removed on exit."""
        ...

    async def raw_commits(self, seconds: float) -> tuple[float, float | None]:
        """Commits per second of the smallest durable write: through the store's own path,
        and through the plain driver where that differs (else None)."""
        ...

    async def seed_terminal_rows(self, seeded: ports.Store, rows: int, now_ms: int) -> None:
        """`rows` bench-only succeeded executions in `seeded` (opened on the same settings)."""
        ...

    async def write_policy(self, approvals: int) -> None:
        """As the owner, an approval policy of `approvals` approvals for `run.create` in the
        scratch database the settings point at (the policy phase)."""
        ...

    async def server_counters(self) -> dict[str, Any] | None:
        """The server's counters on the scratch database the settings point at (WAL, rows per
        table, function time, statements), or None where there is no server."""
        ...


def of(settings: Settings) -> DialectBench:
    """The bench's tools on the dialect of `settings`.

    SQLite: scratch files in new temporary folders; its replicas count their own writes.
    PostgreSQL: scratch databases created through `settings.database_url` (an administrator
    URL) and dropped with their sessions and roles.
    """
    if settings.dialect == "sqlite":
        from qinglong_dispatcher.bench.dialects.sqlite import SqliteBench

        return SqliteBench(settings)
    if settings.dialect != "postgres":  # pragma: no cover - settings admit only the two
        raise errors.ConfigurationError(f"QINGLONG_DATABASE_URL: no bench for {settings.dialect}")
    from qinglong_dispatcher import bootstrap

    with bootstrap.cluster_driver():
        from qinglong_dispatcher.bench.dialects.postgres import PostgresBench
    return PostgresBench(settings)
