-- Subscriptions by target prefix (docs/notifications.md#subscriptions), and the outbox pruned
-- once delivered (docs/operations.md#retention-and-pruning), as the PostgreSQL schema has them.
-- 1. A subscription may name a target prefix, as an approval policy may (migration 0032): 1 to
--    128 printable ASCII characters, no space, no wildcard. It hears an event whose target
--    begins with it, byte for byte; an event without a target is not heard by it. A
--    subscription without one hears any target, and events without one.
-- 2. The event carries its target, as on PostgreSQL, and it is the database's, never a
--    caller's: the plan's (an approval's events, through the request) or the dispatch's (the
--    rest), neither of which ever changes. A trigger writes it right after the event; the one
--    change an event admits is that write, of exactly that value, once.

ALTER TABLE notification_subscriptions ADD COLUMN target_prefix TEXT
    CONSTRAINT notification_subscriptions_target_prefix CHECK (
        target_prefix IS NULL OR (
            typeof(target_prefix) = 'text'
            AND length(target_prefix) BETWEEN 1 AND 128
            AND target_prefix NOT GLOB '*[^!-~]*'
            AND instr(target_prefix, '*') = 0 AND instr(target_prefix, '?') = 0
            AND instr(target_prefix, '%') = 0));

ALTER TABLE notification_events ADD COLUMN target TEXT;

DROP TRIGGER notification_events_no_update;
CREATE TRIGGER notification_events_no_update BEFORE UPDATE ON notification_events
WHEN NOT (OLD.target IS NULL
          AND NEW.id IS OLD.id AND NEW.kind IS OLD.kind AND NEW.subject_id IS OLD.subject_id
          AND NEW.project_id IS OLD.project_id AND NEW.action_type IS OLD.action_type
          AND NEW.at_ms IS OLD.at_ms AND NEW.payload_json IS OLD.payload_json
          AND NEW.target IS CASE WHEN OLD.kind LIKE 'approval.%' THEN (
        SELECT a.target FROM approval_requests AS r
        JOIN action_plans AS a ON a.project_id = r.project_id AND a.action_ref = r.action_ref
        WHERE r.approval_request_id = OLD.subject_id)
    ELSE (
        SELECT t.target FROM approved_action_dispatches AS t WHERE t.dispatch_id = OLD.subject_id)
    END)
BEGIN
    SELECT RAISE(ABORT, 'notification_events: an event never changes');
END;

CREATE TRIGGER notification_events_target AFTER INSERT ON notification_events
BEGIN
    UPDATE notification_events SET target = CASE WHEN NEW.kind LIKE 'approval.%' THEN (
        SELECT a.target FROM approval_requests AS r
        JOIN action_plans AS a ON a.project_id = r.project_id AND a.action_ref = r.action_ref
        WHERE r.approval_request_id = NEW.subject_id)
    ELSE (
        SELECT t.target FROM approved_action_dispatches AS t WHERE t.dispatch_id = NEW.subject_id)
    END
    WHERE id = NEW.id;
END;

UPDATE notification_events SET target = CASE WHEN notification_events.kind LIKE 'approval.%' THEN (
        SELECT a.target FROM approval_requests AS r
        JOIN action_plans AS a ON a.project_id = r.project_id AND a.action_ref = r.action_ref
        WHERE r.approval_request_id = notification_events.subject_id)
    ELSE (
        SELECT t.target FROM approved_action_dispatches AS t WHERE t.dispatch_id = notification_events.subject_id)
    END;

-- Pruning the outbox (docs/operations.md#retention-and-pruning).
-- 3. The prune (the daemon's, or `prune`) deletes the events older than its cutoff whose every
--    delivery is delivered or dead since before it, with those deliveries, their attempts and
--    the marks that the deliverer matched them.
-- 4. The file refuses the deletion of an event the deliverer has not matched yet (above its
--    watermark) or one with a pending delivery, of a pending delivery while its subscription
--    exists, of an attempt of a pending delivery, and of the match of an event not yet
--    matched: an event is never lost before it is delivered or dead-lettered. The newest event
--    stays too: a rowid without AUTOINCREMENT is reused once the highest row is gone, and an
--    event's id is its webhook-id, by which receivers deduplicate. Updating an event stays
--    refused.

DROP TRIGGER notification_events_no_delete;
CREATE TRIGGER notification_events_no_delete BEFORE DELETE ON notification_events
WHEN OLD.id > (SELECT fanned_out_through FROM notification_deliverer)
  OR OLD.id = (SELECT max(id) FROM notification_events)
  OR EXISTS (SELECT 1 FROM notification_deliveries AS d
             WHERE d.event_id = OLD.id AND d.status = 'pending')
BEGIN
    SELECT RAISE(ABORT, 'notification_events: an event goes only once matched and delivered or dead-lettered');
END;

CREATE TRIGGER notification_deliveries_prune_guard BEFORE DELETE ON notification_deliveries
WHEN OLD.status = 'pending'
  AND EXISTS (SELECT 1 FROM notification_subscriptions AS s WHERE s.name = OLD.subscription)
BEGIN
    SELECT RAISE(ABORT, 'notification_deliveries: a pending delivery is never deleted');
END;

CREATE TRIGGER notification_attempts_prune_guard BEFORE DELETE ON notification_attempts
WHEN EXISTS (SELECT 1 FROM notification_deliveries AS d
             WHERE d.event_id = OLD.event_id AND d.subscription = OLD.subscription
               AND d.status = 'pending')
BEGIN
    SELECT RAISE(ABORT, 'notification_attempts: an attempt of a pending delivery is kept');
END;

CREATE TRIGGER notification_fanouts_prune_guard BEFORE DELETE ON notification_fanouts
WHEN OLD.event_id > (SELECT fanned_out_through FROM notification_deliverer)
BEGIN
    SELECT RAISE(ABORT, 'notification_fanouts: an event not yet matched keeps its match');
END;

CREATE INDEX notification_events_at ON notification_events (at_ms, id);
CREATE INDEX notification_attempts_event ON notification_attempts (event_id);

-- The operator's inbox lists the dead letters, newest first.
CREATE INDEX notification_deliveries_dead ON notification_deliveries (done_at_ms)
    WHERE status = 'dead';

-- 5. An event is kept only while some subscription hears its kind (it was: while any
--    subscription exists, migration 0034). An installation told of failures only writes no
--    row per success. The recovery mark's check that its events were written asks only for
--    the kinds someone hears.
DROP TRIGGER notification_events_while_someone_listens;
CREATE TRIGGER notification_events_while_someone_listens BEFORE INSERT ON notification_events
WHEN NOT EXISTS (SELECT 1 FROM notification_subscriptions AS s
                 WHERE instr(s.kinds_json, '"' || NEW.kind || '"') > 0)
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
