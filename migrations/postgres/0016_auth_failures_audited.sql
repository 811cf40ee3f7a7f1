-- Failed authentications through the API are audited (docs/security.md#the-control-plane-api):
-- the login that checked the token (the runtime, as itself, in the daemon's process) appends an
-- `api.auth_failed` row with the client's address, the request's id and a reason code. There
-- is no token id (the token is unknown, expired or revoked, and never stored) and no
-- principal but the recording login. Nobody else writes that kind (QLI01), and it carries no
-- token id. Authentication moves a token's last use at most once a minute.

ALTER TABLE qinglong.security_audit_events
    DROP CONSTRAINT security_audit_events_request_whole,
    ADD CONSTRAINT security_audit_events_request_whole CHECK (
        (token_id IS NULL AND client_address IS NULL AND request_id IS NULL)
        OR (token_id IS NOT NULL AND request_id IS NOT NULL)
        OR (kind = 'api.auth_failed' AND token_id IS NULL
            AND client_address IS NOT NULL AND request_id IS NOT NULL));

-- Authentication reads a token and moves its last use at most once a minute: the runtime
-- reads that column too.
GRANT SELECT (last_used_at_ms) ON qinglong.api_tokens TO qinglong_runtime;

-- The guard of 0015, with the failed authentication's rule first.
CREATE OR REPLACE FUNCTION qinglong.guard_audit_event() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    acting pg_catalog.text;
BEGIN
    IF CURRENT_USER::pg_catalog.text = 'qinglong_recorder' THEN
        -- The approval trigger's rows, and `read_plan`'s (migration 0014).
        IF (NEW.kind NOT LIKE 'approval.%' AND NEW.kind NOT LIKE 'plan.%')
                OR NEW.token_id IS NOT NULL THEN
            RAISE EXCEPTION 'the recorder writes approval and plan-read audit records only'
                USING ERRCODE = 'QLI01';
        END IF;
    ELSE
        acting := qinglong.acting_role();
        IF acting IS NULL
                OR NEW.principal IS DISTINCT FROM qinglong.acting_principal() THEN
            RAISE EXCEPTION 'an audit record names the acting principal'
                USING ERRCODE = 'QLI01';
        END IF;
        IF NEW.kind = 'api.auth_failed' THEN
            -- A refused token has no principal: the login that checked it records the refusal,
            -- as itself (no principal the API became), and only the runtime checks tokens.
            IF acting IS DISTINCT FROM SESSION_USER::pg_catalog.text
                    OR NOT pg_catalog.pg_has_role(acting, 'qinglong_runtime', 'MEMBER')
                    OR NEW.token_id IS NOT NULL THEN
                RAISE EXCEPTION 'a failed authentication is recorded by the runtime that refused it'
                    USING ERRCODE = 'QLI01';
            END IF;
            NEW.committed_at_ms := (pg_catalog.date_part('epoch',
                pg_catalog.transaction_timestamp()) OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8;
            RETURN NEW;
        END IF;
        IF NEW.kind LIKE 'approval.%' OR NEW.kind LIKE 'plan.%' THEN
            RAISE EXCEPTION 'approval and plan-read audit records are written by their definer only'
                USING ERRCODE = 'QLI01';
        END IF;
        IF (NEW.token_id IS NOT NULL OR NEW.kind LIKE 'api.%')
                AND (acting = SESSION_USER::pg_catalog.text OR NEW.token_id IS NULL
                     OR NEW.kind NOT LIKE 'api.%') THEN
            RAISE EXCEPTION 'a request''s audit record comes from a principal the API became'
                USING ERRCODE = 'QLI01';
        END IF;
        IF NEW.kind NOT LIKE 'api.%'
                AND NOT pg_catalog.pg_has_role(acting, 'qinglong_runtime', 'MEMBER')
                AND NOT pg_catalog.pg_has_role(acting, 'qinglong_operator', 'MEMBER') THEN
            RAISE EXCEPTION 'this principal writes only the audit record of its request'
                USING ERRCODE = 'QLI01';
        END IF;
    END IF;
    NEW.committed_at_ms := (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
        OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8;
    RETURN NEW;
END
$$;
