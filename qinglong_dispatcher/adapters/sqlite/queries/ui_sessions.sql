-- SQLite statements: sessions of the operator UI (times on the database clock; a
-- session is named by the SHA-256 of its cookie value, never the value).

-- insert_ui_session --
-- A session opened now for a token that just authenticated.
INSERT INTO ui_sessions (
    session_sha256, token_id, principal, created_at_ms, last_seen_at_ms, idle_ms, expires_at_ms
) VALUES (
    :session_sha256, :token_id, :principal, CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER), CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER), :idle_ms, CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + :lifetime_ms
)

-- cap_ui_sessions --
-- A principal keeps its newest `keep` unrevoked sessions; the older ones are revoked.
UPDATE ui_sessions
SET revoked_at_ms = CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
WHERE principal = :principal AND revoked_at_ms IS NULL
  AND session_sha256 NOT IN (
      SELECT session_sha256 FROM ui_sessions
      WHERE principal = :principal AND revoked_at_ms IS NULL
      ORDER BY created_at_ms DESC, session_sha256
      LIMIT :keep)

-- sweep_ui_sessions --
-- At most `limit` ended sessions (revoked, idle too long, past their lifetime) deleted.
DELETE FROM ui_sessions
WHERE session_sha256 IN (
    SELECT session_sha256 FROM ui_sessions
    WHERE revoked_at_ms IS NOT NULL OR expires_at_ms <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
       OR last_seen_at_ms + idle_ms <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    LIMIT :limit)

-- find_ui_session --
-- A live session by digest, with its token's role: the session unrevoked, used within its idle
-- time and before its lifetime, its token unrevoked and unexpired, all on the database clock;
-- `stale` when its last use is older than `touch_after_ms`.
SELECT s.token_id, s.principal, t.role, s.created_at_ms, s.last_seen_at_ms, s.idle_ms,
       s.expires_at_ms, CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) AS now_ms,
       (s.last_seen_at_ms < CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) - :touch_after_ms) AS stale
FROM ui_sessions AS s
JOIN api_tokens AS t ON t.token_id = s.token_id
WHERE s.session_sha256 = :session_sha256 AND s.revoked_at_ms IS NULL
  AND s.expires_at_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) AND s.last_seen_at_ms + s.idle_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
  AND t.revoked_at_ms IS NULL AND t.expires_at_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)

-- touch_ui_session --
-- The last use, moved to now.
UPDATE ui_sessions
SET last_seen_at_ms = CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
WHERE session_sha256 = :session_sha256 AND last_seen_at_ms < CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)

-- revoke_ui_session --
-- Sign-out: one session ends now.
UPDATE ui_sessions
SET revoked_at_ms = CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
WHERE session_sha256 = :session_sha256 AND revoked_at_ms IS NULL

-- revoke_principal_ui_sessions --
-- Sign-out everywhere: every session of a principal ends now.
UPDATE ui_sessions
SET revoked_at_ms = CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
WHERE principal = :principal AND revoked_at_ms IS NULL

-- revoke_token_ui_sessions --
-- `token revoke`: every session opened with the token ends now (its transaction).
UPDATE ui_sessions
SET revoked_at_ms = CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
WHERE token_id = :token_id AND revoked_at_ms IS NULL

-- select_ui_sessions --
-- The live sessions of a principal, oldest first (their digests: a page tells its own apart).
SELECT s.session_sha256, s.token_id, s.principal, t.role, s.created_at_ms, s.last_seen_at_ms, s.idle_ms,
       s.expires_at_ms, CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) AS now_ms
FROM ui_sessions AS s
JOIN api_tokens AS t ON t.token_id = s.token_id
WHERE s.principal = :principal AND s.revoked_at_ms IS NULL
  AND s.expires_at_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) AND s.last_seen_at_ms + s.idle_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
  AND t.revoked_at_ms IS NULL AND t.expires_at_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
ORDER BY s.created_at_ms, s.session_sha256

-- oidc_anchor_token --
-- The live token an OIDC sign-in's session stands on: the principal's newest unrevoked,
-- unexpired token (a principal's live tokens share one role).
SELECT token_id, principal, role
FROM api_tokens
WHERE principal = :principal AND revoked_at_ms IS NULL
  AND expires_at_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
ORDER BY expires_at_ms DESC, token_id
LIMIT 1
