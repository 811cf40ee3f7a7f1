-- Approval policies (migrations 0026, 0027): every version appended, none changed. The guard
-- numbers the version and names the writer (`session_user`) and the database's time; only the
-- schema's owner may insert (42501 for any other login). The groups travel as a JSON array,
-- as on SQLite.

-- policy_columns --
name, version, action_type, project_id, target_prefix, approvals_required, denials_to_reject,
pg_catalog.to_jsonb(approver_groups)::text AS approver_groups, reason_required, lifetime_ms,
remind_before_ms, not_before_delay_ms, window_ms, proceed_on_unknown, retired, written_by,
written_at_ms

-- insert_policy --
INSERT INTO qinglong.approval_policies (
    name, version, action_type, project_id, target_prefix, approvals_required,
    denials_to_reject, approver_groups, reason_required, lifetime_ms, remind_before_ms,
    not_before_delay_ms, window_ms, proceed_on_unknown
) VALUES (
    :name, 1, :action_type, :project_id, :target_prefix, :approvals_required::int, :denials_to_reject::int,
    ARRAY(SELECT pg_catalog.jsonb_array_elements_text(:approver_groups::jsonb)),
    :reason_required::boolean, :lifetime_ms::bigint, :remind_before_ms::bigint,
    :not_before_delay_ms::bigint, :window_ms::bigint, :proceed_on_unknown::boolean
)
RETURNING {policy_columns}

-- retire_policy --
-- The next version of the newest one, retired: the same rules, no longer in force.
INSERT INTO qinglong.approval_policies (
    name, version, action_type, project_id, target_prefix, approvals_required,
    denials_to_reject, approver_groups, reason_required, lifetime_ms, remind_before_ms,
    not_before_delay_ms, window_ms, proceed_on_unknown, retired
)
SELECT name, version + 1, action_type, project_id, target_prefix, approvals_required,
       denials_to_reject, approver_groups, reason_required, lifetime_ms, remind_before_ms,
       not_before_delay_ms, window_ms, proceed_on_unknown, true
FROM qinglong.approval_policies
WHERE name = :name
ORDER BY version DESC
LIMIT 1
RETURNING {policy_columns}

-- policy_versions --
-- Every version of one policy, newest first.
SELECT {policy_columns}
FROM qinglong.approval_policies
WHERE name = :name
ORDER BY version DESC

-- newest_policies --
-- The newest version of each policy (retired ones only when asked), by name.
SELECT {policy_columns}
FROM qinglong.approval_policies AS p
WHERE p.version = (SELECT max(q.version) FROM qinglong.approval_policies AS q
                   WHERE q.name = p.name)
  AND (:with_retired::boolean OR NOT p.retired)
ORDER BY p.name
