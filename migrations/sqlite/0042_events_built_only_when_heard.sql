-- An event is built only when someone hears its kind (docs/notifications.md, decision 0053),
-- as on PostgreSQL: each trigger that tells a change asks first, in its WHEN clause, whether
-- a subscription hears the kind it would write (the keep trigger's test, migration 0038), so
-- a change nobody listens to builds no payload and inserts no row for the keep trigger to
-- drop. When someone does, every trigger writes what it wrote before.

DROP TRIGGER approval_requests_tell_insert;

CREATE TRIGGER approval_requests_tell_insert AFTER INSERT ON approval_requests
WHEN EXISTS (SELECT 1 FROM notification_subscriptions AS s
             WHERE instr(s.kinds_json, '"approval.requested"') > 0)
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
             SELECT f.name, f.version
             FROM action_plans AS a
             JOIN approval_policies_in_force AS f
               ON f.action_type = NEW.action_type
              AND (f.project_id IS NULL OR f.project_id = NEW.project_id)
              AND (f.target_prefix IS NULL
                   OR substr(a.target, 1, length(f.target_prefix)) = f.target_prefix)
             WHERE a.project_id = NEW.project_id AND a.action_ref = NEW.action_ref
             ORDER BY (f.target_prefix IS NULL), length(f.target_prefix) DESC,
                      (f.project_id IS NULL), f.name
             LIMIT 1) AS p)
    );
END;

DROP TRIGGER approval_requests_tell_update;

CREATE TRIGGER approval_requests_tell_update AFTER UPDATE ON approval_requests
WHEN NEW.status IS NOT OLD.status AND NEW.status IN ('approved', 'rejected', 'expired')
 AND EXISTS (SELECT 1 FROM notification_subscriptions AS s
             WHERE instr(s.kinds_json, '"approval.' || NEW.status || '"') > 0)
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

DROP TRIGGER approval_events_tell;

CREATE TRIGGER approval_events_tell AFTER INSERT ON approval_events
WHEN EXISTS (SELECT 1 FROM notification_subscriptions AS s
             WHERE instr(s.kinds_json, '"' || NEW.kind || '"') > 0)
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

DROP TRIGGER approved_action_dispatch_executions_tell;

CREATE TRIGGER approved_action_dispatch_executions_tell
AFTER UPDATE ON approved_action_dispatch_executions
WHEN NEW.status IS NOT OLD.status AND NEW.status IN ('failed', 'blocked', 'succeeded')
 AND EXISTS (SELECT 1 FROM notification_subscriptions AS s
             WHERE instr(s.kinds_json, '"dispatch.' || NEW.status || '"') > 0)
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

-- A recovery tells two kinds: it is built when either is heard (the keep trigger drops the
-- other, and the check that the mark was told asks only for the kinds someone hears).
DROP TRIGGER recovery_required_marks_tell;

CREATE TRIGGER recovery_required_marks_tell AFTER INSERT ON recovery_required_marks
WHEN EXISTS (SELECT 1 FROM notification_subscriptions AS s
             WHERE instr(s.kinds_json, '"dispatch.recovery_required"') > 0
                OR instr(s.kinds_json, '"target.held"') > 0)
BEGIN
    INSERT INTO notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    )
    SELECT k.kind, d.dispatch_id, d.project_id, d.action_type,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER),
        json_object(
            'dispatchId', d.dispatch_id,
            'approvalRequestId', d.approval_request_id,
            'actionRef', d.action_ref,
            'actionDigest', d.action_digest,
            'status', 'recovery_required',
            'attempt', NEW.execution_attempt,
            'resultCode', u.result_code,
            'target', d.target,
            'noticedBy', NEW.noticed_by)
    FROM approved_action_dispatches AS d
    JOIN (SELECT 1 AS ord, 'dispatch.recovery_required' AS kind
          UNION ALL SELECT 2, 'target.held') AS k
    LEFT JOIN uncertain_outcomes AS u
        ON u.dispatch_id = d.dispatch_id AND u.execution_attempt = NEW.execution_attempt
    WHERE d.dispatch_id = NEW.dispatch_id AND (k.ord = 1 OR d.target IS NOT NULL)
    ORDER BY k.ord;
    SELECT RAISE(ABORT, 'notification_events: a recovery_required mark is told with it')
    WHERE (EXISTS (SELECT 1 FROM notification_subscriptions AS s
                   WHERE instr(s.kinds_json, '"dispatch.recovery_required"') > 0)
           AND NOT EXISTS (
               SELECT 1 FROM notification_events AS n
               WHERE n.subject_id = NEW.dispatch_id AND n.kind = 'dispatch.recovery_required'))
       OR (EXISTS (SELECT 1 FROM notification_subscriptions AS s
                   WHERE instr(s.kinds_json, '"target.held"') > 0)
           AND EXISTS (
               SELECT 1 FROM approved_action_dispatches AS d
               WHERE d.dispatch_id = NEW.dispatch_id AND d.target IS NOT NULL
                 AND NOT EXISTS (
                     SELECT 1 FROM notification_events AS n
                     WHERE n.subject_id = NEW.dispatch_id AND n.kind = 'target.held')));
END;
