-- SQLite statements: API tokens (times on the database clock) and the audit row of an API
-- request.

-- insert_token --
INSERT INTO api_tokens (
    token_id, secret_sha256, principal, role, created_by, created_at_ms, expires_at_ms
) VALUES (
    :token_id, :secret_sha256, :principal, :role, :created_by,
    CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER),
    CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + :ttl_ms
)

-- select_token --
SELECT token_id, principal, role, created_by, created_at_ms, expires_at_ms, last_used_at_ms,
       revoked_at_ms
FROM api_tokens
WHERE token_id = :token_id

-- select_tokens --
SELECT token_id, principal, role, created_by, created_at_ms, expires_at_ms, last_used_at_ms,
       revoked_at_ms
FROM api_tokens
ORDER BY created_at_ms, token_id

-- live_token_roles --
SELECT DISTINCT role
FROM api_tokens
WHERE principal = :principal AND revoked_at_ms IS NULL
  AND expires_at_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)

-- revoke_token --
UPDATE api_tokens
SET revoked_at_ms = CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
WHERE token_id = :token_id AND revoked_at_ms IS NULL
RETURNING token_id

-- authenticate_token --
-- A read: the token matches, is unrevoked and unexpired now; `stale` when its recorded last
-- use is older than a minute (then `touch_token` moves it).
SELECT token_id, principal, role,
       (last_used_at_ms IS NULL
        OR last_used_at_ms
           < CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) - 60000) AS stale
FROM api_tokens
WHERE secret_sha256 = :secret_sha256 AND revoked_at_ms IS NULL
  AND expires_at_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)

-- touch_token --
-- The last use, moved at most once a minute.
UPDATE api_tokens
SET last_used_at_ms = CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
WHERE token_id = :token_id
  AND (last_used_at_ms IS NULL
       OR last_used_at_ms
          < CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) - 60000)

-- plan_exists --
SELECT 1 AS found
FROM action_plans
WHERE project_id = :project_id AND action_ref = :action_ref

-- insert_request_audit --
INSERT INTO security_audit_events (
    kind, actor, principal, project_id, subject_id, detail_code, token_id, client_address,
    request_id, comment, committed_at_ms
) VALUES (
    :kind, :actor, :principal, :project_id, :subject_id, :detail_code, :token_id,
    :client_address, :request_id, :comment,
    CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
)

-- insert_group_member --
-- `token create --group`: the principal votes under policies naming the group (migration
-- 0026's approver groups); already a member: nothing changes.
INSERT INTO approval_group_members (group_name, principal)
VALUES (:group_name, :principal)
ON CONFLICT (group_name, principal) DO NOTHING

-- group_members --
-- Who is in which approver group (`token list`), by principal.
SELECT principal, group_name FROM approval_group_members ORDER BY principal, group_name
