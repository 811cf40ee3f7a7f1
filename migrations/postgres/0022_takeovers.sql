-- Takeovers counted apart from attempts, and handler waits woken (docs/state-machine.md,
-- docs/decisions/0028-takeovers-are-not-failures.md), in schema qinglong.
--
-- 1. A takeover of an expired lease before the barrier (its holder died or stalled) refunds
--    the attempt its holder's claim took, as a yield does, and counts one in `takeovers`
--    instead: leased → leased with the same attempt, a new token and takeovers + 1, within
--    4 × max_attempts (`domain/states.py` TAKEOVERS_PER_ATTEMPT), only once the old lease
--    expired on the database clock. A leased row is no longer claimed with attempt + 1. Past
--    the bound the row is blocked `takeovers_exhausted` (a suspected poison pill): that
--    block, and no longer a spent attempt budget, is what needs no holder's proof.
-- 2. A `handler_missing` wait (pending, due later) may be made due earlier and nothing else:
--    pending → pending moving only eligible_at_ms back. A daemon that has the handler does
--    it at start.
-- 3. The ledger writes a line for every claim, a takeover included (it counts one).

ALTER TABLE qinglong.approved_action_dispatch_executions
    ADD COLUMN takeovers INTEGER NOT NULL DEFAULT 0 CHECK (takeovers >= 0);

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
                settled := NEW.status = 'blocked'
                    AND OLD.takeovers >= 4 * OLD.max_attempts
                    AND NEW.result_code IS NOT DISTINCT FROM 'takeovers_exhausted'
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

-- The ledger as in migration 0011, with a line for a takeover too (same status and attempt,
-- one more takeover). The function stays the recorder's: the migrator is a member of it.
CREATE OR REPLACE FUNCTION qinglong.record_execution_changes() RETURNS trigger
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
    WHERE n.status IS DISTINCT FROM o.status OR n.attempt IS DISTINCT FROM o.attempt
       OR n.takeovers IS DISTINCT FROM o.takeovers;
    RETURN NULL;
END
$$;
