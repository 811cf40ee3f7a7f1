"""What a dispatch costs the PostgreSQL server, read from a scratch database's statistics.

The bench snapshots these counters before and after a drain and divides the difference by
the dispatches: WAL (bytes, records, full-page images), commits and blocks, rows written
per table (with HOT updates), trigger and function time (`track_functions`, switched on for
the scratch database when it is created) and, where the server preloads
`pg_stat_statements`, every statement. WAL counters are the whole server's: other work on
the same server shows in them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib import parse

import anyio
import asyncpg

from qinglong_dispatcher.adapters import named_sql
from qinglong_dispatcher.adapters.postgres import driver_errors

S = named_sql.load(Path(__file__).with_name("server_costs.sql"))

QUIET_WAIT_S = 10.0
"""How long a snapshot waits for the drain's sessions to end (a session's statistics reach
the shared counters when it ends)."""

POLL_S = 0.05


async def track_functions(scratch_url: str) -> None:
    """Count function and trigger time in every later session on the scratch database
    (superuser only; without it the function figures stay empty)."""
    name = parse.urlsplit(scratch_url).path.lstrip("/")
    conn = await _connect(scratch_url)
    try:
        await conn.execute(f"ALTER DATABASE \"{name}\" SET track_functions = 'all'")
    except asyncpg.InsufficientPrivilegeError:
        return
    except driver_errors.DRIVER_ERRORS as exc:
        raise driver_errors.translate(exc) from exc
    finally:
        await conn.close()


async def _connect(url: str) -> asyncpg.Connection:
    try:
        return await asyncpg.connect(url, timeout=10)
    except driver_errors.DRIVER_ERRORS as exc:
        raise driver_errors.translate(exc) from exc


async def snapshot(scratch_url: str) -> dict[str, Any]:
    """The scratch database's counters now, once no other session is connected to it."""
    conn = await _connect(scratch_url)
    try:
        for _ in range(int(QUIET_WAIT_S / POLL_S)):
            if not await conn.fetchval(S["other_backends"]):
                break
            await anyio.sleep(POLL_S)
        return await _read(conn)
    except driver_errors.DRIVER_ERRORS as exc:
        raise driver_errors.translate(exc) from exc
    finally:
        await conn.close()


async def _read(conn: asyncpg.Connection) -> dict[str, Any]:
    wal = await conn.fetchrow(S["wal"])
    db = await conn.fetchrow(S["database"])
    tables = {
        r["relname"]: {
            "ins": r["n_tup_ins"],
            "upd": r["n_tup_upd"],
            "hot_upd": r["n_tup_hot_upd"],
            "del": r["n_tup_del"],
            "heap_blks": r["heap_blks"],
            "idx_blks": r["idx_blks"],
        }
        for r in await conn.fetch(S["tables"])
    }
    functions = {
        r["funcname"]: {
            "calls": r["calls"],
            "total_ms": r["total_time"],
            "self_ms": r["self_time"],
        }
        for r in await conn.fetch(S["functions"])
    }
    statements: dict[str, dict[str, Any]] | None = None
    if await conn.fetchval(S["statements_preloaded"]):
        await conn.execute(S["create_statements"])
        statements = {
            f"{r['userid']}:{r['queryid']}:{r['toplevel']}": {
                "query": r["query"],
                "toplevel": r["toplevel"],
                "calls": r["calls"],
                "ms": r["total_exec_time"],
                "rows": r["rows"],
                "wal_bytes": int(r["wal_bytes"]),
            }
            for r in await conn.fetch(S["statements"])
        }
    return {
        "wal": {
            "bytes": int(wal["lsn_bytes"]),
            "records": wal["wal_records"],
            "fpi": wal["wal_fpi"],
        },
        "database": dict(db),
        "tables": tables,
        "functions": functions,
        "statements": statements,
    }
