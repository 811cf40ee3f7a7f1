-- The terminal state `cancelled`, in schema qinglong: an operator cancels a
-- dispatch while it waits (`pending` or `retry_wait`), under the same row lock and version a
-- claim takes, so it never reaches the barrier. The status CHECK admits the new state (it is
-- strictly wider, so every existing row passes), the state-machine function of 0006 is
-- replaced with the two new pairs and the operator rule, and the operator may now clear the
-- due-index columns a cancel empties.
--
-- Amended in place: every function pins pg_temp last (migration 0011 says why). A
-- database that applied the first text of this file matches this checksum:
-- amends checksum 292a9ac8db36b4a9c1f1fbe4496732ca0db94d77c76e22004b40693360b3489d
-- Amended again, to point its comments at docs/ (the SQL is unchanged):
-- amends checksum cbf89f64e7349f23506f12cab0e666c6d322593e5eaed8e29425c0d1a07380e5

ALTER TABLE qinglong.approved_action_dispatch_executions
    DROP CONSTRAINT approved_action_dispatch_executions_status_check;
ALTER TABLE qinglong.approved_action_dispatch_executions
    ADD CONSTRAINT approved_action_dispatch_executions_status_check CHECK (status IN
        ('pending', 'leased', 'retry_wait', 'executing', 'succeeded', 'failed', 'blocked',
         'cancelled'));
-- Cancelled only from a wait: nothing was ever started.
ALTER TABLE qinglong.approved_action_dispatch_executions
    ADD CONSTRAINT approved_action_dispatch_executions_cancelled_unstarted
        CHECK (status <> 'cancelled' OR started_at_ms IS NULL);

CREATE OR REPLACE FUNCTION qinglong.check_execution_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    claim boolean;
    refund integer;
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- A consumed approval creates the row pending@v0 (docs/state-machine.md): nothing claimed,
        -- started or settled yet.
        IF NEW.status IS DISTINCT FROM 'pending' OR NEW.version IS DISTINCT FROM 0
                OR NEW.attempt IS DISTINCT FROM 0 OR NEW.lease_owner IS NOT NULL
                OR NEW.lease_token IS NOT NULL OR NEW.lease_expires_at_ms IS NOT NULL
                OR NEW.started_at_ms IS NOT NULL OR NEW.retry_at_ms IS NOT NULL
                OR NEW.result_mutation_id IS NOT NULL OR NEW.result_code IS NOT NULL
                OR NEW.completed_at_ms IS NOT NULL THEN
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
    -- Cancelling is an operator's decision: the runtime login, which may UPDATE
    -- every column of the row, never makes it, so the database asks who is deciding.
    IF NEW.status = 'cancelled'
            AND NOT pg_has_role(session_user, 'qinglong_operator', 'MEMBER') THEN
        RAISE EXCEPTION 'qinglong:transition_refused: operator (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    -- The fence (attempt, owner, token, started_at_ms) changes only by a claim, which takes
    -- the next attempt within the budget and starts nothing; leased → leased with the same
    -- attempt is a renew. A yield refunds its claim's attempt; the start barrier alone sets
    -- started_at_ms. So a renew, a completion or a resolution never rewrites who started.
    claim := NEW.status = 'leased'
        AND (OLD.status <> 'leased' OR NEW.attempt IS DISTINCT FROM OLD.attempt);
    IF claim THEN
        IF NEW.attempt IS DISTINCT FROM OLD.attempt + 1 OR NEW.attempt > NEW.max_attempts
                OR NEW.started_at_ms IS NOT NULL THEN
            RAISE EXCEPTION 'qinglong:transition_refused: attempt (% → %)', OLD.status,
                NEW.status USING ERRCODE = 'QLT01';
        END IF;
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
    RETURN NEW;
END
$$;

GRANT UPDATE (eligible_at_ms, retry_at_ms)
    ON qinglong.approved_action_dispatch_executions TO qinglong_operator;
