-- note_subject --
-- Whether a note's subject exists (the request, or the dispatch).
SELECT (EXISTS (SELECT 1 FROM qinglong.approval_requests
                WHERE approval_request_id = :approval_request_id::text)
        OR EXISTS (SELECT 1 FROM qinglong.approved_action_dispatches
                   WHERE dispatch_id = :dispatch_id::text)) AS found

-- insert_note --
-- The principal is the acting one, never a parameter; the guard of migration 0036 holds it
-- and stamps the database's time.
INSERT INTO qinglong.inbox_notes (approval_request_id, dispatch_id, principal, note, written_at_ms)
VALUES (:approval_request_id::text, :dispatch_id::text, qinglong.acting_principal(), :note, 0)
RETURNING note_id, approval_request_id, dispatch_id, principal, note, written_at_ms

-- select_notes --
-- The notes on the requests and dispatches of two JSON arrays of ids, oldest first, read
-- through the two indexes (each id list an array: `IN (SELECT …)` under OR was planned as
-- hashed sub-plans over every note kept).
SELECT note_id, approval_request_id, dispatch_id, principal, note, written_at_ms
FROM qinglong.inbox_notes
WHERE approval_request_id = ANY (ARRAY(SELECT jsonb_array_elements_text(:approval_ids::jsonb)))
   OR dispatch_id = ANY (ARRAY(SELECT jsonb_array_elements_text(:dispatch_ids::jsonb)))
ORDER BY note_id
