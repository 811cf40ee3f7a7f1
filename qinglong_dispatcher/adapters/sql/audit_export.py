"""The audit export's reads, written once: the horizon probe and each stream's next rows."""

from __future__ import annotations

from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.domain import audit_export, records


async def probe(q: query.Query) -> audit_export.Probe:
    """Each stream's highest committed id, then who could still write below it (PostgreSQL)."""
    row = await q.one("audit_export_probe")
    assert row is not None  # a SELECT without FROM always has its row
    return audit_export.Probe(
        audit_max=int(row["audit_max"]),
        ledger_max=int(row["ledger_max"]),
        audit_writers=frozenset(row["audit_writers"] or ()),
        ledger_writers=frozenset(row["ledger_writers"] or ()),
    )


def _audit(row: records.RowLike) -> audit_export.Record:
    return audit_export.Record(
        source="audit",
        event_id=row["event_id"],
        committed_at_ms=row["committed_at_ms"],
        kind=row["kind"],
        principal=row["principal"],
        actor=row["actor"],
        token_id=row["token_id"],
        client_address=row["client_address"],
        request_id=row["request_id"],
        trace_id=row["trace_id"],
        project_id=row["project_id"],
        subject_id=row["subject_id"],
        detail_code=row["detail_code"],
    )


def _ledger(row: records.RowLike) -> audit_export.Record:
    # The lease token is a fence, not an identity: no view prints it, nor does the export.
    return audit_export.Record(
        source="ledger",
        event_id=row["event_id"],
        committed_at_ms=row["committed_at_ms"],
        kind=audit_export.LEDGER_KIND,
        project_id=row["project_id"],
        trace_id=row["trace_id"],
        subject_id=row["dispatch_id"],
        dispatch_id=row["dispatch_id"],
        version=row["version"],
        from_status=row["from_status"],
        to_status=row["to_status"],
        attempt=row["attempt"],
        lease_owner=row["lease_owner"],
        mutation_id=row["mutation_id"],
        result_code=row["result_code"],
    )


async def rows(
    q: query.Query,
    after: audit_export.Cursor,
    upto: audit_export.Cursor,
    *,
    since_ms: int,
    limit: int,
) -> tuple[list[audit_export.Record], list[audit_export.Record]]:
    """Both streams' rows in (after, upto], each in id order, on one snapshot."""
    audits = await q.all(
        "audit_export_audit_rows",
        {"after": after.audit, "upto": upto.audit, "since_ms": since_ms, "limit": limit},
    )
    ledgers = await q.all(
        "audit_export_ledger_rows",
        {"after": after.ledger, "upto": upto.ledger, "since_ms": since_ms, "limit": limit},
    )
    return [_audit(r) for r in audits], [_ledger(r) for r in ledgers]
