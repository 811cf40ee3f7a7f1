"""Per-dispatch costs of a drain: what the server wrote and ran (PostgreSQL), or what the
replicas wrote and how long they spent inside the store's worker thread (SQLite).

`measured` snapshots the server's counters on the scratch database around a drain; `per_dispatch`
turns the difference (or the replicas' own counters) into figures per dispatch.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from qinglong_dispatcher.bench import dialects
from qinglong_dispatcher.bench.scratch import Scratch

SQLITE_PAGE = 4096
"""The production page size (the pragma is the library's default): bytes per page written."""

TOP_STATEMENTS = 25
"""How many statements (by server time) `top_statements` lists."""


@contextlib.asynccontextmanager
async def measured(made: Scratch) -> AsyncIterator[list[dict[str, Any] | None]]:
    """Yield a list that holds, after the block, the server's counters before and after it
    (`[None, None]` on SQLite)."""
    server = dialects.of(made.settings)
    taken: list[dict[str, Any] | None] = [await server.server_counters()]
    yield taken
    taken.append(await server.server_counters())


def _per(value: float, count: int, digits: int = 3) -> float:
    return round(value / count, digits)


def per_dispatch(
    server: Sequence[dict[str, Any] | None], results: Sequence[dict[str, float]], count: int
) -> dict[str, Any]:
    """The costs of one drain of `count` dispatches (the server's counters before and after,
    and each replica's report)."""
    before, after = server
    if before is None or after is None:
        return _store_costs(results, count)
    return _server_costs(before, after, count)


def _store_costs(results: Sequence[dict[str, float]], count: int) -> dict[str, Any]:
    written = sum(r.get("bytes_written", 0.0) for r in results)
    cpu = sum(r.get("worker_cpu_s", 0.0) for r in results)
    wall = sum(r.get("worker_wall_s", 0.0) for r in results)
    drain = sum(r["ended"] - r["began"] for r in results)
    replica_cpu = sum(r["cpu_s"] for r in results)
    return {
        "rows_changed": _per(sum(r.get("worker_rows_changed", 0.0) for r in results), count),
        "bytes_written": _per(written, count, 1),
        "pages_written": _per(written / SQLITE_PAGE, count),
        "worker_cpu_ms": _per(cpu * 1000, count),
        "worker_wall_ms": _per(wall * 1000, count),
        "worker_share_of_wall": round(wall / drain, 3) if drain else 0.0,
        "worker_share_of_cpu": round(cpu / replica_cpu, 3) if replica_cpu else 0.0,
    }


def _delta(after: dict[str, Any], before: dict[str, Any], key: str) -> float:
    return float(after.get(key, 0) - before.get(key, 0))


def _server_costs(before: dict[str, Any], after: dict[str, Any], count: int) -> dict[str, Any]:
    db = {k: _delta(after["database"], before["database"], k) for k in after["database"]}
    tables: dict[str, dict[str, float]] = {}
    for name, row in sorted(after["tables"].items()):
        was = before["tables"].get(name, {})
        moved = {k: _delta(row, was, k) for k in row}
        if any(moved[k] for k in ("ins", "upd", "del")):
            tables[name] = {k: _per(v, count) for k, v in moved.items()}
            tables[name]["hot_ratio"] = (
                round(moved["hot_upd"] / moved["upd"], 3) if moved["upd"] else 1.0
            )
    rows = {k: sum(t[k] for t in tables.values()) for k in ("ins", "upd", "hot_upd", "del")}
    functions: dict[str, dict[str, float]] = {}
    for name, row in sorted(after["functions"].items()):
        was = before["functions"].get(name, {})
        if calls := _delta(row, was, "calls"):
            functions[name] = {
                "calls": _per(calls, count),
                "self_ms": _per(_delta(row, was, "self_ms"), count, 4),
                "total_ms": _per(_delta(row, was, "total_ms"), count, 4),
            }
    return {
        "wal_bytes": _per(_delta(after["wal"], before["wal"], "bytes"), count, 1),
        "wal_records": _per(_delta(after["wal"], before["wal"], "records"), count, 2),
        "wal_fpi": _per(_delta(after["wal"], before["wal"], "fpi"), count, 3),
        "server_commits": _per(db["xact_commit"], count),
        "blocks_touched": _per(db["blks_hit"] + db["blks_read"], count, 1),
        "rows_written": round(sum(rows[k] for k in ("ins", "upd", "del")), 3),
        "rows": {k: round(v, 3) for k, v in rows.items()},
        "hot_ratio": round(rows["hot_upd"] / rows["upd"], 3) if rows["upd"] else 1.0,
        "tables": tables,
        "function_self_ms": round(sum(f["self_ms"] for f in functions.values()), 4),
        "functions": functions,
        **_statements(before.get("statements"), after.get("statements"), count),
    }


def _statements(
    before: dict[str, dict[str, Any]] | None, after: dict[str, dict[str, Any]] | None, count: int
) -> dict[str, Any]:
    """Statements a dispatch runs (top-level: what the clients sent), and the costliest ones
    (nested: run inside functions), where `pg_stat_statements` is loaded; else both None."""
    if after is None or before is None:
        return {"statements": None, "top_statements": None}
    moved = []
    for key, row in after.items():
        was = before.get(key, {})
        calls = _delta(row, was, "calls")
        if calls:
            moved.append(
                {
                    **row,
                    "calls": calls,
                    "ms": _delta(row, was, "ms"),
                    "wal_bytes": _delta(row, was, "wal_bytes"),
                    "rows": _delta(row, was, "rows"),
                }
            )
    toplevel = sum(m["calls"] for m in moved if m["toplevel"])
    moved.sort(key=lambda m: m["ms"], reverse=True)
    return {
        "statements": _per(toplevel, count),
        "top_statements": [
            {
                "query": m["query"],
                "toplevel": m["toplevel"],
                "calls": _per(m["calls"], count),
                "ms": _per(m["ms"], count, 4),
                "rows": _per(m["rows"], count),
                "wal_bytes": _per(m["wal_bytes"], count, 1),
            }
            for m in moved[:TOP_STATEMENTS]
        ],
    }
