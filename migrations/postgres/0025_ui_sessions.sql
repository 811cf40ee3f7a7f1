-- Sessions of the operator UI (docs/ui.md#sessions) live in the store, so that every replica
-- accepts them and a restart keeps them. A row is named by the SHA-256 of the session's cookie
-- value, never the value; it names the token it was opened with and that token's principal.
-- Its times are the database's clock: it ends `idle_ms` after its last use, at
-- `expires_at_ms` in any case, and once revoked (sign-out, `token revoke`). Only the last use
-- moves (forward) and a revocation is set once; nothing else of a session changes (QLI01).

CREATE TABLE qinglong.ui_sessions (
    session_sha256  TEXT PRIMARY KEY CHECK (session_sha256 ~ '^[0-9a-f]{64}$'),
    token_id        TEXT NOT NULL CHECK (token_id ~ '^tok_[0-9a-f]{16}$'),
    principal       TEXT NOT NULL CHECK (principal ~ '^[a-z][a-z0-9_]{0,51}$'),
    created_at_ms   BIGINT NOT NULL,
    last_seen_at_ms BIGINT NOT NULL,
    idle_ms         BIGINT NOT NULL CHECK (idle_ms > 0),
    expires_at_ms   BIGINT NOT NULL,
    revoked_at_ms   BIGINT,
    CHECK (expires_at_ms > created_at_ms)
);
CREATE INDEX ui_sessions_principal ON qinglong.ui_sessions (principal, created_at_ms);
CREATE INDEX ui_sessions_token ON qinglong.ui_sessions (token_id);
CREATE INDEX ui_sessions_expires ON qinglong.ui_sessions (expires_at_ms);

CREATE FUNCTION qinglong.guard_ui_session_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF (NEW.session_sha256, NEW.token_id, NEW.principal, NEW.created_at_ms, NEW.idle_ms,
        NEW.expires_at_ms)
            IS DISTINCT FROM
       (OLD.session_sha256, OLD.token_id, OLD.principal, OLD.created_at_ms, OLD.idle_ms,
        OLD.expires_at_ms)
            OR NEW.last_seen_at_ms < OLD.last_seen_at_ms
            OR (OLD.revoked_at_ms IS NOT NULL
                AND NEW.revoked_at_ms IS DISTINCT FROM OLD.revoked_at_ms) THEN
        RAISE EXCEPTION 'a session changes only its last use and, once, its revocation'
            USING ERRCODE = 'QLI01';
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION qinglong.guard_ui_session_change() FROM PUBLIC;

CREATE TRIGGER ui_sessions_guard
    BEFORE UPDATE ON qinglong.ui_sessions
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_ui_session_change();

-- The runtime authenticates for the API (the daemon's process serves the UI): it opens a
-- session, reads one by digest, moves its last use, revokes it, and deletes ended ones (the
-- bounded sweep at sign-in). `token revoke` (the administrator) revokes a token's sessions.
GRANT SELECT, INSERT, DELETE, UPDATE (last_seen_at_ms, revoked_at_ms)
    ON qinglong.ui_sessions TO qinglong_runtime;
