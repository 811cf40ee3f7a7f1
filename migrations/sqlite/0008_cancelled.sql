-- The terminal state `cancelled`: an operator cancels a dispatch while it waits
-- (`pending` or `retry_wait`), under the same fence a claim takes, so it never reaches the
-- barrier. SQLite cannot alter a CHECK, so the execution table is rebuilt with the new status
-- and its indexes and state-machine triggers are created again (they went with the old table);
-- no table references executions, and the copy keeps every row and column as it was.
--
-- Amended in place: its comments point at docs/; the SQL is unchanged. A database that
-- applied the earlier text matches this checksum:
-- amends checksum 05b31cc471e7d6ce8f9b5b38ba7db79739dae6d7c26070f292426cb0892a0500

CREATE TABLE approved_action_dispatch_executions_0008 (
    dispatch_id         TEXT PRIMARY KEY REFERENCES approved_action_dispatches (dispatch_id),
    project_id          TEXT NOT NULL,
    status              TEXT NOT NULL CHECK (status IN
        ('pending', 'leased', 'retry_wait', 'executing', 'succeeded', 'failed', 'blocked',
         'cancelled')),
    version             INTEGER NOT NULL CHECK (version >= 0),
    attempt             INTEGER NOT NULL CHECK (attempt >= 0),
    max_attempts        INTEGER NOT NULL CHECK (max_attempts >= 1),
    eligible_at_ms      INTEGER,
    retry_at_ms         INTEGER,
    lease_owner         TEXT,
    lease_token         TEXT,
    lease_expires_at_ms INTEGER,
    started_at_ms       INTEGER,
    result_mutation_id  TEXT,
    result_code         TEXT,
    completed_at_ms     INTEGER,
    created_at_ms       INTEGER NOT NULL,
    updated_at_ms       INTEGER NOT NULL,
    -- eligible_at_ms is the due-index key: set exactly in the claimable states.
    CHECK ((eligible_at_ms IS NOT NULL) = (status IN ('pending', 'leased', 'retry_wait'))),
    CHECK (status NOT IN ('leased', 'executing')
           OR (lease_owner IS NOT NULL AND lease_token IS NOT NULL
               AND lease_expires_at_ms IS NOT NULL)),
    CHECK (status <> 'executing' OR started_at_ms IS NOT NULL),
    -- Cancelled only from a wait: nothing was ever started.
    CHECK (status <> 'cancelled' OR started_at_ms IS NULL)
) STRICT;

INSERT INTO approved_action_dispatch_executions_0008 (
    dispatch_id, project_id, status, version, attempt, max_attempts, eligible_at_ms,
    retry_at_ms, lease_owner, lease_token, lease_expires_at_ms, started_at_ms,
    result_mutation_id, result_code, completed_at_ms, created_at_ms, updated_at_ms
)
SELECT dispatch_id, project_id, status, version, attempt, max_attempts, eligible_at_ms,
    retry_at_ms, lease_owner, lease_token, lease_expires_at_ms, started_at_ms,
    result_mutation_id, result_code, completed_at_ms, created_at_ms, updated_at_ms
FROM approved_action_dispatch_executions;

DROP TABLE approved_action_dispatch_executions;

ALTER TABLE approved_action_dispatch_executions_0008
    RENAME TO approved_action_dispatch_executions;

-- The one due scan of both dialects; executing and terminal rows are never in it.
CREATE INDEX approved_action_dispatch_executions_due
    ON approved_action_dispatch_executions (eligible_at_ms, dispatch_id)
    WHERE eligible_at_ms IS NOT NULL;

-- Bounded recovery scan: started rows ordered by lease expiry.
CREATE INDEX approved_action_dispatch_executions_executing
    ON approved_action_dispatch_executions (lease_expires_at_ms, dispatch_id)
    WHERE status = 'executing';

CREATE INDEX approved_action_dispatch_executions_status
    ON approved_action_dispatch_executions (status);

-- A consumed approval creates the row pending@v0: nothing claimed, started or settled yet.
CREATE TRIGGER approved_action_dispatch_executions_insert_state
BEFORE INSERT ON approved_action_dispatch_executions
WHEN NEW.status IS NOT 'pending' OR NEW.version IS NOT 0 OR NEW.attempt IS NOT 0
    OR NEW.lease_owner IS NOT NULL OR NEW.lease_token IS NOT NULL
    OR NEW.lease_expires_at_ms IS NOT NULL OR NEW.started_at_ms IS NOT NULL
    OR NEW.retry_at_ms IS NOT NULL OR NEW.result_mutation_id IS NOT NULL
    OR NEW.result_code IS NOT NULL OR NEW.completed_at_ms IS NOT NULL
BEGIN SELECT RAISE(ABORT, 'qinglong:transition_refused: insert'); END;

-- As in 0006, with `cancelled` terminal and reachable from the two waits. On an edge device
-- the file's owner is the operator, so SQLite has no principal to ask (PostgreSQL does).
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
                OR NEW.status = 'cancelled'
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
        -- A claim may set the whole fence anew, so its own checks end the CASE here.
        WHEN NEW.status = 'leased'
            AND (OLD.status <> 'leased' OR NEW.attempt IS NOT OLD.attempt)
            THEN CASE
                WHEN NEW.attempt IS NOT OLD.attempt + 1 OR NEW.attempt > NEW.max_attempts
                    OR NEW.started_at_ms IS NOT NULL
                    THEN RAISE(ABORT, 'qinglong:transition_refused: attempt')
            END
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
