-- Votes in one pass (docs/security.md#approval-policies): the same rules as migration 0026,
-- with fewer reads per vote.
-- 1. The votes decide in one statement: only a pending request is moved, and only the kind of
--    vote just cast is counted (a deny can only reach the denials, an approval only the
--    approvals), against the policy the request carries.
-- 2. A direct approval under a policy counts the others' approvals only when it needs more
--    than one.
-- 3. `decided_by`: the label a vote records on the request when it decides it (as
--    `approval approve --by` does); the principal's name when none is given.

ALTER TABLE qinglong.approval_votes ADD COLUMN decided_by TEXT
    CHECK (decided_by IS NULL OR pg_catalog.length(decided_by) BETWEEN 1 AND 200);

CREATE OR REPLACE FUNCTION qinglong.count_approval_votes() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- As the voter: the request's guard and audit apply to the move.
    UPDATE qinglong.approval_requests AS r
        SET status = CASE NEW.vote WHEN 'deny' THEN 'rejected' ELSE 'approved' END,
            version = 2, decided_by = COALESCE(NEW.decided_by, NEW.principal),
            decided_principal = NEW.principal, updated_at_ms = NEW.voted_at_ms
        WHERE r.approval_request_id = NEW.approval_request_id AND r.status = 'pending'
          AND (SELECT pg_catalog.count(*) FROM qinglong.approval_votes AS v
               WHERE v.approval_request_id = NEW.approval_request_id
                 AND v.vote = NEW.vote)
              >= COALESCE((SELECT CASE NEW.vote WHEN 'deny' THEN p.denials_to_reject
                                               ELSE p.approvals_required END
                           FROM qinglong.approval_request_policies AS p
                           WHERE p.approval_request_id = NEW.approval_request_id), 1);
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION qinglong.check_direct_approval() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    required pg_catalog.int4;
BEGIN
    SELECT approvals_required INTO required FROM qinglong.approval_request_policies
        WHERE approval_request_id = NEW.approval_request_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF required > 1 AND (SELECT pg_catalog.count(*) FROM qinglong.approval_votes
                         WHERE approval_request_id = NEW.approval_request_id
                           AND vote = 'approve'
                           AND principal IS DISTINCT FROM NEW.decided_principal)
                        OPERATOR(pg_catalog.+) 1 < required THEN
        RAISE EXCEPTION 'approval request % needs % approvals', NEW.approval_request_id,
            required USING ERRCODE = 'QLA03';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM qinglong.approval_votes
                   WHERE approval_request_id = NEW.approval_request_id
                     AND principal = NEW.decided_principal) THEN
        INSERT INTO qinglong.approval_votes (approval_request_id, principal, vote)
            VALUES (NEW.approval_request_id, NEW.decided_principal, 'approve');
    END IF;
    RETURN NULL;
END
$$;
