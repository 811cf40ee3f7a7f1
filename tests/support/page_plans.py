"""The plan a database makes of one of the store's named statements, bound as the store binds
it: on PostgreSQL in a transaction of its own (a page transaction's statement after
`page_plans`, as a page transaction runs it); on SQLite through the harness's plain
connection, the parameters written in."""

from __future__ import annotations

from typing import Any

import asyncpg

from qinglong_dispatcher.adapters.postgres import queries as postgres_queries
from qinglong_dispatcher.adapters.sqlite import queries as sqlite_queries
from tests.support import stores
from tests.support.stores import Harness


async def plan(
    harness: Harness, name: str, params: dict[str, Any], *, page_transaction: bool = True
) -> str:
    """EXPLAIN (PostgreSQL) or EXPLAIN QUERY PLAN (SQLite) of the named statement, one line a
    plan node."""
    if harness.dialect == "sqlite":
        sql = sqlite_queries.load(stores.TABLES.statements)[name]
        # The longest names first, so that `:now_ms` never eats `:now_ms_x`.
        for key, value in sorted(params.items(), key=lambda kv: -len(kv[0])):
            sql = sql.replace(f":{key}", repr(value))
        rows = await harness.raw(f"EXPLAIN QUERY PLAN {sql}")
        return "\n".join(str(row["detail"]) for row in rows)
    statements = postgres_queries.load(stores.TABLES.statements)
    database = (await harness.raw("SELECT current_database() AS name"))[0]["name"]
    conn = await asyncpg.connect(stores.pg_url(database), timeout=5)
    try:
        async with conn.transaction():
            if page_transaction:
                await conn.execute(statements["page_plans"].text)
            statement = statements[name]
            rows = await conn.fetch(f"EXPLAIN {statement.text}", *statement.args(params))
        return "\n".join(row[0] for row in rows)
    finally:
        await conn.close()
