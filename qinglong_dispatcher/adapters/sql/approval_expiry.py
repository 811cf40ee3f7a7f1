"""Approval expiry: the reconcile pass's bounded sweeps of pending requests near and past
their lifetime (both dialects).

The database's clock decides which requests have expired, in the statement and again in the
approval trigger (migration 0024); the caller's clock only stamps `updated_at_ms`. The audit
trigger writes each `approval.expired` row in the same transaction. Before that, a request
whose policy asks for a reminder gets one `approval.expiring` event once the same clock passes
its expiry less the reminder (migration 0027); delivering it is not the sweep's.
"""

from __future__ import annotations

from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.domain import approvals

MAX_SWEEP = 64
"""At most this many requests expire in one pass; the next pass takes the rest."""


async def expire_due(
    q: query.Query, principal: approvals.Principal, *, now_ms: int, limit: int = MAX_SWEEP
) -> list[approvals.Expired]:
    """`pending@v1 → expired@v2` for at most `limit` requests whose lifetime ran out on the
    database's clock, oldest first; the requests it moved."""
    rows = await q.all(
        "expire_approvals",
        {
            "decided_by": approvals.EXPIRED_BY,
            "principal": principal.name,
            "now_ms": now_ms,
            "limit": max(1, min(limit, MAX_SWEEP)),
        },
    )
    return [
        approvals.Expired(
            approval_request_id=row["approval_request_id"],
            project_id=row["project_id"],
            action_type=row["action_type"],
        )
        for row in rows
    ]


async def remind_due(q: query.Query, *, limit: int = MAX_SWEEP) -> list[str]:
    """The `approval.expiring` event of at most `limit` waiting requests whose reminder came
    due on the database's clock, oldest first; the requests reminded. A read first: with
    nothing due the pass writes nothing (and needs no right to)."""
    if await q.one("reminder_due") is None:
        return []
    rows = await q.all("remind_approvals", {"limit": max(1, min(limit, MAX_SWEEP))})
    return [str(row["approval_request_id"]) for row in rows]
