-- Sessions of the operator UI (docs/ui.md#sessions) live in the store, so that every daemon on
-- the file accepts them and a restart keeps them. A row is named by the SHA-256 of the
-- session's cookie value, never the value; it names the token it was opened with and that
-- token's principal. Its times are the database's clock: it ends `idle_ms` after its last use,
-- at `expires_at_ms` in any case, and once revoked (sign-out, `token revoke`). Only the last use
-- moves (forward) and a revocation is set once; nothing else of a session changes.

CREATE TABLE ui_sessions (
    session_sha256  TEXT PRIMARY KEY CHECK (length(session_sha256) = 64),
    token_id        TEXT NOT NULL CHECK (length(token_id) = 20 AND token_id GLOB 'tok_*'),
    principal       TEXT NOT NULL CHECK (length(principal) BETWEEN 1 AND 52),
    created_at_ms   INTEGER NOT NULL,
    last_seen_at_ms INTEGER NOT NULL,
    idle_ms         INTEGER NOT NULL CHECK (idle_ms > 0),
    expires_at_ms   INTEGER NOT NULL,
    revoked_at_ms   INTEGER,
    CHECK (expires_at_ms > created_at_ms)
) STRICT;

CREATE INDEX ui_sessions_principal ON ui_sessions (principal, created_at_ms);
CREATE INDEX ui_sessions_token ON ui_sessions (token_id);
CREATE INDEX ui_sessions_expires ON ui_sessions (expires_at_ms);

CREATE TRIGGER ui_sessions_guard BEFORE UPDATE ON ui_sessions
WHEN NEW.session_sha256 IS NOT OLD.session_sha256 OR NEW.token_id IS NOT OLD.token_id
    OR NEW.principal IS NOT OLD.principal OR NEW.created_at_ms IS NOT OLD.created_at_ms
    OR NEW.idle_ms IS NOT OLD.idle_ms OR NEW.expires_at_ms IS NOT OLD.expires_at_ms
    OR NEW.last_seen_at_ms < OLD.last_seen_at_ms
    OR (OLD.revoked_at_ms IS NOT NULL AND NEW.revoked_at_ms IS NOT OLD.revoked_at_ms)
BEGIN
    SELECT RAISE(ABORT, 'ui_sessions: a session changes only its last use and, once, its revocation');
END;
