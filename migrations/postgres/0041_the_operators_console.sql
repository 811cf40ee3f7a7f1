-- The operator's console (docs/cli.md, decisions 0047 and 0048): a decision's comment from
-- the command line, and a request made again linked to what it was made from.
--
-- 1. A decision's comment from the command line.
--
-- An approve or a reject through the API keeps its comment in its `api.*` audit row; the
-- command line writes no such row (it has no token nor request to name). Its comment travels
-- in the deciding update itself (`approval_requests.decision_comment`): set with the move
-- from `pending` to `approved` or `rejected` and never after, one printable line of at most
-- 500 characters as the audit's, and the approval trigger copies it into the decision's
-- `approval.approved` / `approval.rejected` audit row, which it writes in that transaction
-- under the deciding principal. `qinglong.decision_reasons(id)` returns such a row beside the
-- API's decisions.
ALTER TABLE qinglong.approval_requests ADD COLUMN decision_comment pg_catalog.text
    CONSTRAINT approval_requests_decision_comment_line CHECK (
        decision_comment IS NULL OR (
            pg_catalog.length(decision_comment) BETWEEN 1 AND 500
            AND decision_comment !~ '[[:cntrl:]]'
        )
    );

-- Written with the decision, by the principal the approval guard already holds it to; never
-- on a new request, never once decided.
CREATE FUNCTION qinglong.guard_decision_comment() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM 'pending'
            OR NEW.status NOT IN ('approved', 'rejected') THEN
        RAISE EXCEPTION 'a decision''s comment is written with the decision, never after'
            USING ERRCODE = 'QLI01';
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION qinglong.guard_decision_comment() FROM PUBLIC;
CREATE TRIGGER approval_requests_decision_comment_new
    BEFORE INSERT ON qinglong.approval_requests
    FOR EACH ROW WHEN (NEW.decision_comment IS NOT NULL)
    EXECUTE FUNCTION qinglong.guard_decision_comment();
CREATE TRIGGER approval_requests_decision_comment
    BEFORE UPDATE ON qinglong.approval_requests
    FOR EACH ROW WHEN (OLD.decision_comment IS DISTINCT FROM NEW.decision_comment)
    EXECUTE FUNCTION qinglong.guard_decision_comment();

-- A definer (the recorder), as before: its owner and grants stay. The decision's row carries
-- the comment the deciding update did.
CREATE OR REPLACE FUNCTION qinglong.audit_approval_request() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    kind      pg_catalog.text;
    actor     pg_catalog.text;
    detail    pg_catalog.text;
    principal pg_catalog.text;
    said      pg_catalog.text;
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
            said := NEW.decision_comment;
        END IF;
    ELSE
        RETURN NULL;
    END IF;
    INSERT INTO qinglong.security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, comment, committed_at_ms
    ) VALUES (
        kind, actor, principal, NEW.project_id, NEW.approval_request_id, detail, said,
        (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
            OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8
    );
    RETURN NULL;
END
$$;

-- As before, and the command line's decisions that carried a comment (their `approval.*`
-- row; one without a comment says nothing the list's decider does not).
CREATE OR REPLACE FUNCTION qinglong.decision_reasons(p_approval_request_id pg_catalog.text)
RETURNS TABLE (
    decision pg_catalog.text, principal pg_catalog.text, reason pg_catalog.text,
    comment pg_catalog.text
)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT r.decision, r.principal, r.reason, r.comment
    FROM (
        SELECT 'deny'::pg_catalog.text AS decision, v.principal, v.reason,
               NULL::pg_catalog.text AS comment, v.voted_at_ms AS at_ms, 0::pg_catalog.int8 AS n
        FROM qinglong.approval_votes AS v
        WHERE v.approval_request_id = p_approval_request_id AND v.vote = 'deny'
        UNION ALL
        SELECT CASE e.kind WHEN 'approval.approved' THEN 'approve'
                           WHEN 'approval.rejected' THEN 'reject'
                           ELSE pg_catalog.substr(e.kind, 5) END,
               e.principal, CASE WHEN e.kind = 'api.reject' THEN e.detail_code END, e.comment,
               0::pg_catalog.int8, e.event_id
        FROM qinglong.security_audit_events AS e
        WHERE e.subject_id = p_approval_request_id
          AND (e.kind IN ('api.approve', 'api.reject')
               OR (e.kind IN ('approval.approved', 'approval.rejected')
                   AND e.comment IS NOT NULL))
    ) AS r
    WHERE EXISTS (
        SELECT 1 FROM qinglong.approval_requests AS a
        WHERE a.approval_request_id = p_approval_request_id AND a.status <> 'pending'
    )
    ORDER BY r.at_ms, r.n, r.principal
$$;

-- 2. A request made again (decision 0048) names what it was made from
-- (`approval_requests.resubmitted_from`): the failed, blocked or cancelled dispatch, or the
-- expired request, of its own project and action type. The database checks the origin when
-- the request is written and refuses any later change, so a login that may create requests
-- cannot point one at a made-up or a still-running origin, nor move the link afterwards. The
-- check reads the dispatches and executions a submitter may not: a definer owned by the
-- recorder, given SELECT on the few columns it reads.
ALTER TABLE qinglong.approval_requests ADD COLUMN resubmitted_from pg_catalog.text;
CREATE INDEX approval_requests_resubmitted_from ON qinglong.approval_requests (resubmitted_from)
    WHERE resubmitted_from IS NOT NULL;

GRANT SELECT (project_id, action_type) ON qinglong.approval_requests TO qinglong_recorder;
GRANT SELECT (dispatch_id, project_id, action_type)
    ON qinglong.approved_action_dispatches TO qinglong_recorder;
GRANT SELECT (dispatch_id, status)
    ON qinglong.approved_action_dispatch_executions TO qinglong_recorder;

CREATE FUNCTION qinglong.guard_resubmitted_from() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'what a request was made again from never changes'
            USING ERRCODE = 'QLI01';
    END IF;
    IF NOT EXISTS (
        SELECT 1
        FROM qinglong.approved_action_dispatches AS d
        JOIN qinglong.approved_action_dispatch_executions AS e ON e.dispatch_id = d.dispatch_id
        WHERE d.dispatch_id = NEW.resubmitted_from
          AND e.status IN ('failed', 'blocked', 'cancelled')
          AND d.project_id = NEW.project_id AND d.action_type = NEW.action_type
    ) AND NOT EXISTS (
        SELECT 1 FROM qinglong.approval_requests AS a
        WHERE a.approval_request_id = NEW.resubmitted_from AND a.status = 'expired'
          AND a.project_id = NEW.project_id AND a.action_type = NEW.action_type
    ) THEN
        RAISE EXCEPTION 'a request is made again only from a failed, blocked or cancelled '
            'dispatch or an expired request of its project and action type'
            USING ERRCODE = 'QLI01';
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION qinglong.guard_resubmitted_from() FROM PUBLIC;
GRANT CREATE ON SCHEMA qinglong TO qinglong_recorder;
ALTER FUNCTION qinglong.guard_resubmitted_from() OWNER TO qinglong_recorder;
REVOKE CREATE ON SCHEMA qinglong FROM qinglong_recorder;

CREATE TRIGGER approval_requests_resubmitted_from_new
    BEFORE INSERT ON qinglong.approval_requests
    FOR EACH ROW WHEN (NEW.resubmitted_from IS NOT NULL)
    EXECUTE FUNCTION qinglong.guard_resubmitted_from();
CREATE TRIGGER approval_requests_resubmitted_from
    BEFORE UPDATE ON qinglong.approval_requests
    FOR EACH ROW WHEN (OLD.resubmitted_from IS DISTINCT FROM NEW.resubmitted_from)
    EXECUTE FUNCTION qinglong.guard_resubmitted_from();
