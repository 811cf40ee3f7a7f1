-- PostgreSQL statements: recovery: the expired rows, resolutions, observations and the audit log.

-- select_recovery_required --
SELECT {execution_columns},
       d.approval_request_id, d.action_type, d.action_ref, d.action_digest, d.approved_by,
       d.created_at_ms AS dispatch_created_at_ms, d.target, d.traceparent,
       o.outcome AS observation_outcome, o.reason_code AS observation_reason,
       o.observation_count, o.last_seen_at_ms AS observation_last_seen_at_ms
FROM qinglong.approved_action_dispatch_executions AS e
JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
LEFT JOIN qinglong.recovery_observations AS o ON o.dispatch_id = e.dispatch_id
-- Expired by the earlier of the caller's clock and the database's (see count_recovery_required).
WHERE e.status = 'executing'
  AND e.lease_expires_at_ms <= least(:now_ms::bigint,
      (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
  AND (e.lease_expires_at_ms, e.dispatch_id)
      > (:after_expires_at_ms::bigint, :after_dispatch_id::text)
ORDER BY e.lease_expires_at_ms, e.dispatch_id
LIMIT :limit::bigint

-- resolve_row --
UPDATE qinglong.approved_action_dispatch_executions
SET status = :to_status, result_mutation_id = :mutation_id, result_code = :result_code,
    completed_at_ms = :now_ms::bigint, version = version + 1, updated_at_ms = :now_ms::bigint
WHERE dispatch_id = :dispatch_id AND status = 'executing' AND version = :version
  AND lease_owner = :owner AND lease_token = :token AND attempt = :attempt
  AND started_at_ms = :started_at_ms AND lease_expires_at_ms <= :expired_by_ms::bigint
RETURNING version

-- insert_resolution --
-- The principal is the acting one (qinglong.acting_principal()), decided by the server, never
-- passed by the client.
INSERT INTO qinglong.recovery_resolutions (
    dispatch_id, source, resolution, evidence_digest, resolved_by, principal, reason_code,
    execution_attempt, execution_version, lease_owner, lease_token, started_at_ms,
    committed_at_ms
) VALUES (
    :dispatch_id, :source, :resolution, :evidence_digest, :resolved_by, qinglong.acting_principal(),
    :reason_code, :attempt, :version, :owner, :token, :started_at_ms,
    (extract(epoch FROM transaction_timestamp()) * 1000)::bigint
)

-- select_resolution --
SELECT dispatch_id, source, resolution, evidence_digest, resolved_by, principal, reason_code,
       execution_attempt, execution_version, lease_owner, lease_token, started_at_ms,
       committed_at_ms
FROM qinglong.recovery_resolutions
WHERE dispatch_id = :dispatch_id

-- upsert_observation --
INSERT INTO qinglong.recovery_observations AS o (
    dispatch_id, outcome, reason_code, observation_count, first_seen_at_ms, last_seen_at_ms
) VALUES (:dispatch_id, :outcome, :reason_code, 1, :now_ms::bigint, :now_ms::bigint)
ON CONFLICT (dispatch_id) DO UPDATE
SET outcome = excluded.outcome, reason_code = excluded.reason_code,
    observation_count = o.observation_count + 1,
    last_seen_at_ms = excluded.last_seen_at_ms

-- insert_audit_event --
INSERT INTO qinglong.security_audit_events (
    kind, actor, principal, project_id, subject_id, detail_code, comment, committed_at_ms
) VALUES (
    :kind, :actor, qinglong.acting_principal(), :project_id, :subject_id, :detail_code, :comment,
    (extract(epoch FROM transaction_timestamp()) * 1000)::bigint
)

-- select_audit_events --
SELECT event_id, kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms,
       token_id, client_address, request_id, comment
FROM qinglong.security_audit_events
WHERE subject_id = :subject_id
ORDER BY event_id

-- select_audit_page --
-- The audit log newest first, a keyset page before :before_event_id; a NULL filter matches all.
SELECT event_id, kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms,
       token_id, client_address, request_id, comment
FROM qinglong.security_audit_events
WHERE event_id < :before_event_id::bigint
  AND (:subject_id::text IS NULL OR subject_id = :subject_id::text)
  AND (:principal::text IS NULL OR principal = :principal::text)
  AND (:kind::text IS NULL OR kind = :kind::text)
ORDER BY event_id DESC
LIMIT :limit::bigint
