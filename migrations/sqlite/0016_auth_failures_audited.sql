-- Failed authentications through the API are audited (docs/security.md#the-control-plane-api):
-- an `api.auth_failed` row names the client's address, the request's id and a reason code,
-- and no token id (the token is unknown, expired or revoked, and never stored).

DROP TRIGGER security_audit_events_request_whole;

-- A request's audit row names its token and request id together, or neither; a failed
-- authentication names its client and request id, and no token.
CREATE TRIGGER security_audit_events_request_whole BEFORE INSERT ON security_audit_events
WHEN NOT ((NEW.token_id IS NULL AND NEW.client_address IS NULL AND NEW.request_id IS NULL)
    OR (NEW.token_id IS NOT NULL AND NEW.request_id IS NOT NULL)
    OR (NEW.kind = 'api.auth_failed' AND NEW.token_id IS NULL
        AND NEW.client_address IS NOT NULL AND NEW.request_id IS NOT NULL))
BEGIN
    SELECT RAISE(ABORT, 'security_audit_events: a request names its token and its id');
END;
