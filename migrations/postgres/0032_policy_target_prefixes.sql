-- Approval policies match by target prefix (docs/security.md#approval-policies, decision 0038).
-- 1. A policy may name a target prefix: 1 to 128 printable ASCII characters, no space, no
--    wildcard (`*`, `?`, `%`); it matches a request whose plan's target (`action_plans.target`,
--    migration 0030) begins with it, byte for byte. A policy without one matches any target,
--    and a request without a target.
-- 2. The policy in force for a new request is, among the newest unretired versions for its
--    action type and project: one whose prefix matches before one without; the longer prefix
--    first; a project's before an any-project one; then the first name in byte order.
-- 3. The database reads the target from the request's plan, never from its caller: the plan is
--    written before its request (the key refuses a request without one), its target never
--    changes, and the copy refuses a request whose plan it cannot read (QLA03). The copy
--    carries the prefix, so a request shows which policy matched it and why.

ALTER TABLE qinglong.approval_policies
    ADD CONSTRAINT approval_policies_target_prefix CHECK (
        target_prefix IS NULL
        OR (target_prefix ~ '^[!-~]{1,128}$' AND target_prefix !~ '[*?%]'));

ALTER TABLE qinglong.approval_request_policies ADD COLUMN target_prefix TEXT;

-- Replaced by the three-argument function below (its grants go with it).
DROP FUNCTION qinglong.policy_in_force(pg_catalog.text, pg_catalog.text);

-- The order of point 2. COLLATE "C": the first name by bytes, as on SQLite.
CREATE FUNCTION qinglong.policy_in_force(p_action_type pg_catalog.text,
        p_project_id pg_catalog.text, p_target pg_catalog.text)
RETURNS SETOF qinglong.approval_policies
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT p.* FROM qinglong.approval_policies AS p
    WHERE p.action_type = p_action_type
      AND (p.project_id IS NULL OR p.project_id = p_project_id)
      AND (p.target_prefix IS NULL OR pg_catalog.starts_with(p_target, p.target_prefix))
      AND NOT p.retired
      AND p.version = (SELECT max(q.version) FROM qinglong.approval_policies AS q
                       WHERE q.name = p.name)
    ORDER BY (p.target_prefix IS NULL), pg_catalog.char_length(p.target_prefix) DESC,
             (p.project_id IS NULL), p.name COLLATE "C"
    LIMIT 1
$$;

-- The policy in force for a request, from its plan's target. A definer (the recorder): the
-- request's writer may not read a plan's target, and never names it. No row: no policy, or no
-- plan (the copy refuses that).
CREATE FUNCTION qinglong.request_policy_in_force(p_action_type pg_catalog.text,
        p_project_id pg_catalog.text, p_action_ref pg_catalog.text)
RETURNS SETOF qinglong.approval_policies
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT f.* FROM qinglong.action_plans AS a
    CROSS JOIN LATERAL qinglong.policy_in_force(p_action_type, p_project_id, a.target) AS f
    WHERE a.project_id = p_project_id AND a.action_ref = p_action_ref
$$;

REVOKE ALL ON FUNCTION qinglong.policy_in_force(pg_catalog.text, pg_catalog.text,
    pg_catalog.text) FROM PUBLIC;
REVOKE ALL ON FUNCTION qinglong.request_policy_in_force(pg_catalog.text, pg_catalog.text,
    pg_catalog.text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION qinglong.policy_in_force(pg_catalog.text, pg_catalog.text,
    pg_catalog.text) TO qinglong_recorder;
GRANT CREATE ON SCHEMA qinglong TO qinglong_recorder;
ALTER FUNCTION qinglong.request_policy_in_force(pg_catalog.text, pg_catalog.text,
    pg_catalog.text) OWNER TO qinglong_recorder;
REVOKE CREATE ON SCHEMA qinglong FROM qinglong_recorder;
GRANT EXECUTE ON FUNCTION qinglong.request_policy_in_force(pg_catalog.text, pg_catalog.text,
    pg_catalog.text) TO qinglong_approver, qinglong_submitter, qinglong_runtime,
    qinglong_operator;

-- A definer (the recorder), as before: its owner and grants stay.
CREATE OR REPLACE FUNCTION qinglong.copy_approval_policy() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    pol qinglong.approval_policies%ROWTYPE;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM qinglong.approval_policies
                   WHERE action_type = NEW.action_type) THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM qinglong.action_plans
                   WHERE project_id = NEW.project_id AND action_ref = NEW.action_ref) THEN
        RAISE EXCEPTION 'approval request %: its plan is written before it',
            NEW.approval_request_id USING ERRCODE = 'QLA03';
    END IF;
    SELECT * INTO pol FROM qinglong.request_policy_in_force(
        NEW.action_type, NEW.project_id, NEW.action_ref);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF pol.lifetime_ms IS NOT NULL AND pol.lifetime_ms IS DISTINCT FROM
            NEW.expires_at_ms OPERATOR(pg_catalog.-) NEW.created_at_ms THEN
        RAISE EXCEPTION 'the policy in force changed while the request was written'
            USING ERRCODE = '40001';
    END IF;
    INSERT INTO qinglong.approval_request_policies (
        approval_request_id, policy_name, policy_version, approvals_required,
        denials_to_reject, approver_groups, reason_required, lifetime_ms, remind_before_ms,
        target_prefix
    ) VALUES (
        NEW.approval_request_id, pol.name, pol.version, pol.approvals_required,
        pol.denials_to_reject, pol.approver_groups, pol.reason_required, pol.lifetime_ms,
        pol.remind_before_ms, pol.target_prefix
    );
    RETURN NULL;
END
$$;

-- As the request's writer, after its guard, as before; the policy now the request's plan's.
CREATE OR REPLACE FUNCTION qinglong.set_policy_lifetime() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    lifetime pg_catalog.int8;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM qinglong.approval_policies
                   WHERE action_type = NEW.action_type) THEN
        RETURN NEW;
    END IF;
    SELECT p.lifetime_ms INTO lifetime FROM qinglong.request_policy_in_force(
        NEW.action_type, NEW.project_id, NEW.action_ref) AS p;
    IF lifetime IS NOT NULL THEN
        NEW.expires_at_ms := NEW.created_at_ms OPERATOR(pg_catalog.+) lifetime;
        NEW.db_expires_at_ms := qinglong.db_now_ms() OPERATOR(pg_catalog.+) lifetime;
    END IF;
    RETURN NEW;
END
$$;
