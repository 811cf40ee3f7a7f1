-- SQLite statements: recovery: the expired rows, resolutions, observations and the audit log.

-- select_recovery_required --
SELECT {execution_columns},
       d.approval_request_id, d.action_type, d.action_ref, d.action_digest, d.approved_by,
       d.created_at_ms AS dispatch_created_at_ms, d.target, d.traceparent,
       o.outcome AS observation_outcome, o.reason_code AS observation_reason,
       o.observation_count, o.last_seen_at_ms AS observation_last_seen_at_ms
FROM approved_action_dispatch_executions AS e
JOIN approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
LEFT JOIN recovery_observations AS o ON o.dispatch_id = e.dispatch_id
-- Expired by the earlier of the caller's clock and the database's (see count_recovery_required).
WHERE e.status = 'executing'
  AND e.lease_expires_at_ms <= min(:now_ms,
      CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
  AND (e.lease_expires_at_ms, e.dispatch_id) > (:after_expires_at_ms, :after_dispatch_id)
ORDER BY e.lease_expires_at_ms, e.dispatch_id
LIMIT :limit

-- resolve_row --
UPDATE approved_action_dispatch_executions
SET status = :to_status, result_mutation_id = :mutation_id, result_code = :result_code,
    completed_at_ms = :now_ms, version = version + 1, updated_at_ms = :now_ms
WHERE dispatch_id = :dispatch_id AND status = 'executing' AND version = :version
  AND lease_owner = :owner AND lease_token = :token AND attempt = :attempt
  AND started_at_ms = :started_at_ms AND lease_expires_at_ms <= :expired_by_ms
RETURNING version

-- insert_resolution --
INSERT INTO recovery_resolutions (
    dispatch_id, source, resolution, evidence_digest, resolved_by, principal, reason_code,
    execution_attempt, execution_version, lease_owner, lease_token, started_at_ms,
    committed_at_ms
) VALUES (
    :dispatch_id, :source, :resolution, :evidence_digest, :resolved_by, :principal,
    :reason_code, :attempt, :version, :owner, :token, :started_at_ms,
    CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
)

-- select_resolution --
SELECT dispatch_id, source, resolution, evidence_digest, resolved_by, principal, reason_code,
       execution_attempt, execution_version, lease_owner, lease_token, started_at_ms,
       committed_at_ms
FROM recovery_resolutions
WHERE dispatch_id = :dispatch_id

-- upsert_observation --
INSERT INTO recovery_observations (
    dispatch_id, outcome, reason_code, observation_count, first_seen_at_ms, last_seen_at_ms
) VALUES (:dispatch_id, :outcome, :reason_code, 1, :now_ms, :now_ms)
ON CONFLICT (dispatch_id) DO UPDATE
SET outcome = excluded.outcome, reason_code = excluded.reason_code,
    observation_count = recovery_observations.observation_count + 1,
    last_seen_at_ms = excluded.last_seen_at_ms

-- insert_audit_event --
INSERT INTO security_audit_events (
    kind, actor, principal, project_id, subject_id, detail_code, comment, committed_at_ms
) VALUES (
    :kind, :actor, :principal, :project_id, :subject_id, :detail_code, :comment,
    CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
)

-- select_audit_events --
SELECT event_id, kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms,
       token_id, client_address, request_id, comment
FROM security_audit_events
WHERE subject_id = :subject_id
ORDER BY event_id

-- select_audit_page --
-- The audit log newest first, a keyset page before :before_event_id; a NULL filter matches all.
SELECT event_id, kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms,
       token_id, client_address, request_id, comment
FROM security_audit_events
WHERE event_id < :before_event_id
  AND (:subject_id IS NULL OR subject_id = :subject_id)
  AND (:principal IS NULL OR principal = :principal)
  AND (:kind IS NULL OR kind = :kind)
ORDER BY event_id DESC
LIMIT :limit
