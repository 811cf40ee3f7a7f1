-- Named statements of the PostgreSQL store: the same names as the SQLite store's.
-- Parameters are written `:name` and bound positionally by `queries.py`; every table is
-- schema-qualified so search_path never decides what a statement touches. committed_at_ms
-- columns use the database clock (transaction_timestamp(): one instant per transaction).
-- A locking read splices the plain one and adds its clause (`claim_due_rows`,
-- `lock_execution`), so one text serves the locked and the read-only path.

-- execution_columns --
e.dispatch_id, e.project_id, e.status, e.version, e.attempt, e.max_attempts,
e.eligible_at_ms, e.retry_at_ms, e.lease_owner, e.lease_token, e.lease_expires_at_ms,
e.started_at_ms, e.result_mutation_id, e.result_code, e.completed_at_ms,
e.created_at_ms, e.updated_at_ms

-- select_due --
SELECT {execution_columns},
       d.approval_request_id, d.action_type, d.action_ref, d.action_digest, d.approved_by,
       d.created_at_ms AS dispatch_created_at_ms
FROM qinglong.approved_action_dispatch_executions AS e
JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
WHERE e.eligible_at_ms IS NOT NULL AND e.eligible_at_ms <= :now_ms::bigint
  AND (e.eligible_at_ms, e.dispatch_id) > (:after_eligible_at_ms::bigint, :after_dispatch_id::text)
ORDER BY e.eligible_at_ms, e.dispatch_id
LIMIT :limit::bigint

-- claim_due_rows --
-- The due observation of `claim_due` locks what it sees, and skips (never waits for) the
-- rows another replica holds: their claims are that replica's.
{select_due}
FOR UPDATE OF e SKIP LOCKED

-- select_execution --
SELECT {execution_columns},
       d.approval_request_id, d.action_type, d.action_ref, d.action_digest, d.approved_by,
       d.created_at_ms AS dispatch_created_at_ms
FROM qinglong.approved_action_dispatch_executions AS e
JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
WHERE e.dispatch_id = :dispatch_id

-- lock_execution --
-- The same read under a row lock, so a fencing decision and its update see one row.
{select_execution}
FOR UPDATE OF e

-- lease_page --
-- The fenced claim of a page, one statement: each JSON element {dispatch_id, version, token,
-- proof} leases its row only at the version the claim observed (the rows are already locked
-- by claim_due_rows), and a live lease only once the database's clock also says it expired
-- (the trigger would refuse it: QLF02). The trigger keeps the proof's digest and writes the
-- ledger line; RETURNING names the rows that took, so a lease is reported, never assumed.
UPDATE qinglong.approved_action_dispatch_executions AS e
SET status = 'leased', version = e.version + 1, attempt = e.attempt + 1,
    lease_owner = :owner::text, lease_token = k.token, lease_proof = k.proof,
    lease_expires_at_ms = :expires_at_ms::bigint, eligible_at_ms = :expires_at_ms::bigint,
    retry_at_ms = NULL, started_at_ms = NULL, updated_at_ms = :now_ms::bigint
FROM jsonb_to_recordset(:page::jsonb) AS k (dispatch_id text, version bigint, token text,
                                            proof text)
WHERE e.dispatch_id = k.dispatch_id AND e.version = k.version
  AND e.status IN ('pending', 'leased', 'retry_wait') AND e.eligible_at_ms <= :now_ms::bigint
  AND e.attempt < e.max_attempts
  AND (e.status <> 'leased' OR e.lease_expires_at_ms <= qinglong.db_now_ms())
RETURNING e.dispatch_id, e.version, e.attempt

-- exhaust_row --
-- An expired lease of another holder needs no proof here: the budget is spent (QLF01 else).
UPDATE qinglong.approved_action_dispatch_executions
SET status = 'blocked', version = version + 1, lease_proof = :proof, eligible_at_ms = NULL, retry_at_ms = NULL,
    result_code = :result_code, completed_at_ms = :now_ms::bigint,
    updated_at_ms = :now_ms::bigint
WHERE dispatch_id = :dispatch_id AND version = :version
  AND status IN ('pending', 'leased', 'retry_wait') AND eligible_at_ms <= :now_ms::bigint
  AND attempt >= max_attempts
  AND (status <> 'leased' OR lease_expires_at_ms <= qinglong.db_now_ms())
RETURNING version, attempt

-- renew_lease --
UPDATE qinglong.approved_action_dispatch_executions
SET lease_expires_at_ms = :expires_at_ms::bigint,
    eligible_at_ms = CASE WHEN status = 'leased' THEN :expires_at_ms::bigint ELSE NULL END,
    version = version + 1, updated_at_ms = :now_ms::bigint, lease_proof = :proof
WHERE dispatch_id = :dispatch_id AND version = :version
  AND lease_owner = :owner AND lease_token = :token AND attempt = :attempt
  AND status IN ('leased', 'executing') AND lease_expires_at_ms > :now_ms::bigint
RETURNING version, lease_expires_at_ms

-- start_row --
-- The barrier grants a fresh lease (never a shorter one): an item that waited in its page
-- starts with a whole lease ahead of its execute, not with what the wait left of it.
-- The fence and the binding (the approval and action digest the dispatch was created for) in
-- the update itself: no row back and the caller diagnoses with `lock_execution`.
UPDATE qinglong.approved_action_dispatch_executions AS e
SET status = 'executing', started_at_ms = :now_ms::bigint, eligible_at_ms = NULL,
    lease_expires_at_ms = greatest(e.lease_expires_at_ms, :expires_at_ms::bigint),
    version = e.version + 1, updated_at_ms = :now_ms::bigint, lease_proof = :proof::text
FROM qinglong.approved_action_dispatches AS d
WHERE e.dispatch_id = :dispatch_id::text AND d.dispatch_id = e.dispatch_id
  AND d.approval_request_id = :approval_request_id::text
  AND d.action_digest = :action_digest::text
  AND e.version = :version::bigint AND e.lease_owner = :owner::text
  AND e.lease_token = :token::text AND e.attempt = :attempt::integer
  AND e.status = 'leased' AND e.lease_expires_at_ms > :now_ms::bigint
RETURNING e.dispatch_id, e.version, e.attempt, e.lease_owner, e.lease_token,
          e.lease_expires_at_ms

-- release_row --
UPDATE qinglong.approved_action_dispatch_executions
SET status = :to_status, eligible_at_ms = :eligible_at_ms::bigint,
    retry_at_ms = :retry_at_ms::bigint, attempt = attempt - :refund::integer,
    result_mutation_id = :mutation_id, result_code = :result_code,
    completed_at_ms = :completed_at_ms::bigint, version = version + 1,
    updated_at_ms = :now_ms::bigint, lease_proof = :proof
WHERE dispatch_id = :dispatch_id AND version = :version
  AND lease_owner = :owner AND lease_token = :token AND attempt = :attempt
  AND status = 'leased'
RETURNING version, attempt

-- complete_row --
UPDATE qinglong.approved_action_dispatch_executions
SET status = :to_status, result_mutation_id = :mutation_id, result_code = :result_code,
    completed_at_ms = :now_ms::bigint, version = version + 1, updated_at_ms = :now_ms::bigint,
    lease_proof = :proof
WHERE dispatch_id = :dispatch_id AND status = 'executing'
  AND lease_owner = :owner AND lease_token = :token AND attempt = :attempt
  AND started_at_ms = :started_at_ms AND version >= :version
RETURNING version, attempt

-- select_event_by_mutation --
SELECT dispatch_id, version, from_status, to_status, attempt, lease_owner, lease_token,
       mutation_id, result_code, committed_at_ms
FROM qinglong.execution_events
WHERE dispatch_id = :dispatch_id AND mutation_id = :mutation_id

-- select_events --
SELECT dispatch_id, version, from_status, to_status, attempt, lease_owner, lease_token,
       mutation_id, result_code, committed_at_ms
FROM qinglong.execution_events
WHERE dispatch_id = :dispatch_id
ORDER BY version

-- count_by_status --
SELECT status, count(*) AS n
FROM qinglong.approved_action_dispatch_executions
GROUP BY status

-- count_recovery_required --
SELECT count(*) AS n
FROM qinglong.approved_action_dispatch_executions
-- A started lease has expired only when the caller's clock and the database's both say so.
WHERE status = 'executing'
  AND lease_expires_at_ms <= least(:now_ms::bigint,
      (extract(epoch FROM clock_timestamp()) * 1000)::bigint)

-- due_summary --
SELECT count(*) AS n, min(eligible_at_ms) AS oldest
FROM qinglong.approved_action_dispatch_executions
WHERE eligible_at_ms IS NOT NULL AND eligible_at_ms <= :now_ms::bigint

-- count_runs --
SELECT count(*) AS n FROM qinglong.runs

-- select_dispatch --
SELECT dispatch_id, approval_request_id, project_id, action_type, action_ref, action_digest,
       approved_by, created_at_ms
FROM qinglong.approved_action_dispatches
WHERE dispatch_id = :dispatch_id

-- insert_plan --
INSERT INTO qinglong.action_plans (project_id, action_ref, action_type, plan_json, plan_digest,
                                   created_at_ms)
VALUES (:project_id, :action_ref, :action_type, :plan_json, :plan_digest, :now_ms)

-- select_plan --
SELECT project_id, action_ref, action_type, plan_json, plan_digest
FROM qinglong.action_plans
WHERE project_id = :project_id AND action_ref = :action_ref

-- insert_approval --
-- Every principal column is the session's own login (session_user), written by the server:
-- the approval trigger refuses any other name, and applies the approver and self-approval
-- rules to `approve_approval` (SQLSTATE QLA01/QLA02/QLA03, typed in `database.translate`).
INSERT INTO qinglong.approval_requests (
    approval_request_id, project_id, action_type, action_ref, action_digest, status, version,
    requested_by, decided_by, requested_principal, expires_at_ms, created_at_ms, updated_at_ms
) VALUES (
    :approval_request_id, :project_id, :action_type, :action_ref, :action_digest, 'pending', 1,
    :requested_by, NULL, session_user, :expires_at_ms, :now_ms::bigint, :now_ms::bigint
)

-- select_approval --
SELECT approval_request_id, project_id, action_type, action_ref, action_digest, status, version,
       requested_by, decided_by, requested_principal, decided_principal, consumed_principal,
       expires_at_ms, created_at_ms, updated_at_ms
FROM qinglong.approval_requests
WHERE approval_request_id = :approval_request_id

-- approve_approval --
UPDATE qinglong.approval_requests
SET status = 'approved', version = 2, decided_by = :decided_by,
    decided_principal = session_user, updated_at_ms = :now_ms::bigint
WHERE approval_request_id = :approval_request_id AND status = 'pending' AND version = 1
  AND expires_at_ms > :now_ms::bigint
RETURNING approval_request_id, requested_principal

-- reject_approval --
-- No expiry condition: withdrawing authority is always allowed while pending.
UPDATE qinglong.approval_requests
SET status = 'rejected', version = 2, decided_by = :decided_by,
    decided_principal = session_user, updated_at_ms = :now_ms::bigint
WHERE approval_request_id = :approval_request_id AND status = 'pending' AND version = 1
RETURNING approval_request_id, requested_principal

-- consume_approval --
UPDATE qinglong.approval_requests
SET status = 'consumed', version = 3, consumed_at_ms = :now_ms::bigint,
    consumed_principal = session_user, updated_at_ms = :now_ms::bigint
WHERE approval_request_id = :approval_request_id AND status = 'approved' AND version = 2
  AND expires_at_ms > :now_ms::bigint
RETURNING project_id, action_type, action_ref, action_digest, decided_by

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

-- select_run --
SELECT {run_columns} FROM qinglong.runs WHERE run_id = :run_id

-- select_run_by_key --
SELECT {run_columns} FROM qinglong.runs
WHERE project_id = :project_id AND idempotency_key = :idempotency_key

-- insert_run --
INSERT INTO qinglong.runs (
    run_id, project_id, task_id, task_revision, executor_type, priority, task_name,
    task_snapshot_ref, input_ref, status, trigger_type, execution_origin, execution_owner,
    request_id, idempotency_key, accepted_at_ms, version, event_seq, created_at_ms, updated_at_ms
) VALUES (
    :run_id, :project_id, :task_id, :task_revision, :executor_type, :priority, :task_name,
    :task_snapshot_ref, :input_ref, :status, :trigger_type, :execution_origin, :execution_owner,
    :request_id, :idempotency_key, :accepted_at_ms, :version, :event_seq, :created_at_ms::bigint,
    :created_at_ms::bigint
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
    resource_type, resource_id, created_at_ms, evidence_digest
) VALUES (
    :dispatch_id, :schema_version, :approval_request_id, :project_id, :action_type,
    :action_digest, :execution_attempt, :execution_version, :started_at_ms, :idempotency_key,
    :outcome, :result_code, :resource_type, :resource_id, :created_at_ms, :evidence_digest
)

-- select_recovery_required --
SELECT {execution_columns},
       d.approval_request_id, d.action_type, d.action_ref, d.action_digest, d.approved_by,
       d.created_at_ms AS dispatch_created_at_ms,
       o.outcome AS observation_outcome, o.reason_code AS observation_reason,
       o.observation_count, o.last_seen_at_ms AS observation_last_seen_at_ms
FROM qinglong.approved_action_dispatch_executions AS e
JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
LEFT JOIN qinglong.recovery_observations AS o ON o.dispatch_id = e.dispatch_id
-- Expired by the earlier of the caller's clock and the database's (see count_recovery_required).
WHERE e.status = 'executing'
  AND e.lease_expires_at_ms <= least(:now_ms::bigint,
      (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
  AND (e.lease_expires_at_ms, e.dispatch_id)
      > (:after_expires_at_ms::bigint, :after_dispatch_id::text)
ORDER BY e.lease_expires_at_ms, e.dispatch_id
LIMIT :limit::bigint

-- resolve_row --
UPDATE qinglong.approved_action_dispatch_executions
SET status = :to_status, result_mutation_id = :mutation_id, result_code = :result_code,
    completed_at_ms = :now_ms::bigint, version = version + 1, updated_at_ms = :now_ms::bigint
WHERE dispatch_id = :dispatch_id AND status = 'executing' AND version = :version
  AND lease_owner = :owner AND lease_token = :token AND attempt = :attempt
  AND started_at_ms = :started_at_ms AND lease_expires_at_ms <= :expired_by_ms::bigint
RETURNING version

-- cancel_row --
-- The claim's fence: this version, still waiting. Lease columns and attempt stay as they were
-- (the trigger's fence rule); the row leaves the due index.
UPDATE qinglong.approved_action_dispatch_executions
SET status = 'cancelled', eligible_at_ms = NULL, retry_at_ms = NULL,
    result_mutation_id = :mutation_id, result_code = :result_code,
    completed_at_ms = :now_ms::bigint, version = version + 1, updated_at_ms = :now_ms::bigint
WHERE dispatch_id = :dispatch_id AND version = :version
  AND status IN ('pending', 'retry_wait')
RETURNING version

-- insert_resolution --
-- The principal is the session's own login (session_user), decided by the server, never
-- passed by the client.
INSERT INTO qinglong.recovery_resolutions (
    dispatch_id, source, resolution, evidence_digest, resolved_by, principal, reason_code,
    execution_attempt, execution_version, lease_owner, lease_token, started_at_ms,
    committed_at_ms
) VALUES (
    :dispatch_id, :source, :resolution, :evidence_digest, :resolved_by, session_user,
    :reason_code, :attempt, :version, :owner, :token, :started_at_ms,
    (extract(epoch FROM transaction_timestamp()) * 1000)::bigint
)

-- select_resolution --
SELECT dispatch_id, source, resolution, evidence_digest, resolved_by, principal, reason_code,
       execution_attempt, execution_version, lease_owner, lease_token, started_at_ms,
       committed_at_ms
FROM qinglong.recovery_resolutions
WHERE dispatch_id = :dispatch_id

-- upsert_observation --
INSERT INTO qinglong.recovery_observations AS o (
    dispatch_id, outcome, reason_code, observation_count, first_seen_at_ms, last_seen_at_ms
) VALUES (:dispatch_id, :outcome, :reason_code, 1, :now_ms::bigint, :now_ms::bigint)
ON CONFLICT (dispatch_id) DO UPDATE
SET outcome = excluded.outcome, reason_code = excluded.reason_code,
    observation_count = o.observation_count + 1,
    last_seen_at_ms = excluded.last_seen_at_ms

-- insert_audit_event --
INSERT INTO qinglong.security_audit_events (
    kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
) VALUES (
    :kind, :actor, session_user, :project_id, :subject_id, :detail_code,
    (extract(epoch FROM transaction_timestamp()) * 1000)::bigint
)

-- select_audit_events --
SELECT event_id, kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
FROM qinglong.security_audit_events
WHERE subject_id = :subject_id
ORDER BY event_id

-- backlog_due --
-- Bounded: the due index is read for at most :cap rows, whatever the table holds.
SELECT count(*) AS n, min(eligible_at_ms) AS oldest
FROM (
    SELECT eligible_at_ms FROM qinglong.approved_action_dispatch_executions
    WHERE eligible_at_ms IS NOT NULL AND eligible_at_ms <= :now_ms::bigint
    ORDER BY eligible_at_ms
    LIMIT :cap::bigint
) AS due

-- backlog_started --
-- Bounded by the started rows (the executing partial index), never the terminal ones.
SELECT count(*) AS n,
       coalesce(sum(CASE
           WHEN lease_expires_at_ms <= least(:now_ms::bigint,
               (extract(epoch FROM clock_timestamp()) * 1000)::bigint) THEN 1
           ELSE 0 END), 0)
           AS expired
FROM qinglong.approved_action_dispatch_executions
WHERE status = 'executing'

-- database_now --
-- The server's wall clock now (clock_timestamp, not the transaction's start): the skew guard.
SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms

-- select_plans --
-- One read for a page of dispatches: the keys arrive as two JSON arrays of equal length (the
-- one list form SQLite binds too), zipped element by element. The lateral LIMIT 1 (the key
-- is the primary key) keeps each key one primary-key probe: the planner guesses 100 keys from
-- a JSON array and would otherwise hash-join over a full scan of a table of some 10k plans.
SELECT p.project_id, p.action_ref, p.action_type, p.plan_json, p.plan_digest
FROM ROWS FROM (jsonb_array_elements_text(:project_ids::jsonb),
                jsonb_array_elements_text(:action_refs::jsonb)) AS k (project_id, action_ref)
CROSS JOIN LATERAL (
    SELECT x.project_id, x.action_ref, x.action_type, x.plan_json, x.plan_digest
    FROM qinglong.action_plans AS x
    WHERE x.project_id = k.project_id AND x.action_ref = k.action_ref
    LIMIT 1
) AS p

-- start_fast --
-- The start barrier's happy path as ONE statement (one round trip, its own transaction):
-- `start_row`, whose ledger line the trigger writes. No row back means "not the happy path":
-- the store then runs the shared transaction (`start_row`, diagnosed with `lock_execution`).
WITH started AS (
    {start_row}
)
SELECT version, lease_expires_at_ms FROM started

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
        updated_at_ms
    )
    SELECT :run_id::text, :project_id::text, :task_id::text, :task_revision::bigint,
           :executor_type::text, :priority::integer, :task_name::text,
           :task_snapshot_ref::text, :input_ref::text, :run_status::text, :trigger_type::text,
           :execution_origin::text, :execution_owner::text, :request_id::text,
           :dispatch_id::text, :accepted_at_ms::bigint, :run_version::bigint,
           :event_seq::bigint, :created_at_ms::bigint, :created_at_ms::bigint
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
        outcome, result_code, resource_type, resource_id, created_at_ms, evidence_digest
    )
    SELECT :dispatch_id::text, :schema_version::integer, :approval_request_id::text,
           :project_id::text, :action_type::text, :action_digest::text, :attempt::integer,
           :version::bigint, :started_at_ms::bigint, :dispatch_id::text, :outcome::text,
           :result_code::text, :resource_type::text, run_id, :now_ms::bigint,
           :evidence_digest::text
    FROM run
)
SELECT version FROM done

-- step_run_columns --
step_run_id, run_id, project_id, step_kind, tool_id, tool_version, definition_digest,
action_type, action_ref, action_digest, approval_request_id, binding_digest, status, version,
result_code, created_at_ms, updated_at_ms

-- insert_step_run --
INSERT INTO qinglong.step_runs (
    step_run_id, run_id, project_id, step_kind, tool_id, tool_version, definition_digest,
    action_type, action_ref, action_digest, approval_request_id, binding_digest, status,
    version, result_code, created_at_ms, updated_at_ms
) VALUES (
    :step_run_id, :run_id, :project_id, 'tool', :tool_id, :tool_version, :definition_digest,
    :action_type, :action_ref, :action_digest, :approval_request_id, :binding_digest, :status,
    1, NULL, :now_ms::bigint, :now_ms::bigint
)

-- select_step_run --
SELECT {step_run_columns} FROM qinglong.step_runs WHERE step_run_id = :step_run_id

-- lock_step_run --
-- The same read under a row lock (taken after the Run's: one order, no lock cycle).
{select_step_run}
FOR UPDATE

-- lock_run --
-- The Run a step moves, locked for its compare-and-set (before the StepRun, always).
{select_run}
FOR UPDATE

-- select_step_run_by_approval --
SELECT {step_run_columns} FROM qinglong.step_runs WHERE approval_request_id = :approval_request_id

-- advance_step_run --
-- The StepRun compare-and-set: only from the exact status and version the caller read.
UPDATE qinglong.step_runs
SET status = :to_status, version = :to_version, result_code = :result_code,
    updated_at_ms = :now_ms::bigint
WHERE step_run_id = :step_run_id AND status = :from_status AND version = :from_version
RETURNING version

-- advance_run_sequence --
-- The Run compare-and-set: one more version and one more event, from what the caller read.
UPDATE qinglong.runs
SET version = version + 1, event_seq = event_seq + 1, updated_at_ms = :now_ms::bigint
WHERE run_id = :run_id AND version = :version AND event_seq = :event_seq
RETURNING version, event_seq

-- insert_step_run_mutation --
INSERT INTO qinglong.step_run_mutations (
    mutation_id, step_run_id, run_id, project_id, from_status, to_status, from_version,
    to_version, run_event_seq, run_version, reason_code, mutation_digest, committed_at_ms
) VALUES (
    :mutation_id, :step_run_id, :run_id, :project_id, :from_status, :to_status, :from_version,
    :to_version, :run_event_seq, :run_version, :reason_code, :mutation_digest,
    (extract(epoch FROM transaction_timestamp()) * 1000)::bigint
)
RETURNING committed_at_ms

-- mutation_columns --
mutation_id, step_run_id, run_id, project_id, from_status, to_status, from_version,
to_version, run_event_seq, run_version, reason_code, mutation_digest, committed_at_ms

-- select_step_run_mutation --
SELECT {mutation_columns} FROM qinglong.step_run_mutations WHERE mutation_id = :mutation_id

-- select_step_run_mutations --
SELECT {mutation_columns} FROM qinglong.step_run_mutations
WHERE step_run_id = :step_run_id
ORDER BY to_version

-- count_step_runs_by_status --
SELECT status, count(*) AS n FROM qinglong.step_runs GROUP BY status

-- barrier_timeouts --
-- Short, fixed bounds for the barrier transaction only (is_local = true).
SELECT set_config('statement_timeout', :statement_timeout, true) AS statement_timeout,
       set_config('lock_timeout', :lock_timeout, true) AS lock_timeout,
       set_config('idle_in_transaction_session_timeout', :idle_timeout, true) AS idle_timeout

-- select_barrier_identities --
-- Step 1 of the barrier: every start/replay identity the command carries, by unique key.
SELECT start_id, command_digest FROM qinglong.tool_execution_start_barriers
WHERE start_id = :start_id
   OR (run_id = :run_id AND step_run_id = :step_run_id
       AND started_step_run_version = :started_version)
   OR mutation_id = :mutation_id
   OR trace_id = :trace_id
   OR audit_receipt_id = :audit_receipt_id
   OR dispatch_id = :dispatch_id

-- insert_tool_audit_event --
INSERT INTO qinglong.security_audit_events (
    kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
) VALUES (
    :kind, :actor, session_user, :project_id, :subject_id, :detail_code,
    (extract(epoch FROM transaction_timestamp()) * 1000)::bigint
)
RETURNING event_id, kind, actor, principal, project_id, subject_id, detail_code

-- insert_trace_anchor --
INSERT INTO qinglong.trace_anchors (
    trace_id, project_id, run_id, step_run_id, start_id, command_digest, trace_digest,
    committed_at_ms
) VALUES (
    :trace_id, :project_id, :run_id, :step_run_id, :start_id, :command_digest, :trace_digest,
    (extract(epoch FROM transaction_timestamp()) * 1000)::bigint
)

-- insert_audit_receipt --
INSERT INTO qinglong.audit_receipts (
    receipt_id, audit_event_id, trace_id, start_id, receipt_digest, committed_at_ms
) VALUES (
    :receipt_id, :audit_event_id, :trace_id, :start_id, :receipt_digest,
    (extract(epoch FROM transaction_timestamp()) * 1000)::bigint
)

-- insert_barrier --
INSERT INTO qinglong.tool_execution_start_barriers (
    start_id, schema_version, project_id, run_id, step_run_id, started_step_run_version,
    started_step_run_digest, command_digest, snapshot_digest, tool_id, tool_version,
    definition_digest, policy_fence, action_digest, admission_digest, approval_request_id,
    dispatch_id, mutation_id, mutation_digest, run_event_seq, run_version, trace_id,
    trace_digest, audit_event_id, audit_receipt_id, audit_receipt_digest, barrier_json,
    barrier_digest, committed_at_ms
) VALUES (
    :start_id, 1, :project_id, :run_id, :step_run_id, :started_step_run_version,
    :started_step_run_digest, :command_digest, :snapshot_digest, :tool_id, :tool_version,
    :definition_digest, :policy_fence, :action_digest, :admission_digest, :approval_request_id,
    :dispatch_id, :mutation_id, :mutation_digest, :run_event_seq, :run_version, :trace_id,
    :trace_digest, :audit_event_id, :audit_receipt_id, :audit_receipt_digest, :barrier_json,
    :barrier_digest, :committed_at_ms
)

-- barrier_read --
SELECT b.start_id, b.schema_version, b.project_id, b.run_id, b.step_run_id,
       b.started_step_run_version, b.started_step_run_digest, b.command_digest,
       b.snapshot_digest, b.tool_id, b.tool_version, b.definition_digest, b.policy_fence,
       b.action_digest, b.admission_digest, b.approval_request_id, b.dispatch_id,
       b.mutation_id, b.mutation_digest, b.run_event_seq, b.run_version, b.trace_id,
       b.trace_digest, b.audit_event_id, b.audit_receipt_id, b.audit_receipt_digest,
       b.barrier_json, b.barrier_digest, b.committed_at_ms,
       m.mutation_id AS m_mutation_id, m.step_run_id AS m_step_run_id, m.run_id AS m_run_id,
       m.project_id AS m_project_id, m.from_status AS m_from_status,
       m.to_status AS m_to_status, m.from_version AS m_from_version,
       m.to_version AS m_to_version, m.run_event_seq AS m_run_event_seq,
       m.run_version AS m_run_version, m.reason_code AS m_reason_code,
       m.mutation_digest AS m_mutation_digest, m.committed_at_ms AS m_committed_at_ms,
       e.event_type AS e_event_type, e.run_version AS e_run_version,
       s.binding_digest AS s_binding_digest,
       t.trace_id AS t_trace_id, t.project_id AS t_project_id, t.run_id AS t_run_id,
       t.step_run_id AS t_step_run_id, t.start_id AS t_start_id,
       t.command_digest AS t_command_digest, t.trace_digest AS t_trace_digest,
       r.receipt_id AS r_receipt_id, r.audit_event_id AS r_audit_event_id,
       r.trace_id AS r_trace_id, r.start_id AS r_start_id, r.receipt_digest AS r_receipt_digest,
       a.event_id AS a_event_id, a.kind AS a_kind, a.actor AS a_actor,
       a.principal AS a_principal, a.project_id AS a_project_id,
       a.subject_id AS a_subject_id, a.detail_code AS a_detail_code
FROM qinglong.tool_execution_start_barriers AS b
LEFT JOIN qinglong.step_run_mutations AS m ON m.mutation_id = b.mutation_id
LEFT JOIN qinglong.run_events AS e ON e.run_id = b.run_id AND e.seq = b.run_event_seq
LEFT JOIN qinglong.step_runs AS s ON s.step_run_id = b.step_run_id
LEFT JOIN qinglong.trace_anchors AS t ON t.trace_id = b.trace_id
LEFT JOIN qinglong.audit_receipts AS r ON r.receipt_id = b.audit_receipt_id
LEFT JOIN qinglong.security_audit_events AS a ON a.event_id = b.audit_event_id

-- select_barrier_by_start_id --
{barrier_read}
WHERE b.start_id = :start_id

-- select_barrier_by_started_version --
{barrier_read}
WHERE b.run_id = :run_id AND b.step_run_id = :step_run_id
  AND b.started_step_run_version = :started_version

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

-- savepoint --
-- One item (or the whole page) of the page transaction, undone alone when it fails.
SAVEPOINT page_part

-- rollback_to_savepoint --
ROLLBACK TO SAVEPOINT page_part

-- release_savepoint --
RELEASE SAVEPOINT page_part

-- list_dispatches --
-- `dispatch list`: newest first, a keyset page after (:after_created_at_ms, :after_dispatch_id);
-- a NULL filter matches everything. :lease_expired is the effective-status split of
-- `executing`: true recovery_required, false still live, NULL either, at :settling_ms (the
-- earlier of the caller's clock and the database's, as in count_recovery_required).
SELECT d.dispatch_id, d.project_id, d.action_type, d.action_ref, d.created_at_ms,
       e.status, e.attempt, e.max_attempts, e.lease_expires_at_ms, e.updated_at_ms,
       e.result_code
FROM qinglong.approved_action_dispatches AS d
JOIN qinglong.approved_action_dispatch_executions AS e ON e.dispatch_id = d.dispatch_id
WHERE (d.created_at_ms, d.dispatch_id)
      < (:after_created_at_ms::bigint, :after_dispatch_id::text)
  AND (:project_id::text IS NULL OR d.project_id = :project_id::text)
  AND (:action_type::text IS NULL OR d.action_type = :action_type::text)
  AND (:stored_status::text IS NULL OR e.status = :stored_status::text)
  AND (:lease_expired::boolean IS NULL
       OR (e.lease_expires_at_ms <= :settling_ms::bigint) = :lease_expired::boolean)
ORDER BY d.created_at_ms DESC, d.dispatch_id DESC
LIMIT :limit::bigint

-- select_dispatch_view --
-- `dispatch show`: the dispatch, its execution without the lease token, its last observation.
SELECT d.dispatch_id, d.approval_request_id, d.project_id, d.action_type, d.action_ref,
       d.action_digest, d.approved_by, d.created_at_ms AS dispatch_created_at_ms,
       e.status, e.version, e.attempt, e.max_attempts, e.eligible_at_ms, e.retry_at_ms,
       e.lease_owner, e.lease_expires_at_ms, e.started_at_ms, e.result_mutation_id,
       e.result_code, e.completed_at_ms, e.created_at_ms, e.updated_at_ms,
       o.outcome AS observation_outcome, o.reason_code AS observation_reason,
       o.observation_count, o.last_seen_at_ms AS observation_last_seen_at_ms
FROM qinglong.approved_action_dispatches AS d
JOIN qinglong.approved_action_dispatch_executions AS e ON e.dispatch_id = d.dispatch_id
LEFT JOIN qinglong.recovery_observations AS o ON o.dispatch_id = d.dispatch_id
WHERE d.dispatch_id = :dispatch_id::text

-- select_event_views --
-- The ledger of one dispatch for `dispatch show`: `select_events` without the lease token.
SELECT version, from_status, to_status, attempt, lease_owner, mutation_id, result_code,
       committed_at_ms
FROM qinglong.execution_events
WHERE dispatch_id = :dispatch_id::text
ORDER BY version

-- select_run_ids_by_dispatch --
-- The Run holding each dispatch id (a JSON array) as its idempotency key: `submit --json`.
-- Only dispatches and Runs, which every login that may submit can read.
SELECT d.dispatch_id, r.run_id
FROM qinglong.approved_action_dispatches AS d
JOIN qinglong.runs AS r ON r.project_id = d.project_id AND r.idempotency_key = d.dispatch_id
WHERE d.dispatch_id IN (SELECT jsonb_array_elements_text(:dispatch_ids::jsonb))

-- prune_lock --
-- One prune at a time (a second CronJob run, a manual `prune`): a transaction-level advisory
-- lock ("qlprun"), released at commit.
SELECT pg_catalog.pg_advisory_xact_lock(124710556956014)

-- prunable_dispatches --
-- The dispatch trees a prune may take: terminal before the cutoff, and named by no tool step
-- of a Run (its StepRun binds the approval, its start barrier the dispatch: Runs are business
-- data and keep what they name). The status list matches the partial index of migration 0009.
FROM qinglong.approved_action_dispatch_executions AS e
JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
WHERE e.status IN ('blocked', 'cancelled', 'failed', 'succeeded')
  AND e.updated_at_ms < :cutoff_ms::bigint
  AND NOT EXISTS (
      SELECT 1 FROM qinglong.step_runs AS s WHERE s.approval_request_id = d.approval_request_id
  )
  AND NOT EXISTS (
      SELECT 1 FROM qinglong.tool_execution_start_barriers AS b
      WHERE b.dispatch_id = d.dispatch_id
  )

-- prune_grant_permits --
INSERT INTO qinglong.prune_permits (
    dispatch_id, approval_request_id, project_id, action_ref, cutoff_ms
)
SELECT d.dispatch_id, d.approval_request_id, d.project_id, d.action_ref, :cutoff_ms::bigint
{prunable_dispatches}
ORDER BY e.updated_at_ms, e.dispatch_id
LIMIT :limit::integer

-- prune_count_permits --
SELECT count(*) AS n FROM qinglong.prune_permits

-- prune_count_dispatches --
SELECT count(*) AS n {prunable_dispatches}

-- prune_execution_events --
DELETE FROM qinglong.execution_events
WHERE dispatch_id IN (SELECT dispatch_id FROM qinglong.prune_permits)

-- prune_receipts --
DELETE FROM qinglong.approved_run_action_receipts
WHERE dispatch_id IN (SELECT dispatch_id FROM qinglong.prune_permits)

-- prune_resolutions --
DELETE FROM qinglong.recovery_resolutions
WHERE dispatch_id IN (SELECT dispatch_id FROM qinglong.prune_permits)

-- prune_observations --
DELETE FROM qinglong.recovery_observations
WHERE dispatch_id IN (SELECT dispatch_id FROM qinglong.prune_permits)

-- prune_executions --
DELETE FROM qinglong.approved_action_dispatch_executions
WHERE dispatch_id IN (SELECT dispatch_id FROM qinglong.prune_permits)

-- prune_dispatches --
DELETE FROM qinglong.approved_action_dispatches
WHERE dispatch_id IN (SELECT dispatch_id FROM qinglong.prune_permits)

-- prune_approvals --
DELETE FROM qinglong.approval_requests
WHERE approval_request_id IN (SELECT approval_request_id FROM qinglong.prune_permits)

-- prune_plans --
-- A plan goes with the last request that names it (a rejected one may still name it).
DELETE FROM qinglong.action_plans AS p
WHERE (p.project_id, p.action_ref) IN (
    SELECT project_id, action_ref FROM qinglong.prune_permits
)
  AND NOT EXISTS (
      SELECT 1 FROM qinglong.approval_requests AS a
      WHERE a.project_id = p.project_id AND a.action_ref = p.action_ref
  )

-- prune_clear_permits --
DELETE FROM qinglong.prune_permits

-- prunable_audit_events --
-- Audit records older than the audit cutoff, except those a tool start's audit receipt or
-- barrier names (they are part of a Run's history, which is kept).
FROM qinglong.security_audit_events AS s
WHERE s.committed_at_ms < :audit_cutoff_ms::bigint
  AND NOT EXISTS (
      SELECT 1 FROM qinglong.audit_receipts AS r WHERE r.audit_event_id = s.event_id
  )
  AND NOT EXISTS (
      SELECT 1 FROM qinglong.tool_execution_start_barriers AS b
      WHERE b.audit_event_id = s.event_id
  )

-- prune_grant_audit_permit --
INSERT INTO qinglong.audit_prune_permits (cutoff_ms) VALUES (:audit_cutoff_ms::bigint)

-- prune_audit_events --
DELETE FROM qinglong.security_audit_events
WHERE event_id IN (
    SELECT s.event_id {prunable_audit_events}
    ORDER BY s.committed_at_ms, s.event_id
    LIMIT :limit::integer
)
RETURNING event_id

-- prune_count_audit_events --
SELECT count(*) AS n {prunable_audit_events}

-- prune_clear_audit_permits --
DELETE FROM qinglong.audit_prune_permits
