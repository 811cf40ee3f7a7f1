-- PostgreSQL statements: API tokens (times on the database clock) and the audit row of an
-- API request.

-- insert_token --
INSERT INTO qinglong.api_tokens (
    token_id, secret_sha256, principal, role, created_by, created_at_ms, expires_at_ms
) VALUES (
    :token_id, :secret_sha256, :principal, :role, :created_by, qinglong.db_now_ms(),
    qinglong.db_now_ms() + :ttl_ms::bigint
)

-- select_token --
SELECT token_id, principal, role, created_by, created_at_ms, expires_at_ms, last_used_at_ms,
       revoked_at_ms
FROM qinglong.api_tokens
WHERE token_id = :token_id

-- select_tokens --
SELECT token_id, principal, role, created_by, created_at_ms, expires_at_ms, last_used_at_ms,
       revoked_at_ms
FROM qinglong.api_tokens
ORDER BY created_at_ms, token_id

-- live_token_roles --
-- The roles of a principal's tokens that still authenticate (a principal has one role).
SELECT DISTINCT role
FROM qinglong.api_tokens
WHERE principal = :principal AND revoked_at_ms IS NULL
  AND expires_at_ms > qinglong.db_now_ms()

-- revoke_token --
UPDATE qinglong.api_tokens
SET revoked_at_ms = qinglong.db_now_ms()
WHERE token_id = :token_id AND revoked_at_ms IS NULL
RETURNING token_id

-- authenticate_token --
-- A read: the token matches, is unrevoked and unexpired on the database clock now; `stale`
-- when its recorded last use is older than a minute (then `touch_token` moves it).
SELECT token_id, principal, role,
       (last_used_at_ms IS NULL
        OR last_used_at_ms < qinglong.db_now_ms() - 60000) AS stale
FROM qinglong.api_tokens
WHERE secret_sha256 = :secret_sha256 AND revoked_at_ms IS NULL
  AND expires_at_ms > qinglong.db_now_ms()

-- touch_token --
-- The last use, moved at most once a minute; the runtime's column grants allow exactly this.
UPDATE qinglong.api_tokens
SET last_used_at_ms = qinglong.db_now_ms()
WHERE token_id = :token_id
  AND (last_used_at_ms IS NULL OR last_used_at_ms < qinglong.db_now_ms() - 60000)

-- plan_exists --
SELECT 1 AS found
FROM qinglong.action_plans
WHERE project_id = :project_id AND action_ref = :action_ref

-- insert_request_audit --
-- The principal is the acting one (the principal role the API became), never a parameter.
INSERT INTO qinglong.security_audit_events (
    kind, actor, principal, project_id, subject_id, detail_code, token_id, client_address,
    request_id, comment, committed_at_ms
) VALUES (
    :kind, :actor, qinglong.acting_principal(), :project_id, :subject_id, :detail_code,
    :token_id, :client_address, :request_id, :comment,
    (extract(epoch FROM transaction_timestamp()) * 1000)::bigint
)

-- insert_group_member --
-- SQLite's: on PostgreSQL a group is a role, granted by `token create --group`
-- (`installation_roles.group`), and `approval_group_members` stays empty.
SELECT NULL AS nothing WHERE false

-- group_members --
-- SQLite's members; on PostgreSQL this table stays empty and the store reads the groups'
-- roles granted to principals' roles instead (`installation_roles.group.members`).
SELECT principal, group_name FROM qinglong.approval_group_members
ORDER BY principal, group_name
