-- PostgreSQL statements: pruning finished dispatch trees and old audit records.

-- prune_lock --
-- One prune at a time (a second CronJob run, a manual `prune`): a transaction-level advisory
-- lock ("qlprun"), released at commit.
SELECT pg_catalog.pg_advisory_xact_lock(124710556956014)

-- prunable_dispatches --
-- The dispatch trees a prune may take: terminal before the cutoff, and named by no tool step
-- of a Run (its StepRun binds the approval, its start barrier the dispatch: Runs are business
-- data and keep what they name). The status list matches the partial index of migration 0009.
FROM qinglong.approved_action_dispatch_executions AS e
JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
WHERE e.status IN ('blocked', 'cancelled', 'failed', 'succeeded')
  AND e.updated_at_ms < :cutoff_ms::bigint
  AND NOT EXISTS (
      SELECT 1 FROM qinglong.step_runs AS s WHERE s.approval_request_id = d.approval_request_id
  )
  AND NOT EXISTS (
      SELECT 1 FROM qinglong.tool_execution_start_barriers AS b
      WHERE b.dispatch_id = d.dispatch_id
  )

-- prune_grant_permits --
INSERT INTO qinglong.prune_permits (
    dispatch_id, approval_request_id, project_id, action_ref, cutoff_ms
)
SELECT d.dispatch_id, d.approval_request_id, d.project_id, d.action_ref, :cutoff_ms::bigint
{prunable_dispatches}
ORDER BY e.updated_at_ms, e.dispatch_id
LIMIT :limit::integer

-- prune_count_permits --
SELECT count(*) AS n FROM qinglong.prune_permits

-- prune_count_dispatches --
SELECT count(*) AS n {prunable_dispatches}

-- prune_execution_events --
DELETE FROM qinglong.execution_events
WHERE dispatch_id IN (SELECT dispatch_id FROM qinglong.prune_permits)

-- prune_receipts --
DELETE FROM qinglong.approved_run_action_receipts
WHERE dispatch_id IN (SELECT dispatch_id FROM qinglong.prune_permits)

-- prune_resolutions --
DELETE FROM qinglong.recovery_resolutions
WHERE dispatch_id IN (SELECT dispatch_id FROM qinglong.prune_permits)

-- prune_observations --
DELETE FROM qinglong.recovery_observations
WHERE dispatch_id IN (SELECT dispatch_id FROM qinglong.prune_permits)

-- prune_uncertain_outcomes --
DELETE FROM qinglong.uncertain_outcomes
WHERE dispatch_id IN (SELECT dispatch_id FROM qinglong.prune_permits)

-- prune_recovery_marks --
DELETE FROM qinglong.recovery_required_marks
WHERE dispatch_id IN (SELECT dispatch_id FROM qinglong.prune_permits)

-- prune_executions --
DELETE FROM qinglong.approved_action_dispatch_executions
WHERE dispatch_id IN (SELECT dispatch_id FROM qinglong.prune_permits)

-- prune_dispatches --
DELETE FROM qinglong.approved_action_dispatches
WHERE dispatch_id IN (SELECT dispatch_id FROM qinglong.prune_permits)

-- prune_approvals --
DELETE FROM qinglong.approval_requests
WHERE approval_request_id IN (SELECT approval_request_id FROM qinglong.prune_permits)

-- prune_plans --
-- A plan goes with the last request that names it (a rejected one may still name it).
DELETE FROM qinglong.action_plans AS p
WHERE (p.project_id, p.action_ref) IN (
    SELECT project_id, action_ref FROM qinglong.prune_permits
)
  AND NOT EXISTS (
      SELECT 1 FROM qinglong.approval_requests AS a
      WHERE a.project_id = p.project_id AND a.action_ref = p.action_ref
  )

-- prune_clear_permits --
DELETE FROM qinglong.prune_permits

-- prunable_audit_events --
-- Audit records older than the audit cutoff whose subject finished before it (the rule of
-- `qinglong.audit_subject_finished`, which the delete trigger of migration live_requests asks:
-- a pending request's audit stays; written out here so that the planner joins instead of
-- calling a function per row), except those a tool start's audit receipt or barrier names
-- (they are part of a Run's history, which is kept).
FROM qinglong.security_audit_events AS s
WHERE s.committed_at_ms < :audit_cutoff_ms::bigint
  AND NOT EXISTS (
      SELECT 1 FROM qinglong.approval_requests AS a
      WHERE a.approval_request_id = s.subject_id
        AND NOT (
            (a.status IN ('rejected', 'expired') AND a.updated_at_ms < :audit_cutoff_ms::bigint)
            OR (a.status IN ('pending', 'approved')
                AND COALESCE(a.db_expires_at_ms, a.expires_at_ms) < :audit_cutoff_ms::bigint)
            OR (a.status = 'consumed' AND EXISTS (
                SELECT 1
                FROM qinglong.approved_action_dispatches AS d
                JOIN qinglong.approved_action_dispatch_executions AS e
                    ON e.dispatch_id = d.dispatch_id
                WHERE d.approval_request_id = a.approval_request_id
                  AND e.status IN ('blocked', 'cancelled', 'failed', 'succeeded')
                  AND e.updated_at_ms < :audit_cutoff_ms::bigint
            ))
        )
  )
  AND NOT EXISTS (
      SELECT 1 FROM qinglong.approved_action_dispatch_executions AS e
      WHERE e.dispatch_id = s.subject_id
        AND NOT (e.status IN ('blocked', 'cancelled', 'failed', 'succeeded')
                 AND e.updated_at_ms < :audit_cutoff_ms::bigint)
  )
  AND NOT EXISTS (
      SELECT 1 FROM qinglong.audit_receipts AS r WHERE r.audit_event_id = s.event_id
  )
  AND NOT EXISTS (
      SELECT 1 FROM qinglong.tool_execution_start_barriers AS b
      WHERE b.audit_event_id = s.event_id
  )

-- prune_grant_audit_permit --
INSERT INTO qinglong.audit_prune_permits (cutoff_ms) VALUES (:audit_cutoff_ms::bigint)

-- prune_audit_events --
DELETE FROM qinglong.security_audit_events
WHERE event_id IN (
    SELECT s.event_id {prunable_audit_events}
    ORDER BY s.committed_at_ms, s.event_id
    LIMIT :limit::integer
)
RETURNING event_id

-- prune_count_audit_events --
SELECT count(*) AS n {prunable_audit_events}

-- prune_clear_audit_permits --
DELETE FROM qinglong.audit_prune_permits

-- prunable_notification_events --
-- Outbox events older than the cutoff, matched by the deliverer (at or below its watermark),
-- whose every delivery is delivered or dead since before the cutoff (the database refuses the
-- rest, migration 0038).
FROM qinglong.notification_events AS e
WHERE e.at_ms < :cutoff_ms::bigint
  AND e.id <= (SELECT w.fanned_out_through FROM qinglong.notification_deliverer AS w)
  AND NOT EXISTS (
      SELECT 1 FROM qinglong.notification_deliveries AS d
      WHERE d.event_id = e.id
        AND (d.status = 'pending' OR d.done_at_ms >= :cutoff_ms::bigint)
  )

-- prune_notification_bound --
-- The last of the first `limit` prunable events: one batch is those at or below it.
SELECT max(b.id) AS through FROM (
    SELECT e.id {prunable_notification_events} ORDER BY e.id LIMIT :limit::integer
) AS b

-- prune_notification_attempts --
DELETE FROM qinglong.notification_attempts
WHERE event_id IN (SELECT e.id {prunable_notification_events} AND e.id <= :through::bigint)

-- prune_notification_deliveries --
DELETE FROM qinglong.notification_deliveries
WHERE event_id IN (SELECT e.id {prunable_notification_events} AND e.id <= :through::bigint)
RETURNING event_id

-- prune_notification_fanouts --
DELETE FROM qinglong.notification_fanouts
WHERE event_id IN (SELECT e.id {prunable_notification_events} AND e.id <= :through::bigint)

-- prune_notification_events --
DELETE FROM qinglong.notification_events
WHERE id IN (SELECT e.id {prunable_notification_events} AND e.id <= :through::bigint)
RETURNING id

-- prune_count_notification_events --
SELECT count(*) AS n {prunable_notification_events}

-- prune_count_notification_deliveries --
SELECT count(*) AS n FROM qinglong.notification_deliveries
WHERE event_id IN (SELECT e.id {prunable_notification_events})
