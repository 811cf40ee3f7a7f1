"""Execution windows: the reconcile pass's bounded sweep of waiting rows past their window
(both dialects).

The database's clock decides (migration 0035): the statement picks the rows whose window
closed, and the state machine admits their end (`cancelled`, code `window_expired`) only then
and, on PostgreSQL, only for the runtime. The caller's clock only stamps the row.
"""

from __future__ import annotations

from qinglong_dispatcher.adapters.sql import freezes, query

MAX_SWEEP = 64
"""At most this many rows end in one pass; the next pass takes the rest."""

WINDOW_EXPIRED = "window_expired"
"""The result code of a dispatch that ended waiting because its window closed."""


async def expire_past_window(q: query.Query, *, now_ms: int, limit: int = MAX_SWEEP) -> list[str]:
    """End at most `limit` waiting executions whose window closed on the database's clock,
    earliest first; their dispatch ids."""
    rows = await q.all(
        "expire_past_window", {"now_ms": now_ms, "limit": max(1, min(limit, MAX_SWEEP))}
    )
    return [str(row["dispatch_id"]) for row in rows]


class WaitMethods(freezes.FreezeMethods):
    """The operations of `SqlStore` on what a dispatch waits for before its start: its
    window (here) and the freezes (`freezes.FreezeMethods`)."""

    expire_past_window = query.operation(expire_past_window)
