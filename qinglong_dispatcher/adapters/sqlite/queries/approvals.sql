-- SQLite statements: plans, approvals and the dispatch and execution rows a consume creates.

-- insert_plan --
INSERT INTO action_plans (project_id, action_ref, action_type, plan_json, plan_digest,
                          created_at_ms, plan_key_id, plan_algorithm, plan_sealed,
                          plan_schema_version, target)
VALUES (:project_id, :action_ref, :action_type, :plan_json, :plan_digest, :now_ms, :plan_key_id,
        :plan_algorithm, :plan_sealed, :plan_schema_version, :target)

-- select_plan --
-- Every read of plan_json takes its bytes (CAST AS BLOB): a damaged row that is not UTF-8
-- then comes back `plan_corrupt` (ports.StoredPlan.from_row) instead of failing the read.
SELECT project_id, action_ref, action_type,
       CAST(plan_json AS BLOB) AS plan_json, plan_digest, plan_key_id,
       plan_algorithm, plan_sealed, plan_schema_version
FROM action_plans
WHERE project_id = :project_id AND action_ref = :action_ref

-- select_plans --
-- One read for a page of dispatches: the keys arrive as two JSON arrays of equal length.
SELECT p.project_id, p.action_ref, p.action_type,
       CAST(p.plan_json AS BLOB) AS plan_json, p.plan_digest, p.plan_key_id,
       p.plan_algorithm, p.plan_sealed, p.plan_schema_version
-- Both key columns are bound before the plans are read, so each key is one primary-key probe.
FROM json_each(:project_ids) AS k
JOIN action_plans AS p
  ON p.project_id = k.value AND p.action_ref = json_extract(:action_refs, '$[' || k.key || ']')

-- insert_approval --
-- :principal is the OS user running the store (file permissions are the authority on edge).
-- db_expires_at_ms counts the requested lifetime from now on the database's (system) clock;
-- the insert trigger bounds it, and approving or consuming after it is refused. Under a policy
-- with a lifetime the request lives the policy's (migration 0027, whose trigger refuses any
-- other): the policy in force is looked up as the copy trigger does, by the target of the plan
-- written just before (migration 0032).
INSERT INTO approval_requests (
    approval_request_id, project_id, action_type, action_ref, action_digest, status, version,
    requested_by, decided_by, requested_principal, expires_at_ms, created_at_ms, updated_at_ms,
    db_expires_at_ms, traceparent, resubmitted_from, not_before_ms, window_for_ms
)
SELECT :approval_request_id, :project_id, :action_type, :action_ref, :action_digest, 'pending',
       1, :requested_by, NULL, :principal, :now_ms + l.lifetime_ms, :now_ms, :now_ms,
       CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + l.lifetime_ms,
       :traceparent, :resubmitted_from, :not_before_ms, :window_for_ms
FROM (SELECT coalesce(
        (SELECT p.lifetime_ms FROM action_plans AS a
         JOIN approval_policies_in_force AS p
           ON p.action_type = :action_type
          AND (p.project_id IS NULL OR p.project_id = :project_id)
          AND (p.target_prefix IS NULL
               OR substr(a.target, 1, length(p.target_prefix)) = p.target_prefix)
         WHERE a.project_id = :project_id AND a.action_ref = :action_ref
         ORDER BY (p.target_prefix IS NULL), length(p.target_prefix) DESC,
                  (p.project_id IS NULL), p.name
         LIMIT 1),
        :expires_at_ms - :now_ms) AS lifetime_ms) AS l

-- select_approval --
SELECT approval_request_id, project_id, action_type, action_ref, action_digest, status, version,
       requested_by, decided_by, requested_principal, decided_principal, consumed_principal,
       expires_at_ms, created_at_ms, updated_at_ms, traceparent, resubmitted_from,
       not_before_ms, window_for_ms
FROM approval_requests
WHERE approval_request_id = :approval_request_id

-- approve_approval --
UPDATE approval_requests
SET status = 'approved', version = 2, decided_by = :decided_by,
    decided_principal = :principal, updated_at_ms = :now_ms,
    decision_comment = :comment
WHERE approval_request_id = :approval_request_id AND status = 'pending' AND version = 1
  AND expires_at_ms > :now_ms
RETURNING approval_request_id, requested_principal

-- approve_approvals --
-- A submit's whole batch in one statement (the ids as one JSON array); the ids it did not
-- return the caller explains. The unary + keeps the status index out: the batch's rows are
-- read by their key, never every request that waits.
UPDATE approval_requests
SET status = 'approved', version = 2, decided_by = :decided_by,
    decided_principal = :principal, updated_at_ms = :now_ms
WHERE approval_request_id IN (SELECT value FROM json_each(:ids))
  AND +status = 'pending' AND version = 1 AND expires_at_ms > :now_ms
RETURNING approval_request_id, requested_principal

-- reject_approval --
-- No expiry condition: withdrawing authority is always allowed while pending.
UPDATE approval_requests
SET status = 'rejected', version = 2, decided_by = :decided_by,
    decided_principal = :principal, updated_at_ms = :now_ms,
    decision_comment = :comment
WHERE approval_request_id = :approval_request_id AND status = 'pending' AND version = 1
RETURNING approval_request_id, requested_principal

-- consume_approval --
UPDATE approval_requests
SET status = 'consumed', version = 3, consumed_at_ms = :now_ms,
    consumed_principal = :principal, updated_at_ms = :now_ms
WHERE approval_request_id = :approval_request_id AND status = 'approved' AND version = 2
  AND expires_at_ms > :now_ms
RETURNING project_id, action_type, action_ref, action_digest, decided_by

-- consume_approvals --
-- `consume_approval` for a submit's whole batch, as `approve_approvals` (its rows by key).
UPDATE approval_requests
SET status = 'consumed', version = 3, consumed_at_ms = :now_ms,
    consumed_principal = :principal, updated_at_ms = :now_ms
WHERE approval_request_id IN (SELECT value FROM json_each(:ids))
  AND +status = 'approved' AND version = 2 AND expires_at_ms > :now_ms
RETURNING approval_request_id, project_id, action_type, action_ref, action_digest, decided_by

-- insert_dispatch --
INSERT INTO approved_action_dispatches (
    dispatch_id, approval_request_id, project_id, action_type, action_ref, action_digest,
    approved_by, created_at_ms, target, traceparent, not_before_ms, not_after_ms
) VALUES (
    :dispatch_id, :approval_request_id, :project_id, :action_type, :action_ref, :action_digest,
    :approved_by, :now_ms,
    -- The plan's target and the request's traceparent, read here (triggers refuse any other).
    (SELECT p.target FROM action_plans AS p
     WHERE p.project_id = :project_id AND p.action_ref = :action_ref),
    (SELECT a.traceparent FROM approval_requests AS a
     WHERE a.approval_request_id = :approval_request_id),
    -- The window of the request's policy narrowed by its own, from the database's clock
    -- (likewise).
    (SELECT w.not_before_ms FROM approval_request_windows AS w
     WHERE w.approval_request_id = :approval_request_id),
    (SELECT w.not_after_ms FROM approval_request_windows AS w
     WHERE w.approval_request_id = :approval_request_id)
)

-- insert_execution --
INSERT INTO approved_action_dispatch_executions (
    dispatch_id, project_id, status, version, attempt, max_attempts, eligible_at_ms,
    created_at_ms, updated_at_ms, target, not_before_ms, not_after_ms, proceed_on_unknown
)
-- The dispatch's target and window and its policy's rule on an unknown outcome (the triggers
-- refuse any other); due at the window's start.
SELECT :dispatch_id, :project_id, 'pending', 0, 0, :max_attempts,
       max(:now_ms, coalesce(d.not_before_ms, :now_ms)), :now_ms, :now_ms, d.target,
       d.not_before_ms, d.not_after_ms, u.proceed_on_unknown
FROM approved_action_dispatches AS d
JOIN dispatch_unknown_rules AS u ON u.dispatch_id = d.dispatch_id
WHERE d.dispatch_id = :dispatch_id

-- submit_one --
-- PostgreSQL's submit of one plan in one round trip (its migration 0018). SQLite has no round
-- trip to save: its submit is the shared transaction, one hop. The name stays so both files
-- name the same blocks; nothing runs this one. It matches no row, and it names the parameters
-- of PostgreSQL's block, because the two files bind the same names.
SELECT NULL AS dispatch_id
WHERE 0 AND coalesce(:project_id, :action_ref, :action_type, :plan_json, :plan_digest,
                     :plan_key_id, :plan_algorithm, :plan_sealed, :plan_schema_version,
                     :approval_request_id, :action_digest, :requested_by, :expires_at_ms,
                     :decided_by, :dispatch_id, :max_attempts, :now_ms) IS NOT NULL

-- list_waiting_approvals --
-- `approval list`: pending requests whose lifetime has not run out on the caller's clock nor
-- on the database's (system) clock, newest first, a keyset page after
-- (:after_created_at_ms, :after_approval_request_id) over the partial index of migration
-- 0014; a NULL filter matches everything (:from_ms inclusive, :to_ms exclusive, on
-- creation). Each comes with its plan row, which the store previews (a sealed one opened
-- first); no plan value leaves the store.
SELECT a.approval_request_id, a.project_id, a.action_type, a.action_ref, a.action_digest,
       a.requested_by, a.requested_principal, a.created_at_ms, a.expires_at_ms,
       a.not_before_ms, a.window_for_ms,
       a.status, a.decided_by, a.decided_principal, NULL AS decision_code,
       NULL AS decided_at_ms, a.consumed_at_ms, NULL AS reasons_json,
       CAST(p.plan_json AS BLOB) AS plan_json, p.plan_digest, p.plan_key_id, p.plan_algorithm,
       p.plan_sealed,
       p.plan_schema_version
FROM approval_requests AS a
LEFT JOIN action_plans AS p ON p.project_id = a.project_id AND p.action_ref = a.action_ref
WHERE a.status = 'pending'
  AND (a.created_at_ms, a.approval_request_id)
      < (:after_created_at_ms, :after_approval_request_id)
  AND a.expires_at_ms > :now_ms
  AND COALESCE(a.db_expires_at_ms, a.expires_at_ms)
      > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
  AND (:project_id IS NULL OR a.project_id = :project_id)
  AND (:action_type IS NULL OR a.action_type = :action_type)
  AND (:from_ms IS NULL OR a.created_at_ms >= :from_ms)
  AND (:to_ms IS NULL OR a.created_at_ms < :to_ms)
ORDER BY a.created_at_ms DESC, a.approval_request_id DESC
LIMIT :limit

-- list_approvals --
-- `approval list --status S` for any S but the default `pending` (waiting): requests of the
-- stored status :status, newest first, a keyset page after
-- (:after_created_at_ms, :after_approval_request_id) in the same order as
-- `list_waiting_approvals`, so a cursor means the same position under every status. Each
-- decided row says who decided and how, with the code the audit trigger writes on its
-- `approval.<status>` row (`by_requester`, `by_other`, `db_clock`), and when, and why: its
-- deny votes' reasons, its API decisions' reason and comment, and the comment a command
-- line decision carried in its `approval.*` row (as PostgreSQL's `decision_reasons` returns
-- them). One status's page walks the index of migration 0036.
SELECT a.approval_request_id, a.project_id, a.action_type, a.action_ref, a.action_digest,
       a.requested_by, a.requested_principal, a.created_at_ms, a.expires_at_ms,
       a.not_before_ms, a.window_for_ms,
       a.status, a.decided_by, a.decided_principal,
       CASE WHEN a.status = 'pending' THEN NULL
            WHEN a.status = 'expired' THEN 'db_clock'
            WHEN a.decided_principal = a.requested_principal THEN 'by_requester'
            ELSE 'by_other' END AS decision_code,
       CASE WHEN a.status IN ('approved', 'rejected', 'expired') THEN a.updated_at_ms
            END AS decided_at_ms,
       a.consumed_at_ms,
       CASE WHEN a.status <> 'pending' THEN (
           SELECT json_group_array(json_object(
                      'decision', r.decision, 'principal', r.principal, 'reason', r.reason,
                      'comment', r.comment))
           FROM (
               SELECT 'deny' AS decision, v.principal, v.reason, NULL AS comment,
                      v.voted_at_ms AS at_ms, 0 AS n
               FROM approval_votes AS v
               WHERE v.approval_request_id = a.approval_request_id AND v.vote = 'deny'
               UNION ALL
               SELECT CASE e.kind WHEN 'approval.approved' THEN 'approve'
                                  WHEN 'approval.rejected' THEN 'reject'
                                  ELSE substr(e.kind, 5) END, e.principal,
                      CASE WHEN e.kind = 'api.reject' THEN e.detail_code END, e.comment,
                      0, e.event_id
               FROM security_audit_events AS e
               WHERE e.subject_id = a.approval_request_id
                 AND (e.kind IN ('api.approve', 'api.reject')
                      OR (e.kind IN ('approval.approved', 'approval.rejected')
                          AND e.comment IS NOT NULL))
               ORDER BY 5, 6, 2
           ) AS r
       ) END AS reasons_json,
       CAST(p.plan_json AS BLOB) AS plan_json, p.plan_digest, p.plan_key_id, p.plan_algorithm,
       p.plan_sealed, p.plan_schema_version
FROM approval_requests AS a
LEFT JOIN action_plans AS p ON p.project_id = a.project_id AND p.action_ref = a.action_ref
WHERE a.status = :status
  AND (a.created_at_ms, a.approval_request_id)
      < (:after_created_at_ms, :after_approval_request_id)
  AND (:project_id IS NULL OR a.project_id = :project_id)
  AND (:action_type IS NULL OR a.action_type = :action_type)
  AND (:from_ms IS NULL OR a.created_at_ms >= :from_ms)
  AND (:to_ms IS NULL OR a.created_at_ms < :to_ms)
ORDER BY a.created_at_ms DESC, a.approval_request_id DESC
LIMIT :limit

-- list_all_approvals --
-- `approval list --status all`: `list_approvals` of every status, in the same order (a
-- read an operator asks for now and then: no index of its own).
SELECT a.approval_request_id, a.project_id, a.action_type, a.action_ref, a.action_digest,
       a.requested_by, a.requested_principal, a.created_at_ms, a.expires_at_ms,
       a.not_before_ms, a.window_for_ms,
       a.status, a.decided_by, a.decided_principal,
       CASE WHEN a.status = 'pending' THEN NULL
            WHEN a.status = 'expired' THEN 'db_clock'
            WHEN a.decided_principal = a.requested_principal THEN 'by_requester'
            ELSE 'by_other' END AS decision_code,
       CASE WHEN a.status IN ('approved', 'rejected', 'expired') THEN a.updated_at_ms
            END AS decided_at_ms,
       a.consumed_at_ms,
       CASE WHEN a.status <> 'pending' THEN (
           SELECT json_group_array(json_object(
                      'decision', r.decision, 'principal', r.principal, 'reason', r.reason,
                      'comment', r.comment))
           FROM (
               SELECT 'deny' AS decision, v.principal, v.reason, NULL AS comment,
                      v.voted_at_ms AS at_ms, 0 AS n
               FROM approval_votes AS v
               WHERE v.approval_request_id = a.approval_request_id AND v.vote = 'deny'
               UNION ALL
               SELECT CASE e.kind WHEN 'approval.approved' THEN 'approve'
                                  WHEN 'approval.rejected' THEN 'reject'
                                  ELSE substr(e.kind, 5) END, e.principal,
                      CASE WHEN e.kind = 'api.reject' THEN e.detail_code END, e.comment,
                      0, e.event_id
               FROM security_audit_events AS e
               WHERE e.subject_id = a.approval_request_id
                 AND (e.kind IN ('api.approve', 'api.reject')
                      OR (e.kind IN ('approval.approved', 'approval.rejected')
                          AND e.comment IS NOT NULL))
               ORDER BY 5, 6, 2
           ) AS r
       ) END AS reasons_json,
       CAST(p.plan_json AS BLOB) AS plan_json, p.plan_digest, p.plan_key_id, p.plan_algorithm,
       p.plan_sealed, p.plan_schema_version
FROM approval_requests AS a
LEFT JOIN action_plans AS p ON p.project_id = a.project_id AND p.action_ref = a.action_ref
WHERE true
  AND (a.created_at_ms, a.approval_request_id)
      < (:after_created_at_ms, :after_approval_request_id)
  AND (:project_id IS NULL OR a.project_id = :project_id)
  AND (:action_type IS NULL OR a.action_type = :action_type)
  AND (:from_ms IS NULL OR a.created_at_ms >= :from_ms)
  AND (:to_ms IS NULL OR a.created_at_ms < :to_ms)
ORDER BY a.created_at_ms DESC, a.approval_request_id DESC
LIMIT :limit

-- expire_approvals --
-- The reconcile pass's sweep: at most :limit pending requests whose lifetime ran out on the
-- database's clock become `expired` (oldest first; the expiry trigger of migration 0024
-- holds the same clock), each audited `approval.expired` by the audit trigger.
UPDATE approval_requests
SET status = 'expired', version = 2, decided_by = :decided_by,
    decided_principal = :principal, updated_at_ms = :now_ms
WHERE approval_request_id IN (
    SELECT approval_request_id FROM approval_requests
    WHERE status = 'pending'
      AND coalesce(db_expires_at_ms, expires_at_ms)
          <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    ORDER BY created_at_ms, approval_request_id
    LIMIT :limit
)
RETURNING approval_request_id, project_id, action_type

-- own_vote --
-- The store's principal's vote on a request, if it cast one (migration 0026).
SELECT vote FROM approval_votes
WHERE approval_request_id = :approval_request_id AND principal = :principal

-- insert_vote --
-- The vote's triggers decide (migration 0026): who may vote, and whether the votes now
-- approve or reject the request, in this transaction.
INSERT INTO approval_votes (approval_request_id, principal, vote, reason, decided_by)
VALUES (:approval_request_id, :principal, :vote, :reason, :decided_by)

-- vote_tally --
-- The policy a request carries and its votes so far (none: the request has no policy).
SELECT p.policy_name, p.approvals_required, p.denials_to_reject,
       (SELECT count(*) FROM approval_votes AS v
        WHERE v.approval_request_id = p.approval_request_id AND v.vote = 'approve') AS approvals,
       (SELECT count(*) FROM approval_votes AS v
        WHERE v.approval_request_id = p.approval_request_id AND v.vote = 'deny') AS denials
FROM approval_request_policies AS p
WHERE p.approval_request_id = :approval_request_id

-- select_requested_again --
-- The requests made again from :source_id (a dispatch, or an expired request), oldest first:
-- the other end of their `resubmitted_from` (the partial index of migration 0041).
SELECT approval_request_id
FROM approval_requests
WHERE resubmitted_from = :source_id
ORDER BY created_at_ms, approval_request_id
