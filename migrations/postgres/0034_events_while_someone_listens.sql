-- The outbox is written while someone listens (docs/notifications.md, decision 0044): an event
-- is kept only while at least one subscription exists. An installation that subscribes nobody
-- (an edge router, most often) writes no row per change that nothing would ever read or prune;
-- a subscription hears the changes from its own creation on. The changes themselves are
-- untouched: this only drops the event row before it is written.
CREATE FUNCTION qinglong.keep_event_while_someone_listens() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM qinglong.notification_subscriptions) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION qinglong.keep_event_while_someone_listens() FROM PUBLIC;
GRANT SELECT ON qinglong.notification_subscriptions TO qinglong_recorder;
GRANT CREATE ON SCHEMA qinglong TO qinglong_recorder;
ALTER FUNCTION qinglong.keep_event_while_someone_listens() OWNER TO qinglong_recorder;
REVOKE CREATE ON SCHEMA qinglong FROM qinglong_recorder;

CREATE TRIGGER notification_events_while_someone_listens
    BEFORE INSERT ON qinglong.notification_events
    FOR EACH ROW EXECUTE FUNCTION qinglong.keep_event_while_someone_listens();
