-- Principals and tokens (docs/security.md#the-api-process), in schema qinglong.
--
-- 1. Who acts. A direct login acts as itself (`session_user`), exactly as before. The API's
--    login (NOINHERIT, a member of qinglong_api, itself NOINHERIT) holds no privilege of its
--    own: for each request it runs `SET LOCAL ROLE <installation>_p_<name>` into the principal
--    role the authenticated token names, so `current_user` is the principal while
--    `session_user` stays the API's login. `qinglong.acting_role()` is that role on both paths
--    (a principal role only when qinglong_api was granted it directly and it is named
--    `<installation>_p_…`; otherwise the session's login), and NULL for an API login acting
--    as itself: it may become a principal, nothing else. `qinglong.acting_principal()` is the
--    name recorded (`shop_p_alice` → `alice`). A login that SETs ROLE into a group role
--    (qinglong_approver) still acts as itself, so a shared group name never splits one person
--    into two for separation of duties.
-- 2. The invoker triggers that record or check the principal (approvals, dispatches, audit,
--    resolutions, cancels, re-arming a lost StepRun) now ask for the acting role and
--    principal; the approval audit trigger is a definer (it runs as the recorder, where
--    neither current_user nor session_user names the caller), so it records the principal
--    columns of the row, which the invoker guard checked against the acting principal first.
-- 3. Tokens: `api_tokens` keeps the SHA-256 of each secret, never the secret. The
--    administrator creates and revokes them (with the principal role); the runtime login,
--    which authenticates for the API in the daemon's process, reads only what that needs and
--    writes only the last use.
-- 4. Audit rows of API writes name the token id, client address and request id.
-- 5. Two more kinds for principals: qinglong_viewer reads, qinglong_submitter requests.
-- SQLSTATEs as before: QLA01 not permitted (now also: no acting principal), QLI01 a record
-- for another principal.

-- -- 1. who acts ---------------------------------------------------------------------------

-- The role whose rights decide this statement: a principal the API became, or the login.
CREATE FUNCTION qinglong.acting_role() RETURNS pg_catalog.text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    api pg_catalog.oid := (SELECT r.oid FROM pg_catalog.pg_roles AS r
                           WHERE r.rolname = 'qinglong_api');
BEGIN
    IF CURRENT_USER IS DISTINCT FROM SESSION_USER
            AND pg_catalog.starts_with(CURRENT_USER::pg_catalog.text,
                pg_catalog.regexp_replace('qinglong_api', 'api$', 'p_'))
            AND EXISTS (
                SELECT 1 FROM pg_catalog.pg_auth_members AS m
                JOIN pg_catalog.pg_roles AS r ON r.oid = m.roleid
                WHERE r.rolname = CURRENT_USER AND m.member = api) THEN
        RETURN CURRENT_USER::pg_catalog.text;
    END IF;
    -- The API's login acting as itself is nobody: it may only become a principal.
    IF EXISTS (
            SELECT 1 FROM pg_catalog.pg_auth_members AS m
            JOIN pg_catalog.pg_roles AS r ON r.oid = m.member
            WHERE m.roleid = api AND r.rolname = SESSION_USER) THEN
        RETURN NULL;
    END IF;
    RETURN SESSION_USER::pg_catalog.text;
END
$$;

-- The name recorded for the acting role: a principal role's name without its prefix.
CREATE FUNCTION qinglong.acting_principal() RETURNS pg_catalog.text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE
        WHEN a.role IS DISTINCT FROM SESSION_USER::pg_catalog.text
            THEN pg_catalog.substr(a.role, pg_catalog.length(a.prefix) + 1)
        ELSE a.role END
    FROM (SELECT qinglong.acting_role() AS role,
                 pg_catalog.regexp_replace('qinglong_api', 'api$', 'p_') AS prefix) AS a
$$;

-- -- 2. the triggers ask for the acting principal ------------------------------------------

CREATE OR REPLACE FUNCTION qinglong.guard_approval_request() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    acting   pg_catalog.text := qinglong.acting_role();
    login    pg_catalog.text := qinglong.acting_principal();
    now_ms   pg_catalog.int8 := qinglong.db_now_ms();
    lifetime pg_catalog.int8;
BEGIN
    IF acting IS NULL OR login IS NULL THEN
        RAISE EXCEPTION 'the API''s login acts only as a principal'
            USING ERRCODE = 'QLA01';
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF NEW.status IS DISTINCT FROM 'pending' OR NEW.version IS DISTINCT FROM 1
                OR NEW.decided_by IS NOT NULL OR NEW.decided_principal IS NOT NULL
                OR NEW.consumed_principal IS NOT NULL OR NEW.consumed_at_ms IS NOT NULL THEN
            RAISE EXCEPTION 'an approval request starts pending at version 1, undecided'
                USING ERRCODE = 'QLA03';
        END IF;
        IF NEW.requested_principal IS DISTINCT FROM login THEN
            RAISE EXCEPTION 'the requested principal must be the acting principal'
                USING ERRCODE = 'QLA01';
        END IF;
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
            RAISE EXCEPTION 'the decided principal must be the acting principal'
                USING ERRCODE = 'QLA01';
        END IF;
        IF NEW.status = 'approved' THEN
            IF NOT pg_catalog.pg_has_role(acting, 'qinglong_approver', 'MEMBER') THEN
                RAISE EXCEPTION 'approving needs a qinglong_approver principal'
                    USING ERRCODE = 'QLA01';
            END IF;
            -- Separation of duties between principals (a login and a token of one name are
            -- one principal): self-approval only for a member of qinglong_self_approver.
            IF login = OLD.requested_principal
                    AND NOT pg_catalog.pg_has_role(acting, 'qinglong_self_approver', 'MEMBER')
                    THEN
                RAISE EXCEPTION 'the requester may not approve its own request'
                    USING ERRCODE = 'QLA02';
            END IF;
        ELSIF login IS DISTINCT FROM OLD.requested_principal
                AND NOT pg_catalog.pg_has_role(acting, 'qinglong_approver', 'MEMBER') THEN
            RAISE EXCEPTION 'rejecting another principal''s request needs a qinglong_approver'
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
            RAISE EXCEPTION 'the consumed principal must be the acting principal'
                USING ERRCODE = 'QLA01';
        END IF;
        RETURN NEW;
    END IF;

    RAISE EXCEPTION 'approval request % may not go from % to %',
        OLD.approval_request_id, OLD.status, NEW.status USING ERRCODE = 'QLA03';
END
$$;

-- A definer (the recorder): it records the row's principal column of the step, which the
-- invoker guard above (a BEFORE trigger) checked against the acting principal.
CREATE OR REPLACE FUNCTION qinglong.audit_approval_request() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    kind      pg_catalog.text;
    actor     pg_catalog.text;
    detail    pg_catalog.text;
    principal pg_catalog.text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        kind := 'approval.created';
        actor := NEW.requested_by;
        detail := NEW.action_type;
        principal := NEW.requested_principal;
    ELSIF NEW.status IS DISTINCT FROM OLD.status THEN
        kind := 'approval.' OPERATOR(pg_catalog.||) NEW.status;
        IF NEW.status = 'consumed' THEN
            actor := NEW.consumed_principal;
            detail := NEW.action_type;
            principal := NEW.consumed_principal;
        ELSE
            actor := NEW.decided_by;
            detail := CASE WHEN NEW.decided_principal = NEW.requested_principal
                           THEN 'by_requester' ELSE 'by_other' END;
            principal := NEW.decided_principal;
        END IF;
    ELSE
        RETURN NULL;
    END IF;
    INSERT INTO qinglong.security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
    ) VALUES (
        kind, actor, principal, NEW.project_id, NEW.approval_request_id, detail,
        (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
            OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8
    );
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION qinglong.guard_dispatch_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    approval qinglong.approval_requests%ROWTYPE;
    login    pg_catalog.text := qinglong.acting_principal();
BEGIN
    SELECT * INTO approval FROM qinglong.approval_requests
    WHERE approval_request_id = NEW.approval_request_id;
    IF NOT FOUND OR login IS NULL OR approval.status IS DISTINCT FROM 'consumed'
            OR approval.consumed_principal IS DISTINCT FROM login
            OR (NEW.project_id, NEW.action_type, NEW.action_ref, NEW.action_digest,
                NEW.approved_by)
               IS DISTINCT FROM
               (approval.project_id, approval.action_type, approval.action_ref,
                approval.action_digest, approval.decided_by) THEN
        RAISE EXCEPTION 'a dispatch needs its approval consumed by this principal, for this action'
            USING ERRCODE = 'QLA03';
    END IF;
    RETURN NEW;
END
$$;

-- A resolution names the acting principal; a manual one needs an operator.
CREATE OR REPLACE FUNCTION qinglong.check_resolution_principal() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    exe    qinglong.approved_action_dispatch_executions%ROWTYPE;
    acting pg_catalog.text := qinglong.acting_role();
BEGIN
    IF acting IS NULL
            OR NEW.principal IS DISTINCT FROM qinglong.acting_principal() THEN
        RAISE EXCEPTION 'the recorded principal must be the acting principal'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.source = 'manual'
            AND NOT pg_catalog.pg_has_role(acting, 'qinglong_operator', 'MEMBER') THEN
        RAISE EXCEPTION 'a manual recovery resolution needs a qinglong_operator principal'
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

-- A cancel and re-arming a lost StepRun are an operator's: the acting role must be one.
CREATE OR REPLACE FUNCTION qinglong.check_execution_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    acting  pg_catalog.text;
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
    -- (Asked only for a cancel: every claim and start passes here, and must stay cheap.)
    IF NEW.status = 'cancelled' THEN
        acting := qinglong.acting_role();
    END IF;
    IF NEW.status = 'cancelled' AND (acting IS NULL
            OR NOT pg_catalog.pg_has_role(acting, 'qinglong_operator', 'MEMBER')) THEN
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

CREATE OR REPLACE FUNCTION qinglong.check_step_run_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    acting pg_catalog.text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.status NOT IN ('ready', 'waiting_approval') OR NEW.version IS DISTINCT FROM 1
                OR NEW.result_code IS NOT NULL THEN
            RAISE EXCEPTION 'qinglong:transition_refused: insert (→ %)', NEW.status
                USING ERRCODE = 'QLT01';
        END IF;
        RETURN NEW;
    END IF;
    IF OLD.status IN ('succeeded', 'failed') THEN
        RAISE EXCEPTION 'qinglong:transition_refused: terminal (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    -- The binding digest covers these columns; the row may never drift from it.
    IF (NEW.step_run_id, NEW.run_id, NEW.project_id, NEW.step_kind, NEW.tool_id,
        NEW.tool_version, NEW.definition_digest, NEW.action_type, NEW.action_ref,
        NEW.action_digest, NEW.approval_request_id, NEW.binding_digest, NEW.created_at_ms)
            IS DISTINCT FROM
       (OLD.step_run_id, OLD.run_id, OLD.project_id, OLD.step_kind, OLD.tool_id,
        OLD.tool_version, OLD.definition_digest, OLD.action_type, OLD.action_ref,
        OLD.action_digest, OLD.approval_request_id, OLD.binding_digest, OLD.created_at_ms) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: identity (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    IF NEW.version IS NULL OR NEW.version <= OLD.version THEN
        RAISE EXCEPTION 'qinglong:transition_refused: version (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    IF (OLD.status, NEW.status) NOT IN (
            ('ready', 'running'), ('waiting_approval', 'running'), ('running', 'succeeded'),
            ('running', 'failed'), ('running', 'lost'), ('waiting_approval', 'failed'),
            ('ready', 'failed'), ('lost', 'ready')) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: transition (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    -- Re-arming a lost StepRun lets its tool run again: an operator's decision (the runtime
    -- never makes it, docs/decisions/0019), so the database asks who is deciding.
    IF OLD.status = 'lost' THEN
        acting := qinglong.acting_role();
    END IF;
    IF OLD.status = 'lost' AND (acting IS NULL
            OR NOT pg_catalog.pg_has_role(acting, 'qinglong_operator', 'MEMBER')) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: operator (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    RETURN NEW;
END
$$;

-- -- 3. tokens -----------------------------------------------------------------------------

-- A token: shown by its id, proven by its secret, of which only the SHA-256 is kept. Its
-- times are the database's clock (the statements write them); expiry and revocation are
-- read against that clock at every authentication, so a revocation takes effect at once.
CREATE TABLE qinglong.api_tokens (
    token_id        TEXT PRIMARY KEY CHECK (token_id ~ '^tok_[0-9a-f]{16}$'),
    secret_sha256   TEXT NOT NULL UNIQUE CHECK (secret_sha256 ~ '^[0-9a-f]{64}$'),
    principal       TEXT NOT NULL CHECK (principal ~ '^[a-z][a-z0-9_]{0,51}$'),
    role            TEXT NOT NULL
        CHECK (role IN ('viewer', 'submitter', 'approver', 'operator')),
    created_by      TEXT NOT NULL,
    created_at_ms   BIGINT NOT NULL,
    expires_at_ms   BIGINT NOT NULL,
    last_used_at_ms BIGINT,
    revoked_at_ms   BIGINT,
    CHECK (expires_at_ms > created_at_ms)
);
CREATE INDEX api_tokens_principal ON qinglong.api_tokens (principal);

-- Only the last use moves, and a revocation is set once; nothing else of a token changes.
CREATE FUNCTION qinglong.guard_api_token_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF (NEW.token_id, NEW.secret_sha256, NEW.principal, NEW.role, NEW.created_by,
        NEW.created_at_ms, NEW.expires_at_ms)
            IS DISTINCT FROM
       (OLD.token_id, OLD.secret_sha256, OLD.principal, OLD.role, OLD.created_by,
        OLD.created_at_ms, OLD.expires_at_ms)
            OR (OLD.revoked_at_ms IS NOT NULL
                AND NEW.revoked_at_ms IS DISTINCT FROM OLD.revoked_at_ms) THEN
        RAISE EXCEPTION 'a token changes only its last use and, once, its revocation'
            USING ERRCODE = 'QLI01';
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION qinglong.guard_api_token_change() FROM PUBLIC;

CREATE TRIGGER api_tokens_guard
    BEFORE UPDATE ON qinglong.api_tokens
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_api_token_change();

-- The runtime authenticates for the API (the daemon's process serves it): it reads what a
-- lookup by digest returns and may move the last use, nothing else. Creating and revoking
-- are the administrator's (`token create|revoke`, which also create and grant the roles).
GRANT SELECT (token_id, secret_sha256, principal, role, expires_at_ms, revoked_at_ms),
    UPDATE (last_used_at_ms) ON qinglong.api_tokens TO qinglong_runtime;

-- -- 4. audit rows of API writes -----------------------------------------------------------

ALTER TABLE qinglong.security_audit_events
    ADD COLUMN token_id       TEXT,
    ADD COLUMN client_address TEXT,
    ADD COLUMN request_id     TEXT,
    ADD CONSTRAINT security_audit_events_request_whole CHECK (
        (token_id IS NULL AND client_address IS NULL AND request_id IS NULL)
        OR (token_id IS NOT NULL AND request_id IS NOT NULL));

-- An audit row names the acting principal and the database's clock. Approval kinds are the
-- approval trigger's alone (it runs as the recorder, with the principal its guard checked),
-- and plan-read kinds `read_plan`'s (0014, also the recorder's);
-- a request's token, address and id only from a principal the API became; and a principal
-- that is neither runtime nor operator writes only the `api.*` row of its own request.
CREATE OR REPLACE FUNCTION qinglong.guard_audit_event() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    acting pg_catalog.text;
BEGIN
    IF CURRENT_USER::pg_catalog.text = 'qinglong_recorder' THEN
        -- The approval trigger's rows, and `read_plan`'s (migration 0014).
        IF (NEW.kind NOT LIKE 'approval.%' AND NEW.kind NOT LIKE 'plan.%')
                OR NEW.token_id IS NOT NULL THEN
            RAISE EXCEPTION 'the recorder writes approval and plan-read audit records only'
                USING ERRCODE = 'QLI01';
        END IF;
    ELSE
        acting := qinglong.acting_role();
        IF acting IS NULL
                OR NEW.principal IS DISTINCT FROM qinglong.acting_principal() THEN
            RAISE EXCEPTION 'an audit record names the acting principal'
                USING ERRCODE = 'QLI01';
        END IF;
        IF NEW.kind LIKE 'approval.%' OR NEW.kind LIKE 'plan.%' THEN
            RAISE EXCEPTION 'approval and plan-read audit records are written by their definer only'
                USING ERRCODE = 'QLI01';
        END IF;
        IF (NEW.token_id IS NOT NULL OR NEW.kind LIKE 'api.%')
                AND (acting = SESSION_USER::pg_catalog.text OR NEW.token_id IS NULL
                     OR NEW.kind NOT LIKE 'api.%') THEN
            RAISE EXCEPTION 'a request''s audit record comes from a principal the API became'
                USING ERRCODE = 'QLI01';
        END IF;
        IF NEW.kind NOT LIKE 'api.%'
                AND NOT pg_catalog.pg_has_role(acting, 'qinglong_runtime', 'MEMBER')
                AND NOT pg_catalog.pg_has_role(acting, 'qinglong_operator', 'MEMBER') THEN
            RAISE EXCEPTION 'this principal writes only the audit record of its request'
                USING ERRCODE = 'QLI01';
        END IF;
    END IF;
    NEW.committed_at_ms := (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
        OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8;
    RETURN NEW;
END
$$;

-- -- 5. principals' kinds ------------------------------------------------------------------

-- A viewer reads the state of requests and dispatches (not plans, tokens or audit rows); a
-- submitter also creates plans and requests, and decides nothing (no UPDATE: a request is
-- withdrawn by an approver's rejection). Approvers and submitters append the audit row of
-- their own API request (the guard above keeps them to it).
GRANT USAGE ON SCHEMA qinglong TO qinglong_viewer, qinglong_submitter;
GRANT SELECT ON qinglong.schema_migrations, qinglong.approval_requests,
    qinglong.approved_action_dispatches, qinglong.approved_action_dispatch_executions,
    qinglong.execution_events, qinglong.recovery_resolutions, qinglong.recovery_observations,
    qinglong.runs, qinglong.step_runs
    TO qinglong_viewer, qinglong_submitter;
GRANT INSERT ON qinglong.action_plans, qinglong.approval_requests TO qinglong_submitter;
GRANT SELECT (project_id, action_ref) ON qinglong.action_plans TO qinglong_submitter;
GRANT INSERT ON qinglong.security_audit_events TO qinglong_approver, qinglong_submitter;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA qinglong TO qinglong_submitter, qinglong_approver;
