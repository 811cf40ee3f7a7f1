-- PostgreSQL statements: the page transaction of transactional actions (`adapters/sql/page.py`).
-- Each binds the items' values as one JSON array (jsonb_to_recordset: one round trip for the
-- page); run.create's rows of a page are its own (`actions/run_create/queries/postgres.sql`).

-- start_page --
-- `start_row` for a page: every item's fence and binding in the update itself; RETURNING
-- names the rows that started, and any other item takes the per-item path.
UPDATE qinglong.approved_action_dispatch_executions AS e
SET status = 'executing', started_at_ms = :now_ms::bigint, eligible_at_ms = NULL,
    lease_expires_at_ms = greatest(e.lease_expires_at_ms, k.expires_at_ms),
    version = e.version + 1, updated_at_ms = :now_ms::bigint, lease_proof = k.proof
FROM jsonb_to_recordset(:page::jsonb) AS k (
         dispatch_id text, approval_request_id text, action_digest text, version bigint,
         owner text, token text, proof text, attempt integer, expires_at_ms bigint),
     qinglong.approved_action_dispatches AS d
WHERE e.dispatch_id = k.dispatch_id AND d.dispatch_id = e.dispatch_id
  AND d.approval_request_id = k.approval_request_id AND d.action_digest = k.action_digest
  AND e.version = k.version AND e.lease_owner = k.owner AND e.lease_token = k.token
  AND e.attempt = k.attempt AND e.status = 'leased' AND e.lease_expires_at_ms > :now_ms::bigint
RETURNING e.dispatch_id, e.version, e.lease_expires_at_ms

-- complete_page --
-- `complete_row` for the items this transaction started, with `create_run_fast`'s extra
-- condition (the project): RETURNING names the rows it completed.
UPDATE qinglong.approved_action_dispatch_executions AS e
SET status = 'succeeded', result_mutation_id = k.mutation_id,
    result_code = :result_code::text, completed_at_ms = :now_ms::bigint,
    version = e.version + 1, updated_at_ms = :now_ms::bigint, lease_proof = k.proof
FROM jsonb_to_recordset(:page::jsonb) AS k (
    dispatch_id text, project_id text, owner text, token text, proof text, attempt integer,
    version bigint, mutation_id text)
WHERE e.dispatch_id = k.dispatch_id AND e.status = 'executing'
  AND e.project_id = k.project_id AND e.lease_owner = k.owner AND e.lease_token = k.token
  AND e.attempt = k.attempt AND e.started_at_ms = :now_ms::bigint AND e.version = k.version
RETURNING e.dispatch_id, e.version

-- passage_rows --
-- A passage's page (`adapters/sql/passage.py`, migration 0043): the due waiting rows of one
-- transactional action type, without a target, the budget not spent, within their window
-- and under no freeze on the database's clock (as `lease_page` asks, a second short of the
-- window's end so the trigger, QLW01, never undoes the passage); locked, skipping (never
-- waiting for) the rows another replica holds: replicas pass disjoint pages.
SELECT {execution_columns},
       d.approval_request_id, d.action_type, d.action_ref, d.action_digest, d.approved_by,
       d.created_at_ms AS dispatch_created_at_ms, d.target,
       d.traceparent
FROM qinglong.approved_action_dispatch_executions AS e
JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
WHERE e.eligible_at_ms IS NOT NULL AND e.eligible_at_ms <= :now_ms::bigint
  AND e.status = 'pending' AND d.action_type = :action_type::text AND e.target IS NULL
  AND e.attempt < e.max_attempts
  AND CASE WHEN e.not_before_ms IS NULL AND e.not_after_ms IS NULL THEN true
           ELSE qinglong.db_now_ms() BETWEEN coalesce(e.not_before_ms, 0)
                AND coalesce(e.not_after_ms, 9007199254740991) - 1000 END
  AND NOT EXISTS (
      SELECT 1 FROM qinglong.freezes AS f
      WHERE f.ended_at_ms IS NULL AND f.until_ms > (SELECT qinglong.db_now_ms())
        AND f.from_ms <= (SELECT qinglong.db_now_ms())
        AND (f.action_type IS NULL OR f.action_type = d.action_type)
        AND (f.project_id IS NULL OR f.project_id = d.project_id)
        AND f.target_prefix IS NULL  -- a prefix covers targets only, and these rows have none
        AND NOT EXISTS (SELECT 1 FROM qinglong.freeze_lifts AS l
                        WHERE l.dispatch_id = e.dispatch_id AND l.freeze_id = f.freeze_id))
ORDER BY e.eligible_at_ms, e.dispatch_id
LIMIT :limit::bigint
FOR UPDATE OF e SKIP LOCKED

-- pass_rows --
-- The passage's one write of each row, `pending → succeeded` (the trigger keeps the proof's
-- digest and writes the one ledger line): before the effects, whose Run and receipt present
-- the proof the row holds now; the receipt is checked at commit (migration 0043). Each row
-- is one probe of the primary key (`page_plans`); its status is asked inside CASE, where no
-- index can serve it, as SQLite's unary + keeps its index out.
UPDATE qinglong.approved_action_dispatch_executions AS e
SET status = 'succeeded', version = e.version + 1, attempt = e.attempt + 1,
    lease_owner = :owner::text, lease_token = k.token, lease_proof = k.proof,
    started_at_ms = :now_ms::bigint, completed_at_ms = :now_ms::bigint,
    result_mutation_id = k.mutation_id, result_code = :result_code::text,
    eligible_at_ms = NULL, retry_at_ms = NULL, updated_at_ms = :now_ms::bigint,
    passage_receipt = e.dispatch_id
FROM jsonb_to_recordset(:page::jsonb) AS k (dispatch_id text, version bigint, token text,
                                            proof text, mutation_id text)
WHERE e.dispatch_id = k.dispatch_id AND e.version = k.version
  AND CASE WHEN e.status = 'pending' THEN true ELSE false END
RETURNING e.dispatch_id
