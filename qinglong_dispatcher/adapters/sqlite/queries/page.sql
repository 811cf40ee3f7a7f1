-- SQLite statements: the page transaction of transactional actions (`adapters/sql/page.py`).
-- Each binds the items' values as one JSON array, so a page of 64 is a handful of statements;
-- run.create's rows of a page are its own (`actions/run_create/queries/sqlite.sql`).

-- start_page --
-- `start_row` for a page: every item's fence and binding in the update itself; RETURNING
-- names the rows that started, and any other item takes the per-item path.
UPDATE approved_action_dispatch_executions AS e
SET status = 'executing', started_at_ms = :now_ms, eligible_at_ms = NULL,
    lease_expires_at_ms = max(e.lease_expires_at_ms, k.value ->> 'expires_at_ms'),
    version = e.version + 1, updated_at_ms = :now_ms
FROM json_each(:page) AS k, approved_action_dispatches AS d
WHERE e.dispatch_id = k.value ->> 'dispatch_id' AND d.dispatch_id = e.dispatch_id
  AND d.approval_request_id = k.value ->> 'approval_request_id'
  AND d.action_digest = k.value ->> 'action_digest'
  AND e.version = k.value ->> 'version' AND e.lease_owner = k.value ->> 'owner'
  AND e.lease_token = k.value ->> 'token' AND e.attempt = k.value ->> 'attempt'
  AND +e.status = 'leased' AND e.lease_expires_at_ms > :now_ms
RETURNING dispatch_id, version, lease_expires_at_ms

-- complete_page --
-- `complete_row` for the items this transaction started, with `create_run_fast`'s extra
-- condition (the project): RETURNING names the rows it completed.
UPDATE approved_action_dispatch_executions AS e
SET status = 'succeeded', result_mutation_id = k.value ->> 'mutation_id',
    result_code = :result_code, completed_at_ms = :now_ms, version = e.version + 1,
    updated_at_ms = :now_ms
FROM json_each(:page) AS k
WHERE e.dispatch_id = k.value ->> 'dispatch_id' AND +e.status = 'executing'
  AND e.project_id = k.value ->> 'project_id' AND e.lease_owner = k.value ->> 'owner'
  AND e.lease_token = k.value ->> 'token' AND e.attempt = k.value ->> 'attempt'
  AND e.started_at_ms = :now_ms AND e.version = k.value ->> 'version'
RETURNING dispatch_id, version

-- passage_rows --
-- A passage's page (`adapters/sql/passage.py`, migration 0043): the due waiting rows of one
-- transactional action type, without a target, the budget not spent, within their window
-- and under no freeze on the database's clock (as `lease_page` asks, a second short of the
-- window's end). BEGIN IMMEDIATE already holds the file's one write lock: the plain read is
-- the locked one.
SELECT {execution_columns},
       d.approval_request_id, d.action_type, d.action_ref, d.action_digest, d.approved_by,
       d.created_at_ms AS dispatch_created_at_ms, d.target,
       d.traceparent
FROM approved_action_dispatch_executions AS e
JOIN approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
WHERE e.eligible_at_ms IS NOT NULL AND e.eligible_at_ms <= :now_ms
  -- The unary + keeps the planner on the due index, in its order (`page_plans`).
  AND +e.status = 'pending' AND d.action_type = :action_type AND e.target IS NULL
  AND e.attempt < e.max_attempts
  AND CASE WHEN e.not_before_ms IS NULL AND e.not_after_ms IS NULL THEN true
           ELSE CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
                BETWEEN coalesce(e.not_before_ms, 0)
                AND coalesce(e.not_after_ms, 9007199254740991) - 1000 END
  AND NOT EXISTS (
      SELECT 1 FROM freezes AS f
      WHERE f.ended_at_ms IS NULL
        AND f.until_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
        AND f.from_ms <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
        AND (f.action_type IS NULL OR f.action_type = d.action_type)
        AND (f.project_id IS NULL OR f.project_id = d.project_id)
        AND f.target_prefix IS NULL  -- a prefix covers targets only, and these rows have none
        AND NOT EXISTS (SELECT 1 FROM freeze_lifts AS l
                        WHERE l.dispatch_id = e.dispatch_id AND l.freeze_id = f.freeze_id))
ORDER BY e.eligible_at_ms, e.dispatch_id
LIMIT :limit

-- pass_rows --
-- The passage's one write of each row, `pending → succeeded` (the trigger writes the one
-- ledger line): before the effects, as on PostgreSQL, so the Run's and the receipt's guards
-- admit them as a started row's. The row names its receipt under a foreign key deferred to
-- the commit: a passage without its receipt does not commit (migration 0043).
UPDATE approved_action_dispatch_executions AS e
SET status = 'succeeded', version = e.version + 1, attempt = e.attempt + 1,
    lease_owner = :owner, lease_token = k.value ->> 'token',
    started_at_ms = :now_ms, completed_at_ms = :now_ms,
    result_mutation_id = k.value ->> 'mutation_id', result_code = :result_code,
    eligible_at_ms = NULL, retry_at_ms = NULL, updated_at_ms = :now_ms,
    passage_receipt = e.dispatch_id
FROM json_each(:page) AS k
WHERE e.dispatch_id = k.value ->> 'dispatch_id' AND e.version = k.value ->> 'version'
  AND +e.status = 'pending'
RETURNING dispatch_id
