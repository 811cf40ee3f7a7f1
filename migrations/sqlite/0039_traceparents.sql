-- Traces: the W3C trace context a request was submitted under (docs/traces.md, decision 0050).
--
-- The requester may name a `traceparent` (the API's header, `submit --traceparent`): it is
-- written with the approval request, never changed, and the database, never the caller,
-- copies it into the dispatch the request is consumed into. It names a trace, never a
-- secret; the checks bound it to the one stored form (version 00, lowercase hex, trace and
-- span ids not all zero), so nothing else can ride in that column.

ALTER TABLE approval_requests ADD COLUMN traceparent TEXT
    CONSTRAINT approval_requests_traceparent_w3c CHECK (
        traceparent IS NULL OR (traceparent GLOB
        '00-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f]'
        AND substr(traceparent, 4, 32) <> '00000000000000000000000000000000'
        AND substr(traceparent, 37, 16) <> '0000000000000000'));
ALTER TABLE approved_action_dispatches ADD COLUMN traceparent TEXT
    CONSTRAINT approved_action_dispatches_traceparent_w3c CHECK (
        traceparent IS NULL OR (traceparent GLOB
        '00-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f]'
        AND substr(traceparent, 4, 32) <> '00000000000000000000000000000000'
        AND substr(traceparent, 37, 16) <> '0000000000000000'));

CREATE TRIGGER approval_requests_traceparent_immutable
BEFORE UPDATE OF traceparent ON approval_requests
WHEN NEW.traceparent IS NOT OLD.traceparent
BEGIN
    SELECT RAISE(ABORT, 'qinglong:traceparent_refused: a request''s traceparent never changes');
END;

-- The statement reads the request's traceparent (`insert_dispatch`); this refuses any other.
CREATE TRIGGER approved_action_dispatches_traceparent_of_request
BEFORE INSERT ON approved_action_dispatches
WHEN NEW.traceparent IS NOT (
    SELECT a.traceparent FROM approval_requests AS a
    WHERE a.approval_request_id = NEW.approval_request_id)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:traceparent_refused: a dispatch names its request''s traceparent');
END;
