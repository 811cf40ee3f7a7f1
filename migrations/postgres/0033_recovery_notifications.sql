-- Recovery in the notification outbox (docs/notifications.md, decision 0044).
-- 1. When the database writes the ledger's `recovery_required` mark (migration 0029), it writes
--    in the same transaction `dispatch.recovery_required` and, for a dispatch that names a
--    target, `target.held`: both wait on a person. Both are subject the dispatch (the outbox
--    keeps one event per subject and kind, and a dispatch is marked once), so a target held
--    by two dispatches over its life is told twice; the target is in the payload.
-- 2. The payload is ids, the plan's reference and digest, the attempt, the target and the
--    handler's result code if it recorded an uncertain outcome for that attempt; never a plan.
-- 3. Written by a definer owned by the recorder, as every other kind; nobody else inserts one.

ALTER TABLE qinglong.notification_events DROP CONSTRAINT notification_events_kind_check;
ALTER TABLE qinglong.notification_events ADD CONSTRAINT notification_events_kind_check
    CHECK (kind IN (
        'approval.requested', 'approval.expiring', 'approval.approved',
        'approval.rejected', 'approval.expired', 'dispatch.failed',
        'dispatch.blocked', 'dispatch.succeeded', 'dispatch.recovery_required',
        'target.held'));

CREATE FUNCTION qinglong.tell_recovery_required() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
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
REVOKE ALL ON FUNCTION qinglong.tell_recovery_required() FROM PUBLIC;
-- The handler's code, never what it knew (`evidence_json`).
GRANT SELECT (dispatch_id, execution_attempt, result_code) ON qinglong.uncertain_outcomes
    TO qinglong_recorder;
GRANT CREATE ON SCHEMA qinglong TO qinglong_recorder;
ALTER FUNCTION qinglong.tell_recovery_required() OWNER TO qinglong_recorder;
REVOKE CREATE ON SCHEMA qinglong FROM qinglong_recorder;

CREATE TRIGGER recovery_required_marks_tell
    AFTER INSERT ON qinglong.recovery_required_marks
    FOR EACH ROW EXECUTE FUNCTION qinglong.tell_recovery_required();
