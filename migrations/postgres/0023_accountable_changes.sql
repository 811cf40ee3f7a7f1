-- Accountable changes (docs/security.md, docs/state-machine.md), in schema qinglong.
--
-- 1. A leased row is due exactly when its lease expires (`eligible_at_ms` equals
--    `lease_expires_at_ms`): a row the due scan finds is one a claim may take over, never
--    one every tick sees and none may claim (QLT01).
-- 2. The moves made without a lease proof are few, and each is someone's:
--    - a waiting row (pending, retry_wait) is blocked only when its budget is spent, with the
--      product's code `attempts_exhausted`, an expired lease without its holder's proof only
--      past its takeover bound, with `takeovers_exhausted` (migration takeovers), and each
--      only by the runtime (QLT01);
--    - an operator's cancel needs the `dispatch.cancelled` audit row of the acting principal
--      for this dispatch and this change (`<status before>:<result code>`), written earlier
--      in the same transaction (QLI02); anyone else's the state machine refuses (QLT01);
--    - a started row settled without its holder's proof by a manual resolution, or by
--      anyone but the runtime, needs the `recovery.manual_resolution` audit row of the acting
--      principal for this dispatch and this change (`<status>:<result code>`), likewise
--      (QLI02).
--    The audit guard (migration 0015) already makes an audit row name the acting principal.
-- 3. Runs and receipts present the holder's proof, as every move of a lease does (QLF01): a
--    receipt's dispatch is started (or completed by the same statement) under a lease whose
--    proof digest the proof matches; the dispatcher's Run of a dispatch (trigger type
--    `approved_action`, its idempotency key the dispatch id) likewise, or under that
--    dispatch's lease before its start. The proof is never stored: the trigger clears it, a
--    check constraint holds it.

-- -- 1 and 2. the execution row --------------------------------------------------------------

-- Named to run before the receipt and state-machine triggers (alphabetical order), which
-- clear the proof this one reads.
CREATE FUNCTION qinglong.guard_execution_accountable() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    acting pg_catalog.text;
    wanted pg_catalog.text;
    detail pg_catalog.text;
    settled_by pg_catalog.text;
    proven pg_catalog.bool := false;
BEGIN
    IF NEW.status = 'leased' AND (NEW.lease_expires_at_ms IS NULL
            OR NEW.eligible_at_ms IS DISTINCT FROM NEW.lease_expires_at_ms) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: due (% → %)',
            OLD.status, NEW.status USING ERRCODE = 'QLT01';
    END IF;
    IF NEW.status IS NOT DISTINCT FROM OLD.status
            OR NEW.status NOT IN ('blocked', 'cancelled', 'succeeded', 'failed') THEN
        RETURN NEW;
    END IF;
    -- The holder's proof (the state machine checks it again and refuses a wrong one).
    IF OLD.status IN ('leased', 'executing') AND NEW.lease_proof IS NOT NULL
            AND OLD.lease_proof_digest IS NOT NULL THEN
        proven := pg_catalog.encode(pg_catalog.sha256(
            pg_catalog.convert_to(NEW.lease_proof, 'UTF8')), 'hex') = OLD.lease_proof_digest;
    END IF;
    IF proven THEN
        RETURN NEW;
    END IF;
    acting := qinglong.acting_role();
    IF NEW.status = 'blocked' AND OLD.status IN ('pending', 'retry_wait', 'leased') THEN
        -- An expired lease is blocked only past its takeover bound (a suspected poison pill,
        -- migration takeovers checks the bound and the expiry), a waiting row only once its
        -- attempt budget is spent.
        IF (OLD.status = 'leased'
                    AND NEW.result_code IS DISTINCT FROM 'takeovers_exhausted')
                OR (OLD.status <> 'leased' AND (OLD.attempt < OLD.max_attempts
                    OR NEW.result_code IS DISTINCT FROM 'attempts_exhausted'))
                OR acting IS NULL
                OR NOT pg_catalog.pg_has_role(acting, 'qinglong_runtime', 'MEMBER') THEN
            RAISE EXCEPTION 'qinglong:transition_refused: blocked (% → %)', OLD.status,
                NEW.status USING ERRCODE = 'QLT01';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.status = 'cancelled' THEN
        IF OLD.status NOT IN ('pending', 'retry_wait') OR acting IS NULL
                OR NOT pg_catalog.pg_has_role(acting, 'qinglong_operator', 'MEMBER') THEN
            RETURN NEW;  -- the state machine refuses it (QLT01: transition, or operator)
        END IF;
        wanted := 'dispatch.cancelled';
        detail := OLD.status;
    ELSIF OLD.status = 'executing' THEN
        SELECT r.source INTO settled_by FROM qinglong.recovery_resolutions AS r
        WHERE r.dispatch_id = OLD.dispatch_id AND r.execution_attempt = OLD.attempt
          AND r.lease_owner = OLD.lease_owner AND r.lease_token = OLD.lease_token
          AND r.started_at_ms = OLD.started_at_ms;
        IF NOT FOUND THEN
            RETURN NEW;  -- no resolution: the state machine refuses it (QLF01)
        END IF;
        IF settled_by = 'evidence' AND acting IS NOT NULL
                AND pg_catalog.pg_has_role(acting, 'qinglong_runtime', 'MEMBER') THEN
            RETURN NEW;  -- the runtime settling by evidence: the resolution names it
        END IF;
        wanted := 'recovery.manual_resolution';
        detail := NEW.status;
    ELSE
        RETURN NEW;  -- the state machine refuses the rest
    END IF;
    IF acting IS NULL OR NOT EXISTS (
            SELECT 1 FROM qinglong.security_audit_events AS a
            WHERE a.subject_id = OLD.dispatch_id AND a.kind = wanted
              AND a.principal = qinglong.acting_principal()
              AND a.detail_code = pg_catalog.left(
                  detail OPERATOR(pg_catalog.||) ':'
                      OPERATOR(pg_catalog.||) COALESCE(NEW.result_code, ''), 128)
              AND a.committed_at_ms = (pg_catalog.date_part('epoch',
                  pg_catalog.transaction_timestamp()) OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8
            ) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: unaudited (% → %)',
            OLD.status, NEW.status USING ERRCODE = 'QLI02';
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION qinglong.guard_execution_accountable() FROM PUBLIC;

CREATE TRIGGER approved_action_dispatch_executions_accountable
    BEFORE UPDATE ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_execution_accountable();

-- -- 3. Runs and receipts carry the holder's proof -------------------------------------------

ALTER TABLE qinglong.runs
    ADD COLUMN lease_proof TEXT,
    ADD CONSTRAINT runs_proof_not_stored CHECK (lease_proof IS NULL);
ALTER TABLE qinglong.approved_run_action_receipts
    ADD COLUMN lease_proof TEXT,
    ADD CONSTRAINT approved_run_action_receipts_proof_not_stored CHECK (lease_proof IS NULL);

-- The dispatcher's Run of a dispatch (trigger type `approved_action`, its idempotency key the
-- dispatch id) is written only under that dispatch's lease (leased, executing, or completed by
-- the same statement). Other Runs are no dispatch's effect: evidence reads a Run without its
-- receipt as a conflict, never as success. A receipt only for a started row (migration 0011).
CREATE FUNCTION qinglong.guard_run_holder() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NEW.trigger_type = 'approved_action'
            AND EXISTS (SELECT 1 FROM qinglong.approved_action_dispatches AS d
                        WHERE d.dispatch_id = NEW.idempotency_key)
            AND (NEW.lease_proof IS NULL OR NOT EXISTS (
                SELECT 1 FROM qinglong.approved_action_dispatch_executions AS e
                WHERE e.dispatch_id = NEW.idempotency_key
                  AND e.status IN ('leased', 'executing', 'succeeded')
                  AND e.lease_proof_digest = pg_catalog.encode(pg_catalog.sha256(
                      pg_catalog.convert_to(NEW.lease_proof, 'UTF8')), 'hex'))) THEN
        RAISE EXCEPTION 'qinglong:fence_refused: a Run of a dispatch presents its holder''s proof'
            USING ERRCODE = 'QLF01';
    END IF;
    NEW.lease_proof := NULL;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION qinglong.guard_run_holder() FROM PUBLIC;

CREATE FUNCTION qinglong.guard_receipt_holder() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NEW.lease_proof IS NULL OR NOT EXISTS (
            SELECT 1 FROM qinglong.approved_action_dispatch_executions AS e
            WHERE e.dispatch_id = NEW.dispatch_id AND e.status IN ('executing', 'succeeded')
              AND e.lease_proof_digest = pg_catalog.encode(pg_catalog.sha256(
                  pg_catalog.convert_to(NEW.lease_proof, 'UTF8')), 'hex')) THEN
        RAISE EXCEPTION 'qinglong:fence_refused: a receipt presents its holder''s proof'
            USING ERRCODE = 'QLF01';
    END IF;
    NEW.lease_proof := NULL;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION qinglong.guard_receipt_holder() FROM PUBLIC;

CREATE TRIGGER runs_holder_proof
    BEFORE INSERT ON qinglong.runs
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_run_holder();
-- After `approved_run_action_receipts_guard` (alphabetical order): a receipt that binds no
-- started execution or Run is refused for that first, as before.
CREATE TRIGGER approved_run_action_receipts_holder_proof
    BEFORE INSERT ON qinglong.approved_run_action_receipts
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_receipt_holder();
