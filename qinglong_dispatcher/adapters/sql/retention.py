"""Pruning finished dispatch trees and old audit records in bounded batches, for both dialects.

One batch is one transaction: permits for at most `limit` terminal trees older than the
cutoff (the database checks each one, migration 0009), the rows of those trees child first,
the permits again; then at most `limit` audit records under an audit permit, none of a subject
still live (migration live_requests: the trigger refuses them too); then at most `limit`
notification events delivered or dead-lettered before the dispatch cutoff, with their
deliveries, attempts and matches (migration 0038 refuses an event not yet done). A dry run
counts what a whole prune would remove and writes nothing.
"""

from __future__ import annotations

from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.domain import retention

TREE_DELETES = (
    "prune_execution_events",
    "prune_receipts",
    "prune_resolutions",
    "prune_observations",
    "prune_uncertain_outcomes",
    "prune_recovery_marks",
    "prune_executions",
    "prune_dispatches",
    "prune_approvals",
    "prune_plans",
)
"""Child rows before their parents: every foreign key points at a row still there."""


async def prune_batch(
    q: query.Query, *, cutoff_ms: int, audit_cutoff_ms: int, limit: int
) -> retention.PruneCounts:
    """Delete one batch of trees and one of audit records; the counts of what went."""
    await q.run("prune_lock")
    params = {"cutoff_ms": cutoff_ms, "audit_cutoff_ms": audit_cutoff_ms, "limit": limit}
    await q.run("prune_grant_permits", params)
    dispatches = int((await q.one("prune_count_permits"))["n"])
    if dispatches:
        for name in TREE_DELETES:
            await q.run(name)
        await q.run("prune_clear_permits")
    await q.run("prune_grant_audit_permit", params)
    audit_events = len(await q.all("prune_audit_events", params))
    await q.run("prune_clear_audit_permits")
    events, deliveries = await _prune_notifications(q, cutoff_ms=cutoff_ms, limit=limit)
    return retention.PruneCounts(
        dispatches=dispatches,
        audit_events=audit_events,
        notification_events=events,
        notification_deliveries=deliveries,
    )


async def _prune_notifications(q: query.Query, *, cutoff_ms: int, limit: int) -> tuple[int, int]:
    """One batch of the outbox: the first `limit` prunable events and what names them, child
    rows first (an event's attempts, deliveries and match point at it); the events and the
    deliveries that went."""
    bound = await q.one("prune_notification_bound", {"cutoff_ms": cutoff_ms, "limit": limit})
    if bound is None or bound["through"] is None:
        return 0, 0
    params = {"cutoff_ms": cutoff_ms, "through": int(bound["through"])}
    await q.run("prune_notification_attempts", params)
    deliveries = len(await q.all("prune_notification_deliveries", params))
    await q.run("prune_notification_fanouts", params)
    return len(await q.all("prune_notification_events", params)), deliveries


async def count_prunable(
    q: query.Query, *, cutoff_ms: int, audit_cutoff_ms: int
) -> retention.PruneCounts:
    """What a prune with these cutoffs would remove now (a read)."""
    params = {"cutoff_ms": cutoff_ms, "audit_cutoff_ms": audit_cutoff_ms}
    return retention.PruneCounts(
        dispatches=int((await q.one("prune_count_dispatches", params))["n"]),
        audit_events=int((await q.one("prune_count_audit_events", params))["n"]),
        notification_events=int((await q.one("prune_count_notification_events", params))["n"]),
        notification_deliveries=int(
            (await q.one("prune_count_notification_deliveries", params))["n"]
        ),
    )
