-- SQLite statements: pruning finished dispatch trees and old audit records.

-- prune_lock --
-- One prune at a time: BEGIN IMMEDIATE already holds the database's one write lock.
SELECT 1

-- prunable_dispatches --
-- The dispatch trees a prune may take: terminal before the cutoff, and named by no tool step
-- of a Run (its StepRun binds the approval, its start barrier the dispatch: Runs are business
-- data and keep what they name). The status list matches the partial index of migration 0009,
-- which is named: the planner would otherwise take the status index and sort every finished
-- row for each batch.
FROM approved_action_dispatch_executions AS e
    INDEXED BY approved_action_dispatch_executions_finished
JOIN approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
WHERE e.status IN ('blocked', 'cancelled', 'failed', 'succeeded')
  AND e.updated_at_ms < :cutoff_ms
  AND NOT EXISTS (
      SELECT 1 FROM step_runs AS s WHERE s.approval_request_id = d.approval_request_id
  )
  AND NOT EXISTS (
      SELECT 1 FROM tool_execution_start_barriers AS b WHERE b.dispatch_id = d.dispatch_id
  )
  -- The tree holding the newest ledger line stays: a rowid without AUTOINCREMENT is reused
  -- once the highest row is gone, and the audit export's cursor must never see an id again.
  AND NOT EXISTS (
      SELECT 1 FROM execution_events AS v
      WHERE v.dispatch_id = d.dispatch_id
        AND v.event_id = (SELECT max(event_id) FROM execution_events)
  )

-- prune_grant_permits --
INSERT INTO prune_permits (dispatch_id, approval_request_id, project_id, action_ref, cutoff_ms)
SELECT d.dispatch_id, d.approval_request_id, d.project_id, d.action_ref, :cutoff_ms
{prunable_dispatches}
ORDER BY e.updated_at_ms, e.dispatch_id
LIMIT :limit

-- prune_count_permits --
SELECT count(*) AS n FROM prune_permits

-- prune_count_dispatches --
SELECT count(*) AS n {prunable_dispatches}

-- prune_execution_events --
DELETE FROM execution_events WHERE dispatch_id IN (SELECT dispatch_id FROM prune_permits)

-- prune_receipts --
DELETE FROM approved_run_action_receipts
WHERE dispatch_id IN (SELECT dispatch_id FROM prune_permits)

-- prune_resolutions --
DELETE FROM recovery_resolutions WHERE dispatch_id IN (SELECT dispatch_id FROM prune_permits)

-- prune_observations --
DELETE FROM recovery_observations WHERE dispatch_id IN (SELECT dispatch_id FROM prune_permits)

-- prune_uncertain_outcomes --
DELETE FROM uncertain_outcomes
WHERE dispatch_id IN (SELECT dispatch_id FROM prune_permits)

-- prune_recovery_marks --
DELETE FROM recovery_required_marks
WHERE dispatch_id IN (SELECT dispatch_id FROM prune_permits)

-- prune_executions --
DELETE FROM approved_action_dispatch_executions
WHERE dispatch_id IN (SELECT dispatch_id FROM prune_permits)

-- prune_dispatches --
DELETE FROM approved_action_dispatches
WHERE dispatch_id IN (SELECT dispatch_id FROM prune_permits)

-- prune_approvals --
DELETE FROM approval_requests
WHERE approval_request_id IN (SELECT approval_request_id FROM prune_permits)

-- prune_plans --
-- A plan goes with the last request that names it (a rejected one may still name it).
DELETE FROM action_plans
WHERE (project_id, action_ref) IN (SELECT project_id, action_ref FROM prune_permits)
  AND NOT EXISTS (
      SELECT 1 FROM approval_requests AS a
      WHERE a.project_id = action_plans.project_id AND a.action_ref = action_plans.action_ref
  )

-- prune_clear_permits --
DELETE FROM prune_permits

-- prunable_audit_events --
-- Audit records older than the audit cutoff whose subject finished before it (the rule of
-- the delete trigger of migration live_requests: a pending request's audit stays), except
-- those a tool start's audit receipt or barrier names (they are part of a Run's history,
-- which is kept).
FROM security_audit_events AS s
WHERE s.committed_at_ms < :audit_cutoff_ms
  -- The newest record stays, for the same reason as the newest ledger line's tree.
  AND s.event_id < (SELECT max(event_id) FROM security_audit_events)
  AND NOT EXISTS (
      SELECT 1 FROM approval_requests AS a
      WHERE a.approval_request_id = s.subject_id
        AND NOT (
            (a.status IN ('rejected', 'expired') AND a.updated_at_ms < :audit_cutoff_ms)
            OR (a.status IN ('pending', 'approved') AND coalesce(a.db_expires_at_ms, a.expires_at_ms) < :audit_cutoff_ms)
            OR (a.status = 'consumed' AND EXISTS (
                SELECT 1
                FROM approved_action_dispatches AS d
                JOIN approved_action_dispatch_executions AS e ON e.dispatch_id = d.dispatch_id
                WHERE d.approval_request_id = a.approval_request_id
                  AND e.status IN ('blocked', 'cancelled', 'failed', 'succeeded')
                  AND e.updated_at_ms < :audit_cutoff_ms
            ))
        )
  )
  AND NOT EXISTS (
      SELECT 1 FROM approved_action_dispatch_executions AS e
      WHERE e.dispatch_id = s.subject_id
        AND NOT (e.status IN ('blocked', 'cancelled', 'failed', 'succeeded')
                 AND e.updated_at_ms < :audit_cutoff_ms)
  )
  AND NOT EXISTS (SELECT 1 FROM audit_receipts AS r WHERE r.audit_event_id = s.event_id)
  AND NOT EXISTS (
      SELECT 1 FROM tool_execution_start_barriers AS b WHERE b.audit_event_id = s.event_id
  )

-- prune_grant_audit_permit --
INSERT INTO audit_prune_permits (cutoff_ms) VALUES (:audit_cutoff_ms)

-- prune_audit_events --
DELETE FROM security_audit_events
WHERE event_id IN (
    SELECT s.event_id {prunable_audit_events}
    ORDER BY s.committed_at_ms, s.event_id
    LIMIT :limit
)
RETURNING event_id

-- prune_count_audit_events --
SELECT count(*) AS n {prunable_audit_events}

-- prune_clear_audit_permits --
DELETE FROM audit_prune_permits

-- prunable_notification_events --
-- Outbox events older than the cutoff, matched by the deliverer (at or below its watermark),
-- whose every delivery is delivered or dead since before the cutoff; never the newest (its
-- rowid would be reused: migration 0038).
FROM notification_events AS e
WHERE e.at_ms < :cutoff_ms
  AND e.id <= (SELECT w.fanned_out_through FROM notification_deliverer AS w)
  AND e.id < (SELECT max(n.id) FROM notification_events AS n)
  AND NOT EXISTS (
      SELECT 1 FROM notification_deliveries AS d
      WHERE d.event_id = e.id AND (d.status = 'pending' OR d.done_at_ms >= :cutoff_ms)
  )

-- prune_notification_bound --
-- The last of the first `limit` prunable events: one batch is those at or below it.
SELECT max(b.id) AS through FROM (
    SELECT e.id {prunable_notification_events} ORDER BY e.id LIMIT :limit
) AS b

-- prune_notification_attempts --
DELETE FROM notification_attempts
WHERE event_id IN (SELECT e.id {prunable_notification_events} AND e.id <= :through)

-- prune_notification_deliveries --
DELETE FROM notification_deliveries
WHERE event_id IN (SELECT e.id {prunable_notification_events} AND e.id <= :through)
RETURNING event_id

-- prune_notification_fanouts --
DELETE FROM notification_fanouts
WHERE event_id IN (SELECT e.id {prunable_notification_events} AND e.id <= :through)

-- prune_notification_events --
DELETE FROM notification_events
WHERE id IN (SELECT e.id {prunable_notification_events} AND e.id <= :through)
RETURNING id

-- prune_count_notification_events --
SELECT count(*) AS n {prunable_notification_events}

-- prune_count_notification_deliveries --
SELECT count(*) AS n FROM notification_deliveries
WHERE event_id IN (SELECT e.id {prunable_notification_events})
