-- Transactional actions (docs/state-machine.md#passages, decision 0055), in schema qinglong:
-- an action whose whole effect is rows in this database (`run.create`) may commit its claim,
-- start barrier, effect, receipt and completion in one transaction, a passage: its execution
-- row goes from `pending` straight to `succeeded`, written once, one ledger line naming the
-- path (the ledger trigger writes `pending → succeeded` from the row itself).
-- 1. `transactional_action_types`: the action types that may take a passage, written by the
--    schema's owner alone (no login is granted a write: 42501); `run.create` is one.
-- 2. The edge `pending → succeeded` (the state-machine function of migration 0035 replaced,
--    with that edge more): only the runtime (QLT01), only for a type of point 1 (QLT01), the
--    next attempt within the budget, no takeover, the holder, its start and its completion
--    named (QLT01), the holder's proof presented (QLF01). A passage is a claim and a start:
--    the window (QLW01) and freeze (QLZ01) checks of migration 0035 take that edge too.
-- 3. A passage commits only with the dispatch's receipt for exactly that attempt, start and
--    version (a deferred constraint trigger, checked at commit: the receipt and its Run are
--    written after the row, since both present the proof the row now holds): QLT01 at commit.
--    No other action's barrier can be skipped by it; a passage never leaves a started row
--    behind, so a transactional dispatch that passed is never `recovery_required`. The row
--    names the receipt it commits with (`passage_receipt`, its own dispatch id, written by
--    that edge alone), as on SQLite, whose only check at commit is a foreign key on it: here
--    the deferred trigger checks more (the attempt, version and start), so no key is needed.

CREATE TABLE qinglong.transactional_action_types (
    action_type TEXT PRIMARY KEY CHECK (length(action_type) BETWEEN 1 AND 128)
);
INSERT INTO qinglong.transactional_action_types (action_type) VALUES ('run.create');
-- Read by the state machine on the passage edge (as the runtime), and by whoever shows it.
GRANT SELECT ON qinglong.transactional_action_types
    TO qinglong_runtime, qinglong_operator, qinglong_viewer;

-- Point 3: the receipt the passage names (the same column as SQLite's).
ALTER TABLE qinglong.approved_action_dispatch_executions ADD COLUMN passage_receipt TEXT
    CHECK (passage_receipt IS NULL OR (passage_receipt = dispatch_id AND status = 'succeeded'));
GRANT UPDATE (passage_receipt) ON qinglong.approved_action_dispatch_executions
    TO qinglong_runtime;

-- The state machine of migration 0035, with the edge of point 2.
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
    -- A passage (point 2): the runtime alone, for a type the owner marked transactional,
    -- taking the next attempt within the budget as a claim would, started and completed by
    -- this one write under the holder's proof (the Run and the receipt written after it in the
    -- same transaction present that proof; the receipt is checked at commit, point 3).
    IF OLD.status = 'pending' AND NEW.status = 'succeeded' THEN
        acting := qinglong.acting_role();
        IF acting IS NULL
                OR NOT pg_catalog.pg_has_role(acting, 'qinglong_runtime', 'MEMBER') THEN
            RAISE EXCEPTION 'qinglong:transition_refused: runtime (% → %)', OLD.status,
                NEW.status USING ERRCODE = 'QLT01';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM qinglong.approved_action_dispatches AS d
                       JOIN qinglong.transactional_action_types AS t
                         ON t.action_type = d.action_type
                       WHERE d.dispatch_id = NEW.dispatch_id) THEN
            RAISE EXCEPTION 'qinglong:transition_refused: not transactional (% → %)',
                OLD.status, NEW.status USING ERRCODE = 'QLT01';
        END IF;
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

-- Point 3: at commit, the passage's receipt (the one `run.create` writes, bound by its own
-- guard to this execution's attempt and start and to the dispatch's Run).
CREATE FUNCTION qinglong.check_passage_receipt() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM qinglong.approved_run_action_receipts AS r
                   WHERE r.dispatch_id = NEW.dispatch_id
                     AND r.execution_attempt = NEW.attempt
                     AND r.execution_version = NEW.version
                     AND r.started_at_ms = NEW.started_at_ms) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: a passage commits with its receipt (% → %)',
            OLD.status, NEW.status USING ERRCODE = 'QLT01';
    END IF;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER approved_action_dispatch_executions_passage_receipt
    AFTER UPDATE ON qinglong.approved_action_dispatch_executions
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.status = 'pending' AND NEW.status = 'succeeded')
    EXECUTE FUNCTION qinglong.check_passage_receipt();

-- Point 2: the window and freeze checks of migration 0035 on the passage edge too.
DROP TRIGGER approved_action_dispatch_executions_window
    ON qinglong.approved_action_dispatch_executions;
CREATE TRIGGER approved_action_dispatch_executions_window
    BEFORE UPDATE ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW WHEN ((NEW.not_before_ms IS NOT NULL OR NEW.not_after_ms IS NOT NULL)
        AND ((NEW.status = 'leased' AND (OLD.status <> 'leased'
                                         OR NEW.lease_token IS DISTINCT FROM OLD.lease_token))
             OR (NEW.status = 'executing' AND OLD.status <> 'executing')
             OR (NEW.status = 'succeeded' AND OLD.status = 'pending')))
    EXECUTE FUNCTION qinglong.check_execution_window();

DROP TRIGGER approved_action_dispatch_executions_freeze
    ON qinglong.approved_action_dispatch_executions;
CREATE TRIGGER approved_action_dispatch_executions_freeze
    BEFORE UPDATE ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW WHEN ((NEW.status = 'leased' AND (OLD.status <> 'leased'
                                                   OR NEW.lease_token IS DISTINCT FROM
                                                      OLD.lease_token))
                       OR (NEW.status = 'executing' AND OLD.status <> 'executing')
                       OR (NEW.status = 'succeeded' AND OLD.status = 'pending'))
    EXECUTE FUNCTION qinglong.check_execution_freeze();

REVOKE ALL ON FUNCTION qinglong.check_passage_receipt() FROM PUBLIC;
