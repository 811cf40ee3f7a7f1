-- Live requests (docs/security.md#one-plan-one-dispatch, docs/operations.md#retention).
--
-- One plan, one dispatch: a plan has at most one request that is pending, approved or
-- consumed, and at most one dispatch, whoever writes the row. A copy of a consumed request
-- inserted past the store (a second request for the same plan) would otherwise be approved
-- and consumed into a second dispatch of the same effect. A rejected or expired request
-- leaves the index, so a new request for its plan may follow it.
--
-- A file holding two such requests for one plan was written past the store: the first
-- statement then fails ("UNIQUE constraint failed") and this migration applies nothing, until
-- the operator has settled them (docs/operations.md#one-request-per-plan).
CREATE UNIQUE INDEX approval_requests_one_live_per_plan
    ON approval_requests (project_id, action_ref)
    WHERE status = 'pending' OR status = 'approved' OR status = 'consumed';

CREATE UNIQUE INDEX approved_action_dispatches_one_per_plan
    ON approved_action_dispatches (project_id, action_ref);

-- The audit of a live subject stays: an audit permit admits an audit row only when its
-- subject, an approval request or a dispatch still stored, finished before the permit's
-- cutoff: a request rejected or expired, or whose lifetime ran out (the database refuses to
-- approve or consume it since), or consumed into a dispatch whose execution is terminal; a
-- dispatch whose execution is terminal. A subject already pruned, or one that is
-- neither, keeps the rule of migration 0009, whose trigger still refuses a row no permit
-- covers. Conditions use = and OR, not IN (…), for the reason migration 0006 gives.
CREATE TRIGGER security_audit_events_subject_finished BEFORE DELETE ON security_audit_events
WHEN EXISTS (
    SELECT 1 FROM audit_prune_permits AS p WHERE OLD.committed_at_ms < p.cutoff_ms
) AND NOT EXISTS (
    SELECT 1 FROM audit_prune_permits AS p
    WHERE OLD.committed_at_ms < p.cutoff_ms
      AND NOT EXISTS (
          SELECT 1 FROM approval_requests AS a
          WHERE a.approval_request_id = OLD.subject_id
            AND NOT (
                ((a.status = 'rejected' OR a.status = 'expired') AND a.updated_at_ms < p.cutoff_ms)
                OR ((a.status = 'pending' OR a.status = 'approved')
                    AND coalesce(a.db_expires_at_ms, a.expires_at_ms) < p.cutoff_ms)
                OR (a.status = 'consumed' AND EXISTS (
                    SELECT 1
                    FROM approved_action_dispatches AS d
                    JOIN approved_action_dispatch_executions AS e
                        ON e.dispatch_id = d.dispatch_id
                    WHERE d.approval_request_id = a.approval_request_id
                      AND (e.status = 'blocked' OR e.status = 'cancelled'
                           OR e.status = 'failed' OR e.status = 'succeeded')
                      AND e.updated_at_ms < p.cutoff_ms
                ))
            )
      )
      AND NOT EXISTS (
          SELECT 1 FROM approved_action_dispatch_executions AS e
          WHERE e.dispatch_id = OLD.subject_id
            AND NOT ((e.status = 'blocked' OR e.status = 'cancelled' OR e.status = 'failed'
                      OR e.status = 'succeeded')
                     AND e.updated_at_ms < p.cutoff_ms)
      )
)
BEGIN
    SELECT RAISE(ABORT, 'security_audit_events: the audit of a live subject stays');
END;
