-- A policy's lifetime and reminder (docs/security.md#approval-policies), as the PostgreSQL
-- schema has them.
-- 1. A policy may say how long its requests live (`lifetime_ms`; NULL: the lifetime the caller
--    asks for, the settings' approval lifetime) and when to remind before they expire
--    (`remind_before_ms`); both are copied into the request's policy row.
-- 2. A request under a policy with a lifetime lives exactly that long: the store's statement
--    counts it from the database's clock, and a trigger refuses any other lifetime (the
--    lifetime guard of migration 0011 already caps `db_expires_at_ms` by it).
-- 3. `approval_events` holds one `approval.expiring` row per request, at the database's clock,
--    written by the reconcile sweep once the clock passes expiry less the reminder while the
--    request still waits; an event never changes, and goes only with its request.

ALTER TABLE approval_policies ADD COLUMN lifetime_ms INTEGER
    CHECK (lifetime_ms BETWEEN 1000 AND 2592000000);
ALTER TABLE approval_policies ADD COLUMN remind_before_ms INTEGER
    CHECK (remind_before_ms BETWEEN 1000 AND 2592000000
           AND remind_before_ms < coalesce(lifetime_ms, 2592000001));

ALTER TABLE approval_request_policies ADD COLUMN lifetime_ms INTEGER;
ALTER TABLE approval_request_policies ADD COLUMN remind_before_ms INTEGER;

-- The view and the triggers that read a policy's columns, with the new ones.
DROP TRIGGER approval_request_policies_in_force;
DROP TRIGGER approval_requests_policy;
DROP VIEW approval_policies_in_force;

CREATE VIEW approval_policies_in_force AS
SELECT p.* FROM approval_policies AS p
WHERE NOT p.retired
  AND p.version = (SELECT max(q.version) FROM approval_policies AS q WHERE q.name = p.name);

CREATE TRIGGER approval_request_policies_in_force BEFORE INSERT ON approval_request_policies
WHEN NOT EXISTS (
    SELECT 1 FROM approval_requests AS r
    JOIN approval_policies_in_force AS p
      ON p.name = NEW.policy_name AND p.version = NEW.policy_version
    WHERE r.approval_request_id = NEW.approval_request_id
      AND r.status = 'pending' AND r.version = 1
      AND p.name = (SELECT f.name FROM approval_policies_in_force AS f
                    WHERE f.action_type = r.action_type
                      AND (f.project_id IS NULL OR f.project_id = r.project_id)
                    ORDER BY (f.project_id IS NULL), f.name LIMIT 1)
      AND NEW.approvals_required IS p.approvals_required
      AND NEW.denials_to_reject IS p.denials_to_reject
      AND NEW.approver_groups IS p.approver_groups
      AND NEW.reason_required IS p.reason_required
      AND NEW.lifetime_ms IS p.lifetime_ms
      AND NEW.remind_before_ms IS p.remind_before_ms)
BEGIN
    SELECT RAISE(ABORT, 'approval_request_policies: a request carries the policy in force');
END;

-- With no policy for the action type the index finds nothing and the copy never runs.
CREATE TRIGGER approval_requests_policy AFTER INSERT ON approval_requests
WHEN EXISTS (SELECT 1 FROM approval_policies WHERE action_type = NEW.action_type)
BEGIN
    INSERT INTO approval_request_policies (
        approval_request_id, policy_name, policy_version, approvals_required,
        denials_to_reject, approver_groups, reason_required, lifetime_ms, remind_before_ms
    )
    SELECT NEW.approval_request_id, p.name, p.version, p.approvals_required,
           p.denials_to_reject, p.approver_groups, p.reason_required, p.lifetime_ms,
           p.remind_before_ms
    FROM approval_policies_in_force AS p
    WHERE p.action_type = NEW.action_type
      AND (p.project_id IS NULL OR p.project_id = NEW.project_id)
    ORDER BY (p.project_id IS NULL), p.name
    LIMIT 1;
END;

-- A request under a policy with a lifetime asks for exactly that lifetime (`insert_approval`
-- counts it from the database's clock).
CREATE TRIGGER approval_requests_policy_lifetime BEFORE INSERT ON approval_requests
WHEN EXISTS (SELECT 1 FROM approval_policies WHERE action_type = NEW.action_type)
    AND NEW.expires_at_ms - NEW.created_at_ms IS NOT coalesce(
        (SELECT p.lifetime_ms FROM approval_policies_in_force AS p
         WHERE p.action_type = NEW.action_type
           AND (p.project_id IS NULL OR p.project_id = NEW.project_id)
         ORDER BY (p.project_id IS NULL), p.name LIMIT 1),
        NEW.expires_at_ms - NEW.created_at_ms)
BEGIN
    SELECT RAISE(ABORT, 'approval_requests: a request under a policy lives its lifetime');
END;

CREATE TABLE approval_events (
    id                  INTEGER PRIMARY KEY,
    kind                TEXT NOT NULL CHECK (kind IN ('approval.expiring')),
    approval_request_id TEXT NOT NULL
        REFERENCES approval_requests (approval_request_id) ON DELETE CASCADE,
    at_ms               INTEGER NOT NULL
        DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)),
    UNIQUE (approval_request_id, kind)
);

-- A reminder while the request waits, once its expiry less the reminder has passed, at the
-- database's time.
CREATE TRIGGER approval_events_due BEFORE INSERT ON approval_events
WHEN NEW.at_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    OR NEW.at_ms < CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) - 1000
    OR NOT EXISTS (
        SELECT 1 FROM approval_requests AS r
        JOIN approval_request_policies AS p USING (approval_request_id)
        WHERE r.approval_request_id = NEW.approval_request_id AND r.status = 'pending'
          AND p.remind_before_ms IS NOT NULL
          AND NEW.at_ms >= coalesce(r.db_expires_at_ms, r.expires_at_ms) - p.remind_before_ms
          AND NEW.at_ms < coalesce(r.db_expires_at_ms, r.expires_at_ms))
BEGIN
    SELECT RAISE(ABORT, 'approval_events: a reminder is due once, before expiry, at the database''s time');
END;

CREATE TRIGGER approval_events_no_update BEFORE UPDATE ON approval_events
BEGIN
    SELECT RAISE(ABORT, 'approval_events: an event never changes');
END;

CREATE TRIGGER approval_events_no_delete BEFORE DELETE ON approval_events
WHEN EXISTS (SELECT 1 FROM approval_requests
             WHERE approval_request_id = OLD.approval_request_id)
BEGIN
    SELECT RAISE(ABORT, 'approval_events: an event goes only with its request');
END;
