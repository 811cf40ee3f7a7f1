-- Recovery in the notification outbox, as the PostgreSQL schema has it (decision 0044).
-- 1. When the database writes the ledger's `recovery_required` mark (migration 0029), it writes
--    in the same transaction `dispatch.recovery_required` and, for a dispatch that names a
--    target, `target.held`, both subject the dispatch, the target in the payload.
-- 2. The kind CHECK admits them. A CHECK cannot be altered, so the table is rebuilt, rows and
--    ids kept. The migration runs inside its own transaction, where foreign keys cannot be
--    switched off, and renaming a table rewrites the references to it: the rows are set
--    aside, the table dropped and made again under its own name, the rows put back (foreign
--    keys deferred meanwhile, so the fan-outs and deliveries that name them hold at commit),
--    then its three triggers made again, the one that checks an event's change told of the
--    new kinds. The triggers of other tables that write it name it, so they still do.

PRAGMA defer_foreign_keys = ON;

CREATE TEMP TABLE notification_events_kept AS SELECT * FROM notification_events;

DROP TABLE notification_events;

CREATE TABLE notification_events (
    id           INTEGER PRIMARY KEY,
    kind         TEXT NOT NULL CHECK (kind IN (
                     'approval.requested', 'approval.expiring', 'approval.approved',
                     'approval.rejected', 'approval.expired', 'dispatch.failed',
                     'dispatch.blocked', 'dispatch.succeeded', 'dispatch.recovery_required',
                     'target.held')),
    subject_id   TEXT NOT NULL,
    project_id   TEXT NOT NULL,
    action_type  TEXT NOT NULL,
    at_ms        INTEGER NOT NULL,
    payload_json TEXT NOT NULL CHECK (length(CAST(payload_json AS BLOB)) <= 4096),
    UNIQUE (subject_id, kind)
) STRICT;

INSERT INTO notification_events (
    id, kind, subject_id, project_id, action_type, at_ms, payload_json
)
SELECT id, kind, subject_id, project_id, action_type, at_ms, payload_json
FROM temp.notification_events_kept ORDER BY id;

DROP TABLE temp.notification_events_kept;

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
        WHEN NEW.kind IN ('dispatch.recovery_required', 'target.held') THEN EXISTS (
            SELECT 1 FROM recovery_required_marks AS m
            JOIN approved_action_dispatches AS d USING (dispatch_id)
            WHERE m.dispatch_id = NEW.subject_id AND d.project_id = NEW.project_id
              AND d.action_type = NEW.action_type
              AND (NEW.kind = 'dispatch.recovery_required' OR d.target IS NOT NULL))
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

-- The marks are written by INSERT OR IGNORE, whose policy the inserts below inherit: a row a
-- constraint refused would vanish without a word, so the last statement refuses the mark
-- itself unless its events are there.
CREATE TRIGGER recovery_required_marks_tell AFTER INSERT ON recovery_required_marks
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
