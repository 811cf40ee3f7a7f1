-- Checks asked only where they can refuse (decision 0057,
-- docs/performance.md#what-bounds-the-targets-not-met), in schema qinglong. Every rule stays
-- as it was; what changes is how often a row pays for asking it. Each row of a `run.create`
-- passage paid for two guards that could not refuse it, for asking who acts for nothing, for
-- asking whether anyone hears its outcome, and for reading its execution twice.
-- 1. The accountability guard (migration 0023) refuses only a leased row's due time, a block
--    of a waiting or leased row, a cancel and the settling of a started row. Its WHEN clause
--    now names those moves, so every other move (a passage, a claim's renewal, a start) skips
--    the call and the acting-role lookup it made before returning.
-- 2. The action-receipt guard (migration 0012) refuses only a receipt written on an insert or
--    changed on an update: its WHEN clauses say so, one trigger per event (the insert's is
--    named to keep its place in the alphabetical order of the insert's triggers).
-- 3. A receipt's two guards are one function: the binding (QLI01, first, as before) and the
--    holder's proof (QLF01) read the same execution row, now in one query. The Run's holder
--    guard reads its dispatch and that dispatch's execution in one query too.
-- 4. An execution's outcome is told once per statement, not once per row: a page's completion
--    asks once whether anyone hears `dispatch.*`, and when someone does, writes every row's
--    event from the statement's transition tables (those the ledger trigger already keeps).

-- -- 1. the accountability guard --------------------------------------------------------------

DROP TRIGGER approved_action_dispatch_executions_accountable
    ON qinglong.approved_action_dispatch_executions;
-- Still named to run before the receipt and state-machine triggers, which clear the proof
-- the function reads.
CREATE TRIGGER approved_action_dispatch_executions_accountable
    BEFORE UPDATE ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW WHEN (NEW.status = 'leased'
        OR (NEW.status IS DISTINCT FROM OLD.status
            AND (NEW.status = 'cancelled'
                 OR (NEW.status = 'blocked' AND OLD.status IN ('pending', 'retry_wait', 'leased'))
                 OR (OLD.status = 'executing'
                     AND NEW.status IN ('blocked', 'succeeded', 'failed')))))
    EXECUTE FUNCTION qinglong.guard_execution_accountable();

-- -- 2. the action-receipt guard --------------------------------------------------------------

DROP TRIGGER approved_action_dispatch_executions_receipt
    ON qinglong.approved_action_dispatch_executions;
CREATE TRIGGER approved_action_dispatch_executions_receipt
    BEFORE UPDATE ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW WHEN ((NEW.result_receipt_json, NEW.result_receipt_digest)
                       IS DISTINCT FROM (OLD.result_receipt_json, OLD.result_receipt_digest))
    EXECUTE FUNCTION qinglong.guard_execution_receipt();
CREATE TRIGGER approved_action_dispatch_executions_receipt_insert
    BEFORE INSERT ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW WHEN (NEW.result_receipt_json IS NOT NULL
                       OR NEW.result_receipt_digest IS NOT NULL)
    EXECUTE FUNCTION qinglong.guard_execution_receipt();

-- -- 3. a receipt's guards and the Run's holder guard, one query each ------------------------

-- A receipt binds the started execution it belongs to (executing, or succeeded by the very
-- statement that writes the receipt) and the Run its dispatch created (QLI01); it presents
-- the proof of that execution's holder (QLF01), which is never stored.
CREATE OR REPLACE FUNCTION qinglong.guard_receipt() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    held pg_catalog.text;
BEGIN
    SELECT e.lease_proof_digest INTO held
    FROM qinglong.approved_action_dispatch_executions AS e
    JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
    JOIN qinglong.runs AS r ON r.run_id = NEW.resource_id
    WHERE e.dispatch_id = NEW.dispatch_id AND e.status IN ('executing', 'succeeded')
      AND e.attempt = NEW.execution_attempt AND e.started_at_ms = NEW.started_at_ms
      AND d.approval_request_id = NEW.approval_request_id
      AND d.project_id = NEW.project_id AND d.action_type = NEW.action_type
      AND d.action_digest = NEW.action_digest
      AND r.project_id = NEW.project_id AND r.idempotency_key = NEW.idempotency_key
      AND r.idempotency_key = NEW.dispatch_id
      AND r.request_id IS NOT DISTINCT FROM NEW.approval_request_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'a receipt binds its started execution and its dispatch''s Run'
            USING ERRCODE = 'QLI01';
    END IF;
    IF NEW.lease_proof IS NULL OR held IS DISTINCT FROM pg_catalog.encode(pg_catalog.sha256(
            pg_catalog.convert_to(NEW.lease_proof, 'UTF8')), 'hex') THEN
        RAISE EXCEPTION 'qinglong:fence_refused: a receipt presents its holder''s proof'
            USING ERRCODE = 'QLF01';
    END IF;
    NEW.lease_proof := NULL;
    RETURN NEW;
END
$$;

DROP TRIGGER approved_run_action_receipts_holder_proof ON qinglong.approved_run_action_receipts;
DROP FUNCTION qinglong.guard_receipt_holder();

-- The dispatcher's Run of a dispatch is written only under that dispatch's lease (migration
-- 0023): its dispatch and the execution holding it, read together.
CREATE OR REPLACE FUNCTION qinglong.guard_run_holder() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    held pg_catalog.text;
BEGIN
    IF NEW.trigger_type = 'approved_action' THEN
        SELECT e.lease_proof_digest INTO held
        FROM qinglong.approved_action_dispatches AS d
        LEFT JOIN qinglong.approved_action_dispatch_executions AS e
          ON e.dispatch_id = d.dispatch_id AND e.status IN ('leased', 'executing', 'succeeded')
        WHERE d.dispatch_id = NEW.idempotency_key;
        IF FOUND AND (NEW.lease_proof IS NULL OR held IS DISTINCT FROM pg_catalog.encode(
                pg_catalog.sha256(pg_catalog.convert_to(NEW.lease_proof, 'UTF8')), 'hex')) THEN
            RAISE EXCEPTION
                'qinglong:fence_refused: a Run of a dispatch presents its holder''s proof'
                USING ERRCODE = 'QLF01';
        END IF;
    END IF;
    NEW.lease_proof := NULL;
    RETURN NEW;
END
$$;

-- -- 4. an execution's outcome, told once per statement ---------------------------------------

DROP TRIGGER approved_action_dispatch_executions_tell
    ON qinglong.approved_action_dispatch_executions;

-- A terminal outcome but a cancel (an operator's own act, audited already), built only when
-- someone hears its kind (migration 0042).
CREATE OR REPLACE FUNCTION qinglong.tell_execution_outcome() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM qinglong.notification_subscriptions AS s
                   WHERE pg_catalog.strpos(s.kinds_json, '"dispatch.') > 0) THEN
        RETURN NULL;
    END IF;
    INSERT INTO qinglong.notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    )
    SELECT 'dispatch.' OPERATOR(pg_catalog.||) n.status, n.dispatch_id, d.project_id,
        d.action_type, qinglong.db_now_ms(),
        pg_catalog.json_build_object(
            'dispatchId', n.dispatch_id,
            'approvalRequestId', d.approval_request_id,
            'actionRef', d.action_ref,
            'actionDigest', d.action_digest,
            'status', n.status,
            'attempt', n.attempt,
            'resultCode', n.result_code
        )::pg_catalog.text
    FROM new_rows AS n
    JOIN old_rows AS o ON o.dispatch_id OPERATOR(pg_catalog.=) n.dispatch_id
    JOIN qinglong.approved_action_dispatches AS d
      ON d.dispatch_id OPERATOR(pg_catalog.=) n.dispatch_id
    WHERE n.status IS DISTINCT FROM o.status AND n.status IN ('failed', 'blocked', 'succeeded')
      AND EXISTS (SELECT 1 FROM qinglong.notification_subscriptions AS s
                  WHERE pg_catalog.strpos(s.kinds_json,
                                          '"dispatch.' OPERATOR(pg_catalog.||) n.status
                                          OPERATOR(pg_catalog.||) '"') > 0)
    ORDER BY n.dispatch_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER approved_action_dispatch_executions_tell
    AFTER UPDATE ON qinglong.approved_action_dispatch_executions
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.tell_execution_outcome();
