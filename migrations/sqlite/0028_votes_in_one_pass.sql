-- Votes in one pass (docs/security.md#approval-policies): the same rules as migration 0026,
-- each vote read once.
-- 1. One trigger checks a vote before it is written: a single read of the request and of the
--    policy it carries decides every rule (the database's time, a decided or expired request,
--    the requester, the approver groups, the reason), in this order, with 0026's messages.
-- 2. One trigger decides after it: only a pending request is counted, and only the kind of
--    vote just cast (a deny can only reach the denials, an approval only the approvals).
-- 3. A direct approval under a policy reads the policy once and counts the others' approvals
--    only when it needs more than one.
-- 4. The votes are one b-tree (WITHOUT ROWID, keyed by request and principal).
-- 5. `decided_by`: the label a vote records on the request when it decides it (as
--    `approval approve --by` does); the principal's name when none is given.

-- The votes keyed by their primary key alone (WITHOUT ROWID): one b-tree to write, not a
-- table and its key's index. Its triggers go with the old table and are made again below.
DROP TRIGGER approval_requests_direct_vote;

CREATE TABLE approval_votes_keyed (
    approval_request_id TEXT NOT NULL
        REFERENCES approval_requests (approval_request_id) ON DELETE CASCADE,
    principal           TEXT NOT NULL CHECK (principal <> ''),
    vote                TEXT NOT NULL CHECK (vote IN ('approve', 'deny')),
    reason              TEXT,
    voted_at_ms         INTEGER NOT NULL
        DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)),
    decided_by          TEXT CHECK (decided_by IS NULL OR length(decided_by) BETWEEN 1 AND 200),
    PRIMARY KEY (approval_request_id, principal)
) WITHOUT ROWID;

INSERT INTO approval_votes_keyed (approval_request_id, principal, vote, reason, voted_at_ms)
SELECT approval_request_id, principal, vote, reason, voted_at_ms FROM approval_votes;

DROP TABLE approval_votes;
ALTER TABLE approval_votes_keyed RENAME TO approval_votes;

CREATE TRIGGER approval_votes_no_update BEFORE UPDATE ON approval_votes
BEGIN
    SELECT RAISE(ABORT, 'approval_votes: a vote never changes');
END;

CREATE TRIGGER approval_votes_rules BEFORE INSERT ON approval_votes
BEGIN
    SELECT CASE
        WHEN NEW.voted_at_ms > v.now_ms OR NEW.voted_at_ms < v.now_ms - 1000
            THEN RAISE(ABORT, 'approval_votes: a vote carries the database''s time')
        -- A direct approval records its decider's approve vote after the request moved.
        WHEN r.status IS NULL
            OR NOT (r.status = 'pending'
                    OR (r.status = 'approved' AND NEW.vote = 'approve'
                        AND r.decided_principal = NEW.principal))
            THEN RAISE(ABORT, 'approval_votes: the request is decided: it takes no votes')
        WHEN r.status = 'pending'
            AND v.now_ms >= coalesce(r.db_expires_at_ms, r.expires_at_ms)
            THEN RAISE(ABORT, 'qinglong:approval_expired: the database clock says so')
        WHEN p.approval_request_id IS NULL THEN NULL
        WHEN r.requested_principal = NEW.principal
            THEN RAISE(ABORT, 'approval_votes: the requester may not vote on its own request')
        WHEN json_array_length(p.approver_groups) > 0 AND NOT EXISTS (
                SELECT 1 FROM json_each(p.approver_groups) AS g
                JOIN approval_group_members AS m
                  ON m.group_name = g.value AND m.principal = NEW.principal)
            THEN RAISE(ABORT, 'approval_votes: the principal is in none of the policy''s groups')
        WHEN p.reason_required AND trim(coalesce(NEW.reason, '')) = ''
            THEN RAISE(ABORT, 'approval_votes: this policy asks every vote for a reason')
    END
    FROM (SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) AS now_ms) AS v
    LEFT JOIN approval_requests AS r ON r.approval_request_id = NEW.approval_request_id
    LEFT JOIN approval_request_policies AS p
      ON p.approval_request_id = NEW.approval_request_id;
END;

-- The votes decide in their own transaction: a deny counts the denials, an approval the
-- approvals (without a policy one of either decides, as before).
CREATE TRIGGER approval_votes_decide AFTER INSERT ON approval_votes
WHEN (SELECT status FROM approval_requests
      WHERE approval_request_id = NEW.approval_request_id) = 'pending'
BEGIN
    UPDATE approval_requests
    SET status = CASE NEW.vote WHEN 'deny' THEN 'rejected' ELSE 'approved' END, version = 2,
        decided_by = coalesce(NEW.decided_by, NEW.principal),
        decided_principal = NEW.principal, updated_at_ms = NEW.voted_at_ms
    WHERE approval_request_id = NEW.approval_request_id AND status = 'pending'
      AND (SELECT count(*) FROM approval_votes
           WHERE approval_request_id = NEW.approval_request_id AND vote = NEW.vote)
          >= coalesce((SELECT CASE NEW.vote WHEN 'deny' THEN denials_to_reject
                                            ELSE approvals_required END
                       FROM approval_request_policies
                       WHERE approval_request_id = NEW.approval_request_id), 1);
END;

-- A direct approval of a request under a policy is one approve vote: the others' approvals
-- must reach the number less its own, and it is recorded as a vote (whose trigger applies the
-- policy's rules). A request without a policy is approved as before: one key lookup, no vote.
CREATE TRIGGER approval_requests_direct_vote AFTER UPDATE ON approval_requests
WHEN OLD.status = 'pending' AND NEW.status = 'approved'
    AND EXISTS (SELECT 1 FROM approval_request_policies
                WHERE approval_request_id = NEW.approval_request_id)
BEGIN
    SELECT RAISE(ABORT, 'approval_votes: the request needs more approvals')
    FROM approval_request_policies AS p
    WHERE p.approval_request_id = NEW.approval_request_id AND p.approvals_required > 1
      AND (SELECT count(*) FROM approval_votes
           WHERE approval_request_id = NEW.approval_request_id AND vote = 'approve'
             AND principal IS NOT NEW.decided_principal) + 1 < p.approvals_required;
    INSERT INTO approval_votes (approval_request_id, principal, vote)
    SELECT NEW.approval_request_id, NEW.decided_principal, 'approve'
    WHERE NOT EXISTS (SELECT 1 FROM approval_votes
                      WHERE approval_request_id = NEW.approval_request_id
                        AND principal = NEW.decided_principal);
END;
