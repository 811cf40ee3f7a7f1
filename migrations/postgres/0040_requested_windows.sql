-- The requester's narrowing of the execution window (docs/state-machine.md#windows-and-freezes,
-- decision 0051), in schema qinglong: the requester may only narrow what the policy allows.
-- 1. A request may carry `not_before_ms` (start no earlier than that moment) and
--    `window_for_ms` (and then only within that long of it, or of the moment its dispatch is
--    written when no start is named): the requester's window, written with the request and
--    never changed (QLI01), so what was approved is what runs.
-- 2. The dispatch's window is the INTERSECTION of the policy's (migration 0035) and the
--    requester's: the definer that copies the policy's window now takes the later start and
--    the earlier end. Whatever an INSERT names is overwritten, as before: a login can neither
--    widen the requester's window nor the policy's.
-- 3. A narrowing that can never meet the policy's window is refused when the request is
--    written (QLW02): its end falls before the policy's earliest start (now plus the policy's
--    delay; now alone without a policy). One the consume leaves empty (approved after the
--    requester's end) is written empty, never widened: the claim never starts it, and the
--    reconcile pass ends it `cancelled` `window_expired` at its end.

ALTER TABLE qinglong.approval_requests
    ADD COLUMN not_before_ms BIGINT CHECK (not_before_ms > 0),
    ADD COLUMN window_for_ms BIGINT CHECK (window_for_ms BETWEEN 1000 AND 2592000000);

CREATE FUNCTION qinglong.guard_requested_window() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'an approval request''s window never changes' USING ERRCODE = 'QLI01';
END
$$;

CREATE TRIGGER approval_requests_window_immutable
    BEFORE UPDATE OF not_before_ms, window_for_ms ON qinglong.approval_requests
    FOR EACH ROW WHEN ((OLD.not_before_ms, OLD.window_for_ms)
                       IS DISTINCT FROM (NEW.not_before_ms, NEW.window_for_ms))
    EXECUTE FUNCTION qinglong.guard_requested_window();

-- Point 3: the requester's end against the earliest start its policy allows. A definer (the
-- recorder), after the policy's copy (`approval_requests_policy`; triggers of one kind run by
-- name): the requester's login need not read policies.
CREATE FUNCTION qinglong.check_requested_window() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    now_ms pg_catalog.int8 := qinglong.db_now_ms();
    delay  pg_catalog.int8;
BEGIN
    SELECT p.not_before_delay_ms INTO delay
    FROM qinglong.approval_request_policies AS r
    JOIN qinglong.approval_policies AS p
        ON p.name = r.policy_name AND p.version = r.policy_version
    WHERE r.approval_request_id = NEW.approval_request_id;
    IF COALESCE(NEW.not_before_ms, now_ms) OPERATOR(pg_catalog.+) NEW.window_for_ms
            <= now_ms OPERATOR(pg_catalog.+) COALESCE(delay, 0) THEN
        RAISE EXCEPTION 'the requested window ends before the policy lets it start'
            USING ERRCODE = 'QLW02';
    END IF;
    RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION qinglong.check_requested_window() FROM PUBLIC;
GRANT CREATE ON SCHEMA qinglong TO qinglong_recorder;
ALTER FUNCTION qinglong.check_requested_window() OWNER TO qinglong_recorder;
REVOKE CREATE ON SCHEMA qinglong FROM qinglong_recorder;

CREATE TRIGGER approval_requests_window_possible
    AFTER INSERT ON qinglong.approval_requests
    FOR EACH ROW WHEN (NEW.window_for_ms IS NOT NULL)
    EXECUTE FUNCTION qinglong.check_requested_window();

-- Point 2: the window of migration 0035, narrowed by the request's.
CREATE OR REPLACE FUNCTION qinglong.dispatch_window_of_policy() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    delay      pg_catalog.int8;
    span       pg_catalog.int8;
    asked_from pg_catalog.int8;
    asked_for  pg_catalog.int8;
    now_ms     pg_catalog.int8;
    opens      pg_catalog.int8;
BEGIN
    NEW.not_before_ms := NULL;
    NEW.not_after_ms := NULL;
    SELECT p.not_before_delay_ms, p.window_ms INTO delay, span
    FROM qinglong.approval_request_policies AS r
    JOIN qinglong.approval_policies AS p
        ON p.name = r.policy_name AND p.version = r.policy_version
    WHERE r.approval_request_id = NEW.approval_request_id;
    SELECT a.not_before_ms, a.window_for_ms INTO asked_from, asked_for
    FROM qinglong.approval_requests AS a
    WHERE a.approval_request_id = NEW.approval_request_id;
    IF delay IS NULL AND span IS NULL AND asked_from IS NULL AND asked_for IS NULL THEN
        RETURN NEW;
    END IF;
    now_ms := qinglong.db_now_ms();
    opens := now_ms OPERATOR(pg_catalog.+) COALESCE(delay, 0);
    IF delay IS NOT NULL THEN
        NEW.not_before_ms := opens;
    END IF;
    IF span IS NOT NULL THEN
        NEW.not_after_ms := opens OPERATOR(pg_catalog.+) span;
    END IF;
    -- GREATEST and LEAST pass over a NULL: an open side takes the other's bound.
    NEW.not_before_ms := GREATEST(NEW.not_before_ms, asked_from);
    IF asked_for IS NOT NULL THEN
        NEW.not_after_ms := LEAST(NEW.not_after_ms,
            COALESCE(asked_from, now_ms) OPERATOR(pg_catalog.+) asked_for);
    END IF;
    RETURN NEW;
END
$$;
