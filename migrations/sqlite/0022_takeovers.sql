-- Takeovers counted apart from attempts, and handler waits woken (docs/state-machine.md,
-- docs/decisions/0028-takeovers-are-not-failures.md); the same rules as PostgreSQL's.
--
-- 1. A takeover of an expired lease before the barrier (its holder died or stalled) refunds
--    the attempt its holder's claim took, as a yield does, and counts one in `takeovers`
--    instead: leased → leased with the same attempt, a new token and takeovers + 1, within
--    4 × max_attempts (`domain/states.py` TAKEOVERS_PER_ATTEMPT), only once the old lease
--    expired on the database clock. A leased row is no longer claimed with attempt + 1.
-- 2. A `handler_missing` wait (pending, due later) may be made due earlier and nothing else:
--    pending → pending moving only eligible_at_ms back. A daemon that has the handler does
--    it at start.
-- 3. The ledger writes a line for every claim, a takeover included (it counts one).

ALTER TABLE approved_action_dispatch_executions
    ADD COLUMN takeovers INTEGER NOT NULL DEFAULT 0 CHECK (takeovers >= 0);

DROP TRIGGER approved_action_dispatch_executions_insert_state;
CREATE TRIGGER approved_action_dispatch_executions_insert_state
BEFORE INSERT ON approved_action_dispatch_executions
WHEN NEW.status IS NOT 'pending' OR NEW.version IS NOT 0 OR NEW.attempt IS NOT 0
    OR NEW.takeovers IS NOT 0
    OR NEW.lease_owner IS NOT NULL OR NEW.lease_token IS NOT NULL
    OR NEW.lease_expires_at_ms IS NOT NULL OR NEW.started_at_ms IS NOT NULL
    OR NEW.retry_at_ms IS NOT NULL OR NEW.result_mutation_id IS NOT NULL
    OR NEW.result_code IS NOT NULL OR NEW.completed_at_ms IS NOT NULL
BEGIN SELECT RAISE(ABORT, 'qinglong:transition_refused: insert'); END;

DROP TRIGGER approved_action_dispatch_executions_state_machine;
CREATE TRIGGER approved_action_dispatch_executions_state_machine
BEFORE UPDATE ON approved_action_dispatch_executions
BEGIN
    SELECT CASE
        WHEN OLD.status = 'succeeded' OR OLD.status = 'failed' OR OLD.status = 'blocked'
            OR OLD.status = 'cancelled'
            THEN RAISE(ABORT, 'qinglong:transition_refused: terminal')
        WHEN NEW.dispatch_id IS NOT OLD.dispatch_id OR NEW.project_id IS NOT OLD.project_id
            OR NEW.max_attempts IS NOT OLD.max_attempts
            OR NEW.created_at_ms IS NOT OLD.created_at_ms
            THEN RAISE(ABORT, 'qinglong:transition_refused: identity')
        WHEN NEW.version IS NULL OR NEW.version <= OLD.version
            THEN RAISE(ABORT, 'qinglong:transition_refused: version')
        WHEN NOT CASE OLD.status
            WHEN 'pending' THEN NEW.status = 'leased' OR NEW.status = 'blocked'
                OR NEW.status = 'cancelled' OR NEW.status = 'pending'
            WHEN 'retry_wait' THEN NEW.status = 'leased' OR NEW.status = 'blocked'
                OR NEW.status = 'cancelled'
            WHEN 'leased' THEN NEW.status = 'leased' OR NEW.status = 'blocked'
                OR NEW.status = 'retry_wait' OR NEW.status = 'pending'
                OR NEW.status = 'executing'
            WHEN 'executing' THEN NEW.status = 'executing' OR NEW.status = 'succeeded'
                OR NEW.status = 'failed' OR NEW.status = 'blocked'
            ELSE 0
        END
            THEN RAISE(ABORT, 'qinglong:transition_refused: transition')
        -- A handler wait made due earlier: only its due time moves back, nothing else.
        WHEN OLD.status = 'pending' AND NEW.status = 'pending'
            THEN CASE
                WHEN OLD.result_code IS NOT 'handler_missing'
                    OR NOT NEW.eligible_at_ms < OLD.eligible_at_ms
                    OR NEW.attempt IS NOT OLD.attempt OR NEW.takeovers IS NOT OLD.takeovers
                    OR NEW.lease_owner IS NOT OLD.lease_owner
                    OR NEW.lease_token IS NOT OLD.lease_token
                    OR NEW.lease_expires_at_ms IS NOT OLD.lease_expires_at_ms
                    OR NEW.started_at_ms IS NOT OLD.started_at_ms
                    OR NEW.retry_at_ms IS NOT OLD.retry_at_ms
                    OR NEW.result_mutation_id IS NOT OLD.result_mutation_id
                    OR NEW.result_code IS NOT OLD.result_code
                    OR NEW.completed_at_ms IS NOT OLD.completed_at_ms
                    THEN RAISE(ABORT, 'qinglong:transition_refused: wake')
            END
        -- A takeover: a new claim of a leased row (a new token, or the same claimant again
        -- with its lease run out). It keeps the attempt (the dead holder's claim is refunded)
        -- and counts one takeover within the bound, once the old lease expired on the
        -- database clock.
        WHEN OLD.status = 'leased' AND NEW.status = 'leased'
            AND (NEW.lease_token IS NOT OLD.lease_token OR NEW.takeovers IS NOT OLD.takeovers)
            THEN CASE
                WHEN NEW.attempt IS NOT OLD.attempt OR NEW.takeovers IS NOT OLD.takeovers + 1
                    OR NEW.takeovers > 4 * NEW.max_attempts OR NEW.started_at_ms IS NOT NULL
                    OR OLD.lease_expires_at_ms
                        > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
                    THEN RAISE(ABORT, 'qinglong:transition_refused: takeover')
            END
        -- A claim of a waiting row takes the next attempt within the budget, starts nothing.
        WHEN NEW.status = 'leased' AND OLD.status <> 'leased'
            THEN CASE
                WHEN NEW.attempt IS NOT OLD.attempt + 1 OR NEW.attempt > NEW.max_attempts
                    OR NEW.started_at_ms IS NOT NULL OR NEW.takeovers IS NOT OLD.takeovers
                    THEN RAISE(ABORT, 'qinglong:transition_refused: attempt')
            END
        WHEN NEW.takeovers IS NOT OLD.takeovers
            THEN RAISE(ABORT, 'qinglong:transition_refused: takeover')
        -- Anything else keeps the fence; a yield refunds the attempt.
        WHEN NEW.attempt IS NOT OLD.attempt
                - (CASE WHEN OLD.status = 'leased' AND NEW.status = 'pending' THEN 1 ELSE 0 END)
            THEN RAISE(ABORT, 'qinglong:transition_refused: attempt')
        WHEN NEW.lease_owner IS NOT OLD.lease_owner OR NEW.lease_token IS NOT OLD.lease_token
            OR (NEW.started_at_ms IS NOT OLD.started_at_ms
                AND NOT (OLD.status = 'leased' AND NEW.status = 'executing'))
            THEN RAISE(ABORT, 'qinglong:transition_refused: fence')
    END;
END;

DROP TRIGGER approved_action_dispatch_executions_ledger_update;
CREATE TRIGGER approved_action_dispatch_executions_ledger_update
AFTER UPDATE ON approved_action_dispatch_executions
WHEN NEW.status IS NOT OLD.status OR NEW.attempt IS NOT OLD.attempt
    OR NEW.takeovers IS NOT OLD.takeovers
BEGIN
    INSERT INTO execution_events (
        dispatch_id, version, from_status, to_status, attempt, lease_owner, lease_token,
        mutation_id, result_code, committed_at_ms
    ) VALUES (
        NEW.dispatch_id, NEW.version, OLD.status, NEW.status, NEW.attempt, NEW.lease_owner,
        NEW.lease_token,
        CASE WHEN NEW.result_mutation_id IS NOT OLD.result_mutation_id
             THEN NEW.result_mutation_id END,
        CASE WHEN NEW.status <> 'leased' AND NEW.status <> 'executing' THEN NEW.result_code END,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    );
END;
