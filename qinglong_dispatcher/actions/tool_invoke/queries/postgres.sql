-- PostgreSQL statements: tool steps: StepRuns, their ledger and the start barrier (docs/decisions/0019).

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

-- barrier_timeouts --
-- Short, fixed bounds for the barrier transaction only (is_local = true), and the server's
-- wall clock (as `database_now`), in the same round trip.
SELECT set_config('statement_timeout', :statement_timeout, true) AS statement_timeout,
       set_config('lock_timeout', :lock_timeout, true) AS lock_timeout,
       set_config('idle_in_transaction_session_timeout', :idle_timeout, true) AS idle_timeout,
       (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms

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
    :kind, :actor, qinglong.acting_principal(), :project_id, :subject_id, :detail_code,
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

-- count_step_runs_by_status --
SELECT status, count(*) AS n FROM qinglong.step_runs GROUP BY status
