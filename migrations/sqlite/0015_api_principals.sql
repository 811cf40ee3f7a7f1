-- Principals and tokens (docs/security.md#the-api-process). On an edge device the file's
-- owner creates tokens; the API authenticates a request by its token and the store records
-- that token's principal (not the OS user) and applies the token's role, separation of duties
-- and the state machine as for any other principal. `api_tokens` keeps the SHA-256 of each
-- secret, never the secret; only the last use moves, and a revocation is set once. Audit rows
-- of API writes name the token id, client address and request id.

CREATE TABLE api_tokens (
    token_id        TEXT PRIMARY KEY CHECK (length(token_id) = 20 AND token_id GLOB 'tok_*'),
    secret_sha256   TEXT NOT NULL UNIQUE CHECK (length(secret_sha256) = 64),
    principal       TEXT NOT NULL CHECK (length(principal) BETWEEN 1 AND 52),
    role            TEXT NOT NULL
        CHECK (role IN ('viewer', 'submitter', 'approver', 'operator')),
    created_by      TEXT NOT NULL,
    created_at_ms   INTEGER NOT NULL,
    expires_at_ms   INTEGER NOT NULL,
    last_used_at_ms INTEGER,
    revoked_at_ms   INTEGER,
    CHECK (expires_at_ms > created_at_ms)
) STRICT;

CREATE INDEX api_tokens_principal ON api_tokens (principal);

CREATE TRIGGER api_tokens_guard BEFORE UPDATE ON api_tokens
WHEN NEW.token_id IS NOT OLD.token_id OR NEW.secret_sha256 IS NOT OLD.secret_sha256
    OR NEW.principal IS NOT OLD.principal OR NEW.role IS NOT OLD.role
    OR NEW.created_by IS NOT OLD.created_by OR NEW.created_at_ms IS NOT OLD.created_at_ms
    OR NEW.expires_at_ms IS NOT OLD.expires_at_ms
    OR (OLD.revoked_at_ms IS NOT NULL AND NEW.revoked_at_ms IS NOT OLD.revoked_at_ms)
BEGIN
    SELECT RAISE(ABORT, 'api_tokens: a token changes only its last use and, once, its revocation');
END;

ALTER TABLE security_audit_events ADD COLUMN token_id TEXT;
ALTER TABLE security_audit_events ADD COLUMN client_address TEXT;
ALTER TABLE security_audit_events ADD COLUMN request_id TEXT;

-- A request's audit row names its token and request id together, or neither.
CREATE TRIGGER security_audit_events_request_whole BEFORE INSERT ON security_audit_events
WHEN NOT ((NEW.token_id IS NULL AND NEW.client_address IS NULL AND NEW.request_id IS NULL)
    OR (NEW.token_id IS NOT NULL AND NEW.request_id IS NOT NULL))
BEGIN
    SELECT RAISE(ABORT, 'security_audit_events: a request names its token and its id');
END;
