-- The notification outbox (docs/notifications.md), as the PostgreSQL schema has it.
-- 1. `notification_events` holds one row per event worth telling a person about, written by
--    triggers where the change happens, in its transaction: `approval.requested`,
--    `approval.expiring` (a reminder written to `approval_events`), `approval.approved`,
--    `approval.rejected`, `approval.expired`, `dispatch.failed`, `dispatch.blocked`,
--    `dispatch.succeeded`.
-- 2. A row carries ids and the file's time, never a plan.
-- 3. An event is written only while its change holds (a file has no roles: a writer by hand
--    finds the trigger's own row already there, or the change not made), once per subject and
--    kind, at the file's time; it never changes and is never deleted.

CREATE TABLE notification_events (
    id           INTEGER PRIMARY KEY,
    kind         TEXT NOT NULL CHECK (kind IN (
                     'approval.requested', 'approval.expiring', 'approval.approved',
                     'approval.rejected', 'approval.expired', 'dispatch.failed',
                     'dispatch.blocked', 'dispatch.succeeded')),
    subject_id   TEXT NOT NULL,
    project_id   TEXT NOT NULL,
    action_type  TEXT NOT NULL,
    at_ms        INTEGER NOT NULL,
    payload_json TEXT NOT NULL CHECK (length(CAST(payload_json AS BLOB)) <= 4096),
    UNIQUE (subject_id, kind)
) STRICT;

CREATE TRIGGER notification_events_change_holds BEFORE INSERT ON notification_events
WHEN NEW.at_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    OR NEW.at_ms < CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) - 1000
    OR NOT CASE
        WHEN NEW.kind = 'approval.requested' THEN EXISTS (
            SELECT 1 FROM approval_requests AS r
            WHERE r.approval_request_id = NEW.subject_id AND r.project_id = NEW.project_id
              AND r.action_type = NEW.action_type)
        WHEN NEW.kind = 'approval.expiring' THEN EXISTS (
            SELECT 1 FROM approval_events AS e JOIN approval_requests AS r
                USING (approval_request_id)
            WHERE e.approval_request_id = NEW.subject_id AND e.kind = NEW.kind
              AND r.project_id = NEW.project_id AND r.action_type = NEW.action_type)
        WHEN NEW.kind LIKE 'approval.%' THEN EXISTS (
            SELECT 1 FROM approval_requests AS r
            WHERE r.approval_request_id = NEW.subject_id AND r.project_id = NEW.project_id
              AND r.action_type = NEW.action_type AND 'approval.' || r.status = NEW.kind)
        ELSE EXISTS (
            SELECT 1 FROM approved_action_dispatch_executions AS e
            JOIN approved_action_dispatches AS d USING (dispatch_id)
            WHERE e.dispatch_id = NEW.subject_id AND d.project_id = NEW.project_id
              AND d.action_type = NEW.action_type AND 'dispatch.' || e.status = NEW.kind)
    END
BEGIN
    SELECT RAISE(ABORT, 'notification_events: an event is written with its change, at the file''s time');
END;

CREATE TRIGGER notification_events_no_update BEFORE UPDATE ON notification_events
BEGIN
    SELECT RAISE(ABORT, 'notification_events: an event never changes');
END;

CREATE TRIGGER notification_events_no_delete BEFORE DELETE ON notification_events
BEGIN
    SELECT RAISE(ABORT, 'notification_events: an event is never deleted');
END;

-- The policy in force, as the copy trigger chooses it (it may run after this one).
CREATE TRIGGER approval_requests_tell_insert AFTER INSERT ON approval_requests
BEGIN
    INSERT INTO notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    ) VALUES (
        'approval.requested', NEW.approval_request_id, NEW.project_id, NEW.action_type,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER),
        (SELECT json_object(
            'approvalRequestId', NEW.approval_request_id,
            'actionRef', NEW.action_ref,
            'actionDigest', NEW.action_digest,
            'status', NEW.status,
            'expiresAtMs', coalesce(NEW.db_expires_at_ms, NEW.expires_at_ms),
            'policy', p.name,
            'policyVersion', p.version)
         FROM (SELECT NULL) LEFT JOIN (
             SELECT f.name, f.version FROM approval_policies_in_force AS f
             WHERE f.action_type = NEW.action_type
               AND (f.project_id IS NULL OR f.project_id = NEW.project_id)
             ORDER BY (f.project_id IS NULL), f.name LIMIT 1) AS p)
    );
END;

CREATE TRIGGER approval_requests_tell_update AFTER UPDATE ON approval_requests
WHEN NEW.status IS NOT OLD.status AND NEW.status IN ('approved', 'rejected', 'expired')
BEGIN
    INSERT INTO notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    ) VALUES (
        'approval.' || NEW.status, NEW.approval_request_id, NEW.project_id, NEW.action_type,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER),
        (SELECT json_object(
            'approvalRequestId', NEW.approval_request_id,
            'actionRef', NEW.action_ref,
            'actionDigest', NEW.action_digest,
            'status', NEW.status,
            'expiresAtMs', coalesce(NEW.db_expires_at_ms, NEW.expires_at_ms),
            'policy', p.policy_name,
            'policyVersion', p.policy_version)
         FROM (SELECT NULL) LEFT JOIN approval_request_policies AS p
             ON p.approval_request_id = NEW.approval_request_id)
    );
END;

CREATE TRIGGER approval_events_tell AFTER INSERT ON approval_events
BEGIN
    INSERT INTO notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    )
    SELECT NEW.kind, r.approval_request_id, r.project_id, r.action_type,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER),
        json_object(
            'approvalRequestId', r.approval_request_id,
            'actionRef', r.action_ref,
            'actionDigest', r.action_digest,
            'status', r.status,
            'expiresAtMs', coalesce(r.db_expires_at_ms, r.expires_at_ms),
            'policy', p.policy_name,
            'policyVersion', p.policy_version)
    FROM approval_requests AS r
    LEFT JOIN approval_request_policies AS p USING (approval_request_id)
    WHERE r.approval_request_id = NEW.approval_request_id;
END;

-- An execution's terminal outcome, but a cancel (an operator's own act, audited already).
CREATE TRIGGER approved_action_dispatch_executions_tell
AFTER UPDATE ON approved_action_dispatch_executions
WHEN NEW.status IS NOT OLD.status AND NEW.status IN ('failed', 'blocked', 'succeeded')
BEGIN
    INSERT INTO notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    )
    SELECT 'dispatch.' || NEW.status, NEW.dispatch_id, d.project_id, d.action_type,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER),
        json_object(
            'dispatchId', NEW.dispatch_id,
            'approvalRequestId', d.approval_request_id,
            'actionRef', d.action_ref,
            'actionDigest', d.action_digest,
            'status', NEW.status,
            'attempt', NEW.attempt,
            'resultCode', NEW.result_code)
    FROM approved_action_dispatches AS d
    WHERE d.dispatch_id = NEW.dispatch_id;
END;

-- Delivery (docs/notifications.md#delivery), as on PostgreSQL: subscriptions (a secret by
-- reference), the events matched, the deliveries and every attempt, and the deliverer's lease.

CREATE TABLE notification_subscriptions (
    name          TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 63
                                          AND name NOT GLOB '*[^a-z0-9_.-]*'
                                          AND substr(name, 1, 1) GLOB '[a-z0-9]'),
    url           TEXT NOT NULL CHECK ((url GLOB 'http://?*' OR url GLOB 'https://?*')
                                       AND length(url) <= 2048),
    secret_ref    TEXT NOT NULL CHECK (secret_ref GLOB 'credential:?*'
                                       OR secret_ref GLOB 'file:?*' OR secret_ref GLOB 'env:?*'),
    kinds_json    TEXT NOT NULL,
    action_type   TEXT,
    project_id    TEXT,
    format        TEXT NOT NULL DEFAULT 'raw' CHECK (format IN ('raw', 'slack')),
    created_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE notification_fanouts (
    event_id INTEGER PRIMARY KEY REFERENCES notification_events (id)
) STRICT;

CREATE TABLE notification_deliveries (
    event_id           INTEGER NOT NULL REFERENCES notification_events (id),
    subscription       TEXT NOT NULL
        REFERENCES notification_subscriptions (name) ON DELETE CASCADE,
    subject_id         TEXT NOT NULL,
    status             TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts           INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at_ms INTEGER NOT NULL,
    last_code          INTEGER,
    done_at_ms         INTEGER,
    PRIMARY KEY (event_id, subscription)
) STRICT;

CREATE INDEX notification_deliveries_due ON notification_deliveries
    (next_attempt_at_ms, event_id) WHERE status = 'pending';
CREATE INDEX notification_deliveries_subject ON notification_deliveries
    (subscription, subject_id, event_id) WHERE status = 'pending';

CREATE TABLE notification_attempts (
    id            INTEGER PRIMARY KEY,
    event_id      INTEGER NOT NULL,
    subscription  TEXT NOT NULL,
    attempt       INTEGER NOT NULL CHECK (attempt >= 1),
    outcome       TEXT NOT NULL CHECK (outcome IN ('delivered', 'failed', 'dead')),
    response_code INTEGER,
    error_code    TEXT,
    latency_ms    INTEGER NOT NULL CHECK (latency_ms >= 0),
    at_ms         INTEGER NOT NULL
) STRICT;

CREATE TABLE notification_deliverer (
    singleton           INTEGER PRIMARY KEY CHECK (singleton = 1),
    owner               TEXT,
    lease_expires_at_ms INTEGER NOT NULL DEFAULT 0,
    fanned_out_through  INTEGER NOT NULL DEFAULT 0
) STRICT;
INSERT INTO notification_deliverer (singleton) VALUES (1);
