-- note_subject --
-- Whether a note's subject exists (the request, or the dispatch).
SELECT (EXISTS (SELECT 1 FROM approval_requests
                WHERE approval_request_id = :approval_request_id)
        OR EXISTS (SELECT 1 FROM approved_action_dispatches
                   WHERE dispatch_id = :dispatch_id)) AS found

-- insert_note --
-- The store names its principal (the API's authenticated one, or the OS user).
INSERT INTO inbox_notes (approval_request_id, dispatch_id, principal, note, written_at_ms)
VALUES (:approval_request_id, :dispatch_id, :principal, :note,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
RETURNING note_id, approval_request_id, dispatch_id, principal, note, written_at_ms

-- select_notes --
-- The notes on the requests and dispatches of two JSON arrays of ids, oldest first.
SELECT note_id, approval_request_id, dispatch_id, principal, note, written_at_ms
FROM inbox_notes
WHERE approval_request_id IN (SELECT value FROM json_each(:approval_ids))
   OR dispatch_id IN (SELECT value FROM json_each(:dispatch_ids))
ORDER BY note_id
