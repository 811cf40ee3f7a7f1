-- Named statements of the SQLite store. The PostgreSQL store has the same names.
-- Every statement is parameterised; committed_at_ms columns use the database clock.

-- execution_columns --
e.dispatch_id, e.project_id, e.status, e.version, e.attempt, e.max_attempts,
e.eligible_at_ms, e.retry_at_ms, e.lease_owner, e.lease_token, e.lease_expires_at_ms,
e.started_at_ms, e.result_mutation_id, e.result_code, e.completed_at_ms,
e.created_at_ms, e.updated_at_ms

-- select_due --
SELECT {execution_columns},
       d.approval_request_id, d.action_type, d.action_ref, d.action_digest, d.approved_by,
       d.created_at_ms AS dispatch_created_at_ms
FROM approved_action_dispatch_executions AS e
JOIN approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
WHERE e.eligible_at_ms IS NOT NULL AND e.eligible_at_ms <= :now_ms
  AND (e.eligible_at_ms, e.dispatch_id) > (:after_eligible_at_ms, :after_dispatch_id)
ORDER BY e.eligible_at_ms, e.dispatch_id
LIMIT :limit

-- claim_due_rows --
-- The due observation of `claim_due`. BEGIN IMMEDIATE already holds the database's one write
-- lock, so no other writer can take an observed row: the plain due read is the locked one.
{select_due}

-- select_execution --
SELECT {execution_columns},
       d.approval_request_id, d.action_type, d.action_ref, d.action_digest, d.approved_by,
       d.created_at_ms AS dispatch_created_at_ms
FROM approved_action_dispatch_executions AS e
JOIN approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
WHERE e.dispatch_id = :dispatch_id

-- lock_execution --
-- BEGIN IMMEDIATE already holds the database's one write lock: the plain read is the locked one.
{select_execution}

-- lease_page --
-- The fenced claim of a page, one statement: each JSON element {dispatch_id, version, token}
-- leases its row only at the version the claim observed. The unary `+` keeps the planner off
-- the status and due indexes, so each element is one primary-key probe (as in start_page).
-- The trigger writes each ledger line; RETURNING names the rows that took, so a lease is
-- reported, never assumed.
UPDATE approved_action_dispatch_executions AS e
SET status = 'leased', version = e.version + 1, attempt = e.attempt + 1,
    lease_owner = :owner, lease_token = k.value ->> 'token', lease_expires_at_ms = :expires_at_ms,
    eligible_at_ms = :expires_at_ms, retry_at_ms = NULL, started_at_ms = NULL,
    updated_at_ms = :now_ms
FROM json_each(:page) AS k
WHERE e.dispatch_id = k.value ->> 'dispatch_id' AND e.version = k.value ->> 'version'
  AND +e.status IN ('pending', 'leased', 'retry_wait') AND +e.eligible_at_ms <= :now_ms
  AND e.attempt < e.max_attempts
RETURNING dispatch_id, version, attempt

-- exhaust_row --
UPDATE approved_action_dispatch_executions
SET status = 'blocked', version = version + 1, eligible_at_ms = NULL, retry_at_ms = NULL,
    result_code = :result_code, completed_at_ms = :now_ms, updated_at_ms = :now_ms
WHERE dispatch_id = :dispatch_id AND version = :version
  AND status IN ('pending', 'leased', 'retry_wait') AND eligible_at_ms <= :now_ms
  AND attempt >= max_attempts
RETURNING version, attempt

-- renew_lease --
UPDATE approved_action_dispatch_executions
SET lease_expires_at_ms = :expires_at_ms,
    eligible_at_ms = CASE WHEN status = 'leased' THEN :expires_at_ms ELSE NULL END,
    version = version + 1, updated_at_ms = :now_ms
WHERE dispatch_id = :dispatch_id AND version = :version
  AND lease_owner = :owner AND lease_token = :token AND attempt = :attempt
  AND status IN ('leased', 'executing') AND lease_expires_at_ms > :now_ms
RETURNING version, lease_expires_at_ms

-- start_row --
-- The barrier grants a fresh lease (never a shorter one): an item that waited in its page
-- starts with a whole lease ahead of its execute, not with what the wait left of it.
-- The fence and the binding (the approval and action digest the dispatch was created for) in
-- the update itself: no row back and the caller diagnoses with `lock_execution`.
UPDATE approved_action_dispatch_executions AS e
SET status = 'executing', started_at_ms = :now_ms, eligible_at_ms = NULL,
    lease_expires_at_ms = max(e.lease_expires_at_ms, :expires_at_ms),
    version = e.version + 1, updated_at_ms = :now_ms
FROM approved_action_dispatches AS d
WHERE e.dispatch_id = :dispatch_id AND d.dispatch_id = e.dispatch_id
  AND d.approval_request_id = :approval_request_id AND d.action_digest = :action_digest
  AND e.version = :version AND e.lease_owner = :owner AND e.lease_token = :token
  AND e.attempt = :attempt AND e.status = 'leased' AND e.lease_expires_at_ms > :now_ms
RETURNING version, lease_expires_at_ms

-- release_row --
UPDATE approved_action_dispatch_executions
SET status = :to_status, eligible_at_ms = :eligible_at_ms, retry_at_ms = :retry_at_ms,
    attempt = attempt - :refund, result_mutation_id = :mutation_id,
    result_code = :result_code, completed_at_ms = :completed_at_ms,
    version = version + 1, updated_at_ms = :now_ms
WHERE dispatch_id = :dispatch_id AND version = :version
  AND lease_owner = :owner AND lease_token = :token AND attempt = :attempt
  AND status = 'leased'
RETURNING version, attempt

-- complete_row --
UPDATE approved_action_dispatch_executions
SET status = :to_status, result_mutation_id = :mutation_id, result_code = :result_code,
    completed_at_ms = :now_ms, version = version + 1, updated_at_ms = :now_ms
WHERE dispatch_id = :dispatch_id AND status = 'executing'
  AND lease_owner = :owner AND lease_token = :token AND attempt = :attempt
  AND started_at_ms = :started_at_ms AND version >= :version
RETURNING version, attempt

-- select_event_by_mutation --
SELECT dispatch_id, version, from_status, to_status, attempt, lease_owner, lease_token,
       mutation_id, result_code, committed_at_ms
FROM execution_events
WHERE dispatch_id = :dispatch_id AND mutation_id = :mutation_id

-- select_events --
SELECT dispatch_id, version, from_status, to_status, attempt, lease_owner, lease_token,
       mutation_id, result_code, committed_at_ms
FROM execution_events
WHERE dispatch_id = :dispatch_id
ORDER BY version

-- count_by_status --
SELECT status, count(*) AS n
FROM approved_action_dispatch_executions
GROUP BY status

-- count_recovery_required --
-- A started lease has expired only when the caller's clock and the database's both say so.
SELECT count(*) AS n
FROM approved_action_dispatch_executions
WHERE status = 'executing'
  AND lease_expires_at_ms <= min(:now_ms,
      CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))

-- due_summary --
SELECT count(*) AS n, min(eligible_at_ms) AS oldest
FROM approved_action_dispatch_executions
WHERE eligible_at_ms IS NOT NULL AND eligible_at_ms <= :now_ms

-- count_runs --
SELECT count(*) AS n FROM runs

-- select_dispatch --
SELECT dispatch_id, approval_request_id, project_id, action_type, action_ref, action_digest,
       approved_by, created_at_ms
FROM approved_action_dispatches
WHERE dispatch_id = :dispatch_id

-- insert_plan --
INSERT INTO action_plans (project_id, action_ref, action_type, plan_json, plan_digest,
                          created_at_ms)
VALUES (:project_id, :action_ref, :action_type, :plan_json, :plan_digest, :now_ms)

-- select_plan --
SELECT project_id, action_ref, action_type, plan_json, plan_digest
FROM action_plans
WHERE project_id = :project_id AND action_ref = :action_ref

-- insert_approval --
-- :principal is the OS user running the store (file permissions are the authority on edge).
-- db_expires_at_ms counts the requested lifetime from now on the database's (system) clock;
-- the insert trigger bounds it, and approving or consuming after it is refused.
INSERT INTO approval_requests (
    approval_request_id, project_id, action_type, action_ref, action_digest, status, version,
    requested_by, decided_by, requested_principal, expires_at_ms, created_at_ms, updated_at_ms,
    db_expires_at_ms
) VALUES (
    :approval_request_id, :project_id, :action_type, :action_ref, :action_digest, 'pending', 1,
    :requested_by, NULL, :principal, :expires_at_ms, :now_ms, :now_ms,
    CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + (:expires_at_ms - :now_ms)
)

-- select_approval --
SELECT approval_request_id, project_id, action_type, action_ref, action_digest, status, version,
       requested_by, decided_by, requested_principal, decided_principal, consumed_principal,
       expires_at_ms, created_at_ms, updated_at_ms
FROM approval_requests
WHERE approval_request_id = :approval_request_id

-- approve_approval --
UPDATE approval_requests
SET status = 'approved', version = 2, decided_by = :decided_by,
    decided_principal = :principal, updated_at_ms = :now_ms
WHERE approval_request_id = :approval_request_id AND status = 'pending' AND version = 1
  AND expires_at_ms > :now_ms
RETURNING approval_request_id, requested_principal

-- reject_approval --
-- No expiry condition: withdrawing authority is always allowed while pending.
UPDATE approval_requests
SET status = 'rejected', version = 2, decided_by = :decided_by,
    decided_principal = :principal, updated_at_ms = :now_ms
WHERE approval_request_id = :approval_request_id AND status = 'pending' AND version = 1
RETURNING approval_request_id, requested_principal

-- consume_approval --
UPDATE approval_requests
SET status = 'consumed', version = 3, consumed_at_ms = :now_ms,
    consumed_principal = :principal, updated_at_ms = :now_ms
WHERE approval_request_id = :approval_request_id AND status = 'approved' AND version = 2
  AND expires_at_ms > :now_ms
RETURNING project_id, action_type, action_ref, action_digest, decided_by

-- insert_dispatch --
INSERT INTO approved_action_dispatches (
    dispatch_id, approval_request_id, project_id, action_type, action_ref, action_digest,
    approved_by, created_at_ms
) VALUES (
    :dispatch_id, :approval_request_id, :project_id, :action_type, :action_ref, :action_digest,
    :approved_by, :now_ms
)

-- insert_execution --
INSERT INTO approved_action_dispatch_executions (
    dispatch_id, project_id, status, version, attempt, max_attempts, eligible_at_ms,
    created_at_ms, updated_at_ms
) VALUES (
    :dispatch_id, :project_id, 'pending', 0, 0, :max_attempts, :now_ms, :now_ms, :now_ms
)

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

-- select_recovery_required --
SELECT {execution_columns},
       d.approval_request_id, d.action_type, d.action_ref, d.action_digest, d.approved_by,
       d.created_at_ms AS dispatch_created_at_ms,
       o.outcome AS observation_outcome, o.reason_code AS observation_reason,
       o.observation_count, o.last_seen_at_ms AS observation_last_seen_at_ms
FROM approved_action_dispatch_executions AS e
JOIN approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
LEFT JOIN recovery_observations AS o ON o.dispatch_id = e.dispatch_id
-- Expired by the earlier of the caller's clock and the database's (see count_recovery_required).
WHERE e.status = 'executing'
  AND e.lease_expires_at_ms <= min(:now_ms,
      CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
  AND (e.lease_expires_at_ms, e.dispatch_id) > (:after_expires_at_ms, :after_dispatch_id)
ORDER BY e.lease_expires_at_ms, e.dispatch_id
LIMIT :limit

-- resolve_row --
UPDATE approved_action_dispatch_executions
SET status = :to_status, result_mutation_id = :mutation_id, result_code = :result_code,
    completed_at_ms = :now_ms, version = version + 1, updated_at_ms = :now_ms
WHERE dispatch_id = :dispatch_id AND status = 'executing' AND version = :version
  AND lease_owner = :owner AND lease_token = :token AND attempt = :attempt
  AND started_at_ms = :started_at_ms AND lease_expires_at_ms <= :expired_by_ms
RETURNING version

-- cancel_row --
-- The claim's fence: this version, still waiting. Lease columns and attempt stay as they were
-- (the trigger's fence rule); the row leaves the due index.
UPDATE approved_action_dispatch_executions
SET status = 'cancelled', eligible_at_ms = NULL, retry_at_ms = NULL,
    result_mutation_id = :mutation_id, result_code = :result_code,
    completed_at_ms = :now_ms, version = version + 1, updated_at_ms = :now_ms
WHERE dispatch_id = :dispatch_id AND version = :version
  AND status IN ('pending', 'retry_wait')
RETURNING version

-- insert_resolution --
INSERT INTO recovery_resolutions (
    dispatch_id, source, resolution, evidence_digest, resolved_by, principal, reason_code,
    execution_attempt, execution_version, lease_owner, lease_token, started_at_ms,
    committed_at_ms
) VALUES (
    :dispatch_id, :source, :resolution, :evidence_digest, :resolved_by, :principal,
    :reason_code, :attempt, :version, :owner, :token, :started_at_ms,
    CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
)

-- select_resolution --
SELECT dispatch_id, source, resolution, evidence_digest, resolved_by, principal, reason_code,
       execution_attempt, execution_version, lease_owner, lease_token, started_at_ms,
       committed_at_ms
FROM recovery_resolutions
WHERE dispatch_id = :dispatch_id

-- upsert_observation --
INSERT INTO recovery_observations (
    dispatch_id, outcome, reason_code, observation_count, first_seen_at_ms, last_seen_at_ms
) VALUES (:dispatch_id, :outcome, :reason_code, 1, :now_ms, :now_ms)
ON CONFLICT (dispatch_id) DO UPDATE
SET outcome = excluded.outcome, reason_code = excluded.reason_code,
    observation_count = recovery_observations.observation_count + 1,
    last_seen_at_ms = excluded.last_seen_at_ms

-- insert_audit_event --
INSERT INTO security_audit_events (
    kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
) VALUES (
    :kind, :actor, :principal, :project_id, :subject_id, :detail_code,
    CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
)

-- select_audit_events --
SELECT event_id, kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
FROM security_audit_events
WHERE subject_id = :subject_id
ORDER BY event_id

-- backlog_due --
-- Bounded: the due index is read for at most :cap rows, whatever the table holds.
SELECT count(*) AS n, min(eligible_at_ms) AS oldest
FROM (
    SELECT eligible_at_ms FROM approved_action_dispatch_executions
    WHERE eligible_at_ms IS NOT NULL AND eligible_at_ms <= :now_ms
    ORDER BY eligible_at_ms
    LIMIT :cap
) AS due

-- backlog_started --
-- Bounded by the started rows (the executing partial index), never the terminal ones.
SELECT count(*) AS n,
       coalesce(sum(CASE
           WHEN lease_expires_at_ms <= min(:now_ms,
               CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)) THEN 1
           ELSE 0 END), 0) AS expired
FROM approved_action_dispatch_executions
WHERE status = 'executing'

-- database_now --
SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) AS now_ms

-- select_plans --
-- One read for a page of dispatches: the keys arrive as two JSON arrays of equal length.
SELECT p.project_id, p.action_ref, p.action_type, p.plan_json, p.plan_digest
-- Both key columns are bound before the plans are read, so each key is one primary-key probe.
FROM json_each(:project_ids) AS k
JOIN action_plans AS p
  ON p.project_id = k.value AND p.action_ref = json_extract(:action_refs, '$[' || k.key || ']')

-- start_fast --
-- PostgreSQL's one-statement start barrier: a data-modifying CTE writes `start_row` and its
-- ledger event together. SQLite has no data-modifying CTE and no round trip to save: its
-- barrier is the shared transaction (`start_row`, then `insert_event`), one hop. The name
-- stays so both files name the same blocks; nothing runs this one. It matches no row, and it
-- names the parameters of PostgreSQL's block, because the two files bind the same names.
SELECT NULL AS version, NULL AS lease_expires_at_ms
WHERE 0 AND coalesce(:dispatch_id, :approval_request_id, :action_digest, :version, :owner,
                     :token, :attempt, :now_ms, :expires_at_ms) IS NOT NULL

-- create_run_fast --
-- PostgreSQL's one-statement run.create (a data-modifying CTE saves it round trips). SQLite
-- has no data-modifying CTE and no round trip to save: its happy path is the shared
-- transaction (`adapters/sql/runs.create`), one hop. The name stays so both files name the
-- same blocks; nothing runs this one.
SELECT NULL AS version WHERE 0

-- step_run_columns --
step_run_id, run_id, project_id, step_kind, tool_id, tool_version, definition_digest,
action_type, action_ref, action_digest, approval_request_id, binding_digest, status, version,
result_code, created_at_ms, updated_at_ms

-- insert_step_run --
INSERT INTO step_runs (
    step_run_id, run_id, project_id, step_kind, tool_id, tool_version, definition_digest,
    action_type, action_ref, action_digest, approval_request_id, binding_digest, status,
    version, result_code, created_at_ms, updated_at_ms
) VALUES (
    :step_run_id, :run_id, :project_id, 'tool', :tool_id, :tool_version, :definition_digest,
    :action_type, :action_ref, :action_digest, :approval_request_id, :binding_digest, :status,
    1, NULL, :now_ms, :now_ms
)

-- select_step_run --
SELECT {step_run_columns} FROM step_runs WHERE step_run_id = :step_run_id

-- lock_step_run --
-- BEGIN IMMEDIATE already holds the database's one write lock: the plain read is the locked one.
{select_step_run}

-- lock_run --
-- The Run a step moves, read for its compare-and-set; SQLite's write lock is already held.
{select_run}

-- select_step_run_by_approval --
SELECT {step_run_columns} FROM step_runs WHERE approval_request_id = :approval_request_id

-- advance_step_run --
-- The StepRun compare-and-set: only from the exact status and version the caller read.
UPDATE step_runs
SET status = :to_status, version = :to_version, result_code = :result_code,
    updated_at_ms = :now_ms
WHERE step_run_id = :step_run_id AND status = :from_status AND version = :from_version
RETURNING version

-- advance_run_sequence --
-- The Run compare-and-set: one more version and one more event, from what the caller read.
UPDATE runs
SET version = version + 1, event_seq = event_seq + 1, updated_at_ms = :now_ms
WHERE run_id = :run_id AND version = :version AND event_seq = :event_seq
RETURNING version, event_seq

-- insert_step_run_mutation --
INSERT INTO step_run_mutations (
    mutation_id, step_run_id, run_id, project_id, from_status, to_status, from_version,
    to_version, run_event_seq, run_version, reason_code, mutation_digest, committed_at_ms
) VALUES (
    :mutation_id, :step_run_id, :run_id, :project_id, :from_status, :to_status, :from_version,
    :to_version, :run_event_seq, :run_version, :reason_code, :mutation_digest,
    CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
)
RETURNING committed_at_ms

-- mutation_columns --
mutation_id, step_run_id, run_id, project_id, from_status, to_status, from_version,
to_version, run_event_seq, run_version, reason_code, mutation_digest, committed_at_ms

-- select_step_run_mutation --
SELECT {mutation_columns} FROM step_run_mutations WHERE mutation_id = :mutation_id

-- select_step_run_mutations --
SELECT {mutation_columns} FROM step_run_mutations
WHERE step_run_id = :step_run_id
ORDER BY to_version

-- count_step_runs_by_status --
SELECT status, count(*) AS n FROM step_runs GROUP BY status

-- barrier_timeouts --
-- PostgreSQL sets short timeouts for the barrier transaction here. SQLite has none to set
-- (the one connection's busy timeout bounds every wait): the barrier runs this block on both
-- dialects, and here it only selects its parameters back.
SELECT :statement_timeout AS statement_timeout, :lock_timeout AS lock_timeout,
       :idle_timeout AS idle_timeout

-- select_barrier_identities --
-- Step 1 of the barrier: every start/replay identity the command carries, by unique key.
SELECT start_id, command_digest FROM tool_execution_start_barriers
WHERE start_id = :start_id
   OR (run_id = :run_id AND step_run_id = :step_run_id
       AND started_step_run_version = :started_version)
   OR mutation_id = :mutation_id
   OR trace_id = :trace_id
   OR audit_receipt_id = :audit_receipt_id
   OR dispatch_id = :dispatch_id

-- insert_tool_audit_event --
INSERT INTO security_audit_events (
    kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
) VALUES (
    :kind, :actor, :principal, :project_id, :subject_id, :detail_code,
    CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
)
RETURNING event_id, kind, actor, principal, project_id, subject_id, detail_code

-- insert_trace_anchor --
INSERT INTO trace_anchors (
    trace_id, project_id, run_id, step_run_id, start_id, command_digest, trace_digest,
    committed_at_ms
) VALUES (
    :trace_id, :project_id, :run_id, :step_run_id, :start_id, :command_digest, :trace_digest,
    CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
)

-- insert_audit_receipt --
INSERT INTO audit_receipts (
    receipt_id, audit_event_id, trace_id, start_id, receipt_digest, committed_at_ms
) VALUES (
    :receipt_id, :audit_event_id, :trace_id, :start_id, :receipt_digest,
    CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
)

-- insert_barrier --
INSERT INTO tool_execution_start_barriers (
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
FROM tool_execution_start_barriers AS b
LEFT JOIN step_run_mutations AS m ON m.mutation_id = b.mutation_id
LEFT JOIN run_events AS e ON e.run_id = b.run_id AND e.seq = b.run_event_seq
LEFT JOIN step_runs AS s ON s.step_run_id = b.step_run_id
LEFT JOIN trace_anchors AS t ON t.trace_id = b.trace_id
LEFT JOIN audit_receipts AS r ON r.receipt_id = b.audit_receipt_id
LEFT JOIN security_audit_events AS a ON a.event_id = b.audit_event_id

-- select_barrier_by_start_id --
{barrier_read}
WHERE b.start_id = :start_id

-- select_barrier_by_started_version --
{barrier_read}
WHERE b.run_id = :run_id AND b.step_run_id = :step_run_id
  AND b.started_step_run_version = :started_version

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
-- `executing`: 1 recovery_required, 0 still live, NULL either, at :settling_ms (the earlier of
-- the caller's clock and the database's, as in count_recovery_required). No lease token.
SELECT d.dispatch_id, d.project_id, d.action_type, d.action_ref, d.created_at_ms,
       e.status, e.attempt, e.max_attempts, e.lease_expires_at_ms, e.updated_at_ms,
       e.result_code
FROM approved_action_dispatches AS d
JOIN approved_action_dispatch_executions AS e ON e.dispatch_id = d.dispatch_id
WHERE (d.created_at_ms, d.dispatch_id) < (:after_created_at_ms, :after_dispatch_id)
  AND (:project_id IS NULL OR d.project_id = :project_id)
  AND (:action_type IS NULL OR d.action_type = :action_type)
  AND (:stored_status IS NULL OR e.status = :stored_status)
  AND (:lease_expired IS NULL OR (e.lease_expires_at_ms <= :settling_ms) = :lease_expired)
ORDER BY d.created_at_ms DESC, d.dispatch_id DESC
LIMIT :limit

-- select_dispatch_view --
-- `dispatch show`: the dispatch, its execution without the lease token, its last observation.
SELECT d.dispatch_id, d.approval_request_id, d.project_id, d.action_type, d.action_ref,
       d.action_digest, d.approved_by, d.created_at_ms AS dispatch_created_at_ms,
       e.status, e.version, e.attempt, e.max_attempts, e.eligible_at_ms, e.retry_at_ms,
       e.lease_owner, e.lease_expires_at_ms, e.started_at_ms, e.result_mutation_id,
       e.result_code, e.completed_at_ms, e.created_at_ms, e.updated_at_ms,
       o.outcome AS observation_outcome, o.reason_code AS observation_reason,
       o.observation_count, o.last_seen_at_ms AS observation_last_seen_at_ms
FROM approved_action_dispatches AS d
JOIN approved_action_dispatch_executions AS e ON e.dispatch_id = d.dispatch_id
LEFT JOIN recovery_observations AS o ON o.dispatch_id = d.dispatch_id
WHERE d.dispatch_id = :dispatch_id

-- select_event_views --
-- The ledger of one dispatch for `dispatch show`: `select_events` without the lease token.
SELECT version, from_status, to_status, attempt, lease_owner, mutation_id, result_code,
       committed_at_ms
FROM execution_events
WHERE dispatch_id = :dispatch_id
ORDER BY version

-- select_run_ids_by_dispatch --
-- The Run holding each dispatch id (a JSON array) as its idempotency key: `submit --json`.
-- Only dispatches and Runs, which every login that may submit can read.
SELECT d.dispatch_id, r.run_id
FROM json_each(:dispatch_ids) AS k
CROSS JOIN approved_action_dispatches AS d ON d.dispatch_id = k.value
JOIN runs AS r ON r.project_id = d.project_id AND r.idempotency_key = d.dispatch_id

-- prune_lock --
-- One prune at a time: BEGIN IMMEDIATE already holds the database's one write lock.
SELECT 1

-- prunable_dispatches --
-- The dispatch trees a prune may take: terminal before the cutoff, and named by no tool step
-- of a Run (its StepRun binds the approval, its start barrier the dispatch: Runs are business
-- data and keep what they name). The status list matches the partial index of migration 0009,
-- which is named: the planner would otherwise take the status index and sort every finished
-- row for each batch.
FROM approved_action_dispatch_executions AS e
    INDEXED BY approved_action_dispatch_executions_finished
JOIN approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
WHERE e.status IN ('blocked', 'cancelled', 'failed', 'succeeded')
  AND e.updated_at_ms < :cutoff_ms
  AND NOT EXISTS (
      SELECT 1 FROM step_runs AS s WHERE s.approval_request_id = d.approval_request_id
  )
  AND NOT EXISTS (
      SELECT 1 FROM tool_execution_start_barriers AS b WHERE b.dispatch_id = d.dispatch_id
  )

-- prune_grant_permits --
INSERT INTO prune_permits (dispatch_id, approval_request_id, project_id, action_ref, cutoff_ms)
SELECT d.dispatch_id, d.approval_request_id, d.project_id, d.action_ref, :cutoff_ms
{prunable_dispatches}
ORDER BY e.updated_at_ms, e.dispatch_id
LIMIT :limit

-- prune_count_permits --
SELECT count(*) AS n FROM prune_permits

-- prune_count_dispatches --
SELECT count(*) AS n {prunable_dispatches}

-- prune_execution_events --
DELETE FROM execution_events WHERE dispatch_id IN (SELECT dispatch_id FROM prune_permits)

-- prune_receipts --
DELETE FROM approved_run_action_receipts
WHERE dispatch_id IN (SELECT dispatch_id FROM prune_permits)

-- prune_resolutions --
DELETE FROM recovery_resolutions WHERE dispatch_id IN (SELECT dispatch_id FROM prune_permits)

-- prune_observations --
DELETE FROM recovery_observations WHERE dispatch_id IN (SELECT dispatch_id FROM prune_permits)

-- prune_executions --
DELETE FROM approved_action_dispatch_executions
WHERE dispatch_id IN (SELECT dispatch_id FROM prune_permits)

-- prune_dispatches --
DELETE FROM approved_action_dispatches
WHERE dispatch_id IN (SELECT dispatch_id FROM prune_permits)

-- prune_approvals --
DELETE FROM approval_requests
WHERE approval_request_id IN (SELECT approval_request_id FROM prune_permits)

-- prune_plans --
-- A plan goes with the last request that names it (a rejected one may still name it).
DELETE FROM action_plans
WHERE (project_id, action_ref) IN (SELECT project_id, action_ref FROM prune_permits)
  AND NOT EXISTS (
      SELECT 1 FROM approval_requests AS a
      WHERE a.project_id = action_plans.project_id AND a.action_ref = action_plans.action_ref
  )

-- prune_clear_permits --
DELETE FROM prune_permits

-- prunable_audit_events --
-- Audit records older than the audit cutoff, except those a tool start's audit receipt or
-- barrier names (they are part of a Run's history, which is kept).
FROM security_audit_events AS s
WHERE s.committed_at_ms < :audit_cutoff_ms
  AND NOT EXISTS (SELECT 1 FROM audit_receipts AS r WHERE r.audit_event_id = s.event_id)
  AND NOT EXISTS (
      SELECT 1 FROM tool_execution_start_barriers AS b WHERE b.audit_event_id = s.event_id
  )

-- prune_grant_audit_permit --
INSERT INTO audit_prune_permits (cutoff_ms) VALUES (:audit_cutoff_ms)

-- prune_audit_events --
DELETE FROM security_audit_events
WHERE event_id IN (
    SELECT s.event_id {prunable_audit_events}
    ORDER BY s.committed_at_ms, s.event_id
    LIMIT :limit
)
RETURNING event_id

-- prune_count_audit_events --
SELECT count(*) AS n {prunable_audit_events}

-- prune_clear_audit_permits --
DELETE FROM audit_prune_permits
