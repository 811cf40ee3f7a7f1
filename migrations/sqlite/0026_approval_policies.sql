-- Approval policies and votes (docs/security.md#approval-policies): the file decides who may
-- vote on a request and when the votes decide it, as the PostgreSQL schema does.
-- 1. `approval_policies` holds every version of every policy, append-only (the next version
--    of its name, at the database's clock), audited (`approval.policy_set`,
--    `approval.policy_retired`). The file's owner writes them (the store refuses a token).
-- 2. A new request's policy in force (a project's before an any-project one, then by name)
--    is copied by the file into `approval_request_policies`: one row per request, equal to
--    the policy in force when written, never changed. No policy: no row, decided as before.
-- 3. `approval_votes`: one vote per principal per request, at the database's clock; the
--    requester's vote on a request under a policy is refused, a principal in none of its
--    groups (`approval_group_members`) is refused, and so is a vote on a decided or expired
--    request. The votes decide the request in their own transaction. Approving a request
--    under a policy directly is one approve vote, refused while the others' approvals fall
--    short, and recorded; approving one without a policy writes no vote (today's path).

CREATE TABLE approval_policies (
    name               TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 63),
    version            INTEGER NOT NULL CHECK (version >= 1),
    action_type        TEXT NOT NULL,
    project_id         TEXT,
    target_prefix      TEXT,
    approvals_required INTEGER NOT NULL CHECK (approvals_required BETWEEN 1 AND 100),
    denials_to_reject  INTEGER NOT NULL DEFAULT 1 CHECK (denials_to_reject BETWEEN 1 AND 100),
    approver_groups    TEXT NOT NULL DEFAULT '[]' CHECK (json_type(approver_groups) = 'array'),
    reason_required    INTEGER NOT NULL DEFAULT 0 CHECK (reason_required IN (0, 1)),
    retired            INTEGER NOT NULL DEFAULT 0 CHECK (retired IN (0, 1)),
    written_by         TEXT NOT NULL,
    written_at_ms      INTEGER NOT NULL
        DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)),
    PRIMARY KEY (name, version)
);

CREATE INDEX approval_policies_action ON approval_policies (action_type);

CREATE TRIGGER approval_policies_next_version BEFORE INSERT ON approval_policies
WHEN NEW.version IS NOT (SELECT coalesce(max(version), 0) + 1 FROM approval_policies
                         WHERE name = NEW.name)
BEGIN
    SELECT RAISE(ABORT, 'approval_policies: a policy''s versions count from 1, one after another');
END;

-- The same names as PostgreSQL's group roles take (`<installation>_g_<group>`).
CREATE TRIGGER approval_policies_groups BEFORE INSERT ON approval_policies
WHEN EXISTS (SELECT 1 FROM json_each(NEW.approver_groups) AS g
             WHERE g.type <> 'text' OR length(g.value) NOT BETWEEN 1 AND 32
                OR g.value GLOB '*[^a-z0-9_]*' OR substr(g.value, 1, 1) NOT GLOB '[a-z]')
BEGIN
    SELECT RAISE(ABORT, 'approval_policies: an approver group is a lower-case identifier');
END;

CREATE TRIGGER approval_policies_no_update BEFORE UPDATE ON approval_policies
BEGIN
    SELECT RAISE(ABORT, 'approval_policies: a policy version never changes');
END;

CREATE TRIGGER approval_policies_no_delete BEFORE DELETE ON approval_policies
BEGIN
    SELECT RAISE(ABORT, 'approval_policies: a policy version never changes');
END;

CREATE TRIGGER approval_policies_audit AFTER INSERT ON approval_policies
BEGIN
    INSERT INTO security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
    ) VALUES (
        CASE WHEN NEW.retired THEN 'approval.policy_retired' ELSE 'approval.policy_set' END,
        NEW.written_by, NEW.written_by, coalesce(NEW.project_id, ''), NEW.name,
        CAST(NEW.version AS TEXT),
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    );
END;

CREATE TABLE approval_group_members (
    group_name TEXT NOT NULL,
    principal  TEXT NOT NULL,
    PRIMARY KEY (group_name, principal)
);

CREATE TABLE approval_request_policies (
    approval_request_id TEXT PRIMARY KEY
        REFERENCES approval_requests (approval_request_id) ON DELETE CASCADE,
    policy_name         TEXT NOT NULL,
    policy_version      INTEGER NOT NULL,
    approvals_required  INTEGER NOT NULL,
    denials_to_reject   INTEGER NOT NULL,
    approver_groups     TEXT NOT NULL,
    reason_required     INTEGER NOT NULL,
    FOREIGN KEY (policy_name, policy_version) REFERENCES approval_policies (name, version)
);

-- The policy in force for a request: the newest version of each name unless it retired it.
CREATE VIEW approval_policies_in_force AS
SELECT p.* FROM approval_policies AS p
WHERE NOT p.retired
  AND p.version = (SELECT max(q.version) FROM approval_policies AS q WHERE q.name = p.name);

-- Only the copy the next trigger makes fits: the request exists, has no policy row yet, and
-- the row is the policy in force for it, column by column.
CREATE TRIGGER approval_request_policies_in_force BEFORE INSERT ON approval_request_policies
WHEN NOT EXISTS (
    SELECT 1 FROM approval_requests AS r
    JOIN approval_policies_in_force AS p
      ON p.name = NEW.policy_name AND p.version = NEW.policy_version
    WHERE r.approval_request_id = NEW.approval_request_id
      AND r.status = 'pending' AND r.version = 1
      AND p.name = (SELECT f.name FROM approval_policies_in_force AS f
                    WHERE f.action_type = r.action_type
                      AND (f.project_id IS NULL OR f.project_id = r.project_id)
                    ORDER BY (f.project_id IS NULL), f.name LIMIT 1)
      AND NEW.approvals_required IS p.approvals_required
      AND NEW.denials_to_reject IS p.denials_to_reject
      AND NEW.approver_groups IS p.approver_groups
      AND NEW.reason_required IS p.reason_required)
BEGIN
    SELECT RAISE(ABORT, 'approval_request_policies: a request carries the policy in force');
END;

CREATE TRIGGER approval_request_policies_no_update BEFORE UPDATE ON approval_request_policies
BEGIN
    SELECT RAISE(ABORT, 'approval_request_policies: the policy of a request never changes');
END;

-- With no policy for the action type the index finds nothing and the copy never runs.
CREATE TRIGGER approval_requests_policy AFTER INSERT ON approval_requests
WHEN EXISTS (SELECT 1 FROM approval_policies WHERE action_type = NEW.action_type)
BEGIN
    INSERT INTO approval_request_policies (
        approval_request_id, policy_name, policy_version, approvals_required,
        denials_to_reject, approver_groups, reason_required
    )
    SELECT NEW.approval_request_id, p.name, p.version, p.approvals_required,
           p.denials_to_reject, p.approver_groups, p.reason_required
    FROM approval_policies_in_force AS p
    WHERE p.action_type = NEW.action_type
      AND (p.project_id IS NULL OR p.project_id = NEW.project_id)
    ORDER BY (p.project_id IS NULL), p.name
    LIMIT 1;
END;

CREATE TABLE approval_votes (
    approval_request_id TEXT NOT NULL
        REFERENCES approval_requests (approval_request_id) ON DELETE CASCADE,
    principal           TEXT NOT NULL CHECK (principal <> ''),
    vote                TEXT NOT NULL CHECK (vote IN ('approve', 'deny')),
    reason              TEXT,
    voted_at_ms         INTEGER NOT NULL
        DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)),
    PRIMARY KEY (approval_request_id, principal)
);

CREATE TRIGGER approval_votes_clock BEFORE INSERT ON approval_votes
WHEN NEW.voted_at_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    OR NEW.voted_at_ms < CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) - 1000
BEGIN
    SELECT RAISE(ABORT, 'approval_votes: a vote carries the database''s time');
END;

-- A direct approval records its decider's approve vote after the request moved.
CREATE TRIGGER approval_votes_open BEFORE INSERT ON approval_votes
WHEN NOT EXISTS (
    SELECT 1 FROM approval_requests AS r
    WHERE r.approval_request_id = NEW.approval_request_id
      AND (r.status = 'pending'
           OR (r.status = 'approved' AND NEW.vote = 'approve'
               AND r.decided_principal = NEW.principal)))
BEGIN
    SELECT RAISE(ABORT, 'approval_votes: the request is decided: it takes no votes');
END;

CREATE TRIGGER approval_votes_expired BEFORE INSERT ON approval_votes
WHEN EXISTS (
    SELECT 1 FROM approval_requests AS r
    WHERE r.approval_request_id = NEW.approval_request_id AND r.status = 'pending'
      AND CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
          >= coalesce(r.db_expires_at_ms, r.expires_at_ms))
BEGIN
    SELECT RAISE(ABORT, 'qinglong:approval_expired: the database clock says so');
END;

CREATE TRIGGER approval_votes_requester BEFORE INSERT ON approval_votes
WHEN EXISTS (
    SELECT 1 FROM approval_requests AS r
    JOIN approval_request_policies AS p USING (approval_request_id)
    WHERE r.approval_request_id = NEW.approval_request_id
      AND r.requested_principal = NEW.principal)
BEGIN
    SELECT RAISE(ABORT, 'approval_votes: the requester may not vote on its own request');
END;

CREATE TRIGGER approval_votes_groups BEFORE INSERT ON approval_votes
WHEN EXISTS (
    SELECT 1 FROM approval_request_policies AS p
    WHERE p.approval_request_id = NEW.approval_request_id
      AND json_array_length(p.approver_groups) > 0
      AND NOT EXISTS (
          SELECT 1 FROM json_each(p.approver_groups) AS g
          JOIN approval_group_members AS m
            ON m.group_name = g.value AND m.principal = NEW.principal))
BEGIN
    SELECT RAISE(ABORT, 'approval_votes: the principal is in none of the policy''s groups');
END;

CREATE TRIGGER approval_votes_reason BEFORE INSERT ON approval_votes
WHEN trim(coalesce(NEW.reason, '')) = '' AND EXISTS (
    SELECT 1 FROM approval_request_policies AS p
    WHERE p.approval_request_id = NEW.approval_request_id AND p.reason_required)
BEGIN
    SELECT RAISE(ABORT, 'approval_votes: this policy asks every vote for a reason');
END;

CREATE TRIGGER approval_votes_no_update BEFORE UPDATE ON approval_votes
BEGIN
    SELECT RAISE(ABORT, 'approval_votes: a vote never changes');
END;

-- The votes decide in their own transaction: denials first, then approvals.
CREATE TRIGGER approval_votes_reject AFTER INSERT ON approval_votes
WHEN (SELECT count(*) FROM approval_votes
      WHERE approval_request_id = NEW.approval_request_id AND vote = 'deny')
    >= coalesce((SELECT denials_to_reject FROM approval_request_policies
                 WHERE approval_request_id = NEW.approval_request_id), 1)
BEGIN
    UPDATE approval_requests
    SET status = 'rejected', version = 2, decided_by = NEW.principal,
        decided_principal = NEW.principal, updated_at_ms = NEW.voted_at_ms
    WHERE approval_request_id = NEW.approval_request_id AND status = 'pending';
END;

CREATE TRIGGER approval_votes_approve AFTER INSERT ON approval_votes
WHEN (SELECT count(*) FROM approval_votes
      WHERE approval_request_id = NEW.approval_request_id AND vote = 'approve')
    >= coalesce((SELECT approvals_required FROM approval_request_policies
                 WHERE approval_request_id = NEW.approval_request_id), 1)
BEGIN
    UPDATE approval_requests
    SET status = 'approved', version = 2, decided_by = NEW.principal,
        decided_principal = NEW.principal, updated_at_ms = NEW.voted_at_ms
    WHERE approval_request_id = NEW.approval_request_id AND status = 'pending';
END;

-- A direct approval of a request under a policy is one approve vote: the others' approvals
-- must reach the number less its own, and it is recorded as a vote (whose triggers apply the
-- policy's rules). A request without a policy is approved as before: one key lookup, no vote.
CREATE TRIGGER approval_requests_direct_vote AFTER UPDATE ON approval_requests
WHEN OLD.status = 'pending' AND NEW.status = 'approved'
    AND EXISTS (SELECT 1 FROM approval_request_policies
                WHERE approval_request_id = NEW.approval_request_id)
BEGIN
    SELECT RAISE(ABORT, 'approval_votes: the request needs more approvals')
    WHERE (SELECT count(*) FROM approval_votes
           WHERE approval_request_id = NEW.approval_request_id AND vote = 'approve'
             AND principal IS NOT NEW.decided_principal) + 1
          < (SELECT approvals_required FROM approval_request_policies
             WHERE approval_request_id = NEW.approval_request_id);
    INSERT INTO approval_votes (approval_request_id, principal, vote)
    SELECT NEW.approval_request_id, NEW.decided_principal, 'approve'
    WHERE NOT EXISTS (SELECT 1 FROM approval_votes
                      WHERE approval_request_id = NEW.approval_request_id
                        AND principal = NEW.decided_principal);
END;
