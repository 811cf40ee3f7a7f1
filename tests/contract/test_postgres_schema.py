"""Both dialects' migrations produce the same tables and columns."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.support import stores
from tests.support.clock import START_MS

pytestmark = pytest.mark.postgres


async def _sqlite_columns(path: Path) -> dict[str, list[str]]:
    store = await stores.open_sqlite(path)
    try:
        await store.migrate(now_ms=START_MS)
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    try:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return {t: [row[1] for row in conn.execute(f"PRAGMA table_info({t})")] for t in tables}
    finally:
        conn.close()


async def test_postgres_and_sqlite_schemas_match_table_for_table_column_for_column(
    tmp_path: Path,
) -> None:
    expected = await _sqlite_columns(tmp_path / "reference.db")
    async with stores.fresh_database() as database:
        rows = await stores.raw(
            database,
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'qinglong' ORDER BY table_name, ordinal_position",
        )
    found: dict[str, list[str]] = {}
    for row in rows:
        found.setdefault(row["table_name"], []).append(row["column_name"])
    assert found == expected


async def test_the_due_index_is_the_partial_index_of_both_dialects() -> None:
    async with stores.fresh_database() as database:
        rows = await stores.raw(
            database,
            "SELECT indexdef FROM pg_indexes WHERE schemaname = 'qinglong' "
            "AND indexname = 'approved_action_dispatch_executions_due'",
        )
        assert "(eligible_at_ms, dispatch_id)" in rows[0]["indexdef"]
        assert "WHERE (eligible_at_ms IS NOT NULL)" in rows[0]["indexdef"]
