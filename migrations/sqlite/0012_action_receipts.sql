-- The receipt of an action whose effect is outside the database (docs/actions.md): what the
-- downstream system answered (a status, selected headers, digests; never a body or a secret),
-- as canonical JSON with its domain-separated digest, written by the completion itself.
-- It lives in the execution row, so it is settled, frozen and pruned with it: it may be
-- written only by the move executing → succeeded | failed (which only the lease holder
-- makes), never before, never changed after, and never by a recovery resolution.

ALTER TABLE approved_action_dispatch_executions ADD COLUMN result_receipt_json TEXT
    CHECK (result_receipt_json IS NULL OR length(CAST(result_receipt_json AS BLOB)) <= 16384);
ALTER TABLE approved_action_dispatch_executions ADD COLUMN result_receipt_digest TEXT
    CHECK (result_receipt_digest IS NULL OR length(result_receipt_digest) = 64);

CREATE TRIGGER approved_action_dispatch_executions_receipt_insert
BEFORE INSERT ON approved_action_dispatch_executions
WHEN NEW.result_receipt_json IS NOT NULL OR NEW.result_receipt_digest IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'qinglong:transition_refused: receipt');
END;

CREATE TRIGGER approved_action_dispatch_executions_receipt_update
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN (NEW.result_receipt_json IS NOT OLD.result_receipt_json
        OR NEW.result_receipt_digest IS NOT OLD.result_receipt_digest)
    AND NOT (OLD.status = 'executing' AND (NEW.status = 'succeeded' OR NEW.status = 'failed')
             AND OLD.result_receipt_json IS NULL
             AND (NEW.result_receipt_json IS NULL) = (NEW.result_receipt_digest IS NULL))
BEGIN
    SELECT RAISE(ABORT, 'qinglong:transition_refused: receipt');
END;
