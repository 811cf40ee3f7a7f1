-- Subscriptions by target prefix (docs/notifications.md#subscriptions).
-- 1. A subscription may name a target prefix, as an approval policy may (migration 0032): 1 to
--    128 printable ASCII characters, no space, no wildcard. It hears an event whose target
--    begins with it, byte for byte; an event without a target is not heard by it. A
--    subscription without one hears any target, and events without one.
-- 2. The event carries its target, written by the database as the event is: the plan's target
--    for an approval's events (through its request), the dispatch's for a dispatch's, a held
--    target's and a recovery's. A definer owned by the recorder fills it before the row is
--    kept, over anything a writer put there (only the recorder's definers write events).
-- 3. Subscriptions stay the schema's owner's: the column is written with the row, by it alone.

ALTER TABLE qinglong.notification_subscriptions ADD COLUMN target_prefix TEXT
    CONSTRAINT notification_subscriptions_target_prefix CHECK (
        target_prefix IS NULL
        OR (target_prefix ~ '^[!-~]{1,128}$' AND target_prefix !~ '[*?%]'));

ALTER TABLE qinglong.notification_events ADD COLUMN target TEXT;

CREATE FUNCTION qinglong.event_target() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF pg_catalog.starts_with(NEW.kind, 'approval.') THEN
        NEW.target := (
            SELECT a.target FROM qinglong.approval_requests AS r
            JOIN qinglong.action_plans AS a
              ON a.project_id = r.project_id AND a.action_ref = r.action_ref
            WHERE r.approval_request_id = NEW.subject_id);
    ELSE
        NEW.target := (
            SELECT d.target FROM qinglong.approved_action_dispatches AS d
            WHERE d.dispatch_id = NEW.subject_id);
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION qinglong.event_target() FROM PUBLIC;
GRANT CREATE ON SCHEMA qinglong TO qinglong_recorder;
ALTER FUNCTION qinglong.event_target() OWNER TO qinglong_recorder;
REVOKE CREATE ON SCHEMA qinglong FROM qinglong_recorder;

-- Named to run after `notification_events_while_someone_listens` (before-triggers of one table
-- run by name): an event nobody hears is dropped before its target is looked up.
CREATE TRIGGER notification_events_with_target
    BEFORE INSERT ON qinglong.notification_events
    FOR EACH ROW EXECUTE FUNCTION qinglong.event_target();
