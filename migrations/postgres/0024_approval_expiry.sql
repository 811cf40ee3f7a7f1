-- Approval expiry (docs/state-machine.md), in schema qinglong: a pending request whose
-- lifetime ran out becomes `expired`, an outcome rather than a request nobody can use.
-- 1. `pending → expired` only once the request's `db_expires_at_ms` has passed on the
--    database's clock (QLA03 before), and only by the runtime, whose reconcile pass sweeps
--    them (QLA01 for anyone else); `expired` is terminal as before (QLA03).
-- 2. Its audit row `approval.expired` says why (`detail_code` `db_clock`), not by whom.

CREATE OR REPLACE FUNCTION qinglong.guard_approval_request() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    acting   pg_catalog.text := qinglong.acting_role();
    login    pg_catalog.text := qinglong.acting_principal();
    now_ms   pg_catalog.int8 := qinglong.db_now_ms();
    lifetime pg_catalog.int8;
BEGIN
    IF acting IS NULL OR login IS NULL THEN
        RAISE EXCEPTION 'the API''s login acts only as a principal'
            USING ERRCODE = 'QLA01';
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF NEW.status IS DISTINCT FROM 'pending' OR NEW.version IS DISTINCT FROM 1
                OR NEW.decided_by IS NOT NULL OR NEW.decided_principal IS NOT NULL
                OR NEW.consumed_principal IS NOT NULL OR NEW.consumed_at_ms IS NOT NULL THEN
            RAISE EXCEPTION 'an approval request starts pending at version 1, undecided'
                USING ERRCODE = 'QLA03';
        END IF;
        IF NEW.requested_principal IS DISTINCT FROM login THEN
            RAISE EXCEPTION 'the requested principal must be the acting principal'
                USING ERRCODE = 'QLA01';
        END IF;
        lifetime := NEW.expires_at_ms - NEW.created_at_ms;
        IF lifetime IS NULL OR lifetime <= 0 OR lifetime > 2592000000 THEN
            RAISE EXCEPTION 'an approval lives more than 0 s and at most 30 days'
                USING ERRCODE = 'QLA05';
        END IF;
        NEW.db_expires_at_ms := now_ms + lifetime;
        RETURN NEW;
    END IF;

    IF OLD.status IN ('consumed', 'rejected', 'expired') THEN
        RAISE EXCEPTION 'approval request % is %: it never changes again',
            OLD.approval_request_id, OLD.status USING ERRCODE = 'QLA03';
    END IF;
    IF (NEW.approval_request_id, NEW.project_id, NEW.action_type, NEW.action_ref,
            NEW.action_digest, NEW.requested_by, NEW.requested_principal, NEW.expires_at_ms,
            NEW.created_at_ms, NEW.db_expires_at_ms)
            IS DISTINCT FROM
            (OLD.approval_request_id, OLD.project_id, OLD.action_type, OLD.action_ref,
            OLD.action_digest, OLD.requested_by, OLD.requested_principal, OLD.expires_at_ms,
            OLD.created_at_ms, OLD.db_expires_at_ms) THEN
        RAISE EXCEPTION 'the identity of an approval request never changes'
            USING ERRCODE = 'QLA03';
    END IF;
    IF NEW.status IN ('approved', 'consumed')
            AND now_ms >= COALESCE(OLD.db_expires_at_ms, OLD.expires_at_ms) THEN
        RAISE EXCEPTION 'approval request % expired (database clock)', OLD.approval_request_id
            USING ERRCODE = 'QLA04';
    END IF;
    -- Expiry is the database clock's outcome, never a decision: only a request whose lifetime
    -- ran out on this clock becomes `expired`, and only the runtime's sweep moves it.
    IF NEW.status = 'expired' AND OLD.status = 'pending' THEN
        IF now_ms < COALESCE(OLD.db_expires_at_ms, OLD.expires_at_ms) THEN
            RAISE EXCEPTION 'approval request % has not expired (database clock)',
                OLD.approval_request_id USING ERRCODE = 'QLA03';
        END IF;
        IF NOT pg_catalog.pg_has_role(acting, 'qinglong_runtime', 'MEMBER') THEN
            RAISE EXCEPTION 'expiring a request needs the runtime'
                USING ERRCODE = 'QLA01';
        END IF;
    END IF;

    IF OLD.status = 'pending' AND NEW.status IN ('approved', 'rejected', 'expired') THEN
        IF NEW.version IS DISTINCT FROM 2 OR NEW.decided_by IS NULL
                OR NEW.consumed_principal IS NOT NULL OR NEW.consumed_at_ms IS NOT NULL THEN
            RAISE EXCEPTION 'a decision moves pending@v1 to version 2 and names its decider'
                USING ERRCODE = 'QLA03';
        END IF;
        IF NEW.decided_principal IS DISTINCT FROM login THEN
            RAISE EXCEPTION 'the decided principal must be the acting principal'
                USING ERRCODE = 'QLA01';
        END IF;
        IF NEW.status = 'approved' THEN
            IF NOT pg_catalog.pg_has_role(acting, 'qinglong_approver', 'MEMBER') THEN
                RAISE EXCEPTION 'approving needs a qinglong_approver principal'
                    USING ERRCODE = 'QLA01';
            END IF;
            -- Separation of duties between principals (a login and a token of one name are
            -- one principal): self-approval only for a member of qinglong_self_approver.
            IF login = OLD.requested_principal
                    AND NOT pg_catalog.pg_has_role(acting, 'qinglong_self_approver', 'MEMBER')
                    THEN
                RAISE EXCEPTION 'the requester may not approve its own request'
                    USING ERRCODE = 'QLA02';
            END IF;
        ELSIF NEW.status = 'rejected' AND login IS DISTINCT FROM OLD.requested_principal
                AND NOT pg_catalog.pg_has_role(acting, 'qinglong_approver', 'MEMBER') THEN
            RAISE EXCEPTION 'rejecting another principal''s request needs a qinglong_approver'
                USING ERRCODE = 'QLA01';
        END IF;
        RETURN NEW;
    END IF;

    IF OLD.status = 'approved' AND NEW.status = 'consumed' THEN
        IF NEW.version IS DISTINCT FROM 3 OR NEW.consumed_at_ms IS NULL
                OR (NEW.decided_by, NEW.decided_principal)
                    IS DISTINCT FROM (OLD.decided_by, OLD.decided_principal) THEN
            RAISE EXCEPTION 'consuming moves approved@v2 to version 3 and keeps the decision'
                USING ERRCODE = 'QLA03';
        END IF;
        IF NEW.consumed_principal IS DISTINCT FROM login THEN
            RAISE EXCEPTION 'the consumed principal must be the acting principal'
                USING ERRCODE = 'QLA01';
        END IF;
        RETURN NEW;
    END IF;

    RAISE EXCEPTION 'approval request % may not go from % to %',
        OLD.approval_request_id, OLD.status, NEW.status USING ERRCODE = 'QLA03';
END
$$;

-- A definer (the recorder), as before: its owner and grants stay.
CREATE OR REPLACE FUNCTION qinglong.audit_approval_request() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    kind      pg_catalog.text;
    actor     pg_catalog.text;
    detail    pg_catalog.text;
    principal pg_catalog.text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        kind := 'approval.created';
        actor := NEW.requested_by;
        detail := NEW.action_type;
        principal := NEW.requested_principal;
    ELSIF NEW.status IS DISTINCT FROM OLD.status THEN
        kind := 'approval.' OPERATOR(pg_catalog.||) NEW.status;
        IF NEW.status = 'consumed' THEN
            actor := NEW.consumed_principal;
            detail := NEW.action_type;
            principal := NEW.consumed_principal;
        ELSE
            actor := NEW.decided_by;
            detail := CASE WHEN NEW.status = 'expired' THEN 'db_clock'
                           WHEN NEW.decided_principal = NEW.requested_principal
                           THEN 'by_requester' ELSE 'by_other' END;
            principal := NEW.decided_principal;
        END IF;
    ELSE
        RETURN NULL;
    END IF;
    INSERT INTO qinglong.security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
    ) VALUES (
        kind, actor, principal, NEW.project_id, NEW.approval_request_id, detail,
        (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
            OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8
    );
    RETURN NULL;
END
$$;
