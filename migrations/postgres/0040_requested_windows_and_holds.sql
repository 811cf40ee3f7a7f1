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

-- Holding a target on an unknown outcome (docs/operations.md#freezes-and-holds, decision
-- 0051). A target whose last effect has an unknown outcome (`recovery_required`: an
-- `executing` row whose lease expired) is held until the row is settled; a policy may say
-- `proceed` instead.
-- 4. `proceed_on_unknown` (false: hold, the default) is the policy's; the database copies it,
--    never the caller, into the execution when it is written (a definer overwrites whatever
--    an INSERT names), from the policy version its request carries, and it never changes
--    (QLI01): no login can flip the rule of its own execution.
-- 5. The unique index of migration 0030 is narrowed to what holds whatever happens: a
--    `leased` row, and an `executing` row of a hold policy. An `executing` row of a proceed
--    policy holds its target only while its lease is live, a test of the database's clock
--    that no index can make: a trigger on every lease of a targeted row refuses (QLH01) while
--    such a row on its target is live (the index refuses the rest, 23505), and on the start
--    and every renewal of a proceeding row while any other row holds its target. Each takes
--    the target's transaction lock first (the claim's, migration 0030), so a lease and a
--    proceeding row's start never pass unseen by each other. A renewal is refused too: a row
--    whose target another took once its lease ran out never comes back to life beside it.
-- 6. The rows past a claim keep a plain partial index of their own, which the claim's busy
--    probe and the target reads use, filtering the proceeding rows whose lease ran out.

ALTER TABLE qinglong.approval_policies
    ADD COLUMN proceed_on_unknown BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE qinglong.approved_action_dispatch_executions
    ADD COLUMN proceed_on_unknown BOOLEAN NOT NULL DEFAULT false;

CREATE FUNCTION qinglong.execution_rule_of_policy() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    NEW.proceed_on_unknown := COALESCE((
        SELECT p.proceed_on_unknown
        FROM qinglong.approved_action_dispatches AS d
        JOIN qinglong.approval_request_policies AS r
            ON r.approval_request_id = d.approval_request_id
        JOIN qinglong.approval_policies AS p
            ON p.name = r.policy_name AND p.version = r.policy_version
        WHERE d.dispatch_id = NEW.dispatch_id), false);
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION qinglong.execution_rule_of_policy() FROM PUBLIC;
GRANT CREATE ON SCHEMA qinglong TO qinglong_recorder;
ALTER FUNCTION qinglong.execution_rule_of_policy() OWNER TO qinglong_recorder;
REVOKE CREATE ON SCHEMA qinglong FROM qinglong_recorder;

CREATE TRIGGER approved_action_dispatch_executions_rule_of_policy
    BEFORE INSERT ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW EXECUTE FUNCTION qinglong.execution_rule_of_policy();

CREATE FUNCTION qinglong.guard_execution_rule() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'an execution''s rule on an unknown outcome is its policy''s and never changes'
        USING ERRCODE = 'QLI01';
END
$$;

CREATE TRIGGER approved_action_dispatch_executions_rule_immutable
    BEFORE UPDATE OF proceed_on_unknown ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW WHEN (OLD.proceed_on_unknown IS DISTINCT FROM NEW.proceed_on_unknown)
    EXECUTE FUNCTION qinglong.guard_execution_rule();

-- Point 5.
DROP INDEX qinglong.approved_action_dispatch_executions_one_per_target;
CREATE UNIQUE INDEX approved_action_dispatch_executions_one_per_target
    ON qinglong.approved_action_dispatch_executions (target)
    WHERE target IS NOT NULL
      AND (status = 'leased' OR (status = 'executing' AND NOT proceed_on_unknown));
-- Point 6.
CREATE INDEX approved_action_dispatch_executions_past_claim
    ON qinglong.approved_action_dispatch_executions (target)
    WHERE target IS NOT NULL AND status IN ('leased', 'executing');

CREATE FUNCTION qinglong.check_target_holder() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    now_ms pg_catalog.int8;
    holder pg_catalog.text;
BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock(1903326210, pg_catalog.hashtext(NEW.target));
    now_ms := qinglong.db_now_ms();
    -- A lease: the live proceeding rows (the unique index holds the others); a proceeding
    -- row's start or renewal: every row that holds the target.
    SELECT b.dispatch_id INTO holder
    FROM qinglong.approved_action_dispatch_executions AS b
    WHERE b.target = NEW.target AND b.status IN ('leased', 'executing')
      AND b.dispatch_id <> NEW.dispatch_id
      AND CASE WHEN NEW.status = 'leased'
               THEN b.status = 'executing' AND b.proceed_on_unknown
                    AND b.lease_expires_at_ms > now_ms
               ELSE b.status = 'leased' OR NOT b.proceed_on_unknown
                    OR b.lease_expires_at_ms > now_ms END
    LIMIT 1;
    IF holder IS NOT NULL THEN
        RAISE EXCEPTION 'qinglong:target_refused: % holds the target of % (% → %)', holder,
            NEW.dispatch_id, OLD.status, NEW.status USING ERRCODE = 'QLH01';
    END IF;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION qinglong.check_target_holder() FROM PUBLIC;

CREATE TRIGGER approved_action_dispatch_executions_target_holder
    BEFORE UPDATE ON qinglong.approved_action_dispatch_executions
    FOR EACH ROW WHEN (NEW.target IS NOT NULL AND (
        (NEW.status = 'leased' AND (OLD.status <> 'leased'
                                    OR NEW.lease_token IS DISTINCT FROM OLD.lease_token))
        OR (NEW.proceed_on_unknown AND NEW.status = 'executing'
            AND (OLD.status <> 'executing'
                 OR NEW.lease_expires_at_ms IS DISTINCT FROM OLD.lease_expires_at_ms))))
    EXECUTE FUNCTION qinglong.check_target_holder();
