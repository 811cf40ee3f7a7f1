"""Recovery transactions: list, resolve under the snapshot fence, observe, audit.

See docs/operations.md, "Recovery".

The principal recorded beside the operator's name is the one the system authenticated: on
SQLite the store passes the OS user or the API's principal; PostgreSQL's `insert_resolution`
and `insert_audit_event` write the acting principal (`qinglong.acting_principal()`) and ignore
the parameter. An API resolution also writes its request's audit row.
"""

from __future__ import annotations

from collections.abc import Sequence

from qinglong_dispatcher.adapters.sql import query, rows, tokens
from qinglong_dispatcher.domain import (
    audit_views,
    errors,
    fencing,
    principals,
    records,
    recovery,
    states,
)
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import ExecutionStatus
from qinglong_dispatcher.ports import action_tables

_BEFORE_ALL = (-(2**63), "")


async def database_now_ms(q: query.Query) -> int:
    """The database server's wall clock, in epoch milliseconds (ledger `committed_at_ms` uses
    it; the skew guard reads it)."""
    return int((await q.one("database_now"))["now_ms"])


async def settling_ms(q: query.Query, now_ms: int) -> int:
    """The instant that decides "expired" in this transaction: the earlier of the caller's
    clock and the database's (`domain.recovery.settling_now_ms`)."""
    return recovery.settling_now_ms(now_ms, await database_now_ms(q))


def _snapshot(row: query.Row) -> recovery.Snapshot:
    observation = recovery.Observation.from_joined_row(row)
    return recovery.Snapshot(
        execution=records.Execution.from_row(row),
        dispatch=records.Dispatch.from_joined_row(row),
        observation=observation,
    )


async def list_recovery_required(
    q: query.Query, *, now_ms: int, limit: int, after: tuple[int, str] | None = None
) -> list[recovery.Snapshot]:
    """A keyset page over the executing index: rows whose lease expired."""
    first = after or _BEFORE_ALL
    found = await q.all(
        "select_recovery_required",
        {
            "now_ms": now_ms,
            "limit": limit,
            "after_expires_at_ms": first[0],
            "after_dispatch_id": first[1],
        },
    )
    return [_snapshot(row) for row in found]


async def resolve(
    q: query.Query,
    resolution: recovery.Resolution,
    tables: Sequence[action_tables.ActionTables],
    *,
    principal: str | None,
    now_ms: int,
    context: principals.RequestContext | None = None,
) -> records.Transition:
    """Settle the row if it still matches the snapshot; the first committed writer wins."""
    fence = resolution.fence
    # Locked: a late complete from another replica either committed before (and we refuse)
    # or waits for this transaction (and is refused by its own fence).
    found = await rows.read_row(q, fence.dispatch_id, lock=True)
    if found is None:
        return records.Transition(
            outcome=Outcome.NOT_FOUND, dispatch_id=fence.dispatch_id, reason="not_found"
        )
    execution, dispatch = found
    settled_at_ms = await settling_ms(q, now_ms)
    refusal = recovery.resolve_refusal(execution, fence, settling_ms=settled_at_ms)
    if refusal is not None:
        return records.Transition(
            outcome=Outcome.CONFLICT,
            dispatch_id=fence.dispatch_id,
            status=execution.status,
            reason=refusal,
        )
    target = ExecutionStatus(resolution.resolution.value)
    mutation = fencing.mutation_id(fence.dispatch_id, fence.attempt, "recovery")
    params = {
        "dispatch_id": fence.dispatch_id,
        "version": fence.version,
        "owner": fence.owner,
        "token": fence.token,
        "attempt": fence.attempt,
        "started_at_ms": fence.started_at_ms,
        "now_ms": now_ms,
        "principal": principal,
    }
    # The resolution first: the database settles a started row without its holder's proof
    # only for a resolution of its exact fence (migration 0011), and writes the ledger line.
    await q.run(
        "insert_resolution",
        {
            **params,
            "source": resolution.source.value,
            "resolution": resolution.resolution.value,
            "evidence_digest": resolution.evidence_digest,
            "resolved_by": resolution.resolved_by,
            "reason_code": resolution.reason_code,
        },
    )
    if resolution.source is recovery.Source.MANUAL:
        # Before the update: the database settles by a manual resolution only once this
        # transaction wrote its audit row, naming the acting principal and this change.
        await q.run(
            "insert_audit_event",
            {
                "kind": recovery.AUDIT_MANUAL_RESOLUTION,
                "actor": resolution.resolved_by,
                "principal": principal,
                "project_id": resolution.project_id,
                "subject_id": fence.dispatch_id,
                "detail_code": f"{resolution.resolution.value}:{resolution.reason_code}"[:128],
                "comment": resolution.comment,
            },
        )
    resolved = await rows.fenced_update(
        q,
        "resolve_row",
        {
            **params,
            "to_status": target.value,
            "mutation_id": mutation,
            "result_code": resolution.reason_code,
            "expired_by_ms": settled_at_ms,
        },
        dispatch_id=fence.dispatch_id,
        outcome=Outcome.COMPLETED,
        status=target,
    )
    if resolved.outcome is Outcome.CONFLICT:
        # Under the row lock the domain's refusal above already saw what the update repeats:
        # a miss is a broken invariant, and raising undoes the resolution with it.
        raise errors.StoreError("the resolution's update matched no row", code="raced")
    for own in tables:  # bookkeeping only, in this transaction: their rows follow
        await own.settle(
            q,
            dispatch,
            resolution=resolution.resolution.value,
            reason_code=resolution.reason_code,
            now_ms=now_ms,
        )
    await tokens.record_request(
        q,
        context,
        principal=principal,
        operation="resolve",
        actor=resolution.resolved_by,
        project_id=resolution.project_id,
        subject_id=fence.dispatch_id,
        detail_code=f"{resolution.resolution.value}:{resolution.reason_code}",
    )
    return resolved


async def record_observation(
    q: query.Query,
    dispatch_id: str,
    *,
    outcome: recovery.ObservationOutcome,
    reason_code: str,
    now_ms: int,
) -> None:
    """Upsert the last reconcile outcome."""
    await q.run(
        "upsert_observation",
        {
            "dispatch_id": dispatch_id,
            "outcome": outcome.value,
            "reason_code": reason_code,
            "now_ms": now_ms,
        },
    )


async def get_resolution(q: query.Query, dispatch_id: str) -> recovery.StoredResolution | None:
    """The resolution row of a dispatch."""
    row = await q.one("select_resolution", {"dispatch_id": dispatch_id})
    if row is None:
        return None
    return recovery.StoredResolution(
        dispatch_id=row["dispatch_id"],
        source=recovery.Source(row["source"]),
        resolution=states.Completion(row["resolution"]),
        evidence_digest=row["evidence_digest"],
        resolved_by=row["resolved_by"],
        principal=row["principal"],
        reason_code=row["reason_code"],
        committed_at_ms=row["committed_at_ms"],
    )


def _audit_event(row: records.RowLike) -> recovery.AuditEvent:
    return recovery.AuditEvent(
        event_id=row["event_id"],
        kind=row["kind"],
        actor=row["actor"],
        principal=row["principal"],
        project_id=row["project_id"],
        subject_id=row["subject_id"],
        detail_code=row["detail_code"],
        committed_at_ms=row["committed_at_ms"],
        token_id=row["token_id"],
        client_address=row["client_address"],
        request_id=row["request_id"],
        comment=row["comment"],
    )


async def audit_events(q: query.Query, subject_id: str) -> list[recovery.AuditEvent]:
    """Audit records about one subject."""
    return [
        _audit_event(row) for row in await q.all("select_audit_events", {"subject_id": subject_id})
    ]


async def audit_page(q: query.Query, request: audit_views.AuditQuery) -> audit_views.AuditPage:
    """A page of the audit log, newest first; one row more is read to know if it is last."""
    found = await q.all(
        "select_audit_page",
        {
            "before_event_id": 2**63 - 1 if request.before is None else request.before,
            "subject_id": request.subject_id,
            "principal": request.principal,
            "kind": request.kind,
            "limit": request.limit + 1,
        },
    )
    events = tuple(_audit_event(row) for row in found[: request.limit])
    more = len(found) > request.limit
    return audit_views.AuditPage(events, events[-1].event_id if more else None)
