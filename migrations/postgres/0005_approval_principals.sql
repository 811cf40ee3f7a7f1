-- Approvals by authenticated principals, in schema qinglong: the login that
-- created, decided and consumed each request is stored beside the free-text labels; a trigger
-- lets only qinglong_approver logins approve, applies separation of duties (self-approval
-- only for qinglong_self_approver), allows exactly the transitions of domain/approvals.py and
-- audits every state change; a dispatch may only be inserted for its consumed approval.
--
-- Amended in place: every function pins pg_temp last (migration 0011 says why). A
-- database that applied the first text of this file matches this checksum:
-- amends checksum a527fe3ef9ad81407d4418747461797fb2a16d79c390359d47e5c93ed6491e9c
-- Amended again, to point its comments at docs/ (the SQL is unchanged):
-- amends checksum a9973a6d67f526506971d531982d6f947c235110fa745b12f29819f43a52f56e

-- Rows older than this migration were made by a principal nobody recorded: 'unknown'. The
-- default exists only to backfill them and is dropped at once: every new row names its own.
ALTER TABLE qinglong.approval_requests
    ADD COLUMN requested_principal TEXT NOT NULL DEFAULT 'unknown',
    ADD COLUMN decided_principal   TEXT,
    ADD COLUMN consumed_principal  TEXT;
ALTER TABLE qinglong.approval_requests ALTER COLUMN requested_principal DROP DEFAULT;
UPDATE qinglong.approval_requests SET decided_principal = 'unknown' WHERE status <> 'pending';
UPDATE qinglong.approval_requests SET consumed_principal = 'unknown' WHERE status = 'consumed';

-- Every INSERT and UPDATE of a request, whoever runs it (the store or a direct SQL session).
-- SQLSTATEs: QLA01 this login may not take the step (not an approver, or writing another
-- login's name), QLA02 self-approval refused, QLA03 not a permitted change of the request.
CREATE FUNCTION qinglong.guard_approval_request() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    login text := session_user::text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.status IS DISTINCT FROM 'pending' OR NEW.version IS DISTINCT FROM 1
                OR NEW.decided_by IS NOT NULL OR NEW.decided_principal IS NOT NULL
                OR NEW.consumed_principal IS NOT NULL OR NEW.consumed_at_ms IS NOT NULL THEN
            RAISE EXCEPTION 'an approval request starts pending at version 1, undecided'
                USING ERRCODE = 'QLA03';
        END IF;
        IF NEW.requested_principal IS DISTINCT FROM login THEN
            RAISE EXCEPTION 'the requested principal must be the session login'
                USING ERRCODE = 'QLA01';
        END IF;
        RETURN NEW;
    END IF;

    IF OLD.status IN ('consumed', 'rejected', 'expired') THEN
        RAISE EXCEPTION 'approval request % is %: it never changes again',
            OLD.approval_request_id, OLD.status USING ERRCODE = 'QLA03';
    END IF;
    IF (NEW.approval_request_id, NEW.project_id, NEW.action_type, NEW.action_ref,
            NEW.action_digest, NEW.requested_by, NEW.requested_principal, NEW.expires_at_ms,
            NEW.created_at_ms)
            IS DISTINCT FROM
            (OLD.approval_request_id, OLD.project_id, OLD.action_type, OLD.action_ref,
            OLD.action_digest, OLD.requested_by, OLD.requested_principal, OLD.expires_at_ms,
            OLD.created_at_ms) THEN
        RAISE EXCEPTION 'the identity of an approval request never changes'
            USING ERRCODE = 'QLA03';
    END IF;

    IF OLD.status = 'pending' AND NEW.status IN ('approved', 'rejected', 'expired') THEN
        IF NEW.version IS DISTINCT FROM 2 OR NEW.decided_by IS NULL
                OR NEW.consumed_principal IS NOT NULL OR NEW.consumed_at_ms IS NOT NULL THEN
            RAISE EXCEPTION 'a decision moves pending@v1 to version 2 and names its decider'
                USING ERRCODE = 'QLA03';
        END IF;
        IF NEW.decided_principal IS DISTINCT FROM login THEN
            RAISE EXCEPTION 'the decided principal must be the session login'
                USING ERRCODE = 'QLA01';
        END IF;
        IF NEW.status = 'approved' THEN
            IF NOT pg_has_role(login, 'qinglong_approver', 'MEMBER') THEN
                RAISE EXCEPTION 'approving needs a qinglong_approver login'
                    USING ERRCODE = 'QLA01';
            END IF;
            -- Separation of duties: the requester may approve its own request only when an
            -- administrator granted it qinglong_self_approver explicitly.
            IF login = OLD.requested_principal
                    AND NOT pg_has_role(login, 'qinglong_self_approver', 'MEMBER') THEN
                RAISE EXCEPTION 'the requester may not approve its own request'
                    USING ERRCODE = 'QLA02';
            END IF;
        ELSIF login IS DISTINCT FROM OLD.requested_principal
                AND NOT pg_has_role(login, 'qinglong_approver', 'MEMBER') THEN
            -- Rejecting (or recording expiry) removes authority: the requester may withdraw
            -- its own request, anybody else must be an approver.
            RAISE EXCEPTION 'rejecting another login''s request needs a qinglong_approver login'
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
            RAISE EXCEPTION 'the consumed principal must be the session login'
                USING ERRCODE = 'QLA01';
        END IF;
        RETURN NEW;
    END IF;

    RAISE EXCEPTION 'approval request % may not go from % to %',
        OLD.approval_request_id, OLD.status, NEW.status USING ERRCODE = 'QLA03';
END
$$;
REVOKE ALL ON FUNCTION qinglong.guard_approval_request() FROM PUBLIC;

CREATE TRIGGER approval_requests_guard
    BEFORE INSERT OR UPDATE ON qinglong.approval_requests
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_approval_request();

-- One audit record per state change, written by the database in the same transaction, so a
-- direct SQL path cannot skip it. SECURITY DEFINER (owned by the migrator): the sessions
-- themselves hold no INSERT on the audit table for this. session_user is still the login.
CREATE FUNCTION qinglong.audit_approval_request() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    kind   text;
    actor  text;
    detail text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        kind := 'approval.created';
        actor := NEW.requested_by;
        detail := NEW.action_type;
    ELSIF NEW.status IS DISTINCT FROM OLD.status THEN
        kind := 'approval.' || NEW.status;
        IF NEW.status = 'consumed' THEN
            -- Consuming carries no label: the login is the actor.
            actor := NEW.consumed_principal;
            detail := NEW.action_type;
        ELSE
            actor := NEW.decided_by;
            detail := CASE WHEN NEW.decided_principal = NEW.requested_principal
                           THEN 'by_requester' ELSE 'by_other' END;
        END IF;
    ELSE
        RETURN NULL;
    END IF;
    INSERT INTO qinglong.security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
    ) VALUES (
        kind, actor, session_user, NEW.project_id, NEW.approval_request_id, detail,
        (extract(epoch FROM transaction_timestamp()) * 1000)::bigint
    );
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION qinglong.audit_approval_request() FROM PUBLIC;

CREATE TRIGGER approval_requests_audit
    AFTER INSERT OR UPDATE ON qinglong.approval_requests
    FOR EACH ROW EXECUTE FUNCTION qinglong.audit_approval_request();

-- A dispatch exists only for the approval it consumed, in the same transaction: the request
-- must be consumed by this very login and bind the same project, action and approver label.
-- Without this a login that may INSERT dispatches could dispatch what nobody approved.
CREATE FUNCTION qinglong.guard_dispatch_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    approval qinglong.approval_requests%ROWTYPE;
BEGIN
    SELECT * INTO approval FROM qinglong.approval_requests
    WHERE approval_request_id = NEW.approval_request_id;
    IF NOT FOUND OR approval.status IS DISTINCT FROM 'consumed'
            OR approval.consumed_principal IS DISTINCT FROM session_user::text
            OR (NEW.project_id, NEW.action_type, NEW.action_ref, NEW.action_digest,
                NEW.approved_by)
               IS DISTINCT FROM
               (approval.project_id, approval.action_type, approval.action_ref,
                approval.action_digest, approval.decided_by) THEN
        RAISE EXCEPTION 'a dispatch needs its approval consumed by this login, for this action'
            USING ERRCODE = 'QLA03';
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION qinglong.guard_dispatch_insert() FROM PUBLIC;

CREATE TRIGGER approved_action_dispatches_guard
    BEFORE INSERT ON qinglong.approved_action_dispatches
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_dispatch_insert();

-- Grants (docs/security.md, docs/installation.md). The approver creates plans and requests,
-- decides them, and consumes them (the dispatch, its execution and its first ledger line);
-- `submit tool-invoke` also reads the Run and inserts the waiting StepRun. It never runs an
-- execution (no UPDATE on executions) and never writes the audit table itself: the trigger
-- does. qinglong_self_approver carries no privilege: it is a marker the trigger reads.
GRANT SELECT, INSERT ON qinglong.action_plans, qinglong.approved_action_dispatches,
    qinglong.approved_action_dispatch_executions, qinglong.execution_events,
    qinglong.step_runs TO qinglong_approver;
GRANT SELECT, INSERT, UPDATE ON qinglong.approval_requests TO qinglong_approver;
GRANT SELECT ON qinglong.runs TO qinglong_approver;
-- Creating the StepRun locks its Run (SELECT … FOR UPDATE), and PostgreSQL grants a row lock
-- only with UPDATE on some column: the one column no reader takes as evidence of anything.
GRANT UPDATE (updated_at_ms) ON qinglong.runs TO qinglong_approver;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA qinglong TO qinglong_approver;
