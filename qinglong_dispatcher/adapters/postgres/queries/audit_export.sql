-- PostgreSQL statements: the audit export (docs/decisions/0043-an-audit-export-below-a-commit-horizon.md).

-- audit_export_probe --
-- One statement, so its snapshot (the highest committed ids) is taken before the lock table
-- is read: a transaction that drew an id at or below those maxima holds its table's
-- RowExclusiveLock now, or has ended. Those holders are what the horizon waits out.
SELECT
    (SELECT coalesce(max(event_id), 0) FROM qinglong.security_audit_events) AS audit_max,
    (SELECT coalesce(max(event_id), 0) FROM qinglong.execution_events) AS ledger_max,
    ARRAY(
        SELECT DISTINCT l.virtualtransaction
        FROM pg_catalog.pg_locks AS l
        WHERE l.locktype = 'relation'
          AND l.mode = 'RowExclusiveLock'
          AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d
                            WHERE d.datname = pg_catalog.current_database())
          AND l.relation = 'qinglong.security_audit_events'::regclass
    ) AS audit_writers,
    ARRAY(
        SELECT DISTINCT l.virtualtransaction
        FROM pg_catalog.pg_locks AS l
        WHERE l.locktype = 'relation'
          AND l.mode = 'RowExclusiveLock'
          AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d
                            WHERE d.datname = pg_catalog.current_database())
          AND l.relation = 'qinglong.execution_events'::regclass
    ) AS ledger_writers

-- audit_export_audit_rows --
-- The trace id is the subject's: a request's, or a dispatch's (one primary-key probe each).
SELECT event_id, kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms,
       token_id, client_address, request_id,
       substr(coalesce(
           (SELECT a.traceparent FROM qinglong.approval_requests AS a
            WHERE a.approval_request_id = subject_id),
           (SELECT d.traceparent FROM qinglong.approved_action_dispatches AS d
            WHERE d.dispatch_id = subject_id)), 4, 32) AS trace_id
FROM qinglong.security_audit_events
WHERE event_id > :after::bigint AND event_id <= :upto::bigint
  AND committed_at_ms >= :since_ms::bigint
ORDER BY event_id
LIMIT :limit::bigint

-- audit_export_ledger_rows --
SELECT e.event_id, e.dispatch_id, d.project_id, e.version, e.from_status, e.to_status,
       e.attempt, e.lease_owner, e.mutation_id, e.result_code, e.committed_at_ms,
       substr(d.traceparent, 4, 32) AS trace_id
FROM qinglong.execution_events AS e
JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
WHERE e.event_id > :after::bigint AND e.event_id <= :upto::bigint
  AND e.committed_at_ms >= :since_ms::bigint
ORDER BY e.event_id
LIMIT :limit::bigint
