-- PostgreSQL statements: the page transaction of transactional actions (`adapters/sql/page.py`).

-- page_effects_taken --
-- The page transaction (adapters/sql/page.py) binds each item's values as one JSON array per
-- statement (jsonb_to_recordset: one round trip for the page, the one list form SQLite binds
-- too). This one names the items whose effect already exists (a receipt, or a Run holding the
-- dispatch id as its idempotency key): the per-item path replays or refuses those.
SELECT k.dispatch_id
FROM jsonb_to_recordset(:page::jsonb) AS k (dispatch_id text, project_id text)
WHERE EXISTS (SELECT 1 FROM qinglong.approved_run_action_receipts AS r
              WHERE r.dispatch_id = k.dispatch_id)
   OR EXISTS (SELECT 1 FROM qinglong.runs AS x
              WHERE x.project_id = k.project_id AND x.idempotency_key = k.dispatch_id)

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

-- insert_page_runs --
INSERT INTO qinglong.runs (
    run_id, project_id, task_id, task_revision, executor_type, priority, task_name,
    task_snapshot_ref, input_ref, status, trigger_type, execution_origin, execution_owner,
    request_id, idempotency_key, accepted_at_ms, version, event_seq, created_at_ms, updated_at_ms
)
SELECT run_id, project_id, task_id, task_revision, executor_type, priority, task_name,
       task_snapshot_ref, input_ref, status, trigger_type, execution_origin, execution_owner,
       request_id, idempotency_key, accepted_at_ms, version, event_seq, created_at_ms,
       created_at_ms
FROM jsonb_to_recordset(:runs::jsonb) AS k (
    run_id text, project_id text, task_id text, task_revision bigint, executor_type text,
    priority integer, task_name text, task_snapshot_ref text, input_ref text, status text,
    trigger_type text, execution_origin text, execution_owner text, request_id text,
    idempotency_key text, accepted_at_ms bigint, version bigint, event_seq bigint,
    created_at_ms bigint)

-- insert_page_run_attempts --
INSERT INTO qinglong.run_attempts (run_id, attempt_no, status, created_at_ms)
SELECT run_id, 1, status, created_at_ms
FROM jsonb_to_recordset(:runs::jsonb) AS k (run_id text, status text, created_at_ms bigint)

-- insert_page_run_events --
INSERT INTO qinglong.run_events (run_id, seq, event_type, run_version, committed_at_ms)
SELECT run_id, event_seq, :event_type::text, version,
       (extract(epoch FROM transaction_timestamp()) * 1000)::bigint
FROM jsonb_to_recordset(:runs::jsonb) AS k (run_id text, event_seq bigint, version bigint)

-- insert_page_receipts --
INSERT INTO qinglong.approved_run_action_receipts (
    dispatch_id, schema_version, approval_request_id, project_id, action_type, action_digest,
    execution_attempt, execution_version, started_at_ms, idempotency_key, outcome, result_code,
    resource_type, resource_id, created_at_ms, evidence_digest
)
SELECT dispatch_id, schema_version, approval_request_id, project_id, action_type,
       action_digest, execution_attempt, execution_version, started_at_ms, idempotency_key,
       outcome, result_code, resource_type, resource_id, created_at_ms, evidence_digest
FROM jsonb_to_recordset(:receipts::jsonb) AS k (
    dispatch_id text, schema_version integer, approval_request_id text, project_id text,
    action_type text, action_digest text, execution_attempt integer, execution_version bigint,
    started_at_ms bigint, idempotency_key text, outcome text, result_code text,
    resource_type text, resource_id text, created_at_ms bigint, evidence_digest text)

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
