-- Execution windows (docs/state-machine.md#windows-and-freezes, decision 0046), in schema
-- qinglong: the database decides when an approved action may start.
-- 1. A policy may carry a window: `not_before_delay_ms` (the dispatch may start only that long
--    after it is created) and `window_ms` (and then only within that long). The database
--    copies them, never the caller, into the dispatch when it is written, from the policy
--    version its request carries and the database's clock (a definer overwrites whatever an
--    INSERT names), and into its execution, whose first due time is the window's start (the
--    claim's due index then skips a row before its window at no cost).
-- 2. A lease (a claim or a takeover) or a start barrier outside the window, on the database's
--    clock, is refused QLW01; a window never changes (QLI01).
-- 3. Past its window a waiting row (`pending`, `retry_wait`, or `leased` under a lease that
--    expired before its start: a holder that died between claim and barrier) ends
--    `cancelled` with the code `window_expired`, by the runtime's reconcile pass and by no
--    one else (QLT01), never while the window is open (QLW01) nor under a live lease (QLF02):
--    the state-machine function of migration 0022 is replaced with that rule more. Without
--    the `leased` case such a row could never be taken over (outside its window) nor ended.

ALTER TABLE qinglong.approval_policies
    ADD COLUMN not_before_delay_ms BIGINT
        CHECK (not_before_delay_ms BETWEEN 0 AND 2592000000),
    ADD COLUMN window_ms BIGINT CHECK (window_ms BETWEEN 1000 AND 2592000000);
ALTER TABLE qinglong.approved_action_dispatches
    ADD COLUMN not_before_ms BIGINT,
    ADD COLUMN not_after_ms BIGINT;
ALTER TABLE qinglong.approved_action_dispatch_executions
    ADD COLUMN not_before_ms BIGINT,
    ADD COLUMN not_after_ms BIGINT;

-- Definers (the recorder, like every definer): the consumer's login need not read policies,
-- and never chooses the window it copies.
CREATE FUNCTION qinglong.dispatch_window_of_policy() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    delay pg_catalog.int8;
    span  pg_catalog.int8;
    opens pg_catalog.int8;
BEGIN
    NEW.not_before_ms := NULL;
    NEW.not_after_ms := NULL;
    SELECT p.not_before_delay_ms, p.window_ms INTO delay, span
    FROM qinglong.approval_request_policies AS r
    JOIN qinglong.approval_policies AS p
        ON p.name = r.policy_name AND p.version = r.policy_version
    WHERE r.approval_request_id = NEW.approval_request_id;
    IF delay IS NULL AND span IS NULL THEN
        RETURN NEW;
    END IF;
    opens := qinglong.db_now_ms() OPERATOR(pg_catalog.+) COALESCE(delay, 0);
    IF delay IS NOT NULL THEN
        NEW.not_before_ms := opens;
    END IF;
    IF span IS NOT NULL THEN
        NEW.not_after_ms := opens OPERATOR(pg_catalog.+) span;
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION qinglong.execution_window_of_dispatch() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    SELECT d.not_before_ms, d.not_after_ms INTO NEW.not_before_ms, NEW.not_after_ms
    FROM qinglong.approved_action_dispatches AS d WHERE d.dispatch_id = NEW.dispatch_id;
    IF NEW.not_before_ms IS NOT NULL THEN
        NEW.eligible_at_ms := GREATEST(NEW.eligible_at_ms, NEW.not_before_ms);
    END IF;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION qinglong.dispatch_window_of_policy() FROM PUBLIC;
REVOKE ALL ON FUNCTION qinglong.execution_window_of_dispatch() FROM PUBLIC;
GRANT CREATE ON SCHEMA qinglong TO qinglong_recorder;
ALTER FUNCTION qinglong.dispatch_window_of_policy() OWNER TO qinglong_recorder;
ALTER FUNCTION qinglong.execution_window_of_dispatch() OWNER TO qinglong_recorder;
REVOKE CREATE ON SCHEMA qinglong FROM qinglong_recorder;

CREATE TRIGGER approved_action_dispatches_window_of_policy
    BEFORE INSERT ON qinglong.approved_action_dispatches
    FOR EACH ROW EXECUTE FUNCTION qinglong.dispatch_window_of_policy();

CREATE TRIGGER approved_action_dispatch_executions_window_of_dispatch
    BEFORE INSERT ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW EXECUTE FUNCTION qinglong.execution_window_of_dispatch();

-- A window is its dispatch's, forever.
CREATE FUNCTION qinglong.guard_execution_window_copy() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'an execution''s window is its dispatch''s and never changes'
        USING ERRCODE = 'QLI01';
END
$$;

CREATE TRIGGER approved_action_dispatch_executions_window_immutable
    BEFORE UPDATE OF not_before_ms, not_after_ms ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW WHEN ((OLD.not_before_ms, OLD.not_after_ms)
                       IS DISTINCT FROM (NEW.not_before_ms, NEW.not_after_ms))
    EXECUTE FUNCTION qinglong.guard_execution_window_copy();

-- No lease and no start outside the window, on the database's clock. The WHEN keeps a row
-- without a window (every row but a policy's) from calling anything.
CREATE FUNCTION qinglong.check_execution_window() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    now_ms pg_catalog.int8 := qinglong.db_now_ms();
BEGIN
    IF now_ms < NEW.not_before_ms OR now_ms >= NEW.not_after_ms THEN
        RAISE EXCEPTION 'qinglong:window_refused: % outside its execution window (% → %)',
            NEW.dispatch_id, OLD.status, NEW.status USING ERRCODE = 'QLW01';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER approved_action_dispatch_executions_window
    BEFORE UPDATE ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW WHEN ((NEW.not_before_ms IS NOT NULL OR NEW.not_after_ms IS NOT NULL)
        AND ((NEW.status = 'leased' AND (OLD.status <> 'leased'
                                         OR NEW.lease_token IS DISTINCT FROM OLD.lease_token))
             OR (NEW.status = 'executing' AND OLD.status <> 'executing')))
    EXECUTE FUNCTION qinglong.check_execution_window();

-- The expiry sweep reads the waiting rows with a window.
CREATE INDEX approved_action_dispatch_executions_windowed
    ON qinglong.approved_action_dispatch_executions (not_after_ms)
    WHERE not_after_ms IS NOT NULL AND status IN ('pending', 'retry_wait', 'leased');

-- The state machine of migration 0022, with the one rule of point 3.
CREATE OR REPLACE FUNCTION qinglong.check_execution_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    acting   pg_catalog.text;
    claim    pg_catalog.bool;
    takeover pg_catalog.bool;
    refund   pg_catalog.int4;
    now_ms   pg_catalog.int8 := qinglong.db_now_ms();
    proven   pg_catalog.bool;
    settled  pg_catalog.bool;
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- A consumed approval creates the row pending@v0 (docs/state-machine.md): nothing
        -- claimed, taken over, started or settled yet.
        IF NEW.status IS DISTINCT FROM 'pending' OR NEW.version IS DISTINCT FROM 0
                OR NEW.attempt IS DISTINCT FROM 0 OR NEW.takeovers IS DISTINCT FROM 0
                OR NEW.lease_owner IS NOT NULL
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
            ('pending', 'pending'),
            ('pending', 'blocked'), ('retry_wait', 'blocked'), ('leased', 'blocked'),
            ('leased', 'retry_wait'), ('leased', 'pending'), ('leased', 'executing'),
            ('executing', 'executing'), ('executing', 'succeeded'),
            ('executing', 'failed'), ('executing', 'blocked'),
            ('pending', 'cancelled'), ('retry_wait', 'cancelled'), ('leased', 'cancelled')) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: transition (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    -- Cancelling is an operator's decision: the runtime login never makes it.
    -- (Asked only for a cancel: every claim and start passes here, and must stay cheap.)
    IF NEW.status = 'cancelled' THEN
        acting := qinglong.acting_role();
    END IF;
    -- Or the runtime's end of a wait whose execution window closed on the database clock
    -- (`window_expired`, migration 0035): never before, never by anyone else.
    IF NEW.status = 'cancelled' AND NEW.result_code IS NOT DISTINCT FROM 'window_expired' THEN
        IF acting IS NULL
                OR NOT pg_catalog.pg_has_role(acting, 'qinglong_runtime', 'MEMBER') THEN
            RAISE EXCEPTION 'qinglong:transition_refused: runtime (% → %)', OLD.status,
                NEW.status USING ERRCODE = 'QLT01';
        END IF;
        IF OLD.not_after_ms IS NULL OR OLD.not_after_ms > now_ms THEN
            RAISE EXCEPTION 'qinglong:window_refused: the window is still open (% → %)',
                OLD.status, NEW.status USING ERRCODE = 'QLW01';
        END IF;
        IF OLD.status = 'leased' AND OLD.lease_expires_at_ms > now_ms THEN
            RAISE EXCEPTION 'qinglong:fence_refused: live lease (% → %)', OLD.status,
                NEW.status USING ERRCODE = 'QLF02';
        END IF;
    ELSIF OLD.status = 'leased' AND NEW.status = 'cancelled' THEN
        -- A claimed row is cancelled by nobody: only its window's end takes it back.
        RAISE EXCEPTION 'qinglong:transition_refused: transition (% → %)', OLD.status,
            NEW.status USING ERRCODE = 'QLT01';
    ELSIF NEW.status = 'cancelled' AND (acting IS NULL
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
    -- A handler wait made due earlier: only its due time moves back, nothing else.
    IF OLD.status = 'pending' AND NEW.status = 'pending' THEN
        IF OLD.result_code IS DISTINCT FROM 'handler_missing'
                OR NOT NEW.eligible_at_ms < OLD.eligible_at_ms
                OR (NEW.attempt, NEW.takeovers, NEW.lease_owner, NEW.lease_token,
                    NEW.lease_expires_at_ms, NEW.started_at_ms, NEW.retry_at_ms,
                    NEW.result_mutation_id, NEW.result_code, NEW.completed_at_ms)
                   IS DISTINCT FROM
                   (OLD.attempt, OLD.takeovers, OLD.lease_owner, OLD.lease_token,
                    OLD.lease_expires_at_ms, OLD.started_at_ms, OLD.retry_at_ms,
                    OLD.result_mutation_id, OLD.result_code, OLD.completed_at_ms) THEN
            RAISE EXCEPTION 'qinglong:transition_refused: wake (% → %)', OLD.status,
                NEW.status USING ERRCODE = 'QLT01';
        END IF;
        NEW.lease_proof_digest := OLD.lease_proof_digest;
        NEW.lease_proof := NULL;
        RETURN NEW;
    END IF;
    -- A takeover: a new claim of a leased row (a new token, or the same claimant again with
    -- its lease run out). It keeps the attempt (the dead holder's claim is refunded) and
    -- counts one takeover within the bound; the old lease has expired.
    takeover := OLD.status = 'leased' AND NEW.status = 'leased'
        AND (NEW.lease_token IS DISTINCT FROM OLD.lease_token
             OR NEW.takeovers IS DISTINCT FROM OLD.takeovers);
    IF takeover THEN
        IF NEW.attempt IS DISTINCT FROM OLD.attempt
                OR NEW.takeovers IS DISTINCT FROM OLD.takeovers + 1
                OR NEW.takeovers > 4 * NEW.max_attempts
                OR NEW.started_at_ms IS NOT NULL THEN
            RAISE EXCEPTION 'qinglong:transition_refused: takeover (% → %)', OLD.status,
                NEW.status USING ERRCODE = 'QLT01';
        END IF;
    END IF;
    claim := takeover OR (NEW.status = 'leased' AND OLD.status <> 'leased');
    IF claim THEN
        IF NOT takeover AND (NEW.attempt IS DISTINCT FROM OLD.attempt + 1
                OR NEW.attempt > NEW.max_attempts OR NEW.started_at_ms IS NOT NULL
                OR NEW.takeovers IS DISTINCT FROM OLD.takeovers) THEN
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
    IF NEW.takeovers IS DISTINCT FROM OLD.takeovers THEN
        RAISE EXCEPTION 'qinglong:transition_refused: takeover (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
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
            -- Without the holder's proof: an expired lease whose takeovers are spent may be
            -- blocked as such, and a recovery resolution for this exact fence may settle an
            -- expired started row.
            IF OLD.status = 'leased' THEN
                settled := OLD.lease_expires_at_ms <= now_ms AND (
                    (NEW.status = 'blocked'
                     AND OLD.takeovers >= 4 * OLD.max_attempts
                     AND NEW.result_code IS NOT DISTINCT FROM 'takeovers_exhausted')
                    OR (NEW.status = 'cancelled'
                        AND NEW.result_code IS NOT DISTINCT FROM 'window_expired'));
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

-- Freezes (docs/operations.md#freezes-and-holds, decision 0046).
-- 4. `freezes`: a freeze covers the dispatches of its scope (every one, or an action type, a
--    project, a target prefix; the set ones all match) from `from_ms` until `until_ms`, for a
--    reason; written and ended by the schema's owner alone (no grant to any role: 42501 for
--    everyone else), each audited by the recorder (`approval.freeze_added`,
--    `approval.freeze_ended`: an approval record, which no login but the recorder may write).
--    Ending one stamps who and when, nothing else changes; a freeze is never deleted.
-- 5. A covered dispatch waits: no lease and no start while a freeze covers it (QLZ01), and the
--    claim leaves it out without spending anything.
-- 6. `freeze_lifts`: an operator who is not the dispatch's requester lifts one freeze for one
--    dispatch, with a reason (the requester: QLZ02; anyone not an operator: 42501), audited
--    (`approval.freeze_lifted`); a lift is never changed nor deleted but with its dispatch.

CREATE TABLE qinglong.freezes (
    freeze_id     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action_type   TEXT CHECK (action_type IS NULL OR length(action_type) BETWEEN 1 AND 128),
    project_id    TEXT CHECK (project_id IS NULL OR length(project_id) BETWEEN 1 AND 128),
    target_prefix TEXT CHECK (target_prefix IS NULL
                              OR (target_prefix ~ '^[!-~]{1,128}$'
                                  AND target_prefix !~ '[*?%]')),
    from_ms       BIGINT NOT NULL,
    until_ms      BIGINT NOT NULL,
    reason        TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 200),
    created_by    TEXT NOT NULL DEFAULT '',
    created_at_ms BIGINT NOT NULL DEFAULT 0,
    ended_by      TEXT,
    ended_at_ms   BIGINT,
    CHECK (until_ms > from_ms)
);

-- The freezes that may be in force: the claim's and the triggers' probe.
CREATE INDEX freezes_in_force ON qinglong.freezes (until_ms) WHERE ended_at_ms IS NULL;

CREATE FUNCTION qinglong.guard_freeze() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'a freeze is never deleted: end it' USING ERRCODE = 'QLI01';
    END IF;
    IF TG_OP = 'INSERT' THEN
        NEW.created_by := SESSION_USER::pg_catalog.text;
        NEW.created_at_ms := qinglong.db_now_ms();
        NEW.ended_by := NULL;
        NEW.ended_at_ms := NULL;
        RETURN NEW;
    END IF;
    IF OLD.ended_at_ms IS NOT NULL
            OR (NEW.freeze_id, NEW.action_type, NEW.project_id, NEW.target_prefix, NEW.from_ms,
                NEW.until_ms, NEW.reason, NEW.created_by, NEW.created_at_ms)
               IS DISTINCT FROM
               (OLD.freeze_id, OLD.action_type, OLD.project_id, OLD.target_prefix, OLD.from_ms,
                OLD.until_ms, OLD.reason, OLD.created_by, OLD.created_at_ms) THEN
        RAISE EXCEPTION 'a freeze only ends, once' USING ERRCODE = 'QLI01';
    END IF;
    NEW.ended_by := SESSION_USER::pg_catalog.text;
    NEW.ended_at_ms := qinglong.db_now_ms();
    RETURN NEW;
END
$$;

CREATE TRIGGER freezes_guard
    BEFORE INSERT OR UPDATE OR DELETE ON qinglong.freezes
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_freeze();

CREATE TABLE qinglong.freeze_lifts (
    dispatch_id  TEXT NOT NULL
        REFERENCES qinglong.approved_action_dispatches (dispatch_id) ON DELETE CASCADE,
    freeze_id    BIGINT NOT NULL REFERENCES qinglong.freezes (freeze_id),
    reason       TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 200),
    lifted_by    TEXT NOT NULL DEFAULT '',
    lifted_at_ms BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (dispatch_id, freeze_id)
);

CREATE INDEX freeze_lifts_freeze ON qinglong.freeze_lifts (freeze_id);

CREATE FUNCTION qinglong.guard_freeze_lift() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    acting pg_catalog.text;
BEGIN
    IF TG_OP = 'DELETE' AND NOT EXISTS (SELECT 1 FROM qinglong.approved_action_dispatches
            WHERE dispatch_id = OLD.dispatch_id) THEN
        RETURN OLD;  -- pruned with its dispatch (the key's cascade)
    END IF;
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION 'a freeze lift never changes' USING ERRCODE = 'QLI01';
    END IF;
    acting := qinglong.acting_role();
    IF acting IS NULL OR NOT pg_catalog.pg_has_role(acting, 'qinglong_operator', 'MEMBER') THEN
        RAISE EXCEPTION 'an operator lifts a freeze' USING ERRCODE = 'QLZ02';
    END IF;
    NEW.lifted_by := qinglong.acting_principal();
    IF EXISTS (SELECT 1 FROM qinglong.approved_action_dispatches AS d
               JOIN qinglong.approval_requests AS r
                   ON r.approval_request_id = d.approval_request_id
               WHERE d.dispatch_id = NEW.dispatch_id
                 AND r.requested_principal = NEW.lifted_by) THEN
        RAISE EXCEPTION 'the requester of dispatch % may not lift a freeze for it',
            NEW.dispatch_id USING ERRCODE = 'QLZ02';
    END IF;
    NEW.lifted_at_ms := qinglong.db_now_ms();
    RETURN NEW;
END
$$;

CREATE TRIGGER freeze_lifts_guard
    BEFORE INSERT OR UPDATE OR DELETE ON qinglong.freeze_lifts
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_freeze_lift();

-- A definer (the recorder), like the policy audit.
CREATE FUNCTION qinglong.audit_freeze() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_TABLE_NAME = 'freeze_lifts' THEN
        INSERT INTO qinglong.security_audit_events (
            kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
        ) SELECT 'approval.freeze_lifted', NEW.lifted_by, NEW.lifted_by, d.project_id, NEW.dispatch_id,
                 NEW.freeze_id::pg_catalog.text, NEW.lifted_at_ms
          FROM qinglong.approved_action_dispatches AS d WHERE d.dispatch_id = NEW.dispatch_id;
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO qinglong.security_audit_events (
            kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
        ) VALUES ('approval.freeze_added', NEW.created_by, NEW.created_by,
                  COALESCE(NEW.project_id, ''), 'freeze:' || NEW.freeze_id::pg_catalog.text, pg_catalog.left(NEW.reason, 128),
                  NEW.created_at_ms);
    ELSE
        INSERT INTO qinglong.security_audit_events (
            kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
        ) VALUES ('approval.freeze_ended', NEW.ended_by, NEW.ended_by,
                  COALESCE(NEW.project_id, ''), 'freeze:' || NEW.freeze_id::pg_catalog.text, 'ended', NEW.ended_at_ms);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER freezes_audit
    AFTER INSERT OR UPDATE ON qinglong.freezes
    FOR EACH ROW EXECUTE FUNCTION qinglong.audit_freeze();
CREATE TRIGGER freeze_lifts_audit
    AFTER INSERT ON qinglong.freeze_lifts
    FOR EACH ROW EXECUTE FUNCTION qinglong.audit_freeze();

-- The freeze that covers an execution now, not lifted for it (NULL: none). Read by the start
-- guard below and by `dispatch show`; a definer (the recorder) so that a login that may
-- update an execution need not read freezes to be refused by one.
CREATE FUNCTION qinglong.freeze_covering(p_dispatch_id pg_catalog.text,
        p_now_ms pg_catalog.int8)
RETURNS pg_catalog.int8
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- PL/pgSQL, not SQL: a SQL function with a SET clause is planned again at every call
    -- (migration 0019), and the start guard calls this once per lease and start.
    RETURN (
        SELECT f.freeze_id FROM qinglong.freezes AS f
        JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = p_dispatch_id
        WHERE f.ended_at_ms IS NULL AND f.until_ms > p_now_ms AND f.from_ms <= p_now_ms
          AND (f.action_type IS NULL OR f.action_type = d.action_type)
          AND (f.project_id IS NULL OR f.project_id = d.project_id)
          AND (f.target_prefix IS NULL OR pg_catalog.starts_with(d.target, f.target_prefix))
          AND NOT EXISTS (SELECT 1 FROM qinglong.freeze_lifts AS l
                          WHERE l.dispatch_id = d.dispatch_id AND l.freeze_id = f.freeze_id)
        ORDER BY f.freeze_id
        LIMIT 1);
END
$$;

CREATE FUNCTION qinglong.check_execution_freeze() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    now_ms    pg_catalog.int8;
    frozen_by pg_catalog.int8;
BEGIN
    -- Every lease and start comes here: with no freeze in force (nearly always), one probe of
    -- the partial index and nothing more.
    IF NOT EXISTS (SELECT 1 FROM qinglong.freezes WHERE ended_at_ms IS NULL) THEN
        RETURN NEW;
    END IF;
    now_ms := qinglong.db_now_ms();
    frozen_by := qinglong.freeze_covering(NEW.dispatch_id, now_ms);
    IF frozen_by IS NOT NULL THEN
        RAISE EXCEPTION 'qinglong:freeze_refused: % is frozen by freeze % (% → %)',
            NEW.dispatch_id, frozen_by, OLD.status, NEW.status USING ERRCODE = 'QLZ01';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER approved_action_dispatch_executions_freeze
    BEFORE UPDATE ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW WHEN ((NEW.status = 'leased' AND (OLD.status <> 'leased'
                                                   OR NEW.lease_token IS DISTINCT FROM
                                                      OLD.lease_token))
                       OR (NEW.status = 'executing' AND OLD.status <> 'executing'))
    EXECUTE FUNCTION qinglong.check_execution_freeze();

REVOKE ALL ON FUNCTION qinglong.guard_freeze(), qinglong.guard_freeze_lift(),
    qinglong.audit_freeze(), qinglong.check_execution_freeze(),
    qinglong.freeze_covering(pg_catalog.text, pg_catalog.int8) FROM PUBLIC;
GRANT SELECT ON qinglong.freezes, qinglong.freeze_lifts TO qinglong_recorder;
GRANT CREATE ON SCHEMA qinglong TO qinglong_recorder;
ALTER FUNCTION qinglong.audit_freeze() OWNER TO qinglong_recorder;
ALTER FUNCTION qinglong.freeze_covering(pg_catalog.text, pg_catalog.int8)
    OWNER TO qinglong_recorder;
REVOKE CREATE ON SCHEMA qinglong FROM qinglong_recorder;
GRANT EXECUTE ON FUNCTION qinglong.freeze_covering(pg_catalog.text, pg_catalog.int8)
    TO qinglong_runtime, qinglong_operator, qinglong_viewer, qinglong_approver,
       qinglong_submitter;
GRANT SELECT ON qinglong.freezes, qinglong.freeze_lifts
    TO qinglong_runtime, qinglong_operator, qinglong_viewer, qinglong_approver,
       qinglong_submitter;
GRANT INSERT ON qinglong.freeze_lifts TO qinglong_operator;
