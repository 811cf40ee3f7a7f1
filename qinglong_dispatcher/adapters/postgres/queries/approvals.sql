-- PostgreSQL statements: plans, approvals and the dispatch and execution rows a consume creates.

-- insert_plan --
INSERT INTO qinglong.action_plans (project_id, action_ref, action_type, plan_json, plan_digest,
                                   created_at_ms, plan_key_id, plan_algorithm, plan_sealed,
                                   plan_schema_version, target)
VALUES (:project_id, :action_ref, :action_type, :plan_json, :plan_digest, :now_ms, :plan_key_id,
        :plan_algorithm, :plan_sealed, :plan_schema_version, :target)

-- select_plan --
SELECT project_id, action_ref, action_type, plan_json, plan_digest, plan_key_id,
       plan_algorithm, plan_sealed, plan_schema_version
FROM qinglong.action_plans
WHERE project_id = :project_id AND action_ref = :action_ref

-- select_plans --
-- One read for a page of dispatches: the keys arrive as two JSON arrays of equal length (the
-- one list form SQLite binds too), zipped element by element. The lateral LIMIT 1 (the key
-- is the primary key) keeps each key one primary-key probe: the planner guesses 100 keys from
-- a JSON array and would otherwise hash-join over a full scan of a table of some 10k plans.
SELECT p.project_id, p.action_ref, p.action_type, p.plan_json, p.plan_digest, p.plan_key_id,
       p.plan_algorithm, p.plan_sealed, p.plan_schema_version
FROM ROWS FROM (jsonb_array_elements_text(:project_ids::jsonb),
                jsonb_array_elements_text(:action_refs::jsonb)) AS k (project_id, action_ref)
CROSS JOIN LATERAL (
    SELECT x.project_id, x.action_ref, x.action_type, x.plan_json, x.plan_digest, x.plan_key_id,
           x.plan_algorithm, x.plan_sealed, x.plan_schema_version
    FROM qinglong.action_plans AS x
    WHERE x.project_id = k.project_id AND x.action_ref = k.action_ref
    LIMIT 1
) AS p

-- insert_approval --
-- Every principal column is the acting principal (qinglong.acting_principal(): the login, or
-- the principal role the API became), written by the server:
-- the approval trigger refuses any other name, and applies the approver and self-approval
-- rules to `approve_approval` (SQLSTATE QLA01/QLA02/QLA03, typed in `database.translate`).
INSERT INTO qinglong.approval_requests (
    approval_request_id, project_id, action_type, action_ref, action_digest, status, version,
    requested_by, decided_by, requested_principal, expires_at_ms, created_at_ms, updated_at_ms,
    traceparent, resubmitted_from, not_before_ms, window_for_ms
) VALUES (
    :approval_request_id, :project_id, :action_type, :action_ref, :action_digest, 'pending', 1,
    :requested_by, NULL, qinglong.acting_principal(), :expires_at_ms, :now_ms::bigint, :now_ms::bigint,
    :traceparent::text, :resubmitted_from::text, :not_before_ms::bigint, :window_for_ms::bigint
)

-- select_approval --
SELECT approval_request_id, project_id, action_type, action_ref, action_digest, status, version,
       requested_by, decided_by, requested_principal, decided_principal, consumed_principal,
       expires_at_ms, created_at_ms, updated_at_ms, traceparent, resubmitted_from,
       not_before_ms, window_for_ms
FROM qinglong.approval_requests
WHERE approval_request_id = :approval_request_id

-- approve_approval --
UPDATE qinglong.approval_requests
SET status = 'approved', version = 2, decided_by = :decided_by,
    decided_principal = qinglong.acting_principal(), updated_at_ms = :now_ms::bigint,
    decision_comment = :comment
WHERE approval_request_id = :approval_request_id AND status = 'pending' AND version = 1
  AND expires_at_ms > :now_ms::bigint
RETURNING approval_request_id, requested_principal

-- approve_approvals --
-- A submit's whole batch in one statement (the ids as one JSON array), each row judged by the
-- triggers as for one request; the ids it did not return the caller explains. The acting
-- principal is a sub-select, asked once for the statement rather than once per row (the
-- approval trigger still checks it on each). The batch's rows are read by their key: inside
-- CASE no index serves the status, which would read every request that waits.
UPDATE qinglong.approval_requests
SET status = 'approved', version = 2, decided_by = :decided_by,
    decided_principal = (SELECT qinglong.acting_principal()), updated_at_ms = :now_ms::bigint
WHERE approval_request_id = ANY (ARRAY(SELECT jsonb_array_elements_text(:ids::jsonb)))
  AND CASE WHEN status = 'pending' AND version = 1 THEN expires_at_ms > :now_ms::bigint
           ELSE false END
RETURNING approval_request_id, requested_principal

-- reject_approval --
-- No expiry condition: withdrawing authority is always allowed while pending.
UPDATE qinglong.approval_requests
SET status = 'rejected', version = 2, decided_by = :decided_by,
    decided_principal = qinglong.acting_principal(), updated_at_ms = :now_ms::bigint,
    decision_comment = :comment
WHERE approval_request_id = :approval_request_id AND status = 'pending' AND version = 1
RETURNING approval_request_id, requested_principal

-- consume_approval --
UPDATE qinglong.approval_requests
SET status = 'consumed', version = 3, consumed_at_ms = :now_ms::bigint,
    consumed_principal = qinglong.acting_principal(), updated_at_ms = :now_ms::bigint
WHERE approval_request_id = :approval_request_id AND status = 'approved' AND version = 2
  AND expires_at_ms > :now_ms::bigint
RETURNING project_id, action_type, action_ref, action_digest, decided_by

-- consume_approvals --
-- `consume_approval` for a submit's whole batch, as `approve_approvals` (its rows by key).
UPDATE qinglong.approval_requests
SET status = 'consumed', version = 3, consumed_at_ms = :now_ms::bigint,
    consumed_principal = (SELECT qinglong.acting_principal()), updated_at_ms = :now_ms::bigint
WHERE approval_request_id = ANY (ARRAY(SELECT jsonb_array_elements_text(:ids::jsonb)))
  AND CASE WHEN status = 'approved' AND version = 2 THEN expires_at_ms > :now_ms::bigint
           ELSE false END
RETURNING approval_request_id, project_id, action_type, action_ref, action_digest, decided_by

-- insert_dispatch --
INSERT INTO qinglong.approved_action_dispatches (
    dispatch_id, approval_request_id, project_id, action_type, action_ref, action_digest,
    approved_by, created_at_ms
) VALUES (
    :dispatch_id, :approval_request_id, :project_id, :action_type, :action_ref, :action_digest,
    :approved_by, :now_ms
)

-- insert_execution --
INSERT INTO qinglong.approved_action_dispatch_executions (
    dispatch_id, project_id, status, version, attempt, max_attempts, eligible_at_ms,
    created_at_ms, updated_at_ms
) VALUES (
    :dispatch_id, :project_id, 'pending', 0, 0, :max_attempts, :now_ms::bigint,
    :now_ms::bigint, :now_ms::bigint
)

-- submit_one --
-- A submit of one plan in one round trip: migration 0018's invoker function runs the shared
-- submit's six statements as the caller (`fast_paths.submit_fast`); the dispatch id back means
-- all six committed.
SELECT qinglong.submit_one(
    :project_id, :action_ref, :action_type, :plan_json, :plan_digest, :plan_key_id,
    :plan_algorithm, :plan_sealed, :plan_schema_version::integer, :approval_request_id,
    :action_digest, :requested_by, :expires_at_ms::bigint, :decided_by, :dispatch_id,
    :max_attempts::integer, :now_ms::bigint
) AS dispatch_id

-- list_waiting_approvals --
-- `approval list`: pending requests whose lifetime has not run out on the caller's clock nor
-- on the database's, newest first, a keyset page after (:after_created_at_ms,
-- :after_approval_request_id) over the partial index of migration 0014; a NULL filter
-- matches everything (:from_ms inclusive, :to_ms exclusive, on creation). Each comes with
-- its plan row, which the store previews (a sealed one
-- opened first); no plan value leaves the store.
SELECT a.approval_request_id, a.project_id, a.action_type, a.action_ref, a.action_digest,
       a.requested_by, a.requested_principal, a.created_at_ms, a.expires_at_ms,
       a.not_before_ms, a.window_for_ms,
       a.status, a.decided_by, a.decided_principal, NULL::text AS decision_code,
       NULL::bigint AS decided_at_ms, a.consumed_at_ms, NULL::text AS reasons_json,
       p.plan_json, p.plan_digest, p.plan_key_id, p.plan_algorithm, p.plan_sealed,
       p.plan_schema_version
FROM qinglong.approval_requests AS a
LEFT JOIN qinglong.action_plans AS p
  ON p.project_id = a.project_id AND p.action_ref = a.action_ref
WHERE a.status = 'pending'
  AND (a.created_at_ms, a.approval_request_id)
      < (:after_created_at_ms::bigint, :after_approval_request_id::text)
  AND a.expires_at_ms > :now_ms::bigint
  AND COALESCE(a.db_expires_at_ms, a.expires_at_ms)
      > (extract(epoch FROM clock_timestamp()) * 1000)::bigint
  AND (:project_id::text IS NULL OR a.project_id = :project_id::text)
  AND (:action_type::text IS NULL OR a.action_type = :action_type::text)
  AND (:from_ms::bigint IS NULL OR a.created_at_ms >= :from_ms::bigint)
  AND (:to_ms::bigint IS NULL OR a.created_at_ms < :to_ms::bigint)
ORDER BY a.created_at_ms DESC, a.approval_request_id DESC
LIMIT :limit::bigint

-- list_approvals --
-- `approval list --status S` for any S but the default `pending` (waiting): requests of the
-- stored status :status, newest first, a keyset page after
-- (:after_created_at_ms, :after_approval_request_id) in the same order as
-- `list_waiting_approvals`, so a cursor means the same position under every status. Each
-- decided row says who decided and how, with the code the audit trigger writes on its
-- `approval.<status>` row (`by_requester`, `by_other`, `db_clock`), and when, and why: its
-- deny votes' reasons and its API decisions' reason and comment, through the definer
-- function of migration 0036 (a viewer may read neither table). One status's page walks the
-- index of migration 0036.
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
           SELECT json_agg(json_build_object(
                      'decision', r.decision, 'principal', r.principal, 'reason', r.reason,
                      'comment', r.comment) ORDER BY r.n)::text
           FROM qinglong.decision_reasons(a.approval_request_id) WITH ORDINALITY AS r (
               decision, principal, reason, comment, n)
       ) END AS reasons_json,
       p.plan_json, p.plan_digest, p.plan_key_id, p.plan_algorithm, p.plan_sealed,
       p.plan_schema_version
FROM qinglong.approval_requests AS a
LEFT JOIN qinglong.action_plans AS p
  ON p.project_id = a.project_id AND p.action_ref = a.action_ref
WHERE a.status = :status::text
  AND (a.created_at_ms, a.approval_request_id)
      < (:after_created_at_ms::bigint, :after_approval_request_id::text)
  AND (:project_id::text IS NULL OR a.project_id = :project_id::text)
  AND (:action_type::text IS NULL OR a.action_type = :action_type::text)
  AND (:from_ms::bigint IS NULL OR a.created_at_ms >= :from_ms::bigint)
  AND (:to_ms::bigint IS NULL OR a.created_at_ms < :to_ms::bigint)
ORDER BY a.created_at_ms DESC, a.approval_request_id DESC
LIMIT :limit::bigint

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
           SELECT json_agg(json_build_object(
                      'decision', r.decision, 'principal', r.principal, 'reason', r.reason,
                      'comment', r.comment) ORDER BY r.n)::text
           FROM qinglong.decision_reasons(a.approval_request_id) WITH ORDINALITY AS r (
               decision, principal, reason, comment, n)
       ) END AS reasons_json,
       p.plan_json, p.plan_digest, p.plan_key_id, p.plan_algorithm, p.plan_sealed,
       p.plan_schema_version
FROM qinglong.approval_requests AS a
LEFT JOIN qinglong.action_plans AS p
  ON p.project_id = a.project_id AND p.action_ref = a.action_ref
WHERE true
  AND (a.created_at_ms, a.approval_request_id)
      < (:after_created_at_ms::bigint, :after_approval_request_id::text)
  AND (:project_id::text IS NULL OR a.project_id = :project_id::text)
  AND (:action_type::text IS NULL OR a.action_type = :action_type::text)
  AND (:from_ms::bigint IS NULL OR a.created_at_ms >= :from_ms::bigint)
  AND (:to_ms::bigint IS NULL OR a.created_at_ms < :to_ms::bigint)
ORDER BY a.created_at_ms DESC, a.approval_request_id DESC
LIMIT :limit::bigint

-- expire_approvals --
-- The reconcile pass's sweep: at most :limit pending requests whose lifetime ran out on the
-- database's clock become `expired` (oldest first, skipping rows another transaction
-- holds). The approval trigger (migration 0024) holds the same clock and admits only the
-- runtime; the audit trigger writes each `approval.expired`.
UPDATE qinglong.approval_requests
SET status = 'expired', version = 2, decided_by = :decided_by,
    decided_principal = (SELECT qinglong.acting_principal()), updated_at_ms = :now_ms::bigint
WHERE approval_request_id IN (
    SELECT approval_request_id FROM qinglong.approval_requests
    WHERE status = 'pending'
      AND COALESCE(db_expires_at_ms, expires_at_ms) <= qinglong.db_now_ms()
    ORDER BY created_at_ms, approval_request_id
    LIMIT :limit::bigint
    FOR UPDATE SKIP LOCKED
)
RETURNING approval_request_id, project_id, action_type

-- own_vote --
-- The acting principal's vote on a request, if it cast one (migration 0026).
SELECT vote FROM qinglong.approval_votes
WHERE approval_request_id = :approval_request_id AND principal = qinglong.acting_principal()

-- insert_vote --
-- The vote's triggers decide (migration 0026): who may vote, and whether the votes now
-- approve or reject the request, in this transaction.
INSERT INTO qinglong.approval_votes (approval_request_id, principal, vote, reason, decided_by)
VALUES (:approval_request_id, qinglong.acting_principal(), :vote, :reason, :decided_by)

-- vote_tally --
-- The policy a request carries and its votes so far (none: the request has no policy).
SELECT p.policy_name, p.approvals_required, p.denials_to_reject,
       (SELECT count(*) FROM qinglong.approval_votes AS v
        WHERE v.approval_request_id = p.approval_request_id AND v.vote = 'approve') AS approvals,
       (SELECT count(*) FROM qinglong.approval_votes AS v
        WHERE v.approval_request_id = p.approval_request_id AND v.vote = 'deny') AS denials
FROM qinglong.approval_request_policies AS p
WHERE p.approval_request_id = :approval_request_id

-- select_requested_again --
-- The requests made again from :source_id (a dispatch, or an expired request), oldest first:
-- the other end of their `resubmitted_from` (the partial index of migration 0041).
SELECT approval_request_id
FROM qinglong.approval_requests
WHERE resubmitted_from = :source_id
ORDER BY created_at_ms, approval_request_id
