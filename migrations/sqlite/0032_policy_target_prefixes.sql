-- Approval policies match by target prefix (docs/security.md#approval-policies, decision 0038),
-- as the PostgreSQL schema has them.
-- 1. A policy may name a target prefix: 1 to 128 printable ASCII characters, no space, no
--    wildcard (`*`, `?`, `%`); it matches a request whose plan's target (`action_plans.target`,
--    migration 0030) begins with it, byte for byte. A policy without one matches any target,
--    and a request without a target.
-- 2. The policy in force for a new request is, among the newest unretired versions for its
--    action type and project: one whose prefix matches before one without; the longer prefix
--    first; a project's before an any-project one; then the first name in byte order.
-- 3. The database reads the target from the request's plan, never from its caller: a request
--    under a policy is refused unless its plan is written (a plain connection need not enforce
--    the key), its target never changes, and the copy and its check choose by that target. The
--    copy carries the prefix.
-- 4. A request's copy goes only with its request (pruning): a writer who deleted it would leave
--    the request deciding as if no policy applied.

ALTER TABLE approval_request_policies ADD COLUMN target_prefix TEXT;

CREATE TRIGGER approval_policies_target_prefix BEFORE INSERT ON approval_policies
WHEN NEW.target_prefix IS NOT NULL AND (
    typeof(NEW.target_prefix) <> 'text'
    OR length(NEW.target_prefix) NOT BETWEEN 1 AND 128
    OR NEW.target_prefix GLOB '*[^!-~]*'
    OR instr(NEW.target_prefix, '*') > 0 OR instr(NEW.target_prefix, '?') > 0
    OR instr(NEW.target_prefix, '%') > 0)
BEGIN
    SELECT RAISE(ABORT, 'approval_policies: a target prefix is 1 to 128 printable characters, no space or wildcard');
END;

DROP TRIGGER approval_request_policies_in_force;
DROP TRIGGER approval_requests_policy;
DROP TRIGGER approval_requests_policy_lifetime;

-- The order of point 2, in each of the three places that choose.
CREATE TRIGGER approval_request_policies_in_force BEFORE INSERT ON approval_request_policies
WHEN NOT EXISTS (
    SELECT 1 FROM approval_requests AS r
    JOIN action_plans AS a ON a.project_id = r.project_id AND a.action_ref = r.action_ref
    JOIN approval_policies_in_force AS p
      ON p.name = NEW.policy_name AND p.version = NEW.policy_version
    WHERE r.approval_request_id = NEW.approval_request_id
      AND r.status = 'pending' AND r.version = 1
      AND p.name = (SELECT f.name FROM approval_policies_in_force AS f
                    WHERE f.action_type = r.action_type
                      AND (f.project_id IS NULL OR f.project_id = r.project_id)
                      AND (f.target_prefix IS NULL
                           OR substr(a.target, 1, length(f.target_prefix)) = f.target_prefix)
                    ORDER BY (f.target_prefix IS NULL), length(f.target_prefix) DESC,
                             (f.project_id IS NULL), f.name
                    LIMIT 1)
      AND NEW.approvals_required IS p.approvals_required
      AND NEW.denials_to_reject IS p.denials_to_reject
      AND NEW.approver_groups IS p.approver_groups
      AND NEW.reason_required IS p.reason_required
      AND NEW.lifetime_ms IS p.lifetime_ms
      AND NEW.remind_before_ms IS p.remind_before_ms
      AND NEW.target_prefix IS p.target_prefix)
BEGIN
    SELECT RAISE(ABORT, 'approval_request_policies: a request carries the policy in force');
END;

CREATE TRIGGER approval_request_policies_no_delete BEFORE DELETE ON approval_request_policies
WHEN EXISTS (SELECT 1 FROM approval_requests
             WHERE approval_request_id = OLD.approval_request_id)
BEGIN
    SELECT RAISE(ABORT, 'approval_request_policies: the policy of a request never changes');
END;

-- A request under policies names a written plan: its target is the plan's.
CREATE TRIGGER approval_requests_plan_first BEFORE INSERT ON approval_requests
WHEN EXISTS (SELECT 1 FROM approval_policies WHERE action_type = NEW.action_type)
    AND NOT EXISTS (SELECT 1 FROM action_plans
                    WHERE project_id = NEW.project_id AND action_ref = NEW.action_ref)
BEGIN
    SELECT RAISE(ABORT, 'approval_requests: a request''s plan is written before it');
END;

CREATE TRIGGER approval_requests_policy AFTER INSERT ON approval_requests
WHEN EXISTS (SELECT 1 FROM approval_policies WHERE action_type = NEW.action_type)
BEGIN
    INSERT INTO approval_request_policies (
        approval_request_id, policy_name, policy_version, approvals_required,
        denials_to_reject, approver_groups, reason_required, lifetime_ms, remind_before_ms,
        target_prefix
    )
    SELECT NEW.approval_request_id, p.name, p.version, p.approvals_required,
           p.denials_to_reject, p.approver_groups, p.reason_required, p.lifetime_ms,
           p.remind_before_ms, p.target_prefix
    FROM action_plans AS a
    JOIN approval_policies_in_force AS p
      ON p.action_type = NEW.action_type
     AND (p.project_id IS NULL OR p.project_id = NEW.project_id)
     AND (p.target_prefix IS NULL
          OR substr(a.target, 1, length(p.target_prefix)) = p.target_prefix)
    WHERE a.project_id = NEW.project_id AND a.action_ref = NEW.action_ref
    ORDER BY (p.target_prefix IS NULL), length(p.target_prefix) DESC,
             (p.project_id IS NULL), p.name
    LIMIT 1;
END;

-- A request under a policy with a lifetime asks for exactly that lifetime (`insert_approval`
-- counts it from the database's clock).
CREATE TRIGGER approval_requests_policy_lifetime BEFORE INSERT ON approval_requests
WHEN EXISTS (SELECT 1 FROM approval_policies WHERE action_type = NEW.action_type)
    AND NEW.expires_at_ms - NEW.created_at_ms IS NOT coalesce(
        (SELECT p.lifetime_ms FROM action_plans AS a
         JOIN approval_policies_in_force AS p
           ON p.action_type = NEW.action_type
          AND (p.project_id IS NULL OR p.project_id = NEW.project_id)
          AND (p.target_prefix IS NULL
               OR substr(a.target, 1, length(p.target_prefix)) = p.target_prefix)
         WHERE a.project_id = NEW.project_id AND a.action_ref = NEW.action_ref
         ORDER BY (p.target_prefix IS NULL), length(p.target_prefix) DESC,
                  (p.project_id IS NULL), p.name
         LIMIT 1),
        NEW.expires_at_ms - NEW.created_at_ms)
BEGIN
    SELECT RAISE(ABORT, 'approval_requests: a request under a policy lives its lifetime');
END;

-- The outbox's `approval.requested` names the policy the request carries: chosen by the same
-- rule as the copy above, its plan's target included.
DROP TRIGGER approval_requests_tell_insert;

CREATE TRIGGER approval_requests_tell_insert AFTER INSERT ON approval_requests
BEGIN
    INSERT INTO notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    ) VALUES (
        'approval.requested', NEW.approval_request_id, NEW.project_id, NEW.action_type,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER),
        (SELECT json_object(
            'approvalRequestId', NEW.approval_request_id,
            'actionRef', NEW.action_ref,
            'actionDigest', NEW.action_digest,
            'status', NEW.status,
            'expiresAtMs', coalesce(NEW.db_expires_at_ms, NEW.expires_at_ms),
            'policy', p.name,
            'policyVersion', p.version)
         FROM (SELECT NULL) LEFT JOIN (
             SELECT f.name, f.version
             FROM action_plans AS a
             JOIN approval_policies_in_force AS f
               ON f.action_type = NEW.action_type
              AND (f.project_id IS NULL OR f.project_id = NEW.project_id)
              AND (f.target_prefix IS NULL
                   OR substr(a.target, 1, length(f.target_prefix)) = f.target_prefix)
             WHERE a.project_id = NEW.project_id AND a.action_ref = NEW.action_ref
             ORDER BY (f.target_prefix IS NULL), length(f.target_prefix) DESC,
                      (f.project_id IS NULL), f.name
             LIMIT 1) AS p)
    );
END;
