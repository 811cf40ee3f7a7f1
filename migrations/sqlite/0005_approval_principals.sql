-- Approvals by authenticated principals: the OS user that created, decided
-- and consumed each request is stored beside the free-text labels; triggers allow exactly the
-- transitions of domain/approvals.py and audit every state change. Separation of duties is
-- the store's (QINGLONG_SELF_APPROVAL): SQLite has no session identity to compare.
--
-- Amended in place: its comments point at docs/; the SQL is unchanged. A database that
-- applied the earlier text matches this checksum:
-- amends checksum 0118d79573b7fe692d74a1b174a92ef4883943c5c5c23716c887b1d328f3eb83

-- SQLite adds a NOT NULL column only with a default. It is '' and never a principal: the
-- rows older than this migration are backfilled to 'unknown' below, and the insert trigger
-- refuses '', so every new row names its principal.
ALTER TABLE approval_requests ADD COLUMN requested_principal TEXT NOT NULL DEFAULT '';
ALTER TABLE approval_requests ADD COLUMN decided_principal TEXT;
ALTER TABLE approval_requests ADD COLUMN consumed_principal TEXT;
UPDATE approval_requests SET requested_principal = 'unknown';
UPDATE approval_requests SET decided_principal = 'unknown' WHERE status <> 'pending';
UPDATE approval_requests SET consumed_principal = 'unknown' WHERE status = 'consumed';

CREATE TRIGGER approval_requests_insert_guard BEFORE INSERT ON approval_requests
WHEN NEW.status IS NOT 'pending' OR NEW.version IS NOT 1 OR NEW.requested_principal = ''
    OR NEW.decided_by IS NOT NULL OR NEW.decided_principal IS NOT NULL
    OR NEW.consumed_principal IS NOT NULL OR NEW.consumed_at_ms IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'approval_requests: a request starts pending@v1, undecided, with its principal');
END;

CREATE TRIGGER approval_requests_update_guard BEFORE UPDATE ON approval_requests
WHEN OLD.status IN ('consumed', 'rejected', 'expired')
    OR NEW.approval_request_id IS NOT OLD.approval_request_id
    OR NEW.project_id IS NOT OLD.project_id OR NEW.action_type IS NOT OLD.action_type
    OR NEW.action_ref IS NOT OLD.action_ref OR NEW.action_digest IS NOT OLD.action_digest
    OR NEW.requested_by IS NOT OLD.requested_by
    OR NEW.requested_principal IS NOT OLD.requested_principal
    OR NEW.expires_at_ms IS NOT OLD.expires_at_ms OR NEW.created_at_ms IS NOT OLD.created_at_ms
    OR NOT (
        (OLD.status = 'pending' AND NEW.status IN ('approved', 'rejected', 'expired')
            AND NEW.version = 2 AND NEW.decided_by IS NOT NULL
            AND NEW.decided_principal IS NOT NULL AND NEW.decided_principal <> ''
            AND NEW.consumed_principal IS NULL AND NEW.consumed_at_ms IS NULL)
        OR (OLD.status = 'approved' AND NEW.status = 'consumed' AND NEW.version = 3
            AND NEW.consumed_at_ms IS NOT NULL
            AND NEW.consumed_principal IS NOT NULL AND NEW.consumed_principal <> ''
            AND NEW.decided_by IS OLD.decided_by
            AND NEW.decided_principal IS OLD.decided_principal)
    )
BEGIN
    SELECT RAISE(ABORT, 'approval_requests: not a permitted change of the request');
END;

-- One audit record per state change, in the same transaction, on the database clock.
CREATE TRIGGER approval_requests_audit_insert AFTER INSERT ON approval_requests
BEGIN
    INSERT INTO security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
    ) VALUES (
        'approval.created', NEW.requested_by, NEW.requested_principal, NEW.project_id,
        NEW.approval_request_id, NEW.action_type,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    );
END;

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
             WHEN NEW.decided_principal = NEW.requested_principal THEN 'by_requester'
             ELSE 'by_other' END,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    );
END;

-- A dispatch exists only for its consumed approval, binding the same action and approver.
CREATE TRIGGER approved_action_dispatches_insert_guard BEFORE INSERT ON approved_action_dispatches
WHEN NOT EXISTS (
    SELECT 1 FROM approval_requests AS a
    WHERE a.approval_request_id = NEW.approval_request_id AND a.status = 'consumed'
      AND a.project_id = NEW.project_id AND a.action_type = NEW.action_type
      AND a.action_ref = NEW.action_ref AND a.action_digest = NEW.action_digest
      AND a.decided_by = NEW.approved_by
)
BEGIN
    SELECT RAISE(ABORT, 'approved_action_dispatches: needs its consumed approval, same action');
END;
