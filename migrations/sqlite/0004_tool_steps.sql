-- Tool StepRuns and the atomic start barrier (docs/decisions/0019): the StepRun,
-- its mutation ledger, the Trace anchor, the Audit receipt and the immutable start barrier.
-- The tool-start audit event itself is a security_audit_events row (kind
-- 'tool.start_authorised'). Everything but step_runs is immutable.
--
-- Amended in place: its comments point at docs/; the SQL is unchanged. A database that
-- applied the earlier text matches this checksum:
-- amends checksum 773b88480722443de06624c891cf573d5dcce8094127f40a03baf8fc0cdd9397

CREATE TABLE step_runs (
    step_run_id         TEXT PRIMARY KEY,
    run_id              TEXT NOT NULL REFERENCES runs (run_id),
    project_id          TEXT NOT NULL,
    step_kind           TEXT NOT NULL CHECK (step_kind = 'tool'),
    tool_id             TEXT NOT NULL,
    tool_version        INTEGER NOT NULL CHECK (tool_version >= 1),
    definition_digest   TEXT NOT NULL CHECK (length(definition_digest) = 64),
    action_type         TEXT NOT NULL,
    action_ref          TEXT NOT NULL,
    action_digest       TEXT NOT NULL CHECK (length(action_digest) = 64),
    approval_request_id TEXT UNIQUE REFERENCES approval_requests (approval_request_id),
    binding_digest      TEXT NOT NULL CHECK (length(binding_digest) = 64),
    status              TEXT NOT NULL CHECK (status IN
        ('ready', 'waiting_approval', 'running', 'succeeded', 'failed', 'lost')),
    version             INTEGER NOT NULL CHECK (version >= 1),
    result_code         TEXT,
    created_at_ms       INTEGER NOT NULL,
    updated_at_ms       INTEGER NOT NULL,
    CHECK (status <> 'waiting_approval' OR approval_request_id IS NOT NULL)
) STRICT;

CREATE INDEX step_runs_run ON step_runs (run_id);
CREATE INDEX step_runs_status ON step_runs (status);

CREATE TABLE step_run_mutations (
    mutation_id     TEXT PRIMARY KEY,
    step_run_id     TEXT NOT NULL REFERENCES step_runs (step_run_id),
    run_id          TEXT NOT NULL REFERENCES runs (run_id),
    project_id      TEXT NOT NULL,
    from_status     TEXT NOT NULL,
    to_status       TEXT NOT NULL,
    from_version    INTEGER NOT NULL,
    to_version      INTEGER NOT NULL,
    run_event_seq   INTEGER NOT NULL,
    run_version     INTEGER NOT NULL,
    reason_code     TEXT NOT NULL,
    mutation_digest TEXT NOT NULL CHECK (length(mutation_digest) = 64),
    committed_at_ms INTEGER NOT NULL,
    UNIQUE (step_run_id, to_version),
    FOREIGN KEY (run_id, run_event_seq) REFERENCES run_events (run_id, seq)
) STRICT;

CREATE TABLE trace_anchors (
    trace_id        TEXT PRIMARY KEY,
    project_id      TEXT NOT NULL,
    run_id          TEXT NOT NULL REFERENCES runs (run_id),
    step_run_id     TEXT NOT NULL REFERENCES step_runs (step_run_id),
    start_id        TEXT NOT NULL UNIQUE,
    command_digest  TEXT NOT NULL CHECK (length(command_digest) = 64),
    trace_digest    TEXT NOT NULL CHECK (length(trace_digest) = 64),
    committed_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE audit_receipts (
    receipt_id      TEXT PRIMARY KEY,
    audit_event_id  INTEGER NOT NULL UNIQUE REFERENCES security_audit_events (event_id),
    trace_id        TEXT NOT NULL UNIQUE REFERENCES trace_anchors (trace_id),
    start_id        TEXT NOT NULL UNIQUE,
    receipt_digest  TEXT NOT NULL CHECK (length(receipt_digest) = 64),
    committed_at_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE tool_execution_start_barriers (
    start_id                 TEXT PRIMARY KEY,
    schema_version           INTEGER NOT NULL CHECK (schema_version = 1),
    project_id               TEXT NOT NULL,
    run_id                   TEXT NOT NULL REFERENCES runs (run_id),
    step_run_id              TEXT NOT NULL REFERENCES step_runs (step_run_id),
    started_step_run_version INTEGER NOT NULL CHECK (started_step_run_version >= 2),
    started_step_run_digest  TEXT NOT NULL CHECK (length(started_step_run_digest) = 64),
    command_digest           TEXT NOT NULL CHECK (length(command_digest) = 64),
    snapshot_digest          TEXT NOT NULL CHECK (length(snapshot_digest) = 64),
    tool_id                  TEXT NOT NULL,
    tool_version             INTEGER NOT NULL,
    definition_digest        TEXT NOT NULL CHECK (length(definition_digest) = 64),
    policy_fence             TEXT NOT NULL CHECK (length(policy_fence) = 64),
    action_digest            TEXT NOT NULL CHECK (length(action_digest) = 64),
    admission_digest         TEXT NOT NULL CHECK (length(admission_digest) = 64),
    approval_request_id      TEXT REFERENCES approval_requests (approval_request_id),
    dispatch_id              TEXT UNIQUE REFERENCES approved_action_dispatches (dispatch_id),
    mutation_id              TEXT NOT NULL UNIQUE REFERENCES step_run_mutations (mutation_id),
    mutation_digest          TEXT NOT NULL CHECK (length(mutation_digest) = 64),
    run_event_seq            INTEGER NOT NULL,
    run_version              INTEGER NOT NULL,
    trace_id                 TEXT NOT NULL UNIQUE REFERENCES trace_anchors (trace_id),
    trace_digest             TEXT NOT NULL CHECK (length(trace_digest) = 64),
    audit_event_id           INTEGER NOT NULL UNIQUE
        REFERENCES security_audit_events (event_id),
    audit_receipt_id         TEXT NOT NULL UNIQUE REFERENCES audit_receipts (receipt_id),
    audit_receipt_digest     TEXT NOT NULL CHECK (length(audit_receipt_digest) = 64),
    barrier_json             TEXT NOT NULL CHECK (length(CAST(barrier_json AS BLOB)) <= 16384),
    barrier_digest           TEXT NOT NULL CHECK (length(barrier_digest) = 64),
    committed_at_ms          INTEGER NOT NULL,
    UNIQUE (run_id, step_run_id, started_step_run_version),
    UNIQUE (run_id, run_event_seq),
    FOREIGN KEY (run_id, run_event_seq) REFERENCES run_events (run_id, seq),
    CHECK ((approval_request_id IS NULL) = (dispatch_id IS NULL))
) STRICT;

CREATE TRIGGER step_run_mutations_immutable_update BEFORE UPDATE ON step_run_mutations
BEGIN SELECT RAISE(ABORT, 'step_run_mutations is immutable'); END;
CREATE TRIGGER step_run_mutations_immutable_delete BEFORE DELETE ON step_run_mutations
BEGIN SELECT RAISE(ABORT, 'step_run_mutations is immutable'); END;
CREATE TRIGGER trace_anchors_immutable_update BEFORE UPDATE ON trace_anchors
BEGIN SELECT RAISE(ABORT, 'trace_anchors is immutable'); END;
CREATE TRIGGER trace_anchors_immutable_delete BEFORE DELETE ON trace_anchors
BEGIN SELECT RAISE(ABORT, 'trace_anchors is immutable'); END;
CREATE TRIGGER audit_receipts_immutable_update BEFORE UPDATE ON audit_receipts
BEGIN SELECT RAISE(ABORT, 'audit_receipts is immutable'); END;
CREATE TRIGGER audit_receipts_immutable_delete BEFORE DELETE ON audit_receipts
BEGIN SELECT RAISE(ABORT, 'audit_receipts is immutable'); END;
CREATE TRIGGER tool_execution_start_barriers_immutable_update
BEFORE UPDATE ON tool_execution_start_barriers
BEGIN SELECT RAISE(ABORT, 'tool_execution_start_barriers is immutable'); END;
CREATE TRIGGER tool_execution_start_barriers_immutable_delete
BEFORE DELETE ON tool_execution_start_barriers
BEGIN SELECT RAISE(ABORT, 'tool_execution_start_barriers is immutable'); END;
