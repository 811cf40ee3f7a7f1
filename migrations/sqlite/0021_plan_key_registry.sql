-- The plan keys the database knows (docs/security.md#plans-at-rest). A plan is sealed under a
-- key id this table holds, or not at all: the triggers below refuse any insert or reseal
-- naming another id. `migrate` with the ring configured registers its ids (the file's owner
-- is the authority on the edge). Rows written before this migration are not checked: one that
-- names an unknown id stays blocked alone.

CREATE TABLE plan_keys (
    key_id           TEXT PRIMARY KEY
        CHECK (length(key_id) BETWEEN 1 AND 64 AND key_id GLOB '[A-Za-z0-9]*'
               AND key_id NOT GLOB '*[^A-Za-z0-9._-]*'),
    registered_at_ms INTEGER NOT NULL
) STRICT;

CREATE TRIGGER action_plans_key_registered_insert BEFORE INSERT ON action_plans
WHEN NEW.plan_key_id IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM plan_keys WHERE key_id = NEW.plan_key_id)
BEGIN
    SELECT RAISE(ABORT, 'action_plans: a plan is sealed under a registered key');
END;

CREATE TRIGGER action_plans_key_registered_update BEFORE UPDATE OF plan_key_id ON action_plans
WHEN NEW.plan_key_id IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM plan_keys WHERE key_id = NEW.plan_key_id)
BEGIN
    SELECT RAISE(ABORT, 'action_plans: a plan is sealed under a registered key');
END;
