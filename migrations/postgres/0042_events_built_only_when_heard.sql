-- An event is built only when someone hears its kind (docs/notifications.md, decision 0053).
-- Migration 0038 keeps an event only while some subscription hears its kind, but the triggers
-- that tell a change still built its payload (the request's policy read, the JSON object
-- made) and inserted the row, which the keep trigger then dropped: every success of an
-- installation told of failures only paid for an event nobody would read. Each `tell_*`
-- function now asks first, by the same test as the keep trigger (a plain text search of the
-- quoted kind in the subscription's kinds), and returns before any of that work when nobody
-- listens. When someone does, everything is as before: the same rows in the same
-- transaction, and the keep trigger still drops the one kind of a recovery's pair nobody
-- hears. The functions stay the recorder's definers (CREATE OR REPLACE keeps their owner and
-- grants).

CREATE OR REPLACE FUNCTION qinglong.tell_approval_request() RETURNS trigger
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
    IF NOT EXISTS (
            SELECT 1 FROM qinglong.notification_subscriptions AS s
            WHERE pg_catalog.strpos(s.kinds_json,
                                    '"' OPERATOR(pg_catalog.||) kind
                                    OPERATOR(pg_catalog.||) '"') > 0) THEN
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

CREATE OR REPLACE FUNCTION qinglong.tell_approval_reminder() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (
            SELECT 1 FROM qinglong.notification_subscriptions AS s
            WHERE pg_catalog.strpos(s.kinds_json,
                                    '"' OPERATOR(pg_catalog.||) NEW.kind
                                    OPERATOR(pg_catalog.||) '"') > 0) THEN
        RETURN NULL;
    END IF;
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

CREATE OR REPLACE FUNCTION qinglong.tell_execution_outcome() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (
            SELECT 1 FROM qinglong.notification_subscriptions AS s
            WHERE pg_catalog.strpos(s.kinds_json,
                                    '"dispatch.' OPERATOR(pg_catalog.||) NEW.status
                                    OPERATOR(pg_catalog.||) '"') > 0) THEN
        RETURN NULL;
    END IF;
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

-- A recovery tells two kinds: it is built when either is heard (the keep trigger drops the
-- other).
CREATE OR REPLACE FUNCTION qinglong.tell_recovery_required() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (
            SELECT 1 FROM qinglong.notification_subscriptions AS s
            WHERE pg_catalog.strpos(s.kinds_json, '"dispatch.recovery_required"') > 0
               OR pg_catalog.strpos(s.kinds_json, '"target.held"') > 0) THEN
        RETURN NULL;
    END IF;
    INSERT INTO qinglong.notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    )
    SELECT k.kind, d.dispatch_id, d.project_id, d.action_type, qinglong.db_now_ms(),
        pg_catalog.json_build_object(
            'dispatchId', d.dispatch_id,
            'approvalRequestId', d.approval_request_id,
            'actionRef', d.action_ref,
            'actionDigest', d.action_digest,
            'status', 'recovery_required',
            'attempt', NEW.execution_attempt,
            'resultCode', u.result_code,
            'target', d.target,
            'noticedBy', NEW.noticed_by
        )::pg_catalog.text
    FROM qinglong.approved_action_dispatches AS d
    CROSS JOIN (VALUES (1, 'dispatch.recovery_required'), (2, 'target.held')) AS k (ord, kind)
    LEFT JOIN qinglong.uncertain_outcomes AS u
        ON u.dispatch_id = d.dispatch_id AND u.execution_attempt = NEW.execution_attempt
    WHERE d.dispatch_id = NEW.dispatch_id AND (k.ord = 1 OR d.target IS NOT NULL)
    ORDER BY k.ord;
    RETURN NULL;
END
$$;
