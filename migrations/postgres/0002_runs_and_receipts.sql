-- Runs created by run.create, their first attempt and events, and the receipt that is the
-- recovery evidence (docs/actions.md), in schema qinglong. Receipts and Run events are immutable.
--
-- Amended in place: its comments point at docs/; the SQL is unchanged. A database that
-- applied the earlier text matches this checksum:
-- amends checksum bcc0992657df1b5a466b980ad65e2f5cbebbd05848ba791b2e512a266027758f

CREATE TABLE qinglong.runs (
    run_id            TEXT PRIMARY KEY,
    project_id        TEXT NOT NULL,
    task_id           TEXT NOT NULL,
    task_revision     BIGINT NOT NULL CHECK (task_revision >= 0),
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
    accepted_at_ms    BIGINT NOT NULL,
    version           BIGINT NOT NULL CHECK (version >= 1),
    event_seq         BIGINT NOT NULL CHECK (event_seq >= 0),
    created_at_ms     BIGINT NOT NULL,
    updated_at_ms     BIGINT NOT NULL,
    UNIQUE (project_id, idempotency_key)
);

CREATE INDEX runs_idempotency_key ON qinglong.runs (idempotency_key);

CREATE TABLE qinglong.run_attempts (
    run_id        TEXT NOT NULL REFERENCES qinglong.runs (run_id),
    attempt_no    INTEGER NOT NULL CHECK (attempt_no >= 1),
    status        TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (run_id, attempt_no)
);

CREATE TABLE qinglong.run_events (
    run_id          TEXT NOT NULL REFERENCES qinglong.runs (run_id),
    seq             BIGINT NOT NULL CHECK (seq >= 1),
    event_type      TEXT NOT NULL,
    run_version     BIGINT NOT NULL,
    committed_at_ms BIGINT NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE qinglong.approved_run_action_receipts (
    dispatch_id         TEXT PRIMARY KEY
        REFERENCES qinglong.approved_action_dispatches (dispatch_id),
    schema_version      INTEGER NOT NULL,
    approval_request_id TEXT NOT NULL,
    project_id          TEXT NOT NULL,
    action_type         TEXT NOT NULL,
    action_digest       TEXT NOT NULL,
    execution_attempt   INTEGER NOT NULL,
    execution_version   BIGINT NOT NULL,
    started_at_ms       BIGINT NOT NULL,
    idempotency_key     TEXT NOT NULL,
    outcome             TEXT NOT NULL,
    result_code         TEXT NOT NULL,
    resource_type       TEXT NOT NULL,
    resource_id         TEXT NOT NULL REFERENCES qinglong.runs (run_id),
    created_at_ms       BIGINT NOT NULL,
    evidence_digest     TEXT NOT NULL CHECK (length(evidence_digest) = 64),
    UNIQUE (resource_type, resource_id)
);

CREATE TRIGGER run_events_immutable
    BEFORE UPDATE OR DELETE OR TRUNCATE ON qinglong.run_events
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER approved_run_action_receipts_immutable
    BEFORE UPDATE OR DELETE OR TRUNCATE ON qinglong.approved_run_action_receipts
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();

-- Grants (docs/security.md): see 0001. The operator may append Run events and change only the
-- state columns of a Run.
GRANT SELECT, INSERT ON qinglong.run_events, qinglong.approved_run_action_receipts
    TO qinglong_runtime;
GRANT SELECT, INSERT, UPDATE ON qinglong.runs, qinglong.run_attempts TO qinglong_runtime;

GRANT SELECT ON qinglong.runs, qinglong.run_attempts, qinglong.run_events,
    qinglong.approved_run_action_receipts TO qinglong_operator;
GRANT INSERT ON qinglong.run_events TO qinglong_operator;
GRANT UPDATE (status, version, event_seq, updated_at_ms) ON qinglong.runs TO qinglong_operator;
