-- SQLite statements: the Run tables: Runs, attempts, RunEvents and receipts (`run.create`),
-- one at a time (`store.create`) and a page at a time (`store.create_page`).

-- select_receipt --
SELECT dispatch_id, schema_version, approval_request_id, project_id, action_type,
       action_digest, execution_attempt, execution_version, started_at_ms, idempotency_key,
       outcome, result_code, resource_type, resource_id, created_at_ms, evidence_digest
FROM approved_run_action_receipts
WHERE dispatch_id = :dispatch_id

-- run_columns --
run_id, project_id, task_id, task_revision, executor_type, priority, task_name,
task_snapshot_ref, input_ref, status, trigger_type, execution_origin, execution_owner,
request_id, idempotency_key, accepted_at_ms, version, event_seq, created_at_ms

-- count_runs --
-- The `runs` figure of `status`.
SELECT count(*) AS n FROM runs

-- select_run --
SELECT {run_columns} FROM runs WHERE run_id = :run_id

-- select_run_by_key --
SELECT {run_columns} FROM runs WHERE project_id = :project_id AND idempotency_key = :idempotency_key

-- insert_run --
INSERT INTO runs (
    run_id, project_id, task_id, task_revision, executor_type, priority, task_name,
    task_snapshot_ref, input_ref, status, trigger_type, execution_origin, execution_owner,
    request_id, idempotency_key, accepted_at_ms, version, event_seq, created_at_ms, updated_at_ms
) VALUES (
    :run_id, :project_id, :task_id, :task_revision, :executor_type, :priority, :task_name,
    :task_snapshot_ref, :input_ref, :status, :trigger_type, :execution_origin, :execution_owner,
    :request_id, :idempotency_key, :accepted_at_ms, :version, :event_seq, :created_at_ms,
    :created_at_ms
)

-- insert_run_attempt --
INSERT INTO run_attempts (run_id, attempt_no, status, created_at_ms)
VALUES (:run_id, 1, :status, :created_at_ms)

-- insert_run_event --
INSERT INTO run_events (run_id, seq, event_type, run_version, committed_at_ms)
VALUES (:run_id, :seq, :event_type, :run_version,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))

-- insert_receipt --
INSERT INTO approved_run_action_receipts (
    dispatch_id, schema_version, approval_request_id, project_id, action_type, action_digest,
    execution_attempt, execution_version, started_at_ms, idempotency_key, outcome, result_code,
    resource_type, resource_id, created_at_ms, evidence_digest
) VALUES (
    :dispatch_id, :schema_version, :approval_request_id, :project_id, :action_type,
    :action_digest, :execution_attempt, :execution_version, :started_at_ms, :idempotency_key,
    :outcome, :result_code, :resource_type, :resource_id, :created_at_ms, :evidence_digest
)

-- create_run_fast --
-- PostgreSQL's one-statement run.create (a data-modifying CTE saves it round trips). SQLite
-- has no data-modifying CTE and no round trip to save: its happy path is the shared
-- transaction (`actions/run_create/store.create`), one hop. The name stays so both files name
-- the same blocks; nothing runs this one.
SELECT NULL AS version WHERE 0

-- page_effects_taken --
-- A page's run.create (`store.effects_taken`, `store.create_page`, run by the page transaction
-- `adapters/sql/page.py`) is a handful of statements. This read takes the page as one JSON
-- array and names the items whose effect already exists (a receipt, or a Run holding the
-- dispatch id as its idempotency key): the per-item path replays or refuses those.
SELECT k.value ->> 'dispatch_id' AS dispatch_id
FROM json_each(:page) AS k
WHERE EXISTS (SELECT 1 FROM approved_run_action_receipts AS r
              WHERE r.dispatch_id = k.value ->> 'dispatch_id')
   OR EXISTS (SELECT 1 FROM runs AS x
              WHERE x.project_id = k.value ->> 'project_id'
                AND x.idempotency_key = k.value ->> 'dispatch_id')

-- insert_page_runs --
-- A page's Runs, each with its first attempt and its created event (`store.create_page`,
-- `Query.run_rows`): three prepared statements, each stepped once per row, each row's values
-- bound as they are (extracting them from a JSON array in SQL cost more than the insert).
INSERT INTO runs (
    run_id, project_id, task_id, task_revision, executor_type, priority, task_name,
    task_snapshot_ref, input_ref, status, trigger_type, execution_origin, execution_owner,
    request_id, idempotency_key, accepted_at_ms, version, event_seq, created_at_ms, updated_at_ms
) VALUES (
    :run_id, :project_id, :task_id, :task_revision, :executor_type, :priority, :task_name,
    :task_snapshot_ref, :input_ref, :status, :trigger_type, :execution_origin,
    :execution_owner, :request_id, :idempotency_key, :accepted_at_ms, :version, :event_seq,
    :created_at_ms, :created_at_ms
);
INSERT INTO run_attempts (run_id, attempt_no, status, created_at_ms)
VALUES (:run_id, 1, :status, :created_at_ms);
INSERT INTO run_events (run_id, seq, event_type, run_version, committed_at_ms)
VALUES (:run_id, :event_seq, :event_type, :version,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))

-- insert_page_receipts --
INSERT INTO approved_run_action_receipts (
    dispatch_id, schema_version, approval_request_id, project_id, action_type, action_digest,
    execution_attempt, execution_version, started_at_ms, idempotency_key, outcome, result_code,
    resource_type, resource_id, created_at_ms, evidence_digest
) VALUES (
    :dispatch_id, :schema_version, :approval_request_id, :project_id, :action_type,
    :action_digest, :execution_attempt, :execution_version, :started_at_ms, :idempotency_key,
    :outcome, :result_code, :resource_type, :resource_id, :created_at_ms, :evidence_digest
)

-- select_run_ids_by_dispatch --
-- The Run holding each dispatch id (a JSON array) as its idempotency key: `submit --json`.
-- Only dispatches and Runs, which every login that may submit can read.
SELECT d.dispatch_id, r.run_id
FROM json_each(:dispatch_ids) AS k
CROSS JOIN approved_action_dispatches AS d ON d.dispatch_id = k.value
JOIN runs AS r ON r.project_id = d.project_id AND r.idempotency_key = d.dispatch_id
