-- SQLite statements: the audit export (docs/decisions/0043-an-audit-export-below-a-commit-horizon.md).

-- audit_export_probe --
-- Writers are serialised and a reader sees whole commits only: every id at or below the
-- highest one visible has committed, so no writer is ever waited out here.
SELECT
    coalesce((SELECT max(event_id) FROM security_audit_events), 0) AS audit_max,
    coalesce((SELECT max(event_id) FROM execution_events), 0) AS ledger_max,
    NULL AS audit_writers,
    NULL AS ledger_writers

-- audit_export_audit_rows --
-- The trace id is the subject's: a request's, or a dispatch's (one primary-key probe each).
SELECT event_id, kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms,
       token_id, client_address, request_id,
       substr(coalesce(
           (SELECT a.traceparent FROM approval_requests AS a
            WHERE a.approval_request_id = subject_id),
           (SELECT d.traceparent FROM approved_action_dispatches AS d
            WHERE d.dispatch_id = subject_id)), 4, 32) AS trace_id
FROM security_audit_events
WHERE event_id > :after AND event_id <= :upto
  AND committed_at_ms >= :since_ms
ORDER BY event_id
LIMIT :limit

-- audit_export_ledger_rows --
SELECT e.event_id, e.dispatch_id, d.project_id, e.version, e.from_status, e.to_status,
       e.attempt, e.lease_owner, e.mutation_id, e.result_code, e.committed_at_ms,
       substr(d.traceparent, 4, 32) AS trace_id
FROM execution_events AS e
JOIN approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
WHERE e.event_id > :after AND e.event_id <= :upto
  AND e.committed_at_ms >= :since_ms
ORDER BY e.event_id
LIMIT :limit
