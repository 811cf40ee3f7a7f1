-- The operator's console (docs/cli.md, decisions 0047 and 0048).
--
-- 1. A decision's comment from the command line travels in the deciding update
-- (`approval_requests.decision_comment`), set with the move from `pending` to `approved` or
-- `rejected` and never after, one printable line of at most 500 characters; the audit
-- trigger copies it into the decision's `approval.*` row.
ALTER TABLE approval_requests ADD COLUMN decision_comment TEXT
    CONSTRAINT approval_requests_decision_comment_line CHECK (
        decision_comment IS NULL OR (length(decision_comment) BETWEEN 1 AND 500 AND decision_comment NOT GLOB '*[' || char(1) || '-' || char(31) || char(127) || ']*')
    );

CREATE TRIGGER approval_requests_decision_comment_new BEFORE INSERT ON approval_requests
WHEN NEW.decision_comment IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'qinglong:comment_refused: a decision''s comment is written with the decision, never after');
END;

CREATE TRIGGER approval_requests_decision_comment BEFORE UPDATE ON approval_requests
WHEN NEW.decision_comment IS NOT OLD.decision_comment
    AND (OLD.status IS NOT 'pending' OR NEW.status NOT IN ('approved', 'rejected'))
BEGIN
    SELECT RAISE(ABORT, 'qinglong:comment_refused: a decision''s comment is written with the decision, never after');
END;

DROP TRIGGER approval_requests_audit_update;
CREATE TRIGGER approval_requests_audit_update AFTER UPDATE ON approval_requests
WHEN NEW.status IS NOT OLD.status
BEGIN
    INSERT INTO security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, comment, committed_at_ms
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
        CASE WHEN NEW.status IN ('approved', 'rejected') THEN NEW.decision_comment END,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    );
END;

-- 2. A request made again (decision 0048) names what it was made from
-- (`resubmitted_from`): the failed, blocked or cancelled dispatch, or the expired request, of
-- its own project and action type, checked when the request is written; never changed.
ALTER TABLE approval_requests ADD COLUMN resubmitted_from TEXT;
CREATE INDEX approval_requests_resubmitted_from ON approval_requests (resubmitted_from)
    WHERE resubmitted_from IS NOT NULL;

CREATE TRIGGER approval_requests_resubmitted_from_new BEFORE INSERT ON approval_requests
WHEN NEW.resubmitted_from IS NOT NULL
    AND NOT EXISTS (
        SELECT 1 FROM approved_action_dispatches AS d
        JOIN approved_action_dispatch_executions AS e ON e.dispatch_id = d.dispatch_id
        WHERE d.dispatch_id = NEW.resubmitted_from
          AND e.status IN ('failed', 'blocked', 'cancelled')
          AND d.project_id = NEW.project_id AND d.action_type = NEW.action_type)
    AND NOT EXISTS (
        SELECT 1 FROM approval_requests AS a
        WHERE a.approval_request_id = NEW.resubmitted_from AND a.status = 'expired'
          AND a.project_id = NEW.project_id AND a.action_type = NEW.action_type)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:resubmit_refused: a request is made again only from a failed, blocked or cancelled dispatch or an expired request of its project and action type');
END;

CREATE TRIGGER approval_requests_resubmitted_from BEFORE UPDATE ON approval_requests
WHEN NEW.resubmitted_from IS NOT OLD.resubmitted_from
BEGIN
    SELECT RAISE(ABORT, 'qinglong:resubmit_refused: what a request was made again from never changes');
END;
