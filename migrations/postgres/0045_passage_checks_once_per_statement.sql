-- A passage's checks of who passes it and for which type, asked once per statement
-- (docs/decisions/0059-a-passages-actor-and-type-are-asked-once-per-statement.md), in schema
-- qinglong.
-- Every rule of migration 0043 stays; what changes is how often a page of passages pays for
-- asking it. Each row of a passage asked who acts (two catalog reads through
-- `acting_role`) and whether its dispatch's type is marked transactional (a join), though
-- every row of one statement has the same actor, and a page of passages is one statement.
-- 1. The state machine (migration 0043's, replaced) keeps, on the edge `pending → succeeded`,
--    every check of the row itself: the attempt within the budget, no takeover, the holder,
--    its start, its completion and its receipt named (QLT01), the proof presented (QLF01).
-- 2. After each UPDATE statement of execution rows, one check of the rows it passed (those
--    that name their receipt: only a passage writes `passage_receipt`, and a row that names
--    it is terminal, so every such row of the statement was passed by it): the acting role
--    is the runtime's (QLT01) and every passed row's dispatch is of a type marked
--    transactional (QLT01). A refusal undoes the whole statement, as a row's did: nothing of
--    it is written. The function is not a definer: it asks who acts as the statement's
--    caller.

-- Point 1.
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
            ('pending', 'cancelled'), ('retry_wait', 'cancelled'), ('leased', 'cancelled'),
            ('pending', 'succeeded')) THEN
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
    -- A passage (migration 0043): taking the next attempt within the budget as a claim
    -- would, started and completed by this one write under the holder's proof (the Run and
    -- the receipt written after it in the same transaction present that proof; the receipt is
    -- checked at commit). Who passes it, and for which type, the statement's check asks once
    -- for all its rows (`check_passages`, below).
    IF OLD.status = 'pending' AND NEW.status = 'succeeded' THEN
        IF NEW.attempt IS DISTINCT FROM OLD.attempt + 1 OR NEW.attempt > NEW.max_attempts
                OR NEW.takeovers IS DISTINCT FROM OLD.takeovers
                OR NEW.lease_owner IS NULL OR NEW.lease_token IS NULL
                OR NEW.started_at_ms IS NULL OR NEW.completed_at_ms IS NULL
                OR NEW.result_mutation_id IS NULL
                OR NEW.passage_receipt IS DISTINCT FROM NEW.dispatch_id THEN
            RAISE EXCEPTION 'qinglong:transition_refused: passage (% → %)', OLD.status,
                NEW.status USING ERRCODE = 'QLT01';
        END IF;
        IF NEW.lease_proof IS NULL THEN
            RAISE EXCEPTION 'qinglong:fence_refused: a passage presents its proof (% → %)',
                OLD.status, NEW.status USING ERRCODE = 'QLF01';
        END IF;
        NEW.lease_proof_digest := pg_catalog.encode(pg_catalog.sha256(
            pg_catalog.convert_to(NEW.lease_proof, 'UTF8')), 'hex');
        NEW.lease_proof := NULL;
        RETURN NEW;
    END IF;
    -- Only a passage names a receipt on its row (point 3).
    IF NEW.passage_receipt IS DISTINCT FROM OLD.passage_receipt THEN
        RAISE EXCEPTION 'qinglong:transition_refused: passage receipt (% → %)', OLD.status,
            NEW.status USING ERRCODE = 'QLT01';
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


-- Point 2.
CREATE FUNCTION qinglong.check_passages() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    acting pg_catalog.text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM new_rows AS n WHERE n.passage_receipt IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    acting := qinglong.acting_role();
    IF acting IS NULL OR NOT pg_catalog.pg_has_role(acting, 'qinglong_runtime', 'MEMBER') THEN
        RAISE EXCEPTION 'qinglong:transition_refused: runtime (pending → succeeded)'
            USING ERRCODE = 'QLT01';
    END IF;
    IF EXISTS (SELECT 1 FROM new_rows AS n
               WHERE n.passage_receipt IS NOT NULL
                 AND NOT EXISTS (SELECT 1 FROM qinglong.approved_action_dispatches AS d
                                 JOIN qinglong.transactional_action_types AS t
                                   ON t.action_type = d.action_type
                                 WHERE d.dispatch_id = n.dispatch_id))
    THEN
        RAISE EXCEPTION 'qinglong:transition_refused: not transactional (pending → succeeded)'
            USING ERRCODE = 'QLT01';
    END IF;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION qinglong.check_passages() FROM PUBLIC;

CREATE TRIGGER approved_action_dispatch_executions_passages
    AFTER UPDATE ON qinglong.approved_action_dispatch_executions
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.check_passages();
