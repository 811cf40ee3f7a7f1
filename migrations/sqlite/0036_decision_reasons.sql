-- Decided approvals show why (docs/api.md, decision 0047): the comment
-- an approve, reject or settle carried is one printable line kept in the write's own audit
-- row, and one status's page of `approval list --status S` reads that status alone. (The
-- store file's permissions are the authority on who reads the votes and the audit table.)
ALTER TABLE security_audit_events ADD COLUMN comment TEXT
    CONSTRAINT security_audit_events_comment_line CHECK (
        comment IS NULL OR (length(comment) BETWEEN 1 AND 500 AND comment NOT GLOB '*[' || char(1) || '-' || char(31) || char(127) || ']*')
    );

CREATE INDEX approval_requests_by_status
    ON approval_requests (status, created_at_ms DESC, approval_request_id DESC);
