-- A policy's lifetime and reminder (docs/security.md#approval-policies), in schema qinglong.
-- 1. A policy may say how long its requests live (`lifetime_ms`; NULL: the lifetime the caller
--    asks for, the settings' approval lifetime) and when to remind before they expire
--    (`remind_before_ms`). Both are copied into the request's policy row by the definer.
-- 2. The database sets the lifetime of a request under a policy with one, from its own clock:
--    a trigger after the request's guard sets `expires_at_ms` and `db_expires_at_ms` from the
--    policy in force, whatever the caller asked; the copy refuses (40001, retried by the store)
--    a request whose lifetime is not the policy it copies (a new version committed between).
-- 3. `approval_events` holds one `approval.expiring` row per request, at the database's clock,
--    written by the runtime's reconcile sweep once the clock passes expiry less the reminder,
--    while the request still waits (QLA01 for any other writer, QLA03 before that time);
--    nothing changes or deletes an event but its request's pruning.

ALTER TABLE qinglong.approval_policies
    ADD COLUMN lifetime_ms BIGINT CHECK (lifetime_ms BETWEEN 1000 AND 2592000000),
    ADD COLUMN remind_before_ms BIGINT CHECK (remind_before_ms BETWEEN 1000 AND 2592000000),
    ADD CONSTRAINT approval_policies_remind_within_lifetime
        CHECK (remind_before_ms < lifetime_ms);

ALTER TABLE qinglong.approval_request_policies
    ADD COLUMN lifetime_ms BIGINT,
    ADD COLUMN remind_before_ms BIGINT;

-- A definer (the recorder), as before: its owner and grants stay.
CREATE OR REPLACE FUNCTION qinglong.copy_approval_policy() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    pol qinglong.approval_policies%ROWTYPE;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM qinglong.approval_policies
                   WHERE action_type = NEW.action_type) THEN
        RETURN NULL;
    END IF;
    SELECT * INTO pol FROM qinglong.policy_in_force(NEW.action_type, NEW.project_id);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF pol.lifetime_ms IS NOT NULL AND pol.lifetime_ms IS DISTINCT FROM
            NEW.expires_at_ms OPERATOR(pg_catalog.-) NEW.created_at_ms THEN
        RAISE EXCEPTION 'the policy in force changed while the request was written'
            USING ERRCODE = '40001';
    END IF;
    INSERT INTO qinglong.approval_request_policies (
        approval_request_id, policy_name, policy_version, approvals_required,
        denials_to_reject, approver_groups, reason_required, lifetime_ms, remind_before_ms
    ) VALUES (
        NEW.approval_request_id, pol.name, pol.version, pol.approvals_required,
        pol.denials_to_reject, pol.approver_groups, pol.reason_required, pol.lifetime_ms,
        pol.remind_before_ms
    );
    RETURN NULL;
END
$$;

-- As the request's writer, after its guard (triggers of one kind run by name): the guard
-- checked and counted the caller's lifetime; a policy's lifetime replaces it.
CREATE FUNCTION qinglong.set_policy_lifetime() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    lifetime pg_catalog.int8;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM qinglong.approval_policies
                   WHERE action_type = NEW.action_type) THEN
        RETURN NEW;
    END IF;
    SELECT p.lifetime_ms INTO lifetime
        FROM qinglong.policy_in_force(NEW.action_type, NEW.project_id) AS p;
    IF lifetime IS NOT NULL THEN
        NEW.expires_at_ms := NEW.created_at_ms OPERATOR(pg_catalog.+) lifetime;
        NEW.db_expires_at_ms := qinglong.db_now_ms() OPERATOR(pg_catalog.+) lifetime;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER approval_requests_lifetime
    BEFORE INSERT ON qinglong.approval_requests
    FOR EACH ROW EXECUTE FUNCTION qinglong.set_policy_lifetime();

CREATE TABLE qinglong.approval_events (
    id                  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind                TEXT NOT NULL CHECK (kind IN ('approval.expiring')),
    approval_request_id TEXT NOT NULL
        REFERENCES qinglong.approval_requests (approval_request_id) ON DELETE CASCADE,
    at_ms               BIGINT NOT NULL DEFAULT 0,
    UNIQUE (approval_request_id, kind)
);

CREATE FUNCTION qinglong.guard_approval_event() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    acting pg_catalog.text := qinglong.acting_role();
    now_ms pg_catalog.int8 := qinglong.db_now_ms();
BEGIN
    IF TG_OP = 'DELETE' AND NOT EXISTS (SELECT 1 FROM qinglong.approval_requests
            WHERE approval_request_id = OLD.approval_request_id) THEN
        RETURN OLD;  -- pruned with its request (the key's cascade)
    END IF;
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION 'an approval event never changes' USING ERRCODE = 'QLA03';
    END IF;
    IF acting IS NULL OR NOT pg_catalog.pg_has_role(acting, 'qinglong_runtime', 'MEMBER') THEN
        RAISE EXCEPTION 'approval events are the runtime''s' USING ERRCODE = 'QLA01';
    END IF;
    -- A reminder while the request waits, once its expiry less the reminder has passed. Its
    -- expiry is the sweep's to respect: its statement read this clock a moment earlier, and a
    -- request it found unexpired must not fail the whole pass here.
    IF NOT EXISTS (
            SELECT 1 FROM qinglong.approval_requests AS r
            JOIN qinglong.approval_request_policies AS p USING (approval_request_id)
            WHERE r.approval_request_id = NEW.approval_request_id AND r.status = 'pending'
              AND p.remind_before_ms IS NOT NULL
              AND now_ms >= COALESCE(r.db_expires_at_ms, r.expires_at_ms)
                  OPERATOR(pg_catalog.-) p.remind_before_ms) THEN
        RAISE EXCEPTION 'approval request % is not due a reminder (database clock)',
            NEW.approval_request_id USING ERRCODE = 'QLA03';
    END IF;
    NEW.at_ms := now_ms;
    RETURN NEW;
END
$$;

CREATE TRIGGER approval_events_guard
    BEFORE INSERT OR UPDATE OR DELETE ON qinglong.approval_events
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_approval_event();

-- The sweep looks for waiting requests whose copy asks for a reminder.
CREATE INDEX approval_request_policies_reminded
    ON qinglong.approval_request_policies (approval_request_id)
    WHERE remind_before_ms IS NOT NULL;

REVOKE ALL ON FUNCTION qinglong.set_policy_lifetime(), qinglong.guard_approval_event()
    FROM PUBLIC;
GRANT SELECT ON qinglong.approval_events
    TO qinglong_approver, qinglong_submitter, qinglong_runtime, qinglong_operator;
GRANT INSERT ON qinglong.approval_events TO qinglong_runtime;
