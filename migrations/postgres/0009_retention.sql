-- Retention (docs/operations.md): finished dispatch trees and old
-- audit records may be deleted, and only by a prune run as a member of qinglong_pruner.
--
-- qinglong_pruner is the only role granted DELETE. A prune first writes a permit per dispatch
-- tree it will delete; the permit's insert trigger admits only a tree whose execution is
-- terminal (succeeded, failed, blocked, cancelled) and became so before the permit's cutoff,
-- a cutoff not in the future on the database clock. The immutability triggers keep refusing
-- UPDATE and TRUNCATE to everyone, and refuse a DELETE unless the deleting role is a member of
-- qinglong_pruner AND a permit names the row's tree; so not even a superuser's stray DELETE
-- passes, and no pending, leased, retry_wait or executing (recovery_required) row can go.
-- The prune removes its permits before it commits.
--
-- Amended in place: every function pins pg_temp last (migration 0011 says why). A
-- database that applied the first text of this file matches this checksum:
-- amends checksum dd69ba850f484232f36b07bc365ad50027361d72e5e1b938f51490bdefa58d61
-- Amended again, to point its comments at docs/ (the SQL is unchanged):
-- amends checksum 8493a5911c6af7624e3081ef5c005b81db4361acab615668e699e694adab4a1a

CREATE TABLE qinglong.prune_permits (
    dispatch_id         TEXT PRIMARY KEY,
    approval_request_id TEXT NOT NULL UNIQUE,
    project_id          TEXT NOT NULL,
    action_ref          TEXT NOT NULL,
    cutoff_ms           BIGINT NOT NULL
);

CREATE INDEX prune_permits_plan ON qinglong.prune_permits (project_id, action_ref);

-- One row per audit prune: audit records committed before its cutoff may be deleted.
CREATE TABLE qinglong.audit_prune_permits (
    cutoff_ms BIGINT PRIMARY KEY
);

-- The prune's scan: terminal rows by the time they became terminal (a terminal row is never
-- updated again, so updated_at_ms is that time). Rows enter it once, when they finish.
CREATE INDEX approved_action_dispatch_executions_finished
    ON qinglong.approved_action_dispatch_executions (updated_at_ms, dispatch_id)
    WHERE status IN ('blocked', 'cancelled', 'failed', 'succeeded');

CREATE INDEX security_audit_events_committed
    ON qinglong.security_audit_events (committed_at_ms);

-- Deleting a plan or an approval checks the rows that reference it (their foreign keys): these
-- two referencing columns had no index, so each delete scanned a whole table.
CREATE INDEX approval_requests_plan ON qinglong.approval_requests (project_id, action_ref);
CREATE INDEX tool_execution_start_barriers_approval
    ON qinglong.tool_execution_start_barriers (approval_request_id);

CREATE FUNCTION qinglong.guard_prune_permit() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_TABLE_NAME = 'audit_prune_permits' THEN
        IF NEW.cutoff_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint THEN
            RAISE EXCEPTION 'audit_prune_permits: the cutoff may not be in the future'
                USING ERRCODE = 'restrict_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.cutoff_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint
            OR NOT EXISTS (
                SELECT 1
                FROM qinglong.approved_action_dispatches AS d
                JOIN qinglong.approved_action_dispatch_executions AS e
                    ON e.dispatch_id = d.dispatch_id
                WHERE d.dispatch_id = NEW.dispatch_id
                  AND d.approval_request_id = NEW.approval_request_id
                  AND d.project_id = NEW.project_id AND d.action_ref = NEW.action_ref
                  AND e.status IN ('blocked', 'cancelled', 'failed', 'succeeded')
                  AND e.updated_at_ms < NEW.cutoff_ms) THEN
        RAISE EXCEPTION 'prune_permits: only a terminal dispatch tree older than a past cutoff'
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION qinglong.guard_prune_permit() FROM PUBLIC;

CREATE TRIGGER prune_permits_guard
    BEFORE INSERT ON qinglong.prune_permits
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_permit();
CREATE TRIGGER audit_prune_permits_guard
    BEFORE INSERT ON qinglong.audit_prune_permits
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_permit();
CREATE TRIGGER prune_permits_immutable
    BEFORE UPDATE OR TRUNCATE ON qinglong.prune_permits
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER audit_prune_permits_immutable
    BEFORE UPDATE OR TRUNCATE ON qinglong.audit_prune_permits
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();

-- One row check for every table of a tree and the audit table: the pruner, and a permit
-- naming the row (the execution row must itself be terminal too).
CREATE FUNCTION qinglong.guard_prune_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    permitted boolean;
BEGIN
    IF NOT pg_has_role(current_user, 'qinglong_pruner', 'MEMBER') THEN
        permitted := false;
    ELSIF TG_TABLE_NAME = 'security_audit_events' THEN
        permitted := EXISTS (SELECT 1 FROM qinglong.audit_prune_permits AS p
                             WHERE OLD.committed_at_ms < p.cutoff_ms);
    ELSIF TG_TABLE_NAME = 'action_plans' THEN
        permitted := EXISTS (SELECT 1 FROM qinglong.prune_permits AS p
                             WHERE p.project_id = OLD.project_id
                               AND p.action_ref = OLD.action_ref);
    ELSIF TG_TABLE_NAME = 'approval_requests' THEN
        permitted := EXISTS (SELECT 1 FROM qinglong.prune_permits AS p
                             WHERE p.approval_request_id = OLD.approval_request_id);
    ELSIF TG_TABLE_NAME = 'approved_action_dispatch_executions' THEN
        permitted := OLD.status IN ('blocked', 'cancelled', 'failed', 'succeeded')
            AND EXISTS (SELECT 1 FROM qinglong.prune_permits AS p
                        WHERE p.dispatch_id = OLD.dispatch_id);
    ELSE
        permitted := EXISTS (SELECT 1 FROM qinglong.prune_permits AS p
                             WHERE p.dispatch_id = OLD.dispatch_id);
    END IF;
    IF NOT permitted THEN
        RAISE EXCEPTION '% is immutable: only a prune deletes', TG_TABLE_NAME
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN OLD;
END
$$;
REVOKE ALL ON FUNCTION qinglong.guard_prune_delete() FROM PUBLIC;

-- The statement triggers of 0001–0004 keep refusing UPDATE and TRUNCATE; DELETE moves to the
-- row check above.
DROP TRIGGER action_plans_immutable ON qinglong.action_plans;
CREATE TRIGGER action_plans_immutable
    BEFORE UPDATE OR TRUNCATE ON qinglong.action_plans
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
DROP TRIGGER approved_action_dispatches_immutable ON qinglong.approved_action_dispatches;
CREATE TRIGGER approved_action_dispatches_immutable
    BEFORE UPDATE OR TRUNCATE ON qinglong.approved_action_dispatches
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
DROP TRIGGER execution_events_immutable ON qinglong.execution_events;
CREATE TRIGGER execution_events_immutable
    BEFORE UPDATE OR TRUNCATE ON qinglong.execution_events
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
DROP TRIGGER approved_run_action_receipts_immutable ON qinglong.approved_run_action_receipts;
CREATE TRIGGER approved_run_action_receipts_immutable
    BEFORE UPDATE OR TRUNCATE ON qinglong.approved_run_action_receipts
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
DROP TRIGGER recovery_resolutions_immutable ON qinglong.recovery_resolutions;
CREATE TRIGGER recovery_resolutions_immutable
    BEFORE UPDATE OR TRUNCATE ON qinglong.recovery_resolutions
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
DROP TRIGGER security_audit_events_immutable ON qinglong.security_audit_events;
CREATE TRIGGER security_audit_events_immutable
    BEFORE UPDATE OR TRUNCATE ON qinglong.security_audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();

CREATE TRIGGER action_plans_prune_only
    BEFORE DELETE ON qinglong.action_plans
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();
CREATE TRIGGER approval_requests_prune_only
    BEFORE DELETE ON qinglong.approval_requests
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();
CREATE TRIGGER approved_action_dispatches_prune_only
    BEFORE DELETE ON qinglong.approved_action_dispatches
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();
CREATE TRIGGER approved_action_dispatch_executions_prune_only
    BEFORE DELETE ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();
CREATE TRIGGER execution_events_prune_only
    BEFORE DELETE ON qinglong.execution_events
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();
CREATE TRIGGER approved_run_action_receipts_prune_only
    BEFORE DELETE ON qinglong.approved_run_action_receipts
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();
CREATE TRIGGER recovery_resolutions_prune_only
    BEFORE DELETE ON qinglong.recovery_resolutions
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();
CREATE TRIGGER recovery_observations_prune_only
    BEFORE DELETE ON qinglong.recovery_observations
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();
CREATE TRIGGER security_audit_events_prune_only
    BEFORE DELETE ON qinglong.security_audit_events
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();

-- Grants (docs/security.md): the pruner reads what a prune must check (the tool rows that keep a
-- tree, the audit receipts that keep an audit record), writes its permits, and deletes the
-- rows of a tree and old audit records. Nobody else is granted DELETE.
GRANT USAGE ON SCHEMA qinglong TO qinglong_pruner;
GRANT SELECT ON qinglong.schema_migrations TO qinglong_pruner;
GRANT SELECT, DELETE ON qinglong.action_plans, qinglong.approval_requests,
    qinglong.approved_action_dispatches, qinglong.approved_action_dispatch_executions,
    qinglong.execution_events, qinglong.approved_run_action_receipts,
    qinglong.recovery_resolutions, qinglong.recovery_observations,
    qinglong.security_audit_events TO qinglong_pruner;
GRANT SELECT ON qinglong.step_runs, qinglong.tool_execution_start_barriers,
    qinglong.audit_receipts TO qinglong_pruner;
GRANT SELECT, INSERT, DELETE ON qinglong.prune_permits, qinglong.audit_prune_permits
    TO qinglong_pruner;
