-- The outbox is written while someone listens (docs/notifications.md, decision 0044): an event
-- is kept only while at least one subscription exists. An installation that subscribes nobody
-- (an edge router, most often) writes no row per change that nothing would ever read or prune;
-- a subscription hears the changes from its own creation on. The changes themselves are
-- untouched: an event is dropped before it is written (RAISE(IGNORE) skips that one row, and
-- the trigger that wrote it goes on), and the recovery mark's own check that its events were
-- written asks only while someone listens.
CREATE TRIGGER notification_events_while_someone_listens BEFORE INSERT ON notification_events
WHEN NOT EXISTS (SELECT 1 FROM notification_subscriptions)
BEGIN
    SELECT RAISE(IGNORE);
END;

DROP TRIGGER recovery_required_marks_tell;

CREATE TRIGGER recovery_required_marks_tell AFTER INSERT ON recovery_required_marks
WHEN EXISTS (SELECT 1 FROM notification_subscriptions)
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
    WHERE NOT EXISTS (
            SELECT 1 FROM notification_events AS n
            WHERE n.subject_id = NEW.dispatch_id AND n.kind = 'dispatch.recovery_required')
       OR EXISTS (
            SELECT 1 FROM approved_action_dispatches AS d
            WHERE d.dispatch_id = NEW.dispatch_id AND d.target IS NOT NULL
              AND NOT EXISTS (
                  SELECT 1 FROM notification_events AS n
                  WHERE n.subject_id = NEW.dispatch_id AND n.kind = 'target.held'));
END;
