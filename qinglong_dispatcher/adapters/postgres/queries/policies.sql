-- What a reader sees of approval policies and votes (migration 0026; adapters/sql/policy_reads.py).

-- vote_request --
-- The request's requester, status and expiry by the database's clock.
SELECT requested_principal, status, COALESCE(db_expires_at_ms, expires_at_ms) AS expires_at_ms
FROM qinglong.approval_requests WHERE approval_request_id = :approval_request_id

-- request_policy --
-- The policy copied into the request when it was written, if any.
SELECT policy_name, policy_version, approvals_required, denials_to_reject, approver_groups,
       reason_required, target_prefix
FROM qinglong.approval_request_policies WHERE approval_request_id = :approval_request_id

-- request_votes --
-- The votes so far, oldest first.
SELECT principal, vote, reason, voted_at_ms FROM qinglong.approval_votes
WHERE approval_request_id = :approval_request_id
ORDER BY voted_at_ms, principal

-- group_voters --
-- The members of the request's policy's groups: the logins and token principals that are
-- members (directly or through other roles) of a role `<installation>_g_<group>` and of the
-- installation's approver role, as the vote's guard asks `pg_has_role` (the API's logins,
-- which only become a principal, left out). The installation is
-- the schema owner's (its migrator); `pg_auth_members` is readable by every role.
WITH RECURSIVE installation AS (
    SELECT pg_catalog.regexp_replace(n.nspowner::pg_catalog.regrole::pg_catalog.text,
                                     'migrator$', '') AS prefix
    FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'qinglong'
), groups AS (
    SELECT pg_catalog.to_regrole(i.prefix OPERATOR(pg_catalog.||) 'g_'
                                 OPERATOR(pg_catalog.||) g.name) AS oid
    FROM installation AS i, qinglong.approval_request_policies AS p,
         pg_catalog.unnest(p.approver_groups) AS g(name)
    WHERE p.approval_request_id = :approval_request_id
), members AS (
    SELECT m.member FROM pg_catalog.pg_auth_members AS m JOIN groups ON m.roleid = groups.oid
    UNION
    SELECT m.member FROM pg_catalog.pg_auth_members AS m
    JOIN members ON m.roleid = members.member
)
SELECT DISTINCT CASE
    WHEN pg_catalog.starts_with(r.rolname::pg_catalog.text,
                                i.prefix OPERATOR(pg_catalog.||) 'p_')
        THEN pg_catalog.substr(r.rolname::pg_catalog.text,
                               pg_catalog.length(i.prefix) OPERATOR(pg_catalog.+) 3)
    ELSE r.rolname::pg_catalog.text END AS principal
FROM members JOIN pg_catalog.pg_roles AS r ON r.oid = members.member, installation AS i
WHERE (r.rolcanlogin
       OR pg_catalog.starts_with(r.rolname::pg_catalog.text, i.prefix OPERATOR(pg_catalog.||) 'p_'))
  AND pg_catalog.pg_has_role(r.oid, i.prefix OPERATOR(pg_catalog.||) 'approver', 'MEMBER')
  -- The API's logins reach the principals' roles but act only as one of them, never as
  -- themselves (`acting_role`): they are not voters.
  AND NOT pg_catalog.pg_has_role(r.oid, i.prefix OPERATOR(pg_catalog.||) 'api', 'MEMBER')
ORDER BY 1

-- policies_in_force --
-- The newest version of each policy name, unless it retired it.
SELECT p.name, p.version, p.action_type, p.project_id, p.target_prefix, p.approvals_required,
       p.denials_to_reject, p.approver_groups, p.reason_required, p.written_by, p.written_at_ms
FROM qinglong.approval_policies AS p
WHERE NOT p.retired
  AND p.version = (SELECT max(q.version) FROM qinglong.approval_policies AS q
                   WHERE q.name = p.name)
ORDER BY p.name

-- waiting_by_policy --
-- Pending requests not expired by the database's clock, by the policy they carry ('' none).
SELECT COALESCE(p.policy_name, '') AS policy, count(*) AS n
FROM qinglong.approval_requests AS r
LEFT JOIN qinglong.approval_request_policies AS p
       ON p.approval_request_id = r.approval_request_id
WHERE r.status = 'pending'
  AND COALESCE(r.db_expires_at_ms, r.expires_at_ms) > qinglong.db_now_ms()
GROUP BY 1
