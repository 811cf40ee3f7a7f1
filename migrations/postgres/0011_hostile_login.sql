-- The database's word against a hostile login (docs/security.md), in schema qinglong.
--
-- 1. Every function pins `search_path = pg_catalog, pg_temp`: pg_temp LAST, so no session's
--    temporary type, domain or table can stand in for a catalog one (PostgreSQL searches
--    pg_temp FIRST when the path does not name it). Types and functions are qualified too.
--    The functions that must write what the session may not (audit rows, the execution
--    ledger) run as `qinglong_recorder`, which owns those functions and may only INSERT
--    into those two tables: a definer that went wrong could append, never rewrite or own.
-- 2. The lease fence is the database's: a claim stores the SHA-256 of a secret proof the
--    claimant presents (`lease_proof`, never stored: the trigger clears it), and every later
--    move of a leased or executing row (renew, start, release, complete) must present the
--    proof again. A live lease cannot be taken over (database clock). An executing row
--    reaches a terminal state only by its holder's proof or by a recovery resolution for its
--    exact fence, once its lease expired on the database clock.
-- 3. The execution ledger is written by the database, from the transitions themselves (one
--    statement trigger per statement, from its transition tables); nobody may INSERT it.
-- 4. Approvals expire on the database clock: a request's lifetime is bounded (30 days) and
--    counted from its creation on the database clock; approving and consuming check it.
-- 5. Audit rows name the session's own login; recovery resolutions, receipts and Runs only
--    for the row, fence and identity they belong to.
-- SQLSTATEs: QLF01 not the lease holder, QLF02 a live lease, QLF03 a lease beyond the bound,
-- QLR01 a resolution that does not match its execution, QLA04 expired on the database clock,
-- QLA05 a lifetime out of range, QLI01 a record for another principal, row or identity.
--
-- Amended in place: its comments point at docs/; the SQL is unchanged. A database that
-- applied the earlier text matches this checksum:
-- amends checksum a75c101d73f3dfeb2829f4578a38b8090bf14ba646d65ddd9e1c790c0d01c0b8

-- -- 1. search_path and the recorder ------------------------------------------------------

ALTER FUNCTION qinglong.refuse_mutation() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION qinglong.check_resolution_principal() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION qinglong.guard_dispatch_insert() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION qinglong.check_step_run_change() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION qinglong.guard_prune_permit() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION qinglong.guard_prune_delete() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION qinglong.notify_dispatch_due() SET search_path = pg_catalog, pg_temp;

-- The recorder may append to the two records the database writes itself, nothing else.
GRANT USAGE ON SCHEMA qinglong TO qinglong_recorder;
GRANT INSERT ON qinglong.security_audit_events, qinglong.execution_events TO qinglong_recorder;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA qinglong TO qinglong_recorder;

CREATE OR REPLACE FUNCTION qinglong.audit_approval_request() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    kind   pg_catalog.text;
    actor  pg_catalog.text;
    detail pg_catalog.text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        kind := 'approval.created';
        actor := NEW.requested_by;
        detail := NEW.action_type;
    ELSIF NEW.status IS DISTINCT FROM OLD.status THEN
        kind := 'approval.' OPERATOR(pg_catalog.||) NEW.status;
        IF NEW.status = 'consumed' THEN
            actor := NEW.consumed_principal;
            detail := NEW.action_type;
        ELSE
            actor := NEW.decided_by;
            detail := CASE WHEN NEW.decided_principal = NEW.requested_principal
                           THEN 'by_requester' ELSE 'by_other' END;
        END IF;
    ELSE
        RETURN NULL;
    END IF;
    INSERT INTO qinglong.security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
    ) VALUES (
        kind, actor, SESSION_USER, NEW.project_id, NEW.approval_request_id, detail,
        (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
            OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8
    );
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION qinglong.audit_approval_request() FROM PUBLIC;
-- A new owner needs CREATE on the schema at the moment of the change only.
GRANT CREATE ON SCHEMA qinglong TO qinglong_recorder;
ALTER FUNCTION qinglong.audit_approval_request() OWNER TO qinglong_recorder;

-- The database clock in milliseconds, for the rules below (not a definer: it reads nothing).
CREATE FUNCTION qinglong.db_now_ms() RETURNS pg_catalog.int8
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT (pg_catalog.date_part('epoch', pg_catalog.clock_timestamp())
        OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8
$$;

-- -- 2. the fence --------------------------------------------------------------------------

ALTER TABLE qinglong.approved_action_dispatch_executions
    ADD COLUMN lease_proof_digest TEXT,
    ADD COLUMN lease_proof TEXT,
    -- The proof travels in a statement and never rests in the row.
    ADD CONSTRAINT approved_action_dispatch_executions_proof_not_stored
        CHECK (lease_proof IS NULL);

CREATE OR REPLACE FUNCTION qinglong.check_execution_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    claim   pg_catalog.bool;
    refund  pg_catalog.int4;
    now_ms  pg_catalog.int8 := qinglong.db_now_ms();
    proven  pg_catalog.bool;
    settled pg_catalog.bool;
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- A consumed approval creates the row pending@v0 (docs/state-machine.md): nothing claimed,
        -- started or settled yet.
        IF NEW.status IS DISTINCT FROM 'pending' OR NEW.version IS DISTINCT FROM 0
                OR NEW.attempt IS DISTINCT FROM 0 OR NEW.lease_owner IS NOT NULL
                OR NEW.lease_token IS NOT NULL OR NEW.lease_expires_at_ms IS NOT NULL
                OR NEW.started_at_ms IS NOT NULL OR NEW.retry_at_ms IS NOT NULL
                OR NEW.result_mutation_id IS NOT NULL OR NEW.result_code IS NOT NULL
                OR NEW.completed_at_ms IS NOT NULL OR NEW.lease_proof_digest IS NOT NULL
                OR NEW.lease_proof IS NOT NULL THEN
            RAISE EXCEPTION 'qinglong:transition_refused: insert (→ %)', NEW.status
                USING ERRCODE = 'QLT01';
        END IF;
        RETURN NEW;
    END IF;
    IF OLD.status IN ('succeeded', 'failed', 'blocked', 'cancelled') THEN
        RAISE EXCEPTION 'qinglong:transition_refused: terminal (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    IF (NEW.dispatch_id, NEW.project_id, NEW.max_attempts, NEW.created_at_ms)
            IS DISTINCT FROM (OLD.dispatch_id, OLD.project_id, OLD.max_attempts,
                              OLD.created_at_ms) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: identity (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    IF NEW.version IS NULL OR NEW.version <= OLD.version THEN
        RAISE EXCEPTION 'qinglong:transition_refused: version (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    IF (OLD.status, NEW.status) NOT IN (
            ('pending', 'leased'), ('retry_wait', 'leased'), ('leased', 'leased'),
            ('pending', 'blocked'), ('retry_wait', 'blocked'), ('leased', 'blocked'),
            ('leased', 'retry_wait'), ('leased', 'pending'), ('leased', 'executing'),
            ('executing', 'executing'), ('executing', 'succeeded'),
            ('executing', 'failed'), ('executing', 'blocked'),
            ('pending', 'cancelled'), ('retry_wait', 'cancelled')) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: transition (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    -- Cancelling is an operator's decision: the runtime login never makes it.
    IF NEW.status = 'cancelled'
            AND NOT pg_catalog.pg_has_role(SESSION_USER, 'qinglong_operator', 'MEMBER') THEN
        RAISE EXCEPTION 'qinglong:transition_refused: operator (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    -- No lease runs further ahead of the database clock than a day: a holder may delay work,
    -- not park a row out of every operator's reach.
    IF NEW.lease_expires_at_ms > now_ms + 86400000 THEN
        RAISE EXCEPTION 'qinglong:fence_refused: lease beyond the bound (% → %)', OLD.status,
            NEW.status USING ERRCODE = 'QLF03';
    END IF;
    claim := NEW.status = 'leased'
        AND (OLD.status <> 'leased' OR NEW.attempt IS DISTINCT FROM OLD.attempt);
    IF claim THEN
        IF NEW.attempt IS DISTINCT FROM OLD.attempt + 1 OR NEW.attempt > NEW.max_attempts
                OR NEW.started_at_ms IS NOT NULL THEN
            RAISE EXCEPTION 'qinglong:transition_refused: attempt (% → %)', OLD.status,
                NEW.status USING ERRCODE = 'QLT01';
        END IF;
        -- A takeover only once the old lease expired on the database's own clock.
        IF OLD.status = 'leased' AND OLD.lease_expires_at_ms > now_ms THEN
            RAISE EXCEPTION 'qinglong:fence_refused: live lease (% → %)', OLD.status,
                NEW.status USING ERRCODE = 'QLF02';
        END IF;
        IF NEW.lease_proof IS NULL THEN
            RAISE EXCEPTION 'qinglong:fence_refused: a claim presents its proof (% → %)',
                OLD.status, NEW.status USING ERRCODE = 'QLF01';
        END IF;
        NEW.lease_proof_digest := pg_catalog.encode(pg_catalog.sha256(
            pg_catalog.convert_to(NEW.lease_proof, 'UTF8')), 'hex');
        NEW.lease_proof := NULL;
        RETURN NEW;
    END IF;
    refund := CASE WHEN OLD.status = 'leased' AND NEW.status = 'pending' THEN 1 ELSE 0 END;
    IF NEW.attempt IS DISTINCT FROM OLD.attempt - refund THEN
        RAISE EXCEPTION 'qinglong:transition_refused: attempt (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    IF (NEW.lease_owner, NEW.lease_token) IS DISTINCT FROM (OLD.lease_owner, OLD.lease_token)
            OR (NEW.started_at_ms IS DISTINCT FROM OLD.started_at_ms
                AND NOT (OLD.status = 'leased' AND NEW.status = 'executing')) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: fence (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    IF OLD.status IN ('leased', 'executing') THEN
        proven := OLD.lease_proof_digest IS NOT NULL AND NEW.lease_proof IS NOT NULL
            AND pg_catalog.encode(pg_catalog.sha256(
                    pg_catalog.convert_to(NEW.lease_proof, 'UTF8')), 'hex')
                = OLD.lease_proof_digest;
        IF NOT proven THEN
            -- Without the holder's proof: a spent budget may block an expired lease, and a
            -- recovery resolution for this exact fence may settle an expired started row.
            IF OLD.status = 'leased' THEN
                settled := NEW.status = 'blocked' AND OLD.attempt >= OLD.max_attempts
                    AND OLD.lease_expires_at_ms <= now_ms;
            ELSE
                settled := NEW.status IN ('succeeded', 'failed', 'blocked')
                    AND OLD.lease_expires_at_ms <= now_ms
                    AND EXISTS (
                        SELECT 1 FROM qinglong.recovery_resolutions AS r
                        WHERE r.dispatch_id = OLD.dispatch_id
                          AND r.resolution = NEW.status
                          AND r.execution_attempt = OLD.attempt
                          AND r.lease_owner = OLD.lease_owner
                          AND r.lease_token = OLD.lease_token
                          AND r.started_at_ms = OLD.started_at_ms);
            END IF;
            IF NOT settled THEN
                RAISE EXCEPTION 'qinglong:fence_refused: not the lease holder (% → %)',
                    OLD.status, NEW.status USING ERRCODE = 'QLF01';
            END IF;
        END IF;
    END IF;
    NEW.lease_proof_digest := OLD.lease_proof_digest;
    NEW.lease_proof := NULL;
    RETURN NEW;
END
$$;

-- -- 3. the ledger, written by the database -----------------------------------------------

-- One INSERT per statement from its transition tables: a page of claims writes its ledger in
-- one statement. A renew (same status, same attempt) changes no status and writes no line.
-- A mutation id is written only where the statement set a new one (a release, completion,
-- cancel or resolution), a result code only on the rows that leave the lease behind.
CREATE FUNCTION qinglong.record_execution_changes() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO qinglong.execution_events (
            dispatch_id, version, from_status, to_status, attempt, lease_owner, lease_token,
            mutation_id, result_code, committed_at_ms
        )
        SELECT n.dispatch_id, n.version, NULL, n.status, n.attempt, NULL, NULL, NULL, NULL,
               (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
                   OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8
        FROM new_rows AS n;
        RETURN NULL;
    END IF;
    INSERT INTO qinglong.execution_events (
        dispatch_id, version, from_status, to_status, attempt, lease_owner, lease_token,
        mutation_id, result_code, committed_at_ms
    )
    SELECT n.dispatch_id, n.version, o.status, n.status, n.attempt, n.lease_owner,
           n.lease_token,
           CASE WHEN n.result_mutation_id IS DISTINCT FROM o.result_mutation_id
                THEN n.result_mutation_id END,
           CASE WHEN n.status NOT IN ('leased', 'executing') THEN n.result_code END,
           (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
               OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8
    FROM new_rows AS n
    JOIN old_rows AS o ON o.dispatch_id = n.dispatch_id
    WHERE n.status IS DISTINCT FROM o.status OR n.attempt IS DISTINCT FROM o.attempt;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION qinglong.record_execution_changes() FROM PUBLIC;
ALTER FUNCTION qinglong.record_execution_changes() OWNER TO qinglong_recorder;
REVOKE CREATE ON SCHEMA qinglong FROM qinglong_recorder;

CREATE TRIGGER approved_action_dispatch_executions_ledger_insert
    AFTER INSERT ON qinglong.approved_action_dispatch_executions
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.record_execution_changes();
CREATE TRIGGER approved_action_dispatch_executions_ledger_update
    AFTER UPDATE ON qinglong.approved_action_dispatch_executions
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.record_execution_changes();

REVOKE INSERT ON qinglong.execution_events
    FROM qinglong_runtime, qinglong_operator, qinglong_approver;

-- -- 4. approvals on the database clock ----------------------------------------------------

ALTER TABLE qinglong.approval_requests ADD COLUMN db_expires_at_ms BIGINT;

CREATE OR REPLACE FUNCTION qinglong.guard_approval_request() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    login    pg_catalog.text := SESSION_USER;
    now_ms   pg_catalog.int8 := qinglong.db_now_ms();
    lifetime pg_catalog.int8;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.status IS DISTINCT FROM 'pending' OR NEW.version IS DISTINCT FROM 1
                OR NEW.decided_by IS NOT NULL OR NEW.decided_principal IS NOT NULL
                OR NEW.consumed_principal IS NOT NULL OR NEW.consumed_at_ms IS NOT NULL THEN
            RAISE EXCEPTION 'an approval request starts pending at version 1, undecided'
                USING ERRCODE = 'QLA03';
        END IF;
        IF NEW.requested_principal IS DISTINCT FROM login THEN
            RAISE EXCEPTION 'the requested principal must be the session login'
                USING ERRCODE = 'QLA01';
        END IF;
        -- The lifetime the requester asked for, counted from now on the database clock.
        lifetime := NEW.expires_at_ms - NEW.created_at_ms;
        IF lifetime IS NULL OR lifetime <= 0 OR lifetime > 2592000000 THEN
            RAISE EXCEPTION 'an approval lives more than 0 s and at most 30 days'
                USING ERRCODE = 'QLA05';
        END IF;
        NEW.db_expires_at_ms := now_ms + lifetime;
        RETURN NEW;
    END IF;

    IF OLD.status IN ('consumed', 'rejected', 'expired') THEN
        RAISE EXCEPTION 'approval request % is %: it never changes again',
            OLD.approval_request_id, OLD.status USING ERRCODE = 'QLA03';
    END IF;
    IF (NEW.approval_request_id, NEW.project_id, NEW.action_type, NEW.action_ref,
            NEW.action_digest, NEW.requested_by, NEW.requested_principal, NEW.expires_at_ms,
            NEW.created_at_ms, NEW.db_expires_at_ms)
            IS DISTINCT FROM
            (OLD.approval_request_id, OLD.project_id, OLD.action_type, OLD.action_ref,
            OLD.action_digest, OLD.requested_by, OLD.requested_principal, OLD.expires_at_ms,
            OLD.created_at_ms, OLD.db_expires_at_ms) THEN
        RAISE EXCEPTION 'the identity of an approval request never changes'
            USING ERRCODE = 'QLA03';
    END IF;
    -- Approving and consuming give authority: never after the lifetime ran out. Rows older
    -- than this migration carry only the requester's own clock.
    IF NEW.status IN ('approved', 'consumed')
            AND now_ms >= COALESCE(OLD.db_expires_at_ms, OLD.expires_at_ms) THEN
        RAISE EXCEPTION 'approval request % expired (database clock)', OLD.approval_request_id
            USING ERRCODE = 'QLA04';
    END IF;

    IF OLD.status = 'pending' AND NEW.status IN ('approved', 'rejected', 'expired') THEN
        IF NEW.version IS DISTINCT FROM 2 OR NEW.decided_by IS NULL
                OR NEW.consumed_principal IS NOT NULL OR NEW.consumed_at_ms IS NOT NULL THEN
            RAISE EXCEPTION 'a decision moves pending@v1 to version 2 and names its decider'
                USING ERRCODE = 'QLA03';
        END IF;
        IF NEW.decided_principal IS DISTINCT FROM login THEN
            RAISE EXCEPTION 'the decided principal must be the session login'
                USING ERRCODE = 'QLA01';
        END IF;
        IF NEW.status = 'approved' THEN
            IF NOT pg_catalog.pg_has_role(login, 'qinglong_approver', 'MEMBER') THEN
                RAISE EXCEPTION 'approving needs a qinglong_approver login'
                    USING ERRCODE = 'QLA01';
            END IF;
            IF login = OLD.requested_principal
                    AND NOT pg_catalog.pg_has_role(login, 'qinglong_self_approver', 'MEMBER')
                    THEN
                RAISE EXCEPTION 'the requester may not approve its own request'
                    USING ERRCODE = 'QLA02';
            END IF;
        ELSIF login IS DISTINCT FROM OLD.requested_principal
                AND NOT pg_catalog.pg_has_role(login, 'qinglong_approver', 'MEMBER') THEN
            RAISE EXCEPTION 'rejecting another login''s request needs a qinglong_approver login'
                USING ERRCODE = 'QLA01';
        END IF;
        RETURN NEW;
    END IF;

    IF OLD.status = 'approved' AND NEW.status = 'consumed' THEN
        IF NEW.version IS DISTINCT FROM 3 OR NEW.consumed_at_ms IS NULL
                OR (NEW.decided_by, NEW.decided_principal)
                    IS DISTINCT FROM (OLD.decided_by, OLD.decided_principal) THEN
            RAISE EXCEPTION 'consuming moves approved@v2 to version 3 and keeps the decision'
                USING ERRCODE = 'QLA03';
        END IF;
        IF NEW.consumed_principal IS DISTINCT FROM login THEN
            RAISE EXCEPTION 'the consumed principal must be the session login'
                USING ERRCODE = 'QLA01';
        END IF;
        RETURN NEW;
    END IF;

    RAISE EXCEPTION 'approval request % may not go from % to %',
        OLD.approval_request_id, OLD.status, NEW.status USING ERRCODE = 'QLA03';
END
$$;

-- -- 5. records for their own principal, row, fence and identity ---------------------------

-- An audit row names the session's own login and the database's clock; the approval kinds
-- are the approval trigger's alone (it runs as the recorder).
CREATE FUNCTION qinglong.guard_audit_event() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NEW.principal IS DISTINCT FROM SESSION_USER::pg_catalog.text THEN
        RAISE EXCEPTION 'an audit record names the session login'
            USING ERRCODE = 'QLI01';
    END IF;
    IF NEW.kind LIKE 'approval.%' AND CURRENT_USER::pg_catalog.text
            IS DISTINCT FROM 'qinglong_recorder' THEN
        RAISE EXCEPTION 'approval audit records are written by the approval trigger only'
            USING ERRCODE = 'QLI01';
    END IF;
    NEW.committed_at_ms := (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
        OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION qinglong.guard_audit_event() FROM PUBLIC;

CREATE TRIGGER security_audit_events_guard
    BEFORE INSERT ON qinglong.security_audit_events
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_audit_event();

-- A resolution settles only a started row whose lease expired on the database clock, for
-- its exact fence. (What the evidence proves is the action's provider's to read: the database
-- cannot see a file or a downstream receipt.)
CREATE OR REPLACE FUNCTION qinglong.check_resolution_principal() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    exe qinglong.approved_action_dispatch_executions%ROWTYPE;
BEGIN
    IF NEW.principal IS DISTINCT FROM SESSION_USER::pg_catalog.text THEN
        RAISE EXCEPTION 'the recorded principal must be the session login'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.source = 'manual'
            AND NOT pg_catalog.pg_has_role(SESSION_USER, 'qinglong_operator', 'MEMBER') THEN
        RAISE EXCEPTION 'a manual recovery resolution needs a qinglong_operator login'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT * INTO exe FROM qinglong.approved_action_dispatch_executions AS e
    WHERE e.dispatch_id = NEW.dispatch_id;
    IF NOT FOUND OR exe.status IS DISTINCT FROM 'executing'
            OR (exe.attempt, exe.version, exe.lease_owner, exe.lease_token, exe.started_at_ms)
               IS DISTINCT FROM
               (NEW.execution_attempt, NEW.execution_version, NEW.lease_owner,
                NEW.lease_token, NEW.started_at_ms) THEN
        RAISE EXCEPTION 'a resolution names its started execution''s exact fence'
            USING ERRCODE = 'QLR01';
    END IF;
    IF exe.lease_expires_at_ms > qinglong.db_now_ms() THEN
        RAISE EXCEPTION 'a resolution waits for the lease to expire (database clock)'
            USING ERRCODE = 'QLR01';
    END IF;
    NEW.committed_at_ms := (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
        OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8;
    RETURN NEW;
END
$$;

-- A receipt binds the started execution it belongs to (executing, or succeeded by the very
-- statement that writes the receipt) and the Run its dispatch created.
CREATE FUNCTION qinglong.guard_receipt() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (
            SELECT 1
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
              AND r.request_id IS NOT DISTINCT FROM NEW.approval_request_id) THEN
        RAISE EXCEPTION 'a receipt binds its started execution and its dispatch''s Run'
            USING ERRCODE = 'QLI01';
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION qinglong.guard_receipt() FROM PUBLIC;

CREATE TRIGGER approved_run_action_receipts_guard
    BEFORE INSERT ON qinglong.approved_run_action_receipts
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_receipt();

-- A Run's identity never changes: only its state, version, event sequence and time move.
CREATE FUNCTION qinglong.guard_run_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF (NEW.run_id, NEW.project_id, NEW.task_id, NEW.task_revision, NEW.executor_type,
        NEW.priority, NEW.task_name, NEW.task_snapshot_ref, NEW.input_ref, NEW.trigger_type,
        NEW.execution_origin, NEW.execution_owner, NEW.request_id, NEW.idempotency_key,
        NEW.accepted_at_ms, NEW.created_at_ms)
            IS DISTINCT FROM
       (OLD.run_id, OLD.project_id, OLD.task_id, OLD.task_revision, OLD.executor_type,
        OLD.priority, OLD.task_name, OLD.task_snapshot_ref, OLD.input_ref, OLD.trigger_type,
        OLD.execution_origin, OLD.execution_owner, OLD.request_id, OLD.idempotency_key,
        OLD.accepted_at_ms, OLD.created_at_ms) THEN
        RAISE EXCEPTION 'the identity of a Run never changes' USING ERRCODE = 'QLI01';
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION qinglong.guard_run_change() FROM PUBLIC;

CREATE TRIGGER runs_identity
    BEFORE UPDATE ON qinglong.runs
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_run_change();
