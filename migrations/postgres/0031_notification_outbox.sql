-- The notification outbox (docs/notifications.md), in schema qinglong.
-- 1. `notification_events` holds one row per event worth telling a person about, written by
--    the database in the transaction of the change it reports, by triggers where the change
--    happens (definers owned by the recorder), so no caller can forget or forge one:
--    `approval.requested` (a request written), `approval.expiring` (its reminder written to
--    `approval_events`), `approval.approved`, `approval.rejected`, `approval.expired` (its
--    status), `dispatch.failed`, `dispatch.blocked`, `dispatch.succeeded` (an execution's
--    terminal status; whether anyone hears of a success is the subscription's choice).
-- 2. A row carries ids and the database's time, never a plan: the payload names the request,
--    the plan's reference and digest, the policy, the dispatch and its result code.
-- 3. Nobody but the recorder's definers inserts one; nobody changes or deletes one.

CREATE TABLE qinglong.notification_events (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind         TEXT NOT NULL CHECK (kind IN (
                     'approval.requested', 'approval.expiring', 'approval.approved',
                     'approval.rejected', 'approval.expired', 'dispatch.failed',
                     'dispatch.blocked', 'dispatch.succeeded')),
    subject_id   TEXT NOT NULL,
    project_id   TEXT NOT NULL,
    action_type  TEXT NOT NULL,
    at_ms        BIGINT NOT NULL,
    payload_json TEXT NOT NULL CHECK (octet_length(payload_json) <= 4096),
    UNIQUE (subject_id, kind)
);

-- The request's policy as its copy has it (written by the copy trigger, which runs first:
-- after-triggers of one table run by name, and `approval_requests_policy` < `..._tell`).
CREATE FUNCTION qinglong.tell_approval_request() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    kind   pg_catalog.text;
    policy pg_catalog.text;
    policy_version pg_catalog.int8;
BEGIN
    IF TG_OP = 'INSERT' THEN
        kind := 'approval.requested';
    ELSIF NEW.status IS DISTINCT FROM OLD.status
            AND NEW.status IN ('approved', 'rejected', 'expired') THEN
        kind := 'approval.' OPERATOR(pg_catalog.||) NEW.status;
    ELSE
        RETURN NULL;
    END IF;
    SELECT p.policy_name, p.policy_version INTO policy, policy_version
        FROM qinglong.approval_request_policies AS p
        WHERE p.approval_request_id OPERATOR(pg_catalog.=) NEW.approval_request_id;
    INSERT INTO qinglong.notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    ) VALUES (
        kind, NEW.approval_request_id, NEW.project_id, NEW.action_type, qinglong.db_now_ms(),
        pg_catalog.json_build_object(
            'approvalRequestId', NEW.approval_request_id,
            'actionRef', NEW.action_ref,
            'actionDigest', NEW.action_digest,
            'status', NEW.status,
            'expiresAtMs', COALESCE(NEW.db_expires_at_ms, NEW.expires_at_ms),
            'policy', policy,
            'policyVersion', policy_version
        )::pg_catalog.text
    );
    RETURN NULL;
END
$$;

CREATE TRIGGER approval_requests_tell
    AFTER INSERT OR UPDATE ON qinglong.approval_requests
    FOR EACH ROW EXECUTE FUNCTION qinglong.tell_approval_request();

-- A reminder (migration 0027's `approval_events`, still its one writer's) is told as it is
-- written.
CREATE FUNCTION qinglong.tell_approval_reminder() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO qinglong.notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    )
    SELECT NEW.kind, r.approval_request_id, r.project_id, r.action_type, NEW.at_ms,
        pg_catalog.json_build_object(
            'approvalRequestId', r.approval_request_id,
            'actionRef', r.action_ref,
            'actionDigest', r.action_digest,
            'status', r.status,
            'expiresAtMs', COALESCE(r.db_expires_at_ms, r.expires_at_ms),
            'policy', p.policy_name,
            'policyVersion', p.policy_version
        )::pg_catalog.text
    FROM qinglong.approval_requests AS r
    LEFT JOIN qinglong.approval_request_policies AS p USING (approval_request_id)
    WHERE r.approval_request_id OPERATOR(pg_catalog.=) NEW.approval_request_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER approval_events_tell
    AFTER INSERT ON qinglong.approval_events
    FOR EACH ROW EXECUTE FUNCTION qinglong.tell_approval_reminder();

-- An execution's terminal outcome, but a cancel (an operator's own act, audited already).
CREATE FUNCTION qinglong.tell_execution_outcome() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO qinglong.notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    )
    SELECT 'dispatch.' OPERATOR(pg_catalog.||) NEW.status, NEW.dispatch_id, d.project_id,
        d.action_type, qinglong.db_now_ms(),
        pg_catalog.json_build_object(
            'dispatchId', NEW.dispatch_id,
            'approvalRequestId', d.approval_request_id,
            'actionRef', d.action_ref,
            'actionDigest', d.action_digest,
            'status', NEW.status,
            'attempt', NEW.attempt,
            'resultCode', NEW.result_code
        )::pg_catalog.text
    FROM qinglong.approved_action_dispatches AS d
    WHERE d.dispatch_id OPERATOR(pg_catalog.=) NEW.dispatch_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER approved_action_dispatch_executions_tell
    AFTER UPDATE ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW
    WHEN (NEW.status IS DISTINCT FROM OLD.status
          AND NEW.status IN ('failed', 'blocked', 'succeeded'))
    EXECUTE FUNCTION qinglong.tell_execution_outcome();

CREATE TRIGGER notification_events_immutable
    BEFORE UPDATE OR DELETE OR TRUNCATE ON qinglong.notification_events
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();

GRANT SELECT ON qinglong.approval_requests, qinglong.approval_request_policies
    TO qinglong_recorder;
GRANT INSERT ON qinglong.notification_events TO qinglong_recorder;
GRANT SELECT ON qinglong.notification_events TO qinglong_runtime, qinglong_operator;
REVOKE ALL ON FUNCTION qinglong.tell_approval_request(), qinglong.tell_approval_reminder(),
    qinglong.tell_execution_outcome() FROM PUBLIC;
GRANT CREATE ON SCHEMA qinglong TO qinglong_recorder;
ALTER FUNCTION qinglong.tell_approval_request() OWNER TO qinglong_recorder;
ALTER FUNCTION qinglong.tell_approval_reminder() OWNER TO qinglong_recorder;
ALTER FUNCTION qinglong.tell_execution_outcome() OWNER TO qinglong_recorder;
REVOKE CREATE ON SCHEMA qinglong FROM qinglong_recorder;
