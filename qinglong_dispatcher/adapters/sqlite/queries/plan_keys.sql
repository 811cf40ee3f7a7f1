-- Plans at rest: the keyset walks of `keys rotate` and `keys check`, and the reseal itself.

-- select_plans_after --
-- A keyset page of every plan, clear or sealed, by primary key (identifiers are never empty).
SELECT project_id, action_ref, action_type,
       CAST(plan_json AS BLOB) AS plan_json, plan_digest, plan_key_id,
       plan_algorithm, plan_sealed, plan_schema_version
FROM action_plans
WHERE (project_id, action_ref) > (:after_project_id, :after_action_ref)
ORDER BY project_id, action_ref
LIMIT :limit

-- select_plans_to_reseal --
-- The next plans that are clear or sealed under another key than the active one.
SELECT project_id, action_ref, action_type,
       CAST(plan_json AS BLOB) AS plan_json, plan_digest, plan_key_id,
       plan_algorithm, plan_sealed, plan_schema_version
FROM action_plans
WHERE (project_id, action_ref) > (:after_project_id, :after_action_ref)
  AND (plan_key_id IS NULL OR plan_key_id <> :active_key_id)
ORDER BY project_id, action_ref
LIMIT :limit

-- count_plans_to_reseal --
SELECT count(*) AS n
FROM action_plans
WHERE plan_key_id IS NULL OR plan_key_id <> :active_key_id

-- reseal_plan --
-- Only if nobody resealed it meanwhile (a second `keys rotate` beside this one).
UPDATE action_plans
SET plan_json = '', plan_key_id = :key_id, plan_algorithm = :algorithm,
    plan_sealed = :sealed, plan_schema_version = :schema_version
WHERE project_id = :project_id AND action_ref = :action_ref AND plan_key_id IS :old_key_id
RETURNING project_id

-- select_newest_sealed_plan --
-- What startup opens to prove the configured ring is the one the stored plans need.
SELECT project_id, action_ref, action_type,
       CAST(plan_json AS BLOB) AS plan_json, plan_digest, plan_key_id,
       plan_algorithm, plan_sealed, plan_schema_version
FROM action_plans
WHERE plan_sealed IS NOT NULL
ORDER BY created_at_ms DESC
LIMIT 1

-- select_plan_key_ids --
-- The key ids the database knows: what the start check compares with the process's ring.
SELECT key_id FROM plan_keys ORDER BY key_id

-- register_plan_key --
-- The owner's (`migrate` with a ring): the ids it holds become ones a plan may be sealed under.
INSERT INTO plan_keys (key_id, registered_at_ms)
VALUES (:key_id, :now_ms)
ON CONFLICT (key_id) DO NOTHING
RETURNING key_id
