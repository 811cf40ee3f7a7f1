-- Targets, one change at a time (docs/state-machine.md#targets, decision 0042).
--
-- A plan may name a target (its action's `TARGET_MEMBER`): the requester writes it in clear
-- beside the plan, and the database copies it, never the caller, into the dispatch and its
-- execution (the definers below overwrite whatever an INSERT names). Then at most one
-- execution per target is past its claim (`leased` or `executing`): a partial unique index.
-- An `executing` row whose lease expired (`recovery_required`, derived) is still
-- `executing`, so the same index holds its target until the row is settled.

ALTER TABLE qinglong.action_plans ADD COLUMN target TEXT
    CHECK (target IS NULL OR (length(target) BETWEEN 1 AND 128));
ALTER TABLE qinglong.approved_action_dispatches ADD COLUMN target TEXT;
ALTER TABLE qinglong.approved_action_dispatch_executions ADD COLUMN target TEXT;

-- Definers (the recorder, like every definer): a login that may insert a dispatch or an
-- execution need not read plans, and cannot choose the target it copies.
CREATE FUNCTION qinglong.dispatch_target_of_plan() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    NEW.target := (SELECT p.target FROM qinglong.action_plans AS p
                   WHERE p.project_id = NEW.project_id AND p.action_ref = NEW.action_ref);
    RETURN NEW;
END
$$;

CREATE FUNCTION qinglong.execution_target_of_dispatch() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    NEW.target := (SELECT d.target FROM qinglong.approved_action_dispatches AS d
                   WHERE d.dispatch_id = NEW.dispatch_id);
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION qinglong.dispatch_target_of_plan() FROM PUBLIC;
REVOKE ALL ON FUNCTION qinglong.execution_target_of_dispatch() FROM PUBLIC;
GRANT CREATE ON SCHEMA qinglong TO qinglong_recorder;
ALTER FUNCTION qinglong.dispatch_target_of_plan() OWNER TO qinglong_recorder;
ALTER FUNCTION qinglong.execution_target_of_dispatch() OWNER TO qinglong_recorder;
REVOKE CREATE ON SCHEMA qinglong FROM qinglong_recorder;

CREATE TRIGGER approved_action_dispatches_target_of_plan
    BEFORE INSERT ON qinglong.approved_action_dispatches
    FOR EACH ROW EXECUTE FUNCTION qinglong.dispatch_target_of_plan();

CREATE TRIGGER approved_action_dispatch_executions_target_of_dispatch
    BEFORE INSERT ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW EXECUTE FUNCTION qinglong.execution_target_of_dispatch();

-- The runtime may update an execution row; its target is the dispatch's, forever.
CREATE FUNCTION qinglong.guard_execution_target() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'an execution''s target is its dispatch''s and never changes'
        USING ERRCODE = 'QLI01';
END
$$;

CREATE TRIGGER approved_action_dispatch_executions_target_immutable
    BEFORE UPDATE OF target ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW WHEN (OLD.target IS DISTINCT FROM NEW.target)
    EXECUTE FUNCTION qinglong.guard_execution_target();

-- One dispatch per target past its claim; the claim's busy probe reads this index too.
CREATE UNIQUE INDEX approved_action_dispatch_executions_one_per_target
    ON qinglong.approved_action_dispatch_executions (target)
    WHERE target IS NOT NULL AND status IN ('leased', 'executing');
