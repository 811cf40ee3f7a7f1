-- Traces: the W3C trace context a request was submitted under (docs/traces.md, decision 0050).
--
-- The requester may name a `traceparent` (the API's header, `submit --traceparent`): it is
-- written with the approval request, never changed, and the database, never the caller,
-- copies it into the dispatch the request is consumed into. It names a trace, never a
-- secret; the checks bound it to the one stored form (version 00, lowercase hex, trace and
-- span ids not all zero), so nothing else can ride in that column.

ALTER TABLE qinglong.approval_requests ADD COLUMN traceparent TEXT
    CONSTRAINT approval_requests_traceparent_w3c CHECK (
        traceparent IS NULL OR (traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
        AND substr(traceparent, 4, 32) <> repeat('0', 32)
        AND substr(traceparent, 37, 16) <> repeat('0', 16)));
ALTER TABLE qinglong.approved_action_dispatches ADD COLUMN traceparent TEXT
    CONSTRAINT approved_action_dispatches_traceparent_w3c CHECK (
        traceparent IS NULL OR (traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
        AND substr(traceparent, 4, 32) <> repeat('0', 32)
        AND substr(traceparent, 37, 16) <> repeat('0', 16)));

-- A definer (the recorder, like every definer): the consumer need not read the request's
-- column to copy it, and cannot choose another.
CREATE FUNCTION qinglong.dispatch_traceparent_of_request() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    NEW.traceparent := (SELECT a.traceparent FROM qinglong.approval_requests AS a
                        WHERE a.approval_request_id = NEW.approval_request_id);
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION qinglong.dispatch_traceparent_of_request() FROM PUBLIC;
GRANT CREATE ON SCHEMA qinglong TO qinglong_recorder;
ALTER FUNCTION qinglong.dispatch_traceparent_of_request() OWNER TO qinglong_recorder;
REVOKE CREATE ON SCHEMA qinglong FROM qinglong_recorder;

CREATE TRIGGER approved_action_dispatches_traceparent_of_request
    BEFORE INSERT ON qinglong.approved_action_dispatches
    FOR EACH ROW EXECUTE FUNCTION qinglong.dispatch_traceparent_of_request();

-- The runtime and the approvers may update a request's state; its trace is the requester's,
-- forever (the dispatch's is immutable with the rest of the row).
CREATE FUNCTION qinglong.guard_approval_traceparent() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'an approval request''s traceparent never changes'
        USING ERRCODE = 'QLI01';
END
$$;

CREATE TRIGGER approval_requests_traceparent_immutable
    BEFORE UPDATE OF traceparent ON qinglong.approval_requests
    FOR EACH ROW WHEN (OLD.traceparent IS DISTINCT FROM NEW.traceparent)
    EXECUTE FUNCTION qinglong.guard_approval_traceparent();
