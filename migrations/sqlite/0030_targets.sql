-- Targets, one change at a time (docs/state-machine.md#targets, decision 0042).
--
-- A plan may name a target (its action's `TARGET_MEMBER`): the requester writes it in clear
-- beside the plan, and the database copies it, never the caller, into the dispatch and its
-- execution (statements read it from the row before, and these triggers refuse any other
-- value). Then at most one execution per target is past its claim (`leased` or `executing`):
-- a partial unique index. An `executing` row whose lease expired (`recovery_required`, derived)
-- is still `executing`, so the same index holds its target until the row is settled.

ALTER TABLE action_plans ADD COLUMN target TEXT
    CHECK (target IS NULL OR (length(target) BETWEEN 1 AND 128));
ALTER TABLE approved_action_dispatches ADD COLUMN target TEXT;
ALTER TABLE approved_action_dispatch_executions ADD COLUMN target TEXT;

-- action_plans_immutable_update admits the sealing of a clear plan; the target never moves.
CREATE TRIGGER action_plans_target_immutable BEFORE UPDATE OF target ON action_plans
WHEN NEW.target IS NOT OLD.target
BEGIN
    SELECT RAISE(ABORT, 'action_plans is immutable');
END;

CREATE TRIGGER approved_action_dispatches_target_of_plan
BEFORE INSERT ON approved_action_dispatches
WHEN NEW.target IS NOT (
    SELECT p.target FROM action_plans AS p
    WHERE p.project_id = NEW.project_id AND p.action_ref = NEW.action_ref)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:target_refused: a dispatch names its plan''s target');
END;

CREATE TRIGGER approved_action_dispatch_executions_target_of_dispatch
BEFORE INSERT ON approved_action_dispatch_executions
WHEN NEW.target IS NOT (
    SELECT d.target FROM approved_action_dispatches AS d WHERE d.dispatch_id = NEW.dispatch_id)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:target_refused: an execution names its dispatch''s target');
END;

CREATE TRIGGER approved_action_dispatch_executions_target_immutable
BEFORE UPDATE OF target ON approved_action_dispatch_executions
WHEN NEW.target IS NOT OLD.target
BEGIN
    SELECT RAISE(ABORT, 'qinglong:target_refused: a target never changes');
END;

-- One dispatch per target past its claim; the claim's busy probe reads this index too.
CREATE UNIQUE INDEX approved_action_dispatch_executions_one_per_target
    ON approved_action_dispatch_executions (target)
    WHERE target IS NOT NULL AND status IN ('leased', 'executing');
