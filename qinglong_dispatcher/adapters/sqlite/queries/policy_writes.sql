-- Approval policies (migrations 0026, 0027): every version appended, none changed; the next
-- version of its name, written by the store's principal (the file's owner) at the database's
-- time. The groups are a JSON array.

-- policy_columns --
name, version, action_type, project_id, target_prefix, approvals_required, denials_to_reject,
approver_groups, reason_required, lifetime_ms, remind_before_ms, not_before_delay_ms,
window_ms, proceed_on_unknown, retired, written_by, written_at_ms

-- insert_policy --
INSERT INTO approval_policies (
    name, version, action_type, project_id, target_prefix, approvals_required,
    denials_to_reject, approver_groups, reason_required, lifetime_ms, remind_before_ms,
    not_before_delay_ms, window_ms, proceed_on_unknown, written_by
) VALUES (
    :name,
    (SELECT coalesce(max(version), 0) + 1 FROM approval_policies WHERE name = :name),
    :action_type, :project_id, :target_prefix, :approvals_required, :denials_to_reject, :approver_groups,
    :reason_required, :lifetime_ms, :remind_before_ms, :not_before_delay_ms, :window_ms,
    :proceed_on_unknown, :principal
)
RETURNING {policy_columns}

-- retire_policy --
-- The next version of the newest one, retired: the same rules, no longer in force.
INSERT INTO approval_policies (
    name, version, action_type, project_id, target_prefix, approvals_required,
    denials_to_reject, approver_groups, reason_required, lifetime_ms, remind_before_ms,
    not_before_delay_ms, window_ms, proceed_on_unknown, retired, written_by
)
SELECT name, version + 1, action_type, project_id, target_prefix, approvals_required,
       denials_to_reject, approver_groups, reason_required, lifetime_ms, remind_before_ms,
       not_before_delay_ms, window_ms, proceed_on_unknown, 1, :principal
FROM approval_policies
WHERE name = :name
ORDER BY version DESC
LIMIT 1
RETURNING {policy_columns}

-- policy_versions --
-- Every version of one policy, newest first.
SELECT {policy_columns}
FROM approval_policies
WHERE name = :name
ORDER BY version DESC

-- newest_policies --
-- The newest version of each policy (retired ones only when asked), by name.
SELECT {policy_columns}
FROM approval_policies AS p
WHERE p.version = (SELECT max(q.version) FROM approval_policies AS q WHERE q.name = p.name)
  AND (:with_retired OR NOT p.retired)
ORDER BY p.name
