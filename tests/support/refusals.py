"""The database's own refusal of an attack, as the hostile tests read it: the SQLSTATE a
PostgreSQL login met, or the message of SQLite's `RAISE(ABORT)`."""

from __future__ import annotations

import sqlite3
from typing import Any

import asyncpg
import pytest

from tests.support import stores


async def sqlstate_as(url: str, sql: str, *args: Any) -> str:
    """Run `sql` as the login `url` names; the SQLSTATE the database refused it with."""
    conn = await asyncpg.connect(url, timeout=5)
    try:
        with pytest.raises(asyncpg.PostgresError) as caught:
            await conn.fetch(sql, *args)
        return str(caught.value.sqlstate)
    finally:
        await conn.close()


async def sqlite_abort(h: stores.Harness, sql: str) -> str:
    """Run `sql` on the SQLite file; the message its trigger or constraint refused it with."""
    with pytest.raises(sqlite3.IntegrityError) as caught:
        await h.raw(sql)
    return str(caught.value)
