-- Subscriptions by target prefix (docs/notifications.md#subscriptions), and the outbox pruned
-- once delivered (docs/operations.md#retention-and-pruning).
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

-- Pruning the outbox (docs/operations.md#retention-and-pruning).
-- 4. The prune (a member of qinglong_pruner, as for dispatch trees) deletes the events older
--    than its cutoff whose every delivery is delivered or dead since before it, with those
--    deliveries, their attempts and the marks that the deliverer matched them.
-- 5. The database refuses, to anyone, the deletion of an event the deliverer has not matched
--    yet (above its watermark) or one with a pending delivery, of a pending delivery while its
--    subscription exists (removing the subscription takes its pending deliveries, as before),
--    of an attempt of a pending delivery, and of the match of an event not yet matched: an
--    event is never lost before it is delivered or dead-lettered. Updating or truncating an
--    event stays refused; only the pruner deletes.

DROP TRIGGER notification_events_immutable ON qinglong.notification_events;
CREATE TRIGGER notification_events_immutable
    BEFORE UPDATE OR TRUNCATE ON qinglong.notification_events
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();

CREATE FUNCTION qinglong.guard_notification_prune() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    matched_through pg_catalog.int8 :=
        (SELECT w.fanned_out_through FROM qinglong.notification_deliverer AS w);
    told pg_catalog.int8;
BEGIN
    IF TG_TABLE_NAME = 'notification_deliveries' THEN
        IF NOT EXISTS (SELECT 1 FROM qinglong.notification_subscriptions AS s
                       WHERE s.name = OLD.subscription) THEN
            RETURN OLD;  -- its subscription's removal (the key's cascade)
        END IF;
        IF OLD.status = 'pending' THEN
            RAISE EXCEPTION 'notification_deliveries: a pending delivery is never deleted'
                USING ERRCODE = 'restrict_violation';
        END IF;
    END IF;
    IF NOT pg_has_role(current_user, 'qinglong_pruner', 'MEMBER') THEN
        RAISE EXCEPTION '%: only a prune deletes', TG_TABLE_NAME
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF TG_TABLE_NAME = 'notification_events' THEN
        told := OLD.id;
    ELSE
        told := OLD.event_id;
    END IF;
    IF told > matched_through
            OR EXISTS (SELECT 1 FROM qinglong.notification_deliveries AS d
                       WHERE d.event_id = told AND d.status = 'pending') THEN
        RAISE EXCEPTION '%: an event goes only once matched and delivered or dead-lettered',
            TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN OLD;
END
$$;
REVOKE ALL ON FUNCTION qinglong.guard_notification_prune() FROM PUBLIC;

CREATE TRIGGER notification_events_prune_guard
    BEFORE DELETE ON qinglong.notification_events
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_notification_prune();
CREATE TRIGGER notification_deliveries_prune_guard
    BEFORE DELETE ON qinglong.notification_deliveries
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_notification_prune();
CREATE TRIGGER notification_attempts_prune_guard
    BEFORE DELETE ON qinglong.notification_attempts
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_notification_prune();
CREATE TRIGGER notification_fanouts_prune_guard
    BEFORE DELETE ON qinglong.notification_fanouts
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_notification_prune();

-- The prune's scan: events by age.
CREATE INDEX notification_events_at ON qinglong.notification_events (at_ms, id);
CREATE INDEX notification_attempts_event ON qinglong.notification_attempts (event_id);

GRANT SELECT ON qinglong.notification_events, qinglong.notification_fanouts,
    qinglong.notification_deliveries, qinglong.notification_attempts,
    qinglong.notification_deliverer, qinglong.notification_subscriptions TO qinglong_pruner;
GRANT DELETE ON qinglong.notification_events, qinglong.notification_fanouts,
    qinglong.notification_deliveries, qinglong.notification_attempts TO qinglong_pruner;

-- The operator's inbox lists the dead letters, newest first.
CREATE INDEX notification_deliveries_dead ON qinglong.notification_deliveries (done_at_ms)
    WHERE status = 'dead';

-- 6. An event is kept only while some subscription hears its kind (it was: while any
--    subscription exists, migration 0034). An installation told of failures only writes no
--    row per success, so notifications of failures cost the success path nothing. A
--    subscription's kinds are JSON written by the `notify` command; the test is a plain text
--    search of the quoted kind, which never raises, so no stored value can fail a change.
CREATE OR REPLACE FUNCTION qinglong.keep_event_while_someone_listens() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (
            SELECT 1 FROM qinglong.notification_subscriptions AS s
            WHERE pg_catalog.strpos(s.kinds_json,
                                    '"' OPERATOR(pg_catalog.||) NEW.kind
                                    OPERATOR(pg_catalog.||) '"') > 0) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$$;
