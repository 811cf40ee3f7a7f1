-- The shape of history held by the file itself (docs/security.md). The file's owner can
-- always rewrite the file; what these rules keep is that no path of the product, and no
-- careless hand with the sqlite3 shell, records a history that did not happen:
-- the execution ledger is written by the database from the transitions themselves; approvals
-- expire on the database clock within a bounded lifetime; resolutions, receipts and Runs only
-- for the row, fence and identity they belong to. The lease proof columns exist for parity
-- with PostgreSQL, where the fence is enforced against other logins; on an edge device one
-- daemon owns the file and the OS user is the authority, so SQLite stores no proof.

ALTER TABLE approved_action_dispatch_executions ADD COLUMN lease_proof_digest TEXT;
ALTER TABLE approved_action_dispatch_executions
    ADD COLUMN lease_proof TEXT CHECK (lease_proof IS NULL);
ALTER TABLE approval_requests ADD COLUMN db_expires_at_ms INTEGER;

-- The ledger: one line per status change or claim (a renew changes neither and writes none).
-- A mutation id only where the statement set a new one; a result code only on rows that
-- leave the lease behind.
CREATE TRIGGER approved_action_dispatch_executions_ledger_insert
AFTER INSERT ON approved_action_dispatch_executions
BEGIN
    INSERT INTO execution_events (
        dispatch_id, version, from_status, to_status, attempt, lease_owner, lease_token,
        mutation_id, result_code, committed_at_ms
    ) VALUES (
        NEW.dispatch_id, NEW.version, NULL, NEW.status, NEW.attempt, NULL, NULL, NULL, NULL,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    );
END;

CREATE TRIGGER approved_action_dispatch_executions_ledger_update
AFTER UPDATE ON approved_action_dispatch_executions
WHEN NEW.status IS NOT OLD.status OR NEW.attempt IS NOT OLD.attempt
BEGIN
    INSERT INTO execution_events (
        dispatch_id, version, from_status, to_status, attempt, lease_owner, lease_token,
        mutation_id, result_code, committed_at_ms
    ) VALUES (
        NEW.dispatch_id, NEW.version, OLD.status, NEW.status, NEW.attempt, NEW.lease_owner,
        NEW.lease_token,
        CASE WHEN NEW.result_mutation_id IS NOT OLD.result_mutation_id
             THEN NEW.result_mutation_id END,
        CASE WHEN NEW.status <> 'leased' AND NEW.status <> 'executing' THEN NEW.result_code END,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    );
END;

-- Any other ledger line must at least describe the row as it now is.
CREATE TRIGGER execution_events_insert_guard BEFORE INSERT ON execution_events
WHEN NOT EXISTS (
    SELECT 1 FROM approved_action_dispatch_executions AS e
    WHERE e.dispatch_id = NEW.dispatch_id AND e.version = NEW.version
      AND e.status = NEW.to_status AND e.attempt = NEW.attempt
      AND e.lease_owner IS NEW.lease_owner AND e.lease_token IS NEW.lease_token
)
BEGIN
    SELECT RAISE(ABORT, 'execution_events: a ledger line records the row''s own change');
END;

-- Approvals: a lifetime of at most 30 days, counted on the database clock from creation.
CREATE TRIGGER approval_requests_lifetime_guard BEFORE INSERT ON approval_requests
WHEN NEW.expires_at_ms - NEW.created_at_ms <= 0
    OR NEW.expires_at_ms - NEW.created_at_ms > 2592000000
    OR NEW.db_expires_at_ms IS NULL
    OR NEW.db_expires_at_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
        + (NEW.expires_at_ms - NEW.created_at_ms)
BEGIN
    SELECT RAISE(ABORT, 'approval_requests: a lifetime of more than 0 s and at most 30 days');
END;

CREATE TRIGGER approval_requests_clock_guard BEFORE UPDATE ON approval_requests
WHEN NEW.db_expires_at_ms IS NOT OLD.db_expires_at_ms
    OR ((NEW.status = 'approved' OR NEW.status = 'consumed') AND NEW.status IS NOT OLD.status
        AND CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
            >= coalesce(OLD.db_expires_at_ms, OLD.expires_at_ms))
BEGIN
    SELECT RAISE(ABORT, 'qinglong:approval_expired: the database clock says so');
END;

-- A resolution settles only a started row whose lease expired, for its exact fence.
CREATE TRIGGER recovery_resolutions_fence_guard BEFORE INSERT ON recovery_resolutions
WHEN NOT EXISTS (
    SELECT 1 FROM approved_action_dispatch_executions AS e
    WHERE e.dispatch_id = NEW.dispatch_id AND e.status = 'executing'
      AND e.attempt = NEW.execution_attempt AND e.version = NEW.execution_version
      AND e.lease_owner = NEW.lease_owner AND e.lease_token = NEW.lease_token
      AND e.started_at_ms = NEW.started_at_ms
      AND e.lease_expires_at_ms <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
)
BEGIN
    SELECT RAISE(ABORT, 'recovery_resolutions: names its expired started execution''s fence');
END;

-- An executing row reaches a terminal state only by a completion or a resolution, each of
-- which names its own new mutation: a bare `UPDATE … SET status` is refused.
CREATE TRIGGER approved_action_dispatch_executions_settle_guard
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN OLD.status = 'executing'
    AND (NEW.status = 'succeeded' OR NEW.status = 'failed' OR NEW.status = 'blocked')
    AND NEW.result_mutation_id IS OLD.result_mutation_id
BEGIN
    SELECT RAISE(ABORT, 'qinglong:transition_refused: settle');
END;

-- A receipt binds its started execution and the Run its dispatch created.
CREATE TRIGGER approved_run_action_receipts_guard BEFORE INSERT ON approved_run_action_receipts
WHEN NOT EXISTS (
    SELECT 1
    FROM approved_action_dispatch_executions AS e
    JOIN approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
    JOIN runs AS r ON r.run_id = NEW.resource_id
    WHERE e.dispatch_id = NEW.dispatch_id
      AND (e.status = 'executing' OR e.status = 'succeeded')
      AND e.attempt = NEW.execution_attempt AND e.started_at_ms = NEW.started_at_ms
      AND d.approval_request_id = NEW.approval_request_id
      AND d.project_id = NEW.project_id AND d.action_type = NEW.action_type
      AND d.action_digest = NEW.action_digest
      AND r.project_id = NEW.project_id AND r.idempotency_key = NEW.idempotency_key
      AND r.idempotency_key = NEW.dispatch_id AND r.request_id IS NEW.approval_request_id
)
BEGIN
    SELECT RAISE(ABORT, 'approved_run_action_receipts: binds its started execution and Run');
END;

-- A Run's identity never changes.
CREATE TRIGGER runs_identity BEFORE UPDATE ON runs
WHEN NEW.run_id IS NOT OLD.run_id OR NEW.project_id IS NOT OLD.project_id
    OR NEW.task_id IS NOT OLD.task_id OR NEW.task_revision IS NOT OLD.task_revision
    OR NEW.executor_type IS NOT OLD.executor_type OR NEW.priority IS NOT OLD.priority
    OR NEW.task_name IS NOT OLD.task_name OR NEW.task_snapshot_ref IS NOT OLD.task_snapshot_ref
    OR NEW.input_ref IS NOT OLD.input_ref OR NEW.trigger_type IS NOT OLD.trigger_type
    OR NEW.execution_origin IS NOT OLD.execution_origin
    OR NEW.execution_owner IS NOT OLD.execution_owner OR NEW.request_id IS NOT OLD.request_id
    OR NEW.idempotency_key IS NOT OLD.idempotency_key
    OR NEW.accepted_at_ms IS NOT OLD.accepted_at_ms OR NEW.created_at_ms IS NOT OLD.created_at_ms
BEGIN
    SELECT RAISE(ABORT, 'runs: the identity of a Run never changes');
END;
