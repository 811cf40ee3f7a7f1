-- SQLite statements: the page transaction of transactional actions (`adapters/sql/page.py`).

-- page_effects_taken --
-- The page transaction (adapters/sql/page.py) binds each item's values as one JSON array per
-- statement, so a page of 64 is a handful of statements. This one names the items whose
-- effect already exists (a receipt, or a Run holding the dispatch id as its idempotency key):
-- the per-item path replays or refuses those.
SELECT k.value ->> 'dispatch_id' AS dispatch_id
FROM json_each(:page) AS k
WHERE EXISTS (SELECT 1 FROM approved_run_action_receipts AS r
              WHERE r.dispatch_id = k.value ->> 'dispatch_id')
   OR EXISTS (SELECT 1 FROM runs AS x
              WHERE x.project_id = k.value ->> 'project_id'
                AND x.idempotency_key = k.value ->> 'dispatch_id')

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

-- insert_page_runs --
INSERT INTO runs (
    run_id, project_id, task_id, task_revision, executor_type, priority, task_name,
    task_snapshot_ref, input_ref, status, trigger_type, execution_origin, execution_owner,
    request_id, idempotency_key, accepted_at_ms, version, event_seq, created_at_ms, updated_at_ms
)
SELECT k.value ->> 'run_id', k.value ->> 'project_id', k.value ->> 'task_id',
       k.value ->> 'task_revision', k.value ->> 'executor_type', k.value ->> 'priority',
       k.value ->> 'task_name', k.value ->> 'task_snapshot_ref', k.value ->> 'input_ref',
       k.value ->> 'status', k.value ->> 'trigger_type', k.value ->> 'execution_origin',
       k.value ->> 'execution_owner', k.value ->> 'request_id', k.value ->> 'idempotency_key',
       k.value ->> 'accepted_at_ms', k.value ->> 'version', k.value ->> 'event_seq',
       k.value ->> 'created_at_ms', k.value ->> 'created_at_ms'
FROM json_each(:runs) AS k

-- insert_page_run_attempts --
INSERT INTO run_attempts (run_id, attempt_no, status, created_at_ms)
SELECT k.value ->> 'run_id', 1, k.value ->> 'status', k.value ->> 'created_at_ms'
FROM json_each(:runs) AS k

-- insert_page_run_events --
INSERT INTO run_events (run_id, seq, event_type, run_version, committed_at_ms)
SELECT k.value ->> 'run_id', k.value ->> 'event_seq', :event_type, k.value ->> 'version',
       CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
FROM json_each(:runs) AS k

-- insert_page_receipts --
INSERT INTO approved_run_action_receipts (
    dispatch_id, schema_version, approval_request_id, project_id, action_type, action_digest,
    execution_attempt, execution_version, started_at_ms, idempotency_key, outcome, result_code,
    resource_type, resource_id, created_at_ms, evidence_digest
)
SELECT k.value ->> 'dispatch_id', k.value ->> 'schema_version',
       k.value ->> 'approval_request_id', k.value ->> 'project_id', k.value ->> 'action_type',
       k.value ->> 'action_digest', k.value ->> 'execution_attempt',
       k.value ->> 'execution_version', k.value ->> 'started_at_ms',
       k.value ->> 'idempotency_key', k.value ->> 'outcome', k.value ->> 'result_code',
       k.value ->> 'resource_type', k.value ->> 'resource_id', k.value ->> 'created_at_ms',
       k.value ->> 'evidence_digest'
FROM json_each(:receipts) AS k

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
