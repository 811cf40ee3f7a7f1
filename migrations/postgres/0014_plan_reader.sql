-- The full plan for a plan reader only, audited (docs/security.md#plans-at-rest), and the
-- index of `approval list`.
--
-- `dispatch show ID --plan` reads a plan through `qinglong.read_plan(dispatch_id)`: a
-- definer function owned by the recorder that refuses a session whose login is not a member
-- of `qinglong_plan_reader` (42501, nothing written), and otherwise writes one audit row
-- (kind `plan.read`, the login as principal and actor, the dispatch id as subject, never
-- the plan) in the caller's transaction and returns the plan row (sealed rows as they are:
-- the caller opens them with its key ring). Only `qinglong_plan_reader` may EXECUTE it; the
-- membership check inside holds even where EXECUTE was granted more widely by mistake. The
-- plan reader is given nothing else but the migration ledger (every command checks the
-- schema first): no plain SELECT on plans, so its one way to a plan is the audited one. (The
-- runtime, operators, approvers and the pruner keep the SELECT on `action_plans` they had:
-- the daemon must read plans to execute them.) `plan.*` audit kinds, like `approval.*`, are
-- written by the recorder alone.

-- The recorder reads what the function returns; it still writes nothing but the two appends.
GRANT SELECT ON qinglong.action_plans, qinglong.approved_action_dispatches TO qinglong_recorder;

CREATE FUNCTION qinglong.read_plan(p_dispatch_id pg_catalog.text)
RETURNS TABLE (
    project_id pg_catalog.text, action_ref pg_catalog.text, action_type pg_catalog.text,
    plan_json pg_catalog.text, plan_digest pg_catalog.text, plan_key_id pg_catalog.text,
    plan_algorithm pg_catalog.text, plan_sealed pg_catalog.bytea,
    plan_schema_version pg_catalog.int4
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    plan_row qinglong.action_plans%ROWTYPE;
BEGIN
    IF NOT pg_catalog.pg_has_role(SESSION_USER, 'qinglong_plan_reader', 'MEMBER') THEN
        RAISE EXCEPTION 'reading a whole plan needs a qinglong_plan_reader login'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT p.* INTO plan_row
    FROM qinglong.approved_action_dispatches AS d
    JOIN qinglong.action_plans AS p
      ON p.project_id = d.project_id AND p.action_ref = d.action_ref
    WHERE d.dispatch_id = p_dispatch_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO qinglong.security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
    ) VALUES (
        'plan.read', SESSION_USER, SESSION_USER, plan_row.project_id, p_dispatch_id,
        plan_row.action_type,
        (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
            OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8
    );
    RETURN QUERY SELECT plan_row.project_id, plan_row.action_ref, plan_row.action_type,
        plan_row.plan_json, plan_row.plan_digest, plan_row.plan_key_id, plan_row.plan_algorithm,
        plan_row.plan_sealed, plan_row.plan_schema_version;
END
$$;
REVOKE ALL ON FUNCTION qinglong.read_plan(pg_catalog.text) FROM PUBLIC;
GRANT USAGE ON SCHEMA qinglong TO qinglong_plan_reader;
GRANT SELECT ON qinglong.schema_migrations TO qinglong_plan_reader;
GRANT EXECUTE ON FUNCTION qinglong.read_plan(pg_catalog.text) TO qinglong_plan_reader;
-- A new owner needs CREATE on the schema at the moment of the change only.
GRANT CREATE ON SCHEMA qinglong TO qinglong_recorder;
ALTER FUNCTION qinglong.read_plan(pg_catalog.text) OWNER TO qinglong_recorder;
REVOKE CREATE ON SCHEMA qinglong FROM qinglong_recorder;

-- An audit row names the session's own login; the approval and plan-read kinds are the
-- definer functions' alone (they run as the recorder).
CREATE OR REPLACE FUNCTION qinglong.guard_audit_event() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NEW.principal IS DISTINCT FROM SESSION_USER::pg_catalog.text THEN
        RAISE EXCEPTION 'an audit record names the session login'
            USING ERRCODE = 'QLI01';
    END IF;
    IF (NEW.kind LIKE 'approval.%' OR NEW.kind LIKE 'plan.%') AND CURRENT_USER::pg_catalog.text
            IS DISTINCT FROM 'qinglong_recorder' THEN
        RAISE EXCEPTION 'approval and plan-read audit records are written by their definer only'
            USING ERRCODE = 'QLI01';
    END IF;
    NEW.committed_at_ms := (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
        OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8;
    RETURN NEW;
END
$$;

-- `approval list`: the waiting requests, newest first, one keyset page at a time.
CREATE INDEX approval_requests_waiting
    ON qinglong.approval_requests (created_at_ms DESC, approval_request_id DESC)
    WHERE status = 'pending';
