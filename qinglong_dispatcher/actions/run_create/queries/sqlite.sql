-- SQLite statements: the Run tables: Runs, attempts, RunEvents and receipts (`run.create`).

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
-- transaction (`actions/run_create/store.create`), one hop. The name stays so both files name the
-- same blocks; nothing runs this one.
SELECT NULL AS version WHERE 0
