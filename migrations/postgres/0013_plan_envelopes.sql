-- Plans encrypted at rest (docs/security.md#plans-at-rest): a plan row is either clear
-- (`plan_json` holds the canonical plan) or sealed (`plan_json` is empty and the envelope
-- columns hold an AES-256-GCM ciphertext, the key id that opens it and the algorithm). The
-- associated data of the envelope is the row's identity, so a ciphertext copied to another
-- row does not open. The one change a plan row admits is being sealed again (`keys rotate`,
-- run with the runtime's login beside running replicas: from clear, or under another key)
-- with its identity and digest unchanged; the digest binds the plaintext, so a reseal that
-- changed the plan would be refused at inspect as drift. Nobody else may UPDATE a plan.

ALTER TABLE qinglong.action_plans
    ADD COLUMN plan_key_id TEXT,
    ADD COLUMN plan_algorithm TEXT
        CHECK (plan_algorithm IS NULL OR plan_algorithm = 'AES-256-GCM'),
    ADD COLUMN plan_sealed BYTEA,
    -- The plan's schema version, part of the associated data: known without opening the plan.
    ADD COLUMN plan_schema_version INTEGER,
    ADD CONSTRAINT action_plans_clear_or_sealed CHECK (
        (plan_sealed IS NULL AND plan_key_id IS NULL AND plan_algorithm IS NULL
            AND plan_json <> '')
        OR (plan_sealed IS NOT NULL AND plan_key_id IS NOT NULL
            AND plan_algorithm IS NOT NULL AND plan_schema_version IS NOT NULL
            AND plan_json = ''));

CREATE FUNCTION qinglong.guard_plan_reseal() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF (NEW.project_id, NEW.action_ref, NEW.action_type, NEW.plan_digest, NEW.created_at_ms)
            IS DISTINCT FROM
       (OLD.project_id, OLD.action_ref, OLD.action_type, OLD.plan_digest, OLD.created_at_ms)
            OR (OLD.plan_schema_version IS NOT NULL
                AND NEW.plan_schema_version IS DISTINCT FROM OLD.plan_schema_version)
            OR NEW.plan_sealed IS NULL OR NEW.plan_json <> '' THEN
        RAISE EXCEPTION '% is immutable', TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION qinglong.guard_plan_reseal() FROM PUBLIC;

DROP TRIGGER action_plans_immutable ON qinglong.action_plans;
CREATE TRIGGER action_plans_immutable
    BEFORE TRUNCATE ON qinglong.action_plans
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER action_plans_reseal_only
    BEFORE UPDATE ON qinglong.action_plans
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_plan_reseal();

GRANT UPDATE (plan_json, plan_key_id, plan_algorithm, plan_sealed, plan_schema_version)
    ON qinglong.action_plans
    TO qinglong_runtime;
