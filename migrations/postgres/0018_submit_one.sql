-- A submit of one plan in one round trip (docs/performance.md#submit): the six statements of
-- the shared submit transaction (`adapters/sql/approvals.submit`) in one function, called as
-- one statement, its own implicit transaction. It is SECURITY INVOKER: every statement runs as
-- the caller, so the grants, the row triggers (who acts, separation of duties, the state
-- machine, the audit rows) and the unique keys judge each row exactly as they judge the
-- shared transaction's; a call succeeds only where its caller could run those statements.
-- An update that matched nothing raises QLS01 and rolls everything back: the caller runs the
-- shared transaction, which names the refusal.
CREATE FUNCTION qinglong.submit_one(
    p_project_id pg_catalog.text, p_action_ref pg_catalog.text, p_action_type pg_catalog.text,
    p_plan_json pg_catalog.text, p_plan_digest pg_catalog.text, p_plan_key_id pg_catalog.text,
    p_plan_algorithm pg_catalog.text, p_plan_sealed pg_catalog.bytea,
    p_plan_schema_version pg_catalog.int4, p_approval_request_id pg_catalog.text,
    p_action_digest pg_catalog.text, p_requested_by pg_catalog.text,
    p_expires_at_ms pg_catalog.int8, p_decided_by pg_catalog.text,
    p_dispatch_id pg_catalog.text, p_max_attempts pg_catalog.int4, p_now_ms pg_catalog.int8
) RETURNS pg_catalog.text
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    approved_by pg_catalog.text;
BEGIN
    INSERT INTO qinglong.action_plans (
        project_id, action_ref, action_type, plan_json, plan_digest, created_at_ms,
        plan_key_id, plan_algorithm, plan_sealed, plan_schema_version
    ) VALUES (
        p_project_id, p_action_ref, p_action_type, p_plan_json, p_plan_digest, p_now_ms,
        p_plan_key_id, p_plan_algorithm, p_plan_sealed, p_plan_schema_version
    );
    INSERT INTO qinglong.approval_requests (
        approval_request_id, project_id, action_type, action_ref, action_digest, status,
        version, requested_by, decided_by, requested_principal, expires_at_ms, created_at_ms,
        updated_at_ms
    ) VALUES (
        p_approval_request_id, p_project_id, p_action_type, p_action_ref, p_action_digest,
        'pending', 1, p_requested_by, NULL, qinglong.acting_principal(), p_expires_at_ms,
        p_now_ms, p_now_ms
    );
    UPDATE qinglong.approval_requests
    SET status = 'approved', version = 2, decided_by = p_decided_by,
        decided_principal = qinglong.acting_principal(), updated_at_ms = p_now_ms
    WHERE approval_request_id = p_approval_request_id AND status = 'pending' AND version = 1
      AND expires_at_ms > p_now_ms;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the submitted request was not approved' USING ERRCODE = 'QLS01';
    END IF;
    UPDATE qinglong.approval_requests
    SET status = 'consumed', version = 3, consumed_at_ms = p_now_ms,
        consumed_principal = qinglong.acting_principal(), updated_at_ms = p_now_ms
    WHERE approval_request_id = p_approval_request_id AND status = 'approved' AND version = 2
      AND expires_at_ms > p_now_ms
    RETURNING decided_by INTO approved_by;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the submitted request was not consumed' USING ERRCODE = 'QLS01';
    END IF;
    INSERT INTO qinglong.approved_action_dispatches (
        dispatch_id, approval_request_id, project_id, action_type, action_ref, action_digest,
        approved_by, created_at_ms
    ) VALUES (
        p_dispatch_id, p_approval_request_id, p_project_id, p_action_type, p_action_ref,
        p_action_digest, approved_by, p_now_ms
    );
    INSERT INTO qinglong.approved_action_dispatch_executions (
        dispatch_id, project_id, status, version, attempt, max_attempts, eligible_at_ms,
        created_at_ms, updated_at_ms
    ) VALUES (
        p_dispatch_id, p_project_id, 'pending', 0, 0, p_max_attempts, p_now_ms, p_now_ms,
        p_now_ms
    );
    RETURN p_dispatch_id;
END
$$;
-- Any login may call it, as any login may run those statements: the grants and triggers
-- answer, with the SQLSTATEs the statements would get (`42501`, `QLA01`, `QLA02`, ...).
GRANT EXECUTE ON FUNCTION qinglong.submit_one(
    pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text,
    pg_catalog.text, pg_catalog.text, pg_catalog.bytea, pg_catalog.int4, pg_catalog.text,
    pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.text, pg_catalog.text,
    pg_catalog.int4, pg_catalog.int8) TO PUBLIC;
