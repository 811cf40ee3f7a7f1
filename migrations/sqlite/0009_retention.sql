-- Retention (docs/operations.md): finished dispatch trees and old
-- audit records may be deleted, and only by a prune. Every other DELETE stays refused.
--
-- A prune first writes a permit per dispatch tree it will delete, in its own transaction; the
-- permit's insert trigger admits only a tree whose execution is terminal (succeeded, failed,
-- blocked, cancelled) and became so before the permit's cutoff, a cutoff not in the future on
-- the database clock. Every table of the tree refuses a DELETE of a row no permit names, so a
-- stray `DELETE FROM execution_events` (a bug, a typo in a sqlite3 shell) still aborts, and
-- nothing can delete a pending, leased, retry_wait or executing (recovery_required) row. The
-- prune removes its permits before it commits. On an edge device the file's owner can drop
-- these triggers: the file permissions are the authority there (as for approvals); the
-- triggers hold every program that uses the file as it stands to the rule.
--
-- Amended in place: its comments point at docs/; the SQL is unchanged. A database that
-- applied the earlier text matches this checksum:
-- amends checksum d7a196a5968f6cc80d64b0f9d597020663c531c6e480deb59781a23a5d66f36d

CREATE TABLE prune_permits (
    dispatch_id         TEXT PRIMARY KEY,
    approval_request_id TEXT NOT NULL UNIQUE,
    project_id          TEXT NOT NULL,
    action_ref          TEXT NOT NULL,
    cutoff_ms           INTEGER NOT NULL
) STRICT;

CREATE INDEX prune_permits_plan ON prune_permits (project_id, action_ref);

-- One row per audit prune: audit records committed before its cutoff may be deleted.
CREATE TABLE audit_prune_permits (
    cutoff_ms INTEGER PRIMARY KEY
) STRICT;

-- The prune's scan: terminal rows by the time they became terminal (a terminal row is never
-- updated again, so updated_at_ms is that time). Rows enter it once, when they finish.
CREATE INDEX approved_action_dispatch_executions_finished
    ON approved_action_dispatch_executions (updated_at_ms, dispatch_id)
    WHERE status IN ('blocked', 'cancelled', 'failed', 'succeeded');

CREATE INDEX security_audit_events_committed ON security_audit_events (committed_at_ms);

-- Deleting a plan or an approval checks the rows that reference it (their foreign keys): these
-- two referencing columns had no index, so each delete scanned a whole table.
CREATE INDEX approval_requests_plan ON approval_requests (project_id, action_ref);
CREATE INDEX tool_execution_start_barriers_approval
    ON tool_execution_start_barriers (approval_request_id);

CREATE TRIGGER prune_permits_insert_guard BEFORE INSERT ON prune_permits
WHEN NEW.cutoff_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    OR NOT EXISTS (
        SELECT 1
        FROM approved_action_dispatches AS d
        JOIN approved_action_dispatch_executions AS e ON e.dispatch_id = d.dispatch_id
        WHERE d.dispatch_id = NEW.dispatch_id
          AND d.approval_request_id = NEW.approval_request_id
          AND d.project_id = NEW.project_id AND d.action_ref = NEW.action_ref
          AND (e.status = 'blocked' OR e.status = 'cancelled' OR e.status = 'failed'
               OR e.status = 'succeeded')
          AND e.updated_at_ms < NEW.cutoff_ms
    )
BEGIN
    SELECT RAISE(ABORT, 'prune_permits: only a terminal dispatch tree older than a past cutoff');
END;

CREATE TRIGGER prune_permits_immutable_update BEFORE UPDATE ON prune_permits
BEGIN SELECT RAISE(ABORT, 'prune_permits is immutable'); END;

CREATE TRIGGER audit_prune_permits_insert_guard BEFORE INSERT ON audit_prune_permits
WHEN NEW.cutoff_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
BEGIN SELECT RAISE(ABORT, 'audit_prune_permits: the cutoff may not be in the future'); END;

CREATE TRIGGER audit_prune_permits_immutable_update BEFORE UPDATE ON audit_prune_permits
BEGIN SELECT RAISE(ABORT, 'audit_prune_permits is immutable'); END;

-- The DELETE triggers: the immutable tables keep their message, and the mutable tables of a
-- tree (the execution, its observation, the approval) get one. Conditions are written with
-- = and OR, not IN (…), for the reason migration 0006 gives.
DROP TRIGGER action_plans_immutable_delete;
CREATE TRIGGER action_plans_immutable_delete BEFORE DELETE ON action_plans
WHEN NOT EXISTS (
    SELECT 1 FROM prune_permits AS p
    WHERE p.project_id = OLD.project_id AND p.action_ref = OLD.action_ref
)
BEGIN SELECT RAISE(ABORT, 'action_plans is immutable'); END;

CREATE TRIGGER approval_requests_prune_only BEFORE DELETE ON approval_requests
WHEN NOT EXISTS (
    SELECT 1 FROM prune_permits AS p WHERE p.approval_request_id = OLD.approval_request_id
)
BEGIN SELECT RAISE(ABORT, 'approval_requests: only a prune deletes a request'); END;

DROP TRIGGER approved_action_dispatches_immutable_delete;
CREATE TRIGGER approved_action_dispatches_immutable_delete
BEFORE DELETE ON approved_action_dispatches
WHEN NOT EXISTS (SELECT 1 FROM prune_permits AS p WHERE p.dispatch_id = OLD.dispatch_id)
BEGIN SELECT RAISE(ABORT, 'approved_action_dispatches is immutable'); END;

-- The execution row is checked twice over: a permit, and its own terminal status.
CREATE TRIGGER approved_action_dispatch_executions_prune_only
BEFORE DELETE ON approved_action_dispatch_executions
WHEN NOT (OLD.status = 'blocked' OR OLD.status = 'cancelled' OR OLD.status = 'failed'
          OR OLD.status = 'succeeded')
    OR NOT EXISTS (SELECT 1 FROM prune_permits AS p WHERE p.dispatch_id = OLD.dispatch_id)
BEGIN
    SELECT RAISE(ABORT, 'approved_action_dispatch_executions: only a prune deletes a finished row');
END;

DROP TRIGGER execution_events_immutable_delete;
CREATE TRIGGER execution_events_immutable_delete BEFORE DELETE ON execution_events
WHEN NOT EXISTS (SELECT 1 FROM prune_permits AS p WHERE p.dispatch_id = OLD.dispatch_id)
BEGIN SELECT RAISE(ABORT, 'execution_events is immutable'); END;

DROP TRIGGER approved_run_action_receipts_immutable_delete;
CREATE TRIGGER approved_run_action_receipts_immutable_delete
BEFORE DELETE ON approved_run_action_receipts
WHEN NOT EXISTS (SELECT 1 FROM prune_permits AS p WHERE p.dispatch_id = OLD.dispatch_id)
BEGIN SELECT RAISE(ABORT, 'approved_run_action_receipts is immutable'); END;

DROP TRIGGER recovery_resolutions_immutable_delete;
CREATE TRIGGER recovery_resolutions_immutable_delete BEFORE DELETE ON recovery_resolutions
WHEN NOT EXISTS (SELECT 1 FROM prune_permits AS p WHERE p.dispatch_id = OLD.dispatch_id)
BEGIN SELECT RAISE(ABORT, 'recovery_resolutions is immutable'); END;

CREATE TRIGGER recovery_observations_prune_only BEFORE DELETE ON recovery_observations
WHEN NOT EXISTS (SELECT 1 FROM prune_permits AS p WHERE p.dispatch_id = OLD.dispatch_id)
BEGIN SELECT RAISE(ABORT, 'recovery_observations: only a prune deletes an observation'); END;

DROP TRIGGER security_audit_events_immutable_delete;
CREATE TRIGGER security_audit_events_immutable_delete BEFORE DELETE ON security_audit_events
WHEN NOT EXISTS (
    SELECT 1 FROM audit_prune_permits AS p WHERE OLD.committed_at_ms < p.cutoff_ms
)
BEGIN SELECT RAISE(ABORT, 'security_audit_events is immutable'); END;
