-- Tool StepRuns and the atomic start barrier (docs/decisions/0019), in schema
-- qinglong: the StepRun, its mutation ledger, the Trace anchor, the Audit receipt and the
-- immutable start barrier. The tool-start audit event itself is a security_audit_events row
-- (kind 'tool.start_authorised'). Everything but step_runs is immutable.
--
-- Amended in place: its comments point at docs/; the SQL is unchanged. A database that
-- applied the earlier text matches this checksum:
-- amends checksum b27a5e92f15fcbca105a86e9adc62428ff4ffac49cc9b136d5e5b73246d2bde1

CREATE TABLE qinglong.step_runs (
    step_run_id         TEXT PRIMARY KEY,
    run_id              TEXT NOT NULL REFERENCES qinglong.runs (run_id),
    project_id          TEXT NOT NULL,
    step_kind           TEXT NOT NULL CHECK (step_kind = 'tool'),
    tool_id             TEXT NOT NULL,
    tool_version        INTEGER NOT NULL CHECK (tool_version >= 1),
    definition_digest   TEXT NOT NULL CHECK (length(definition_digest) = 64),
    action_type         TEXT NOT NULL,
    action_ref          TEXT NOT NULL,
    action_digest       TEXT NOT NULL CHECK (length(action_digest) = 64),
    approval_request_id TEXT UNIQUE
        REFERENCES qinglong.approval_requests (approval_request_id),
    binding_digest      TEXT NOT NULL CHECK (length(binding_digest) = 64),
    status              TEXT NOT NULL CHECK (status IN
        ('ready', 'waiting_approval', 'running', 'succeeded', 'failed', 'lost')),
    version             BIGINT NOT NULL CHECK (version >= 1),
    result_code         TEXT,
    created_at_ms       BIGINT NOT NULL,
    updated_at_ms       BIGINT NOT NULL,
    CHECK (status <> 'waiting_approval' OR approval_request_id IS NOT NULL)
);

CREATE INDEX step_runs_run ON qinglong.step_runs (run_id);
CREATE INDEX step_runs_status ON qinglong.step_runs (status);

CREATE TABLE qinglong.step_run_mutations (
    mutation_id     TEXT PRIMARY KEY,
    step_run_id     TEXT NOT NULL REFERENCES qinglong.step_runs (step_run_id),
    run_id          TEXT NOT NULL REFERENCES qinglong.runs (run_id),
    project_id      TEXT NOT NULL,
    from_status     TEXT NOT NULL,
    to_status       TEXT NOT NULL,
    from_version    BIGINT NOT NULL,
    to_version      BIGINT NOT NULL,
    run_event_seq   BIGINT NOT NULL,
    run_version     BIGINT NOT NULL,
    reason_code     TEXT NOT NULL,
    mutation_digest TEXT NOT NULL CHECK (length(mutation_digest) = 64),
    committed_at_ms BIGINT NOT NULL,
    UNIQUE (step_run_id, to_version),
    FOREIGN KEY (run_id, run_event_seq) REFERENCES qinglong.run_events (run_id, seq)
);

CREATE TABLE qinglong.trace_anchors (
    trace_id        TEXT PRIMARY KEY,
    project_id      TEXT NOT NULL,
    run_id          TEXT NOT NULL REFERENCES qinglong.runs (run_id),
    step_run_id     TEXT NOT NULL REFERENCES qinglong.step_runs (step_run_id),
    start_id        TEXT NOT NULL UNIQUE,
    command_digest  TEXT NOT NULL CHECK (length(command_digest) = 64),
    trace_digest    TEXT NOT NULL CHECK (length(trace_digest) = 64),
    committed_at_ms BIGINT NOT NULL
);

CREATE TABLE qinglong.audit_receipts (
    receipt_id      TEXT PRIMARY KEY,
    audit_event_id  BIGINT NOT NULL UNIQUE
        REFERENCES qinglong.security_audit_events (event_id),
    trace_id        TEXT NOT NULL UNIQUE REFERENCES qinglong.trace_anchors (trace_id),
    start_id        TEXT NOT NULL UNIQUE,
    receipt_digest  TEXT NOT NULL CHECK (length(receipt_digest) = 64),
    committed_at_ms BIGINT NOT NULL
);

CREATE TABLE qinglong.tool_execution_start_barriers (
    start_id                 TEXT PRIMARY KEY,
    schema_version           INTEGER NOT NULL CHECK (schema_version = 1),
    project_id               TEXT NOT NULL,
    run_id                   TEXT NOT NULL REFERENCES qinglong.runs (run_id),
    step_run_id              TEXT NOT NULL REFERENCES qinglong.step_runs (step_run_id),
    started_step_run_version BIGINT NOT NULL CHECK (started_step_run_version >= 2),
    started_step_run_digest  TEXT NOT NULL CHECK (length(started_step_run_digest) = 64),
    command_digest           TEXT NOT NULL CHECK (length(command_digest) = 64),
    snapshot_digest          TEXT NOT NULL CHECK (length(snapshot_digest) = 64),
    tool_id                  TEXT NOT NULL,
    tool_version             INTEGER NOT NULL,
    definition_digest        TEXT NOT NULL CHECK (length(definition_digest) = 64),
    policy_fence             TEXT NOT NULL CHECK (length(policy_fence) = 64),
    action_digest            TEXT NOT NULL CHECK (length(action_digest) = 64),
    admission_digest         TEXT NOT NULL CHECK (length(admission_digest) = 64),
    approval_request_id      TEXT
        REFERENCES qinglong.approval_requests (approval_request_id),
    dispatch_id              TEXT UNIQUE
        REFERENCES qinglong.approved_action_dispatches (dispatch_id),
    mutation_id              TEXT NOT NULL UNIQUE
        REFERENCES qinglong.step_run_mutations (mutation_id),
    mutation_digest          TEXT NOT NULL CHECK (length(mutation_digest) = 64),
    run_event_seq            BIGINT NOT NULL,
    run_version              BIGINT NOT NULL,
    trace_id                 TEXT NOT NULL UNIQUE REFERENCES qinglong.trace_anchors (trace_id),
    trace_digest             TEXT NOT NULL CHECK (length(trace_digest) = 64),
    audit_event_id           BIGINT NOT NULL UNIQUE
        REFERENCES qinglong.security_audit_events (event_id),
    audit_receipt_id         TEXT NOT NULL UNIQUE
        REFERENCES qinglong.audit_receipts (receipt_id),
    audit_receipt_digest     TEXT NOT NULL CHECK (length(audit_receipt_digest) = 64),
    barrier_json             TEXT NOT NULL CHECK (octet_length(barrier_json) <= 16384),
    barrier_digest           TEXT NOT NULL CHECK (length(barrier_digest) = 64),
    committed_at_ms          BIGINT NOT NULL,
    UNIQUE (run_id, step_run_id, started_step_run_version),
    UNIQUE (run_id, run_event_seq),
    FOREIGN KEY (run_id, run_event_seq) REFERENCES qinglong.run_events (run_id, seq),
    CHECK ((approval_request_id IS NULL) = (dispatch_id IS NULL))
);

CREATE TRIGGER step_run_mutations_immutable
    BEFORE UPDATE OR DELETE OR TRUNCATE ON qinglong.step_run_mutations
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER trace_anchors_immutable
    BEFORE UPDATE OR DELETE OR TRUNCATE ON qinglong.trace_anchors
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER audit_receipts_immutable
    BEFORE UPDATE OR DELETE OR TRUNCATE ON qinglong.audit_receipts
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER tool_execution_start_barriers_immutable
    BEFORE UPDATE OR DELETE OR TRUNCATE ON qinglong.tool_execution_start_barriers
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();

-- Grants (docs/security.md). The runtime: SELECT, INSERT only on the barrier, ledger and audit
-- tables; SELECT, INSERT, UPDATE on step_runs (runs are already updatable). The operator
-- reads everything but the barriers, appends the bookkeeping a recovery resolution writes
-- (ledger lines; Run events and audit events are granted in 0002/0003), and may UPDATE only
-- the state columns of a StepRun.
GRANT SELECT, INSERT ON qinglong.step_run_mutations, qinglong.trace_anchors,
    qinglong.audit_receipts, qinglong.tool_execution_start_barriers TO qinglong_runtime;
GRANT SELECT, INSERT, UPDATE ON qinglong.step_runs TO qinglong_runtime;

GRANT SELECT ON qinglong.step_runs, qinglong.step_run_mutations, qinglong.trace_anchors,
    qinglong.audit_receipts TO qinglong_operator;
GRANT INSERT ON qinglong.step_run_mutations TO qinglong_operator;
GRANT UPDATE (status, version, result_code, updated_at_ms) ON qinglong.step_runs
    TO qinglong_operator;
