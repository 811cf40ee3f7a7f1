-- Plans encrypted at rest (docs/security.md#plans-at-rest): a plan row is either clear
-- (`plan_json` holds the canonical plan) or sealed (`plan_json` is empty and the envelope
-- columns hold an AES-256-GCM ciphertext, the key id that opens it and the algorithm). The
-- associated data of the envelope is the row's identity, so a ciphertext copied to another
-- row does not open. The one change a plan row admits is being sealed again (`keys rotate`:
-- from clear, or under another key) with its identity and digest unchanged; the digest binds
-- the plaintext, so a reseal that changed the plan would be refused at inspect as drift.

ALTER TABLE action_plans ADD COLUMN plan_key_id TEXT;
ALTER TABLE action_plans ADD COLUMN plan_algorithm TEXT
    CHECK (plan_algorithm IS NULL OR plan_algorithm = 'AES-256-GCM');
ALTER TABLE action_plans ADD COLUMN plan_sealed BLOB;
-- The plan's schema version, part of the associated data: known without opening the plan.
ALTER TABLE action_plans ADD COLUMN plan_schema_version INTEGER;

CREATE TRIGGER action_plans_clear_or_sealed BEFORE INSERT ON action_plans
WHEN NOT (
    (NEW.plan_sealed IS NULL AND NEW.plan_key_id IS NULL AND NEW.plan_algorithm IS NULL
        AND NEW.plan_json <> '')
    OR (NEW.plan_sealed IS NOT NULL AND NEW.plan_key_id IS NOT NULL
        AND NEW.plan_algorithm IS NOT NULL AND NEW.plan_schema_version IS NOT NULL
        AND NEW.plan_json = ''))
BEGIN
    SELECT RAISE(ABORT, 'action_plans: a plan is clear or sealed, whole');
END;

DROP TRIGGER action_plans_immutable_update;
CREATE TRIGGER action_plans_immutable_update BEFORE UPDATE ON action_plans
WHEN NEW.project_id IS NOT OLD.project_id OR NEW.action_ref IS NOT OLD.action_ref
    OR NEW.action_type IS NOT OLD.action_type OR NEW.plan_digest IS NOT OLD.plan_digest
    OR NEW.created_at_ms IS NOT OLD.created_at_ms
    OR (OLD.plan_schema_version IS NOT NULL
        AND NEW.plan_schema_version IS NOT OLD.plan_schema_version)
    OR NOT (NEW.plan_sealed IS NOT NULL AND NEW.plan_key_id IS NOT NULL
            AND NEW.plan_algorithm IS NOT NULL AND NEW.plan_schema_version IS NOT NULL
            AND NEW.plan_json = '')
BEGIN
    SELECT RAISE(ABORT, 'action_plans is immutable');
END;
