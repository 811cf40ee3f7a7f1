-- PostgreSQL statements: an operator's cancel and the `dispatch list|show` reads.

-- cancel_row --
-- The claim's fence: this version, still waiting. Lease columns and attempt stay as they were
-- (the trigger's fence rule); the row leaves the due index.
UPDATE qinglong.approved_action_dispatch_executions
SET status = 'cancelled', eligible_at_ms = NULL, retry_at_ms = NULL,
    result_mutation_id = :mutation_id, result_code = :result_code,
    completed_at_ms = :now_ms::bigint, version = version + 1, updated_at_ms = :now_ms::bigint
WHERE dispatch_id = :dispatch_id AND version = :version
  AND status IN ('pending', 'retry_wait')
RETURNING version

-- target_holder_columns --
-- The target and the one other execution past its claim on it (the partial unique index of
-- migration 0030 allows one): what `domain/targets.TargetWait` reads. No lease token.
e.target, e.proceed_on_unknown, h.dispatch_id AS target_holder_id, h.status AS target_holder_status,
h.lease_expires_at_ms AS target_holder_lease_expires_at_ms,
-- The window and the freeze a waiting row waits for (migration 0035, `domain/waits.py`).
e.not_before_ms, e.not_after_ms,
CASE WHEN e.status IN ('pending', 'retry_wait')
     THEN qinglong.freeze_covering(e.dispatch_id, qinglong.db_now_ms()) END AS frozen_by

-- target_holder_join --
LEFT JOIN qinglong.approved_action_dispatch_executions AS h
    ON h.target = e.target AND h.status IN ('leased', 'executing')
   AND h.dispatch_id <> e.dispatch_id
   -- The one row that holds it: a proceeding row whose lease ran out does not (0040).
   AND (h.status = 'leased' OR NOT h.proceed_on_unknown
        OR h.lease_expires_at_ms > qinglong.db_now_ms())

-- list_dispatches --
-- `dispatch list`: newest first, a keyset page after (:after_created_at_ms, :after_dispatch_id);
-- a NULL filter matches everything (:from_ms inclusive, :to_ms exclusive, on creation). :lease_expired is the effective-status split of
-- `executing`: true recovery_required, false still live, NULL either, at :settling_ms (the
-- earlier of the caller's clock and the database's, as in count_recovery_required).
SELECT d.dispatch_id, d.project_id, d.action_type, d.action_ref, d.created_at_ms,
       e.status, e.attempt, e.max_attempts, e.lease_expires_at_ms, e.updated_at_ms,
       e.result_code, {target_holder_columns}
FROM qinglong.approved_action_dispatches AS d
JOIN qinglong.approved_action_dispatch_executions AS e ON e.dispatch_id = d.dispatch_id
{target_holder_join}
WHERE (d.created_at_ms, d.dispatch_id)
      < (:after_created_at_ms::bigint, :after_dispatch_id::text)
  AND (:project_id::text IS NULL OR d.project_id = :project_id::text)
  AND (:action_type::text IS NULL OR d.action_type = :action_type::text)
  AND (:stored_status::text IS NULL OR e.status = :stored_status::text)
  AND (:lease_expired::boolean IS NULL
       OR (e.lease_expires_at_ms <= :settling_ms::bigint) = :lease_expired::boolean)
  AND (:target::text IS NULL OR e.target = :target::text)
  AND (:from_ms::bigint IS NULL OR d.created_at_ms >= :from_ms::bigint)
  AND (:to_ms::bigint IS NULL OR d.created_at_ms < :to_ms::bigint)
ORDER BY d.created_at_ms DESC, d.dispatch_id DESC
LIMIT :limit::bigint

-- select_dispatch_view --
-- `dispatch show`: the dispatch, its execution without the lease token, its last observation.
SELECT d.dispatch_id, d.approval_request_id, d.project_id, d.action_type, d.action_ref,
       d.action_digest, d.approved_by, d.created_at_ms AS dispatch_created_at_ms, d.traceparent,
       e.status, e.version, e.attempt, e.max_attempts, e.takeovers, e.eligible_at_ms,
       e.retry_at_ms, e.lease_owner, e.lease_expires_at_ms, e.started_at_ms, e.result_mutation_id,
       e.result_code, e.result_receipt_json, e.result_receipt_digest, e.completed_at_ms,
       e.created_at_ms, e.updated_at_ms, {target_holder_columns},
       o.outcome AS observation_outcome, o.reason_code AS observation_reason,
       o.observation_count, o.last_seen_at_ms AS observation_last_seen_at_ms
FROM qinglong.approved_action_dispatches AS d
JOIN qinglong.approved_action_dispatch_executions AS e ON e.dispatch_id = d.dispatch_id
LEFT JOIN qinglong.recovery_observations AS o ON o.dispatch_id = d.dispatch_id
{target_holder_join}
WHERE d.dispatch_id = :dispatch_id::text

-- select_event_views --
-- The ledger of one dispatch for `dispatch show`: `select_events` without the lease token. A
-- line that settled a started row names who settled it (its resolution: the operator's name
-- and the principal the database authenticated), and the row's `recovery_required` mark
-- (migration 0029) is a line of its own, after the start and before the settle.
SELECT ev.version, ev.from_status, ev.to_status, ev.attempt, ev.lease_owner, ev.mutation_id,
       ev.result_code, ev.committed_at_ms, r.resolved_by AS settled_by,
       r.principal AS settled_principal, NULL AS noticed_by, 0 AS line_order
FROM qinglong.execution_events AS ev
LEFT JOIN qinglong.recovery_resolutions AS r
    ON r.dispatch_id = ev.dispatch_id AND ev.from_status = 'executing'
   AND ev.version = r.execution_version + 1
WHERE ev.dispatch_id = :dispatch_id::text
UNION ALL
SELECT m.execution_version, 'executing', 'recovery_required', m.execution_attempt,
       m.lease_owner, NULL, 'lease_expired', m.committed_at_ms, NULL, NULL, m.noticed_by, 1
FROM qinglong.recovery_required_marks AS m
WHERE m.dispatch_id = :dispatch_id::text
ORDER BY version, line_order

-- read_full_plan --
-- `dispatch show ID --plan`: the definer function of migration 0014 refuses a login that is
-- not a plan reader (42501), and otherwise writes the `plan.read` audit row in this
-- transaction and returns the plan row (sealed as stored). The principal is the session's
-- login, written by the function itself.
SELECT project_id, action_ref, action_type, plan_json, plan_digest, plan_key_id,
       plan_algorithm, plan_sealed, plan_schema_version
FROM qinglong.read_plan(:dispatch_id::text)

-- audit_plan_read --
-- Written already: `read_plan` appended the audit row in this same transaction.
SELECT 1

-- select_recent_requests --
-- The event stream's new approval requests at or after a time, oldest first: a range of the
-- primary key, whose ids begin with their creation time (`activity.approval_id_floor`).
SELECT approval_request_id, project_id, action_type, requested_by, created_at_ms
FROM qinglong.approval_requests
WHERE approval_request_id >= :floor_id::text
ORDER BY approval_request_id
LIMIT :limit::bigint

-- select_recent_settled --
-- The event stream's dispatches that became terminal at or after :since_ms, oldest first (the
-- prune's index: a terminal row is never updated again, so updated_at_ms is when it settled).
SELECT e.dispatch_id, d.project_id, d.action_type, e.status, e.result_code, e.updated_at_ms
FROM qinglong.approved_action_dispatch_executions AS e
JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
WHERE e.status IN ('blocked', 'cancelled', 'failed', 'succeeded')
  AND e.updated_at_ms >= :since_ms::bigint
ORDER BY e.updated_at_ms, e.dispatch_id
LIMIT :limit::bigint
