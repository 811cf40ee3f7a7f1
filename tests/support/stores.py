"""Real stores for the contract suite: a migrated SQLite file per test, PostgreSQL when present."""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio.to_thread
import pytest

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.sqlite import store as sqlite_store
from tests.support.clock import START_MS

DIALECTS = ["sqlite"]


@dataclasses.dataclass
class Harness:
    """A store plus raw SQL for setting up faults the product must survive."""

    dialect: str
    store: ports.Store
    raw: Callable[[str], Awaitable[list[dict[str, Any]]]]
    open_another: Callable[[], Awaitable[ports.Store]]

    async def scalar(self, sql: str) -> Any:
        """First column of the first row."""
        rows = await self.raw(sql)
        return next(iter(rows[0].values())) if rows else None


async def _sqlite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Harness, list[ports.Store]]:
    path = tmp_path_factory.mktemp("sqlite") / "store.db"
    store = await sqlite_store.SqliteStore.open(path, busy_timeout_s=5.0)
    await store.migrate(now_ms=START_MS)
    opened: list[ports.Store] = [store]

    async def raw(sql: str) -> list[dict[str, Any]]:
        # A separate plain connection: driver errors reach the test untranslated.
        def body() -> list[dict[str, Any]]:
            conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)
            conn.row_factory = sqlite3.Row
            try:
                cursor = conn.execute(sql)
                return [dict(r) for r in cursor.fetchall()] if cursor.description else []
            finally:
                conn.close()

        return await anyio.to_thread.run_sync(body)

    async def another() -> ports.Store:
        other = await sqlite_store.SqliteStore.open(path, busy_timeout_s=5.0)
        opened.append(other)
        return other

    return Harness("sqlite", store, raw, another), opened


@contextlib.asynccontextmanager
async def open_harness(
    dialect: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Harness]:
    """Open a fresh store of `dialect` and close everything it opened afterwards."""
    if dialect == "sqlite":
        harness, opened = await _sqlite(tmp_path_factory)
    else:  # pragma: no cover - the PostgreSQL leg plugs in here
        raise AssertionError(f"unknown dialect {dialect}")
    try:
        yield harness
    finally:
        for store in opened:
            await store.close()
