-- The execution and StepRun state machines held by the database (docs/state-machine.md,
-- docs/decisions/0019): triggers allow exactly the row changes of `domain/states.py` ROW_UPDATES and
-- `domain/steps.py` ROW_UPDATES, whoever writes the file. Each trigger is one CASE whose
-- first failing rule aborts with `qinglong:transition_refused: <rule>` (the same rule names
-- and order as PostgreSQL's QLT01); the adapter translates it to `errors.TransitionRefused`.
-- Conditions are written with = and OR: SQLite rebuilds an IN (…) list for every row a
-- trigger fires on, which made a bulk update several times slower.
--
-- Amended in place: its comments point at docs/; the SQL is unchanged. A database that
-- applied the earlier text matches this checksum:
-- amends checksum 0db8e37cd400da5373cbb376fe5719b603de84482060f59ae607cbda20defef3

-- A consumed approval creates the row pending@v0: nothing claimed, started or settled yet.
CREATE TRIGGER approved_action_dispatch_executions_insert_state
BEFORE INSERT ON approved_action_dispatch_executions
WHEN NEW.status IS NOT 'pending' OR NEW.version IS NOT 0 OR NEW.attempt IS NOT 0
    OR NEW.lease_owner IS NOT NULL OR NEW.lease_token IS NOT NULL
    OR NEW.lease_expires_at_ms IS NOT NULL OR NEW.started_at_ms IS NOT NULL
    OR NEW.retry_at_ms IS NOT NULL OR NEW.result_mutation_id IS NOT NULL
    OR NEW.result_code IS NOT NULL OR NEW.completed_at_ms IS NOT NULL
BEGIN SELECT RAISE(ABORT, 'qinglong:transition_refused: insert'); END;

-- The fence (attempt, owner, token, started_at_ms) changes only by a claim, which takes the
-- next attempt within the budget and starts nothing; leased → leased with the same attempt is
-- a renew. A yield refunds its claim's attempt; the start barrier alone sets started_at_ms.
CREATE TRIGGER approved_action_dispatch_executions_state_machine
BEFORE UPDATE ON approved_action_dispatch_executions
BEGIN
    SELECT CASE
        WHEN OLD.status = 'succeeded' OR OLD.status = 'failed' OR OLD.status = 'blocked'
            THEN RAISE(ABORT, 'qinglong:transition_refused: terminal')
        WHEN NEW.dispatch_id IS NOT OLD.dispatch_id OR NEW.project_id IS NOT OLD.project_id
            OR NEW.max_attempts IS NOT OLD.max_attempts
            OR NEW.created_at_ms IS NOT OLD.created_at_ms
            THEN RAISE(ABORT, 'qinglong:transition_refused: identity')
        WHEN NEW.version IS NULL OR NEW.version <= OLD.version
            THEN RAISE(ABORT, 'qinglong:transition_refused: version')
        WHEN NOT CASE OLD.status
            WHEN 'pending' THEN NEW.status = 'leased' OR NEW.status = 'blocked'
            WHEN 'retry_wait' THEN NEW.status = 'leased' OR NEW.status = 'blocked'
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

CREATE TRIGGER step_runs_insert_state
BEFORE INSERT ON step_runs
WHEN NOT (NEW.status = 'ready' OR NEW.status = 'waiting_approval') OR NEW.version IS NOT 1
    OR NEW.result_code IS NOT NULL
BEGIN SELECT RAISE(ABORT, 'qinglong:transition_refused: insert'); END;

-- `lost → ready` is the operator's re-arm (docs/decisions/0019); on an edge device the file's owner is
-- the operator, so SQLite has no principal to ask (PostgreSQL does).
CREATE TRIGGER step_runs_state_machine
BEFORE UPDATE ON step_runs
BEGIN
    SELECT CASE
        WHEN OLD.status = 'succeeded' OR OLD.status = 'failed'
            THEN RAISE(ABORT, 'qinglong:transition_refused: terminal')
        -- The binding digest covers these columns; the row may never drift from it.
        WHEN NEW.step_run_id IS NOT OLD.step_run_id OR NEW.run_id IS NOT OLD.run_id
            OR NEW.project_id IS NOT OLD.project_id OR NEW.step_kind IS NOT OLD.step_kind
            OR NEW.tool_id IS NOT OLD.tool_id OR NEW.tool_version IS NOT OLD.tool_version
            OR NEW.definition_digest IS NOT OLD.definition_digest
            OR NEW.action_type IS NOT OLD.action_type OR NEW.action_ref IS NOT OLD.action_ref
            OR NEW.action_digest IS NOT OLD.action_digest
            OR NEW.approval_request_id IS NOT OLD.approval_request_id
            OR NEW.binding_digest IS NOT OLD.binding_digest
            OR NEW.created_at_ms IS NOT OLD.created_at_ms
            THEN RAISE(ABORT, 'qinglong:transition_refused: identity')
        WHEN NEW.version IS NULL OR NEW.version <= OLD.version
            THEN RAISE(ABORT, 'qinglong:transition_refused: version')
        WHEN NOT CASE OLD.status
            WHEN 'ready' THEN NEW.status = 'running' OR NEW.status = 'failed'
            WHEN 'waiting_approval' THEN NEW.status = 'running' OR NEW.status = 'failed'
            WHEN 'running' THEN NEW.status = 'succeeded' OR NEW.status = 'failed'
                OR NEW.status = 'lost'
            WHEN 'lost' THEN NEW.status = 'ready'
            ELSE 0
        END
            THEN RAISE(ABORT, 'qinglong:transition_refused: transition')
    END;
END;
