-- PostgreSQL statements: the Run tables: Runs, attempts, RunEvents and receipts (`run.create`),
-- one at a time (`store.create`, or `create_run_fast` in one statement) and a page at a time
-- (`store.create_page`).

-- select_receipt --
SELECT dispatch_id, schema_version, approval_request_id, project_id, action_type,
       action_digest, execution_attempt, execution_version, started_at_ms, idempotency_key,
       outcome, result_code, resource_type, resource_id, created_at_ms, evidence_digest
FROM qinglong.approved_run_action_receipts
WHERE dispatch_id = :dispatch_id

-- run_columns --
run_id, project_id, task_id, task_revision, executor_type, priority, task_name,
task_snapshot_ref, input_ref, status, trigger_type, execution_origin, execution_owner,
request_id, idempotency_key, accepted_at_ms, version, event_seq, created_at_ms

-- count_runs --
-- The `runs` figure of `status`.
SELECT count(*) AS n FROM qinglong.runs

-- select_run --
SELECT {run_columns} FROM qinglong.runs WHERE run_id = :run_id

-- select_run_by_key --
SELECT {run_columns} FROM qinglong.runs
WHERE project_id = :project_id AND idempotency_key = :idempotency_key

-- insert_run --
-- With the holder's proof, which the trigger checks and clears (never stored).
INSERT INTO qinglong.runs (
    run_id, project_id, task_id, task_revision, executor_type, priority, task_name,
    task_snapshot_ref, input_ref, status, trigger_type, execution_origin, execution_owner,
    request_id, idempotency_key, accepted_at_ms, version, event_seq, created_at_ms, updated_at_ms,
    lease_proof
) VALUES (
    :run_id, :project_id, :task_id, :task_revision, :executor_type, :priority, :task_name,
    :task_snapshot_ref, :input_ref, :status, :trigger_type, :execution_origin, :execution_owner,
    :request_id, :idempotency_key, :accepted_at_ms, :version, :event_seq, :created_at_ms::bigint,
    :created_at_ms::bigint, :proof::text
)

-- insert_run_attempt --
INSERT INTO qinglong.run_attempts (run_id, attempt_no, status, created_at_ms)
VALUES (:run_id, 1, :status, :created_at_ms)

-- insert_run_event --
INSERT INTO qinglong.run_events (run_id, seq, event_type, run_version, committed_at_ms)
VALUES (:run_id, :seq, :event_type, :run_version,
        (extract(epoch FROM transaction_timestamp()) * 1000)::bigint)

-- insert_receipt --
INSERT INTO qinglong.approved_run_action_receipts (
    dispatch_id, schema_version, approval_request_id, project_id, action_type, action_digest,
    execution_attempt, execution_version, started_at_ms, idempotency_key, outcome, result_code,
    resource_type, resource_id, created_at_ms, evidence_digest, lease_proof
) VALUES (
    :dispatch_id, :schema_version, :approval_request_id, :project_id, :action_type,
    :action_digest, :execution_attempt, :execution_version, :started_at_ms, :idempotency_key,
    :outcome, :result_code, :resource_type, :resource_id, :created_at_ms, :evidence_digest,
    :proof::text
)

-- create_run_fast --
-- The run.create effect's happy path as ONE statement: Run, attempt, RunEvent, receipt and
-- completion (the trigger writes its ledger line). The completion itself is the fence (the shared
-- transaction's conditions: executing, project, owner, token, attempt, started_at, the
-- version the receipt binds; no receipt, no Run holding the key) and takes the row lock:
-- a concurrent change makes READ COMMITTED re-check these conditions on the newest row
-- version. Every insert reads from it, so a refused fence writes nothing. No row back: the
-- shared transaction decides.
WITH done AS (
    UPDATE qinglong.approved_action_dispatch_executions AS e
    SET status = 'succeeded', result_mutation_id = :mutation_id::text,
        result_code = :result_code::text, completed_at_ms = :now_ms::bigint,
        version = e.version + 1, updated_at_ms = :now_ms::bigint, lease_proof = :proof::text
    WHERE e.dispatch_id = :dispatch_id::text AND e.status = 'executing'
      AND e.project_id = :project_id::text AND e.lease_owner = :owner::text
      AND e.lease_token = :token::text AND e.attempt = :attempt::integer
      AND e.started_at_ms = :started_at_ms::bigint AND e.version = :version::bigint
      AND NOT EXISTS (
          SELECT 1 FROM qinglong.approved_run_action_receipts AS r
          WHERE r.dispatch_id = :dispatch_id::text)
      AND NOT EXISTS (
          SELECT 1 FROM qinglong.runs AS x
          WHERE x.project_id = :project_id::text AND x.idempotency_key = :dispatch_id::text)
    RETURNING e.dispatch_id, e.version
), run AS (
    INSERT INTO qinglong.runs (
        run_id, project_id, task_id, task_revision, executor_type, priority, task_name,
        task_snapshot_ref, input_ref, status, trigger_type, execution_origin, execution_owner,
        request_id, idempotency_key, accepted_at_ms, version, event_seq, created_at_ms,
        updated_at_ms, lease_proof
    )
    SELECT :run_id::text, :project_id::text, :task_id::text, :task_revision::bigint,
           :executor_type::text, :priority::integer, :task_name::text,
           :task_snapshot_ref::text, :input_ref::text, :run_status::text, :trigger_type::text,
           :execution_origin::text, :execution_owner::text, :request_id::text,
           :dispatch_id::text, :accepted_at_ms::bigint, :run_version::bigint,
           :event_seq::bigint, :created_at_ms::bigint, :created_at_ms::bigint, :proof::text
    FROM done
    RETURNING run_id
), attempt AS (
    INSERT INTO qinglong.run_attempts (run_id, attempt_no, status, created_at_ms)
    SELECT run_id, 1, :run_status::text, :created_at_ms::bigint FROM run
), run_event AS (
    INSERT INTO qinglong.run_events (run_id, seq, event_type, run_version, committed_at_ms)
    SELECT run_id, :event_seq::bigint, :event_type::text, :run_version::bigint,
           (extract(epoch FROM transaction_timestamp()) * 1000)::bigint
    FROM run
), receipt AS (
    INSERT INTO qinglong.approved_run_action_receipts (
        dispatch_id, schema_version, approval_request_id, project_id, action_type,
        action_digest, execution_attempt, execution_version, started_at_ms, idempotency_key,
        outcome, result_code, resource_type, resource_id, created_at_ms, evidence_digest,
        lease_proof
    )
    SELECT :dispatch_id::text, :schema_version::integer, :approval_request_id::text,
           :project_id::text, :action_type::text, :action_digest::text, :attempt::integer,
           :version::bigint, :started_at_ms::bigint, :dispatch_id::text, :outcome::text,
           :result_code::text, :resource_type::text, run_id, :now_ms::bigint,
           :evidence_digest::text, :proof::text
    FROM run
)
SELECT version FROM done

-- page_effects_taken --
-- A page's run.create (`store.effects_taken`, `store.create_page`, run by the page transaction
-- `adapters/sql/page.py`) binds each item's values as one JSON array per statement
-- (jsonb_to_recordset: one round trip for the page, the one list form SQLite binds too). This
-- one names the items whose effect already exists (a receipt, or a Run holding the dispatch
-- id as its idempotency key): the per-item path replays or refuses those. Each is one probe
-- of a unique key per item: as `EXISTS … OR EXISTS …`, the planner hashed both whole tables
-- for every page, a cost that grew with the history kept.
SELECT k.dispatch_id
FROM jsonb_to_recordset(:page::jsonb) AS k (dispatch_id text, project_id text)
WHERE (SELECT true FROM qinglong.approved_run_action_receipts AS r
       WHERE r.dispatch_id = k.dispatch_id)
   OR (SELECT true FROM qinglong.runs AS x
       WHERE x.project_id = k.project_id AND x.idempotency_key = k.dispatch_id)

-- insert_page_runs --
-- A page's Runs, each with its first attempt and its created event (`store.create_page`,
-- `Query.run_rows`): one statement, the rows one JSON array read once, its three inserts
-- data-modifying CTEs (their foreign keys are checked at the statement's end, the Runs
-- written by then).
WITH k AS (
    SELECT * FROM jsonb_to_recordset(:rows::jsonb) AS k (
        run_id text, project_id text, task_id text, task_revision bigint, executor_type text,
        priority integer, task_name text, task_snapshot_ref text, input_ref text, status text,
        trigger_type text, execution_origin text, execution_owner text, request_id text,
        idempotency_key text, accepted_at_ms bigint, version bigint, event_seq bigint,
        created_at_ms bigint, lease_proof text)
), written_runs AS (
    INSERT INTO qinglong.runs (
        run_id, project_id, task_id, task_revision, executor_type, priority, task_name,
        task_snapshot_ref, input_ref, status, trigger_type, execution_origin, execution_owner,
        request_id, idempotency_key, accepted_at_ms, version, event_seq, created_at_ms,
        updated_at_ms, lease_proof
    )
    SELECT run_id, project_id, task_id, task_revision, executor_type, priority, task_name,
           task_snapshot_ref, input_ref, status, trigger_type, execution_origin,
           execution_owner, request_id, idempotency_key, accepted_at_ms, version, event_seq,
           created_at_ms, created_at_ms, lease_proof
    FROM k
), written_attempts AS (
    INSERT INTO qinglong.run_attempts (run_id, attempt_no, status, created_at_ms)
    SELECT run_id, 1, status, created_at_ms FROM k
)
INSERT INTO qinglong.run_events (run_id, seq, event_type, run_version, committed_at_ms)
SELECT run_id, event_seq, :event_type::text, version,
       (extract(epoch FROM transaction_timestamp()) * 1000)::bigint
FROM k

-- insert_page_receipts --
INSERT INTO qinglong.approved_run_action_receipts (
    dispatch_id, schema_version, approval_request_id, project_id, action_type, action_digest,
    execution_attempt, execution_version, started_at_ms, idempotency_key, outcome, result_code,
    resource_type, resource_id, created_at_ms, evidence_digest, lease_proof
)
SELECT dispatch_id, schema_version, approval_request_id, project_id, action_type,
       action_digest, execution_attempt, execution_version, started_at_ms, idempotency_key,
       outcome, result_code, resource_type, resource_id, created_at_ms, evidence_digest,
       lease_proof
FROM jsonb_to_recordset(:rows::jsonb) AS k (
    dispatch_id text, schema_version integer, approval_request_id text, project_id text,
    action_type text, action_digest text, execution_attempt integer, execution_version bigint,
    started_at_ms bigint, idempotency_key text, outcome text, result_code text,
    resource_type text, resource_id text, created_at_ms bigint, evidence_digest text,
    lease_proof text)

-- select_run_ids_by_dispatch --
-- The Run holding each dispatch id (a JSON array) as its idempotency key: `submit --json`.
-- Only dispatches and Runs, which every login that may submit can read.
SELECT d.dispatch_id, r.run_id
FROM qinglong.approved_action_dispatches AS d
JOIN qinglong.runs AS r ON r.project_id = d.project_id AND r.idempotency_key = d.dispatch_id
WHERE d.dispatch_id IN (SELECT jsonb_array_elements_text(:dispatch_ids::jsonb))
