-- Runs created by run.create, their first attempt and events, and the receipt that is the
-- recovery evidence (docs/actions.md). Receipts and Run events are immutable.
--
-- Amended in place: its comments point at docs/; the SQL is unchanged. A database that
-- applied the earlier text matches this checksum:
-- amends checksum 8be77ce72bd8ec5795fa6f282c362132008dfa468c7304e7a08fbf50737871d9

CREATE TABLE runs (
    run_id            TEXT PRIMARY KEY,
    project_id        TEXT NOT NULL,
    task_id           TEXT NOT NULL,
    task_revision     INTEGER NOT NULL CHECK (task_revision >= 0),
    executor_type     TEXT NOT NULL,
    priority          INTEGER NOT NULL CHECK (priority BETWEEN -1000 AND 1000),
    task_name         TEXT,
    task_snapshot_ref TEXT,
    input_ref         TEXT,
    status            TEXT NOT NULL
        CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    trigger_type      TEXT NOT NULL,
    execution_origin  TEXT NOT NULL,
    execution_owner   TEXT NOT NULL,
    request_id        TEXT,
    idempotency_key   TEXT NOT NULL,
    accepted_at_ms    INTEGER NOT NULL,
    version           INTEGER NOT NULL CHECK (version >= 1),
    event_seq         INTEGER NOT NULL CHECK (event_seq >= 0),
    created_at_ms     INTEGER NOT NULL,
    updated_at_ms     INTEGER NOT NULL,
    UNIQUE (project_id, idempotency_key)
) STRICT;

CREATE INDEX runs_idempotency_key ON runs (idempotency_key);

CREATE TABLE run_attempts (
    run_id        TEXT NOT NULL REFERENCES runs (run_id),
    attempt_no    INTEGER NOT NULL CHECK (attempt_no >= 1),
    status        TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (run_id, attempt_no)
) STRICT;

CREATE TABLE run_events (
    run_id          TEXT NOT NULL REFERENCES runs (run_id),
    seq             INTEGER NOT NULL CHECK (seq >= 1),
    event_type      TEXT NOT NULL,
    run_version     INTEGER NOT NULL,
    committed_at_ms INTEGER NOT NULL,
    PRIMARY KEY (run_id, seq)
) STRICT;

CREATE TABLE approved_run_action_receipts (
    dispatch_id         TEXT PRIMARY KEY REFERENCES approved_action_dispatches (dispatch_id),
    schema_version      INTEGER NOT NULL,
    approval_request_id TEXT NOT NULL,
    project_id          TEXT NOT NULL,
    action_type         TEXT NOT NULL,
    action_digest       TEXT NOT NULL,
    execution_attempt   INTEGER NOT NULL,
    execution_version   INTEGER NOT NULL,
    started_at_ms       INTEGER NOT NULL,
    idempotency_key     TEXT NOT NULL,
    outcome             TEXT NOT NULL,
    result_code         TEXT NOT NULL,
    resource_type       TEXT NOT NULL,
    resource_id         TEXT NOT NULL REFERENCES runs (run_id),
    created_at_ms       INTEGER NOT NULL,
    evidence_digest     TEXT NOT NULL CHECK (length(evidence_digest) = 64),
    UNIQUE (resource_type, resource_id)
) STRICT;

CREATE TRIGGER run_events_immutable_update BEFORE UPDATE ON run_events
BEGIN SELECT RAISE(ABORT, 'run_events is immutable'); END;
CREATE TRIGGER run_events_immutable_delete BEFORE DELETE ON run_events
BEGIN SELECT RAISE(ABORT, 'run_events is immutable'); END;
CREATE TRIGGER approved_run_action_receipts_immutable_update
BEFORE UPDATE ON approved_run_action_receipts
BEGIN SELECT RAISE(ABORT, 'approved_run_action_receipts is immutable'); END;
CREATE TRIGGER approved_run_action_receipts_immutable_delete
BEFORE DELETE ON approved_run_action_receipts
BEGIN SELECT RAISE(ABORT, 'approved_run_action_receipts is immutable'); END;
