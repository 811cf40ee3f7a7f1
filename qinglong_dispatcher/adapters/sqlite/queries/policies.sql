-- What a reader sees of approval policies and votes (migration 0026; adapters/sql/policy_reads.py).

-- vote_request --
-- The request's requester, status and expiry by the database's clock.
SELECT requested_principal, status, coalesce(db_expires_at_ms, expires_at_ms) AS expires_at_ms
FROM approval_requests WHERE approval_request_id = :approval_request_id

-- request_policy --
-- The policy copied into the request when it was written, if any.
SELECT policy_name, policy_version, approvals_required, denials_to_reject, approver_groups,
       reason_required, target_prefix
FROM approval_request_policies WHERE approval_request_id = :approval_request_id

-- request_votes --
-- The votes so far, oldest first.
SELECT principal, vote, reason, voted_at_ms FROM approval_votes
WHERE approval_request_id = :approval_request_id
ORDER BY voted_at_ms, principal

-- group_voters --
-- The members of the request's policy's groups (the file's `approval_group_members`).
SELECT DISTINCT m.principal AS principal
FROM approval_request_policies AS p, json_each(p.approver_groups) AS g
JOIN approval_group_members AS m ON m.group_name = g.value
WHERE p.approval_request_id = :approval_request_id
ORDER BY 1

-- policies_in_force --
-- The newest version of each policy name, unless it retired it.
SELECT name, version, action_type, project_id, target_prefix, approvals_required,
       denials_to_reject, approver_groups, reason_required, written_by, written_at_ms
FROM approval_policies_in_force ORDER BY name

-- waiting_by_policy --
-- Pending requests not expired by the database's clock, by the policy they carry ('' none).
SELECT coalesce(p.policy_name, '') AS policy, count(*) AS n
FROM approval_requests AS r
LEFT JOIN approval_request_policies AS p ON p.approval_request_id = r.approval_request_id
WHERE r.status = 'pending'
  AND coalesce(r.db_expires_at_ms, r.expires_at_ms)
      > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
GROUP BY 1
