-- The receipt of an action whose effect is outside the database (docs/actions.md): what the
-- downstream system answered (a status, selected headers, digests; never a body or a secret),
-- as canonical JSON with its domain-separated digest, written by the completion itself.
-- It lives in the execution row, so it is settled, frozen and pruned with it: it may be
-- written only by the move executing → succeeded | failed, which only the lease holder's
-- proof makes (migration 0011); never before, never changed after. The operator's column
-- grants leave it out, so a recovery resolution cannot write one. The database checks the
-- digest itself: a receipt is exactly the JSON its digest names.

ALTER TABLE qinglong.approved_action_dispatch_executions
    ADD COLUMN result_receipt_json TEXT
        CHECK (result_receipt_json IS NULL OR octet_length(result_receipt_json) <= 16384),
    ADD COLUMN result_receipt_digest TEXT
        CHECK (result_receipt_digest IS NULL OR length(result_receipt_digest) = 64);

CREATE FUNCTION qinglong.guard_execution_receipt() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.result_receipt_json IS NOT NULL OR NEW.result_receipt_digest IS NOT NULL THEN
            RAISE EXCEPTION 'qinglong:transition_refused: receipt (→ %)', NEW.status
                USING ERRCODE = 'QLT01';
        END IF;
        RETURN NEW;
    END IF;
    IF (NEW.result_receipt_json, NEW.result_receipt_digest)
            IS NOT DISTINCT FROM (OLD.result_receipt_json, OLD.result_receipt_digest) THEN
        RETURN NEW;
    END IF;
    IF NOT (OLD.status = 'executing' AND NEW.status IN ('succeeded', 'failed')
            AND OLD.result_receipt_json IS NULL AND OLD.result_receipt_digest IS NULL)
            OR NEW.result_receipt_json IS NULL OR NEW.result_receipt_digest IS NULL
            OR NEW.result_receipt_digest IS DISTINCT FROM pg_catalog.encode(pg_catalog.sha256(
                pg_catalog.convert_to('qinglong/action-receipt@v1', 'UTF8')
                OPERATOR(pg_catalog.||) '\x00'::pg_catalog.bytea
                OPERATOR(pg_catalog.||) pg_catalog.convert_to(NEW.result_receipt_json, 'UTF8')),
                'hex') THEN
        RAISE EXCEPTION 'qinglong:transition_refused: receipt (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION qinglong.guard_execution_receipt() FROM PUBLIC;

CREATE TRIGGER approved_action_dispatch_executions_receipt
    BEFORE INSERT OR UPDATE ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_execution_receipt();
