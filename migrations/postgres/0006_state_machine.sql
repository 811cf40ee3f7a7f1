-- The execution and StepRun state machines held by the database (docs/state-machine.md,
-- docs/decisions/0019), in schema qinglong: a row trigger on each mutable table allows exactly the row
-- changes of `domain/states.py` ROW_UPDATES and `domain/steps.py` ROW_UPDATES, so neither a
-- buggy daemon nor a direct SQL session of any login can move a row the domain would not
-- (before this, the runtime login could UPDATE a succeeded execution back to pending).
-- A refusal raises SQLSTATE QLT01 with a message that names the rule and the two statuses
-- only; the adapters translate it to `errors.TransitionRefused`.
--
-- Amended in place: every function pins pg_temp last (migration 0011 says why). A
-- database that applied the first text of this file matches this checksum:
-- amends checksum 4ebc2325368bb1c631657a5d7df99695ab4e582d9d10d8a4d7ca9d025185f03f
-- Amended again, to point its comments at docs/ (the SQL is unchanged):
-- amends checksum 06efc778ed8ca5dd33bbd3ba1c60ad4bc7f09f96889170a46bf41411e43e4d81

CREATE FUNCTION qinglong.check_execution_change() RETURNS trigger
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
    IF OLD.status IN ('succeeded', 'failed', 'blocked') THEN
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
            ('executing', 'failed'), ('executing', 'blocked')) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: transition (% → %)', OLD.status, NEW.status
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
REVOKE ALL ON FUNCTION qinglong.check_execution_change() FROM PUBLIC;

CREATE TRIGGER approved_action_dispatch_executions_state_machine
    BEFORE INSERT OR UPDATE ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW EXECUTE FUNCTION qinglong.check_execution_change();

CREATE FUNCTION qinglong.check_step_run_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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
    IF OLD.status = 'lost'
            AND NOT pg_has_role(session_user, 'qinglong_operator', 'MEMBER') THEN
        RAISE EXCEPTION 'qinglong:transition_refused: operator (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION qinglong.check_step_run_change() FROM PUBLIC;

CREATE TRIGGER step_runs_state_machine
    BEFORE INSERT OR UPDATE ON qinglong.step_runs
    FOR EACH ROW EXECUTE FUNCTION qinglong.check_step_run_change();
