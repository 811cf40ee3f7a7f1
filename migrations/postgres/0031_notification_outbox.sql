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

-- Delivery (docs/notifications.md#delivery).
-- 4. `notification_subscriptions`: where events go, written by the schema's owner only (the
--    `notify` command, as policies are); the secret is a reference, never its value.
-- 5. `notification_fanouts` marks each event the deliverer has matched against the
--    subscriptions; `notification_deliveries` is one (event, subscription) to send, its
--    status, attempts and next time on the database's clock; `notification_attempts` records
--    every attempt (status, latency, response code; never a body or a secret).
-- 6. `notification_deliverer` is the one lease a cluster's deliverers claim, on the database's
--    clock, so replicas do not send the same event twice at once.

CREATE TABLE qinglong.notification_subscriptions (
    name          TEXT PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    url           TEXT NOT NULL CHECK (url ~ '^https?://[^[:space:]]+$'
                                       AND octet_length(url) <= 2048),
    secret_ref    TEXT NOT NULL CHECK (secret_ref ~ '^(credential|file|env):[^[:space:]]+$'),
    kinds_json    TEXT NOT NULL,
    action_type   TEXT,
    project_id    TEXT,
    format        TEXT NOT NULL DEFAULT 'raw' CHECK (format IN ('raw', 'slack')),
    created_at_ms BIGINT NOT NULL
);

CREATE TABLE qinglong.notification_fanouts (
    event_id BIGINT PRIMARY KEY REFERENCES qinglong.notification_events (id)
);

CREATE TABLE qinglong.notification_deliveries (
    event_id           BIGINT NOT NULL REFERENCES qinglong.notification_events (id),
    subscription       TEXT NOT NULL
        REFERENCES qinglong.notification_subscriptions (name) ON DELETE CASCADE,
    subject_id         TEXT NOT NULL,
    status             TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts           INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at_ms BIGINT NOT NULL,
    last_code          INTEGER,
    done_at_ms         BIGINT,
    PRIMARY KEY (event_id, subscription)
);

CREATE INDEX notification_deliveries_due ON qinglong.notification_deliveries
    (next_attempt_at_ms, event_id) WHERE status = 'pending';
CREATE INDEX notification_deliveries_subject ON qinglong.notification_deliveries
    (subscription, subject_id, event_id) WHERE status = 'pending';

CREATE TABLE qinglong.notification_attempts (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id      BIGINT NOT NULL,
    subscription  TEXT NOT NULL,
    attempt       INTEGER NOT NULL CHECK (attempt >= 1),
    outcome       TEXT NOT NULL CHECK (outcome IN ('delivered', 'failed', 'dead')),
    response_code INTEGER,
    error_code    TEXT CHECK (error_code ~ '^[a-z_]{1,40}$'),
    latency_ms    BIGINT NOT NULL CHECK (latency_ms >= 0),
    at_ms         BIGINT NOT NULL
);

CREATE TABLE qinglong.notification_deliverer (
    singleton           BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    owner               TEXT,
    lease_expires_at_ms BIGINT NOT NULL DEFAULT 0,
    fanned_out_through  BIGINT NOT NULL DEFAULT 0
);
INSERT INTO qinglong.notification_deliverer DEFAULT VALUES;

GRANT SELECT ON qinglong.notification_subscriptions, qinglong.notification_fanouts,
    qinglong.notification_deliveries, qinglong.notification_attempts,
    qinglong.notification_deliverer TO qinglong_runtime, qinglong_operator;
GRANT INSERT ON qinglong.notification_fanouts, qinglong.notification_attempts
    TO qinglong_runtime;
GRANT INSERT, UPDATE ON qinglong.notification_deliveries TO qinglong_runtime;
GRANT UPDATE ON qinglong.notification_deliverer TO qinglong_runtime;
