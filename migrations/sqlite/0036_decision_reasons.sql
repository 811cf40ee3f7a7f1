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

-- A note per inbox row (docs/ui.md): appended, never changed, naming the principal the store
-- acts as (the API's authenticated one; the file's owner is the authority on an edge device).
-- It goes with its request or dispatch when a prune removes those.
CREATE TABLE inbox_notes (
    note_id INTEGER PRIMARY KEY AUTOINCREMENT,
    approval_request_id TEXT
        REFERENCES approval_requests (approval_request_id) ON DELETE CASCADE,
    dispatch_id TEXT REFERENCES approved_action_dispatches (dispatch_id) ON DELETE CASCADE,
    principal TEXT NOT NULL CHECK (length(principal) BETWEEN 1 AND 200),
    note TEXT NOT NULL CONSTRAINT inbox_notes_note_line CHECK (
        length(note) BETWEEN 1 AND 500
        AND note NOT GLOB '*[' || char(1) || '-' || char(31) || char(127) || ']*'
    ),
    written_at_ms INTEGER NOT NULL,
    CONSTRAINT inbox_notes_one_subject CHECK (
        (approval_request_id IS NULL) <> (dispatch_id IS NULL)
    )
);
CREATE INDEX inbox_notes_approval ON inbox_notes (approval_request_id)
    WHERE approval_request_id IS NOT NULL;
CREATE INDEX inbox_notes_dispatch ON inbox_notes (dispatch_id) WHERE dispatch_id IS NOT NULL;

CREATE TRIGGER inbox_notes_immutable BEFORE UPDATE ON inbox_notes
BEGIN SELECT RAISE(ABORT, 'inbox_notes is immutable'); END;
