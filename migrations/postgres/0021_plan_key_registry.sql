-- The plan keys the database knows (docs/security.md#plans-at-rest). A plan is sealed under a
-- key id this table holds, or not at all: a foreign key from `action_plans` refuses (23503)
-- any write naming another id, whoever makes it. The table is the migrator's alone: `migrate`
-- run by the administrator with the ring configured registers its ids; every other role may
-- only read it (the daemon's start check compares it with its ring). Rows written before this
-- migration are not checked (NOT VALID): one that names an unknown id stays blocked alone.
--
-- Resealing a plan is the owner's too (`keys rotate` as the administrator): the runtime loses
-- the UPDATE it held on the envelope columns, so no login below the owner can seal every plan
-- again under a key nobody holds, or with a ciphertext that does not open.

CREATE TABLE qinglong.plan_keys (
    key_id           TEXT PRIMARY KEY
        CHECK (key_id ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    registered_at_ms BIGINT NOT NULL
);
GRANT SELECT ON qinglong.plan_keys
    TO qinglong_runtime, qinglong_operator, qinglong_approver, qinglong_pruner;

ALTER TABLE qinglong.action_plans
    ADD CONSTRAINT action_plans_key_registered FOREIGN KEY (plan_key_id)
        REFERENCES qinglong.plan_keys (key_id) NOT VALID;

REVOKE UPDATE (plan_json, plan_key_id, plan_algorithm, plan_sealed, plan_schema_version)
    ON qinglong.action_plans
    FROM qinglong_runtime;
