-- Approval expiry (docs/state-machine.md): a pending request whose lifetime ran out becomes
-- `expired`, an outcome rather than a request nobody can use. `pending → expired` only once
-- the request's `db_expires_at_ms` has passed on the database's clock; `expired` is terminal
-- as before (approval_requests_update_guard). Its audit row `approval.expired` says why
-- (`detail_code` `db_clock`), not by whom.

CREATE TRIGGER approval_requests_expiry_guard BEFORE UPDATE ON approval_requests
WHEN NEW.status = 'expired' AND OLD.status IS NOT 'expired'
    AND CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
        < coalesce(OLD.db_expires_at_ms, OLD.expires_at_ms)
BEGIN
    SELECT RAISE(ABORT, 'approval_requests: a request expires only once the database clock says so');
END;

DROP TRIGGER approval_requests_audit_update;
CREATE TRIGGER approval_requests_audit_update AFTER UPDATE ON approval_requests
WHEN NEW.status IS NOT OLD.status
BEGIN
    INSERT INTO security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
    ) VALUES (
        'approval.' || NEW.status,
        -- Consuming carries no label: the principal is the actor.
        CASE WHEN NEW.status = 'consumed' THEN NEW.consumed_principal ELSE NEW.decided_by END,
        CASE WHEN NEW.status = 'consumed' THEN NEW.consumed_principal
             ELSE NEW.decided_principal END,
        NEW.project_id, NEW.approval_request_id,
        CASE WHEN NEW.status = 'consumed' THEN NEW.action_type
             WHEN NEW.status = 'expired' THEN 'db_clock'
             WHEN NEW.decided_principal = NEW.requested_principal THEN 'by_requester'
             ELSE 'by_other' END,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    );
END;
