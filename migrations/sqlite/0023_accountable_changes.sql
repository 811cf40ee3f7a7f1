-- Accountable changes: the shape of history an edge file keeps (docs/security.md). The
-- file's owner is the runtime and the operator at once, and can rewrite the file; what these
-- rules keep is that no path of the product, and no careless `sqlite3` session, records a
-- change nobody answers for:
-- 1. a leased row is due exactly when its lease expires (never due under a live lease);
-- 2. a waiting row is blocked only once its budget is spent, with the product's code
--    `attempts_exhausted`;
-- 3. a cancel, and a settlement by a manual resolution, need their audit row for this
--    dispatch and this change, written first (SQLite has no transaction identity to bind
--    them to: PostgreSQL also binds the principal and the transaction);
-- 4. the dispatcher's Run of a dispatch (trigger type `approved_action`, its idempotency key
--    the dispatch id) is written only while that dispatch is held (leased, executing, or
--    succeeded by the same transaction), as a receipt only for a started row (migration 0011).
-- The lease proof columns of Runs and receipts exist for parity with PostgreSQL, where they
-- fence other logins out; one daemon owns this file, so SQLite stores no proof.

ALTER TABLE runs ADD COLUMN lease_proof TEXT CHECK (lease_proof IS NULL);
ALTER TABLE approved_run_action_receipts
    ADD COLUMN lease_proof TEXT CHECK (lease_proof IS NULL);

CREATE TRIGGER approved_action_dispatch_executions_lease_due_guard
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN NEW.status = 'leased' AND (NEW.lease_expires_at_ms IS NULL
    OR NEW.eligible_at_ms IS NOT NEW.lease_expires_at_ms)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:transition_refused: due');
END;

CREATE TRIGGER approved_action_dispatch_executions_exhaust_guard
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN NEW.status = 'blocked' AND (OLD.status = 'pending' OR OLD.status = 'retry_wait')
    AND (OLD.attempt < OLD.max_attempts OR NEW.result_code IS NOT 'attempts_exhausted')
BEGIN
    SELECT RAISE(ABORT, 'qinglong:transition_refused: blocked');
END;

CREATE TRIGGER approved_action_dispatch_executions_cancel_audited
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN NEW.status = 'cancelled' AND (OLD.status = 'pending' OR OLD.status = 'retry_wait')
    AND NOT EXISTS (
    SELECT 1 FROM security_audit_events AS a
    WHERE a.subject_id = OLD.dispatch_id AND a.kind = 'dispatch.cancelled'
      AND a.detail_code = substr(OLD.status || ':' || coalesce(NEW.result_code, ''), 1, 128)
)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:transition_refused: unaudited');
END;

CREATE TRIGGER approved_action_dispatch_executions_manual_audited
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN OLD.status = 'executing'
    AND (NEW.status = 'succeeded' OR NEW.status = 'failed' OR NEW.status = 'blocked')
    AND EXISTS (
        SELECT 1 FROM recovery_resolutions AS r
        WHERE r.dispatch_id = OLD.dispatch_id AND r.source = 'manual')
    AND NOT EXISTS (
        SELECT 1 FROM security_audit_events AS a
        WHERE a.subject_id = OLD.dispatch_id AND a.kind = 'recovery.manual_resolution'
          AND a.detail_code = substr(NEW.status || ':' || coalesce(NEW.result_code, ''), 1, 128))
BEGIN
    SELECT RAISE(ABORT, 'qinglong:transition_refused: unaudited');
END;

CREATE TRIGGER runs_held_guard BEFORE INSERT ON runs
WHEN NEW.trigger_type = 'approved_action'
    AND EXISTS (SELECT 1 FROM approved_action_dispatches AS d WHERE d.dispatch_id = NEW.idempotency_key)
    AND NOT EXISTS (
        SELECT 1 FROM approved_action_dispatch_executions AS e
        WHERE e.dispatch_id = NEW.idempotency_key
          AND (e.status = 'leased' OR e.status = 'executing' OR e.status = 'succeeded'))
BEGIN
    SELECT RAISE(ABORT, 'runs: a Run of a dispatch is written while the dispatch is held');
END;
