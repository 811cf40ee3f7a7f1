-- The sqlite schema a fresh `migrate` leaves: every migration of migrations/sqlite/ applied.
-- Generated; do not edit. A test compares it with a fresh migration; after a new migration run
--     python -m tests.support.schema_reference --write
-- (docs/schema/README.md says what is in it and in which order).

-- file settings
PRAGMA journal_mode = wal;
PRAGMA auto_vacuum = 2;
PRAGMA user_version = 0;
PRAGMA application_id = 0;

-- tables (41)

-- table action_plans
CREATE TABLE action_plans (
    project_id    TEXT NOT NULL,
    action_ref    TEXT NOT NULL,
    action_type   TEXT NOT NULL,
    plan_json     TEXT NOT NULL,
    plan_digest   TEXT NOT NULL CHECK (length(plan_digest) = 64),
    created_at_ms INTEGER NOT NULL, plan_key_id TEXT, plan_algorithm TEXT
    CHECK (plan_algorithm IS NULL OR plan_algorithm = 'AES-256-GCM'), plan_sealed BLOB, plan_schema_version INTEGER, target TEXT
    CHECK (target IS NULL OR (length(target) BETWEEN 1 AND 128)),
    PRIMARY KEY (project_id, action_ref)
) STRICT;

-- table api_tokens
CREATE TABLE api_tokens (
    token_id        TEXT PRIMARY KEY CHECK (length(token_id) = 20 AND token_id GLOB 'tok_*'),
    secret_sha256   TEXT NOT NULL UNIQUE CHECK (length(secret_sha256) = 64),
    principal       TEXT NOT NULL CHECK (length(principal) BETWEEN 1 AND 52),
    role            TEXT NOT NULL
        CHECK (role IN ('viewer', 'submitter', 'approver', 'operator')),
    created_by      TEXT NOT NULL,
    created_at_ms   INTEGER NOT NULL,
    expires_at_ms   INTEGER NOT NULL,
    last_used_at_ms INTEGER,
    revoked_at_ms   INTEGER,
    CHECK (expires_at_ms > created_at_ms)
) STRICT;

-- table approval_events
CREATE TABLE approval_events (
    id                  INTEGER PRIMARY KEY,
    kind                TEXT NOT NULL CHECK (kind IN ('approval.expiring')),
    approval_request_id TEXT NOT NULL
        REFERENCES approval_requests (approval_request_id) ON DELETE CASCADE,
    at_ms               INTEGER NOT NULL
        DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)),
    UNIQUE (approval_request_id, kind)
);

-- table approval_group_members
CREATE TABLE approval_group_members (
    group_name TEXT NOT NULL,
    principal  TEXT NOT NULL,
    PRIMARY KEY (group_name, principal)
);

-- table approval_policies
CREATE TABLE approval_policies (
    name               TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 63),
    version            INTEGER NOT NULL CHECK (version >= 1),
    action_type        TEXT NOT NULL,
    project_id         TEXT,
    target_prefix      TEXT,
    approvals_required INTEGER NOT NULL CHECK (approvals_required BETWEEN 1 AND 100),
    denials_to_reject  INTEGER NOT NULL DEFAULT 1 CHECK (denials_to_reject BETWEEN 1 AND 100),
    approver_groups    TEXT NOT NULL DEFAULT '[]' CHECK (json_type(approver_groups) = 'array'),
    reason_required    INTEGER NOT NULL DEFAULT 0 CHECK (reason_required IN (0, 1)),
    retired            INTEGER NOT NULL DEFAULT 0 CHECK (retired IN (0, 1)),
    written_by         TEXT NOT NULL,
    written_at_ms      INTEGER NOT NULL
        DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)), lifetime_ms INTEGER
    CHECK (lifetime_ms BETWEEN 1000 AND 2592000000), remind_before_ms INTEGER
    CHECK (remind_before_ms BETWEEN 1000 AND 2592000000
           AND remind_before_ms < coalesce(lifetime_ms, 2592000001)), not_before_delay_ms INTEGER
    CHECK (not_before_delay_ms BETWEEN 0 AND 2592000000), window_ms INTEGER
    CHECK (window_ms BETWEEN 1000 AND 2592000000), proceed_on_unknown INTEGER NOT NULL DEFAULT 0
    CHECK (proceed_on_unknown IN (0, 1)),
    PRIMARY KEY (name, version)
);

-- table approval_request_policies
CREATE TABLE approval_request_policies (
    approval_request_id TEXT PRIMARY KEY
        REFERENCES approval_requests (approval_request_id) ON DELETE CASCADE,
    policy_name         TEXT NOT NULL,
    policy_version      INTEGER NOT NULL,
    approvals_required  INTEGER NOT NULL,
    denials_to_reject   INTEGER NOT NULL,
    approver_groups     TEXT NOT NULL,
    reason_required     INTEGER NOT NULL, lifetime_ms INTEGER, remind_before_ms INTEGER, target_prefix TEXT,
    FOREIGN KEY (policy_name, policy_version) REFERENCES approval_policies (name, version)
);

-- table approval_requests
CREATE TABLE approval_requests (
    approval_request_id TEXT PRIMARY KEY,
    project_id          TEXT NOT NULL,
    action_type         TEXT NOT NULL,
    action_ref          TEXT NOT NULL,
    action_digest       TEXT NOT NULL CHECK (length(action_digest) = 64),
    status              TEXT NOT NULL
        CHECK (status IN ('pending', 'approved', 'consumed', 'rejected', 'expired')),
    version             INTEGER NOT NULL CHECK (version >= 1),
    requested_by        TEXT NOT NULL,
    decided_by          TEXT,
    expires_at_ms       INTEGER NOT NULL,
    consumed_at_ms      INTEGER,
    created_at_ms       INTEGER NOT NULL,
    updated_at_ms       INTEGER NOT NULL, requested_principal TEXT NOT NULL DEFAULT '', decided_principal TEXT, consumed_principal TEXT, db_expires_at_ms INTEGER, traceparent TEXT
    CONSTRAINT approval_requests_traceparent_w3c CHECK (
        traceparent IS NULL OR (traceparent GLOB
        '00-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f]'
        AND substr(traceparent, 4, 32) <> '00000000000000000000000000000000'
        AND substr(traceparent, 37, 16) <> '0000000000000000')), not_before_ms INTEGER CHECK (not_before_ms > 0), window_for_ms INTEGER
    CHECK (window_for_ms BETWEEN 1000 AND 2592000000), decision_comment TEXT
    CONSTRAINT approval_requests_decision_comment_line CHECK (
        decision_comment IS NULL OR (length(decision_comment) BETWEEN 1 AND 500 AND decision_comment NOT GLOB '*[' || char(1) || '-' || char(31) || char(127) || ']*')
    ), resubmitted_from TEXT,
    FOREIGN KEY (project_id, action_ref) REFERENCES action_plans (project_id, action_ref)
) STRICT;

-- table approval_votes
CREATE TABLE "approval_votes" (
    approval_request_id TEXT NOT NULL
        REFERENCES approval_requests (approval_request_id) ON DELETE CASCADE,
    principal           TEXT NOT NULL CHECK (principal <> ''),
    vote                TEXT NOT NULL CHECK (vote IN ('approve', 'deny')),
    reason              TEXT,
    voted_at_ms         INTEGER NOT NULL
        DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)),
    decided_by          TEXT CHECK (decided_by IS NULL OR length(decided_by) BETWEEN 1 AND 200),
    PRIMARY KEY (approval_request_id, principal)
) WITHOUT ROWID;

-- table approved_action_dispatch_executions
CREATE TABLE "approved_action_dispatch_executions" (
    dispatch_id         TEXT PRIMARY KEY REFERENCES approved_action_dispatches (dispatch_id),
    project_id          TEXT NOT NULL,
    status              TEXT NOT NULL CHECK (status IN
        ('pending', 'leased', 'retry_wait', 'executing', 'succeeded', 'failed', 'blocked',
         'cancelled')),
    version             INTEGER NOT NULL CHECK (version >= 0),
    attempt             INTEGER NOT NULL CHECK (attempt >= 0),
    max_attempts        INTEGER NOT NULL CHECK (max_attempts >= 1),
    eligible_at_ms      INTEGER,
    retry_at_ms         INTEGER,
    lease_owner         TEXT,
    lease_token         TEXT,
    lease_expires_at_ms INTEGER,
    started_at_ms       INTEGER,
    result_mutation_id  TEXT,
    result_code         TEXT,
    completed_at_ms     INTEGER,
    created_at_ms       INTEGER NOT NULL,
    updated_at_ms       INTEGER NOT NULL, lease_proof_digest TEXT, lease_proof TEXT CHECK (lease_proof IS NULL), result_receipt_json TEXT
    CHECK (result_receipt_json IS NULL OR length(CAST(result_receipt_json AS BLOB)) <= 16384), result_receipt_digest TEXT
    CHECK (result_receipt_digest IS NULL OR length(result_receipt_digest) = 64), takeovers INTEGER NOT NULL DEFAULT 0 CHECK (takeovers >= 0), target TEXT, not_before_ms INTEGER, not_after_ms INTEGER, proceed_on_unknown INTEGER NOT NULL DEFAULT 0 CHECK (proceed_on_unknown IN (0, 1)), passage_receipt TEXT
    REFERENCES approved_run_action_receipts (dispatch_id) DEFERRABLE INITIALLY DEFERRED
    CHECK (passage_receipt IS NULL OR (passage_receipt = dispatch_id AND status = 'succeeded')),
    -- eligible_at_ms is the due-index key: set exactly in the claimable states.
    CHECK ((eligible_at_ms IS NOT NULL) = (status IN ('pending', 'leased', 'retry_wait'))),
    CHECK (status NOT IN ('leased', 'executing')
           OR (lease_owner IS NOT NULL AND lease_token IS NOT NULL
               AND lease_expires_at_ms IS NOT NULL)),
    CHECK (status <> 'executing' OR started_at_ms IS NOT NULL),
    -- Cancelled only from a wait: nothing was ever started.
    CHECK (status <> 'cancelled' OR started_at_ms IS NULL)
) STRICT;

-- table approved_action_dispatches
CREATE TABLE approved_action_dispatches (
    dispatch_id         TEXT PRIMARY KEY,
    approval_request_id TEXT NOT NULL UNIQUE REFERENCES approval_requests (approval_request_id),
    project_id          TEXT NOT NULL,
    action_type         TEXT NOT NULL,
    action_ref          TEXT NOT NULL,
    action_digest       TEXT NOT NULL CHECK (length(action_digest) = 64),
    approved_by         TEXT NOT NULL,
    created_at_ms       INTEGER NOT NULL
, target TEXT, not_before_ms INTEGER, not_after_ms INTEGER, traceparent TEXT
    CONSTRAINT approved_action_dispatches_traceparent_w3c CHECK (
        traceparent IS NULL OR (traceparent GLOB
        '00-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f]'
        AND substr(traceparent, 4, 32) <> '00000000000000000000000000000000'
        AND substr(traceparent, 37, 16) <> '0000000000000000'))) STRICT;

-- table approved_run_action_receipts
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
    evidence_digest     TEXT NOT NULL CHECK (length(evidence_digest) = 64), lease_proof TEXT CHECK (lease_proof IS NULL),
    UNIQUE (resource_type, resource_id)
) STRICT;

-- table audit_prune_permits
CREATE TABLE audit_prune_permits (
    cutoff_ms INTEGER PRIMARY KEY
) STRICT;

-- table audit_receipts
CREATE TABLE audit_receipts (
    receipt_id      TEXT PRIMARY KEY,
    audit_event_id  INTEGER NOT NULL UNIQUE REFERENCES security_audit_events (event_id),
    trace_id        TEXT NOT NULL UNIQUE REFERENCES trace_anchors (trace_id),
    start_id        TEXT NOT NULL UNIQUE,
    receipt_digest  TEXT NOT NULL CHECK (length(receipt_digest) = 64),
    committed_at_ms INTEGER NOT NULL
) STRICT;

-- table execution_events
CREATE TABLE execution_events (
    event_id        INTEGER PRIMARY KEY,
    dispatch_id     TEXT NOT NULL REFERENCES approved_action_dispatches (dispatch_id),
    version         INTEGER NOT NULL,
    from_status     TEXT,
    to_status       TEXT NOT NULL,
    attempt         INTEGER NOT NULL,
    lease_owner     TEXT,
    lease_token     TEXT,
    mutation_id     TEXT,
    result_code     TEXT,
    committed_at_ms INTEGER NOT NULL,
    UNIQUE (dispatch_id, version)
) STRICT;

-- table freeze_lifts
CREATE TABLE freeze_lifts (
    dispatch_id  TEXT NOT NULL
        REFERENCES approved_action_dispatches (dispatch_id) ON DELETE CASCADE,
    freeze_id    INTEGER NOT NULL REFERENCES freezes (freeze_id),
    reason       TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 200),
    lifted_by    TEXT NOT NULL CHECK (length(lifted_by) >= 1),
    lifted_at_ms INTEGER NOT NULL
        DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)),
    PRIMARY KEY (dispatch_id, freeze_id)
) STRICT;

-- table freezes
CREATE TABLE freezes (
    freeze_id     INTEGER PRIMARY KEY,
    action_type   TEXT CHECK (action_type IS NULL OR length(action_type) BETWEEN 1 AND 128),
    project_id    TEXT CHECK (project_id IS NULL OR length(project_id) BETWEEN 1 AND 128),
    target_prefix TEXT CHECK (target_prefix IS NULL
                              OR (length(target_prefix) BETWEEN 1 AND 128
                                  AND target_prefix NOT GLOB '*[^!-~]*'
                                  AND target_prefix NOT GLOB '*[*?%]*')),
    from_ms       INTEGER NOT NULL,
    until_ms      INTEGER NOT NULL,
    reason        TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 200),
    created_by    TEXT NOT NULL CHECK (length(created_by) >= 1),
    created_at_ms INTEGER NOT NULL
        DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)),
    ended_by      TEXT,
    ended_at_ms   INTEGER,
    CHECK (until_ms > from_ms),
    CHECK ((ended_by IS NULL) = (ended_at_ms IS NULL))
) STRICT;

-- table inbox_notes
CREATE TABLE inbox_notes (
    note_id INTEGER PRIMARY KEY AUTOINCREMENT,
    approval_request_id TEXT
        REFERENCES approval_requests (approval_request_id) ON DELETE CASCADE,
    dispatch_id TEXT REFERENCES approved_action_dispatches (dispatch_id) ON DELETE CASCADE,
    principal TEXT NOT NULL CHECK (length(principal) BETWEEN 1 AND 200),
    note TEXT NOT NULL CONSTRAINT inbox_notes_note_line CHECK (
        length(note) BETWEEN 1 AND 500
        AND note NOT GLOB '*[' || char(1) || '-' || char(31) || char(127) || ']*'
    ),
    written_at_ms INTEGER NOT NULL,
    CONSTRAINT inbox_notes_one_subject CHECK (
        (approval_request_id IS NULL) <> (dispatch_id IS NULL)
    )
);

-- table notification_attempts
CREATE TABLE notification_attempts (
    id            INTEGER PRIMARY KEY,
    event_id      INTEGER NOT NULL,
    subscription  TEXT NOT NULL,
    attempt       INTEGER NOT NULL CHECK (attempt >= 1),
    outcome       TEXT NOT NULL CHECK (outcome IN ('delivered', 'failed', 'dead')),
    response_code INTEGER,
    error_code    TEXT,
    latency_ms    INTEGER NOT NULL CHECK (latency_ms >= 0),
    at_ms         INTEGER NOT NULL
) STRICT;

-- table notification_deliverer
CREATE TABLE notification_deliverer (
    singleton           INTEGER PRIMARY KEY CHECK (singleton = 1),
    owner               TEXT,
    lease_expires_at_ms INTEGER NOT NULL DEFAULT 0,
    fanned_out_through  INTEGER NOT NULL DEFAULT 0
) STRICT;

-- table notification_deliveries
CREATE TABLE notification_deliveries (
    event_id           INTEGER NOT NULL REFERENCES notification_events (id),
    subscription       TEXT NOT NULL
        REFERENCES notification_subscriptions (name) ON DELETE CASCADE,
    subject_id         TEXT NOT NULL,
    status             TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts           INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at_ms INTEGER NOT NULL,
    last_code          INTEGER,
    done_at_ms         INTEGER,
    PRIMARY KEY (event_id, subscription)
) STRICT;

-- table notification_events
CREATE TABLE notification_events (
    id           INTEGER PRIMARY KEY,
    kind         TEXT NOT NULL CHECK (kind IN (
                     'approval.requested', 'approval.expiring', 'approval.approved',
                     'approval.rejected', 'approval.expired', 'dispatch.failed',
                     'dispatch.blocked', 'dispatch.succeeded', 'dispatch.recovery_required',
                     'target.held')),
    subject_id   TEXT NOT NULL,
    project_id   TEXT NOT NULL,
    action_type  TEXT NOT NULL,
    at_ms        INTEGER NOT NULL,
    payload_json TEXT NOT NULL CHECK (length(CAST(payload_json AS BLOB)) <= 4096), target TEXT,
    UNIQUE (subject_id, kind)
) STRICT;

-- table notification_fanouts
CREATE TABLE notification_fanouts (
    event_id INTEGER PRIMARY KEY REFERENCES notification_events (id)
) STRICT;

-- table notification_subscriptions
CREATE TABLE notification_subscriptions (
    name          TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 63
                                          AND name NOT GLOB '*[^a-z0-9_.-]*'
                                          AND substr(name, 1, 1) GLOB '[a-z0-9]'),
    url           TEXT NOT NULL CHECK ((url GLOB 'http://?*' OR url GLOB 'https://?*')
                                       AND length(url) <= 2048),
    secret_ref    TEXT NOT NULL CHECK (secret_ref GLOB 'credential:?*'
                                       OR secret_ref GLOB 'file:?*' OR secret_ref GLOB 'env:?*'),
    kinds_json    TEXT NOT NULL,
    action_type   TEXT,
    project_id    TEXT,
    format        TEXT NOT NULL DEFAULT 'raw' CHECK (format IN ('raw', 'slack')),
    created_at_ms INTEGER NOT NULL
, target_prefix TEXT
    CONSTRAINT notification_subscriptions_target_prefix CHECK (
        target_prefix IS NULL OR (
            typeof(target_prefix) = 'text'
            AND length(target_prefix) BETWEEN 1 AND 128
            AND target_prefix NOT GLOB '*[^!-~]*'
            AND instr(target_prefix, '*') = 0 AND instr(target_prefix, '?') = 0
            AND instr(target_prefix, '%') = 0))) STRICT;

-- table plan_keys
CREATE TABLE plan_keys (
    key_id           TEXT PRIMARY KEY
        CHECK (length(key_id) BETWEEN 1 AND 64 AND key_id GLOB '[A-Za-z0-9]*'
               AND key_id NOT GLOB '*[^A-Za-z0-9._-]*'),
    registered_at_ms INTEGER NOT NULL
) STRICT;

-- table prune_permits
CREATE TABLE prune_permits (
    dispatch_id         TEXT PRIMARY KEY,
    approval_request_id TEXT NOT NULL UNIQUE,
    project_id          TEXT NOT NULL,
    action_ref          TEXT NOT NULL,
    cutoff_ms           INTEGER NOT NULL
) STRICT;

-- table recovery_observations
CREATE TABLE recovery_observations (
    dispatch_id       TEXT PRIMARY KEY REFERENCES approved_action_dispatches (dispatch_id),
    outcome           TEXT NOT NULL CHECK (outcome IN ('missing', 'conflict', 'unavailable')),
    reason_code       TEXT NOT NULL,
    observation_count INTEGER NOT NULL CHECK (observation_count >= 1),
    first_seen_at_ms  INTEGER NOT NULL,
    last_seen_at_ms   INTEGER NOT NULL
) STRICT;

-- table recovery_required_marks
CREATE TABLE recovery_required_marks (
    dispatch_id         TEXT PRIMARY KEY REFERENCES approved_action_dispatches (dispatch_id),
    execution_attempt   INTEGER NOT NULL,
    execution_version   INTEGER NOT NULL,
    lease_owner         TEXT,
    lease_expires_at_ms INTEGER,
    noticed_by          TEXT NOT NULL CHECK (noticed_by IN ('recovery_pass', 'resolution')),
    committed_at_ms     INTEGER NOT NULL
) STRICT;

-- table recovery_resolutions
CREATE TABLE recovery_resolutions (
    dispatch_id         TEXT PRIMARY KEY REFERENCES approved_action_dispatches (dispatch_id),
    source              TEXT NOT NULL CHECK (source IN ('evidence', 'manual')),
    resolution          TEXT NOT NULL CHECK (resolution IN ('succeeded', 'failed', 'blocked')),
    evidence_digest     TEXT CHECK (evidence_digest IS NULL OR length(evidence_digest) = 64),
    resolved_by         TEXT NOT NULL,
    principal           TEXT NOT NULL,
    reason_code         TEXT NOT NULL,
    execution_attempt   INTEGER NOT NULL,
    execution_version   INTEGER NOT NULL,
    lease_owner         TEXT NOT NULL,
    lease_token         TEXT NOT NULL,
    started_at_ms       INTEGER NOT NULL,
    committed_at_ms     INTEGER NOT NULL,
    CHECK ((source = 'evidence') = (evidence_digest IS NOT NULL))
) STRICT;

-- table run_attempts
CREATE TABLE run_attempts (
    run_id        TEXT NOT NULL REFERENCES runs (run_id),
    attempt_no    INTEGER NOT NULL CHECK (attempt_no >= 1),
    status        TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (run_id, attempt_no)
) STRICT;

-- table run_events
CREATE TABLE run_events (
    run_id          TEXT NOT NULL REFERENCES runs (run_id),
    seq             INTEGER NOT NULL CHECK (seq >= 1),
    event_type      TEXT NOT NULL,
    run_version     INTEGER NOT NULL,
    committed_at_ms INTEGER NOT NULL,
    PRIMARY KEY (run_id, seq)
) STRICT;

-- table runs
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
    updated_at_ms     INTEGER NOT NULL, lease_proof TEXT CHECK (lease_proof IS NULL),
    UNIQUE (project_id, idempotency_key)
) STRICT;

-- table schema_migrations
CREATE TABLE schema_migrations (
    version       INTEGER PRIMARY KEY,
    name          TEXT NOT NULL,
    checksum      TEXT NOT NULL,
    applied_at_ms INTEGER NOT NULL
) STRICT;

-- table security_audit_events
CREATE TABLE security_audit_events (
    event_id        INTEGER PRIMARY KEY,
    kind            TEXT NOT NULL,
    actor           TEXT NOT NULL,
    principal       TEXT NOT NULL,
    project_id      TEXT NOT NULL,
    subject_id      TEXT NOT NULL,
    detail_code     TEXT NOT NULL,
    committed_at_ms INTEGER NOT NULL
, token_id TEXT, client_address TEXT, request_id TEXT, comment TEXT
    CONSTRAINT security_audit_events_comment_line CHECK (
        comment IS NULL OR (length(comment) BETWEEN 1 AND 500 AND comment NOT GLOB '*[' || char(1) || '-' || char(31) || char(127) || ']*')
    )) STRICT;

-- table sqlite_sequence
CREATE TABLE sqlite_sequence(name,seq);

-- table step_run_mutations
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

-- table step_runs
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

-- table tool_execution_start_barriers
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

-- table trace_anchors
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

-- table transactional_action_types
CREATE TABLE transactional_action_types (
    action_type TEXT PRIMARY KEY CHECK (length(action_type) BETWEEN 1 AND 128)
);

-- table ui_sessions
CREATE TABLE ui_sessions (
    session_sha256  TEXT PRIMARY KEY CHECK (length(session_sha256) = 64),
    token_id        TEXT NOT NULL CHECK (length(token_id) = 20 AND token_id GLOB 'tok_*'),
    principal       TEXT NOT NULL CHECK (length(principal) BETWEEN 1 AND 52),
    created_at_ms   INTEGER NOT NULL,
    last_seen_at_ms INTEGER NOT NULL,
    idle_ms         INTEGER NOT NULL CHECK (idle_ms > 0),
    expires_at_ms   INTEGER NOT NULL,
    revoked_at_ms   INTEGER,
    CHECK (expires_at_ms > created_at_ms)
) STRICT;

-- table uncertain_outcomes
CREATE TABLE uncertain_outcomes (
    dispatch_id       TEXT PRIMARY KEY REFERENCES approved_action_dispatches (dispatch_id),
    execution_attempt INTEGER NOT NULL CHECK (execution_attempt >= 1),
    lease_owner       TEXT NOT NULL,
    result_code       TEXT NOT NULL CHECK (length(result_code) BETWEEN 1 AND 128),
    evidence_json     TEXT NOT NULL
        CHECK (length(CAST(evidence_json AS BLOB)) <= 16384 AND substr(evidence_json, 1, 1) = '{'),
    recorded_at_ms    INTEGER NOT NULL,
    lease_proof       TEXT CHECK (lease_proof IS NULL)  -- PostgreSQL's column; never set here
) STRICT;

-- indexes (37)

-- index api_tokens_principal
CREATE INDEX api_tokens_principal ON api_tokens (principal);

-- index approval_policies_action
CREATE INDEX approval_policies_action ON approval_policies (action_type);

-- index approval_requests_by_status
CREATE INDEX approval_requests_by_status
    ON approval_requests (status, created_at_ms DESC, approval_request_id DESC);

-- index approval_requests_one_live_per_plan
CREATE UNIQUE INDEX approval_requests_one_live_per_plan
    ON approval_requests (project_id, action_ref)
    WHERE status = 'pending' OR status = 'approved' OR status = 'consumed';

-- index approval_requests_plan
CREATE INDEX approval_requests_plan ON approval_requests (project_id, action_ref);

-- index approval_requests_resubmitted_from
CREATE INDEX approval_requests_resubmitted_from ON approval_requests (resubmitted_from)
    WHERE resubmitted_from IS NOT NULL;

-- index approval_requests_waiting
CREATE INDEX approval_requests_waiting
    ON approval_requests (created_at_ms DESC, approval_request_id DESC)
    WHERE status = 'pending';

-- index approved_action_dispatch_executions_due
CREATE INDEX approved_action_dispatch_executions_due
    ON approved_action_dispatch_executions (eligible_at_ms, dispatch_id)
    WHERE eligible_at_ms IS NOT NULL;

-- index approved_action_dispatch_executions_executing
CREATE INDEX approved_action_dispatch_executions_executing
    ON approved_action_dispatch_executions (lease_expires_at_ms, dispatch_id)
    WHERE status = 'executing';

-- index approved_action_dispatch_executions_finished
CREATE INDEX approved_action_dispatch_executions_finished
    ON approved_action_dispatch_executions (updated_at_ms, dispatch_id)
    WHERE status IN ('blocked', 'cancelled', 'failed', 'succeeded');

-- index approved_action_dispatch_executions_one_per_target
CREATE UNIQUE INDEX approved_action_dispatch_executions_one_per_target
    ON approved_action_dispatch_executions (target)
    WHERE target IS NOT NULL
      AND (status = 'leased' OR (status = 'executing' AND proceed_on_unknown = 0));

-- index approved_action_dispatch_executions_passage_receipt
CREATE INDEX approved_action_dispatch_executions_passage_receipt
    ON approved_action_dispatch_executions (passage_receipt) WHERE passage_receipt IS NOT NULL;

-- index approved_action_dispatch_executions_past_claim
CREATE INDEX approved_action_dispatch_executions_past_claim
    ON approved_action_dispatch_executions (target)
    WHERE target IS NOT NULL AND status IN ('leased', 'executing');

-- index approved_action_dispatch_executions_status
CREATE INDEX approved_action_dispatch_executions_status
    ON approved_action_dispatch_executions (status);

-- index approved_action_dispatch_executions_windowed
CREATE INDEX approved_action_dispatch_executions_windowed
    ON approved_action_dispatch_executions (not_after_ms)
    WHERE not_after_ms IS NOT NULL AND status IN ('pending', 'retry_wait', 'leased');

-- index approved_action_dispatches_created
CREATE INDEX approved_action_dispatches_created
    ON approved_action_dispatches (created_at_ms, dispatch_id);

-- index approved_action_dispatches_one_per_plan
CREATE UNIQUE INDEX approved_action_dispatches_one_per_plan
    ON approved_action_dispatches (project_id, action_ref);

-- index execution_events_mutation
CREATE UNIQUE INDEX execution_events_mutation
    ON execution_events (dispatch_id, mutation_id) WHERE mutation_id IS NOT NULL;

-- index freeze_lifts_freeze
CREATE INDEX freeze_lifts_freeze ON freeze_lifts (freeze_id);

-- index freezes_in_force
CREATE INDEX freezes_in_force ON freezes (until_ms) WHERE ended_at_ms IS NULL;

-- index inbox_notes_approval
CREATE INDEX inbox_notes_approval ON inbox_notes (approval_request_id)
    WHERE approval_request_id IS NOT NULL;

-- index inbox_notes_dispatch
CREATE INDEX inbox_notes_dispatch ON inbox_notes (dispatch_id) WHERE dispatch_id IS NOT NULL;

-- index notification_attempts_event
CREATE INDEX notification_attempts_event ON notification_attempts (event_id);

-- index notification_deliveries_dead
CREATE INDEX notification_deliveries_dead ON notification_deliveries (done_at_ms)
    WHERE status = 'dead';

-- index notification_deliveries_due
CREATE INDEX notification_deliveries_due ON notification_deliveries
    (next_attempt_at_ms, event_id) WHERE status = 'pending';

-- index notification_deliveries_subject
CREATE INDEX notification_deliveries_subject ON notification_deliveries
    (subscription, subject_id, event_id) WHERE status = 'pending';

-- index notification_events_at
CREATE INDEX notification_events_at ON notification_events (at_ms, id);

-- index prune_permits_plan
CREATE INDEX prune_permits_plan ON prune_permits (project_id, action_ref);

-- index runs_idempotency_key
CREATE INDEX runs_idempotency_key ON runs (idempotency_key);

-- index security_audit_events_committed
CREATE INDEX security_audit_events_committed ON security_audit_events (committed_at_ms);

-- index security_audit_events_subject
CREATE INDEX security_audit_events_subject ON security_audit_events (subject_id);

-- index step_runs_run
CREATE INDEX step_runs_run ON step_runs (run_id);

-- index step_runs_status
CREATE INDEX step_runs_status ON step_runs (status);

-- index tool_execution_start_barriers_approval
CREATE INDEX tool_execution_start_barriers_approval
    ON tool_execution_start_barriers (approval_request_id);

-- index ui_sessions_expires
CREATE INDEX ui_sessions_expires ON ui_sessions (expires_at_ms);

-- index ui_sessions_principal
CREATE INDEX ui_sessions_principal ON ui_sessions (principal, created_at_ms);

-- index ui_sessions_token
CREATE INDEX ui_sessions_token ON ui_sessions (token_id);

-- triggers (136)

-- trigger action_plans_clear_or_sealed
CREATE TRIGGER action_plans_clear_or_sealed BEFORE INSERT ON action_plans
WHEN NOT (
    (NEW.plan_sealed IS NULL AND NEW.plan_key_id IS NULL AND NEW.plan_algorithm IS NULL
        AND NEW.plan_json <> '')
    OR (NEW.plan_sealed IS NOT NULL AND NEW.plan_key_id IS NOT NULL
        AND NEW.plan_algorithm IS NOT NULL AND NEW.plan_schema_version IS NOT NULL
        AND NEW.plan_json = ''))
BEGIN
    SELECT RAISE(ABORT, 'action_plans: a plan is clear or sealed, whole');
END;

-- trigger action_plans_immutable_delete
CREATE TRIGGER action_plans_immutable_delete BEFORE DELETE ON action_plans
WHEN NOT EXISTS (
    SELECT 1 FROM prune_permits AS p
    WHERE p.project_id = OLD.project_id AND p.action_ref = OLD.action_ref
)
BEGIN SELECT RAISE(ABORT, 'action_plans is immutable'); END;

-- trigger action_plans_immutable_update
CREATE TRIGGER action_plans_immutable_update BEFORE UPDATE ON action_plans
WHEN NEW.project_id IS NOT OLD.project_id OR NEW.action_ref IS NOT OLD.action_ref
    OR NEW.action_type IS NOT OLD.action_type OR NEW.plan_digest IS NOT OLD.plan_digest
    OR NEW.created_at_ms IS NOT OLD.created_at_ms
    OR (OLD.plan_schema_version IS NOT NULL
        AND NEW.plan_schema_version IS NOT OLD.plan_schema_version)
    OR NOT (NEW.plan_sealed IS NOT NULL AND NEW.plan_key_id IS NOT NULL
            AND NEW.plan_algorithm IS NOT NULL AND NEW.plan_schema_version IS NOT NULL
            AND NEW.plan_json = '')
BEGIN
    SELECT RAISE(ABORT, 'action_plans is immutable');
END;

-- trigger action_plans_key_registered_insert
CREATE TRIGGER action_plans_key_registered_insert BEFORE INSERT ON action_plans
WHEN NEW.plan_key_id IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM plan_keys WHERE key_id = NEW.plan_key_id)
BEGIN
    SELECT RAISE(ABORT, 'action_plans: a plan is sealed under a registered key');
END;

-- trigger action_plans_key_registered_update
CREATE TRIGGER action_plans_key_registered_update BEFORE UPDATE OF plan_key_id ON action_plans
WHEN NEW.plan_key_id IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM plan_keys WHERE key_id = NEW.plan_key_id)
BEGIN
    SELECT RAISE(ABORT, 'action_plans: a plan is sealed under a registered key');
END;

-- trigger action_plans_target_immutable
CREATE TRIGGER action_plans_target_immutable BEFORE UPDATE OF target ON action_plans
WHEN NEW.target IS NOT OLD.target
BEGIN
    SELECT RAISE(ABORT, 'action_plans is immutable');
END;

-- trigger api_tokens_guard
CREATE TRIGGER api_tokens_guard BEFORE UPDATE ON api_tokens
WHEN NEW.token_id IS NOT OLD.token_id OR NEW.secret_sha256 IS NOT OLD.secret_sha256
    OR NEW.principal IS NOT OLD.principal OR NEW.role IS NOT OLD.role
    OR NEW.created_by IS NOT OLD.created_by OR NEW.created_at_ms IS NOT OLD.created_at_ms
    OR NEW.expires_at_ms IS NOT OLD.expires_at_ms
    OR (OLD.revoked_at_ms IS NOT NULL AND NEW.revoked_at_ms IS NOT OLD.revoked_at_ms)
BEGIN
    SELECT RAISE(ABORT, 'api_tokens: a token changes only its last use and, once, its revocation');
END;

-- trigger approval_events_due
CREATE TRIGGER approval_events_due BEFORE INSERT ON approval_events
WHEN NEW.at_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    OR NEW.at_ms < CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) - 1000
    OR NOT EXISTS (
        SELECT 1 FROM approval_requests AS r
        JOIN approval_request_policies AS p USING (approval_request_id)
        WHERE r.approval_request_id = NEW.approval_request_id AND r.status = 'pending'
          AND p.remind_before_ms IS NOT NULL
          AND NEW.at_ms >= coalesce(r.db_expires_at_ms, r.expires_at_ms) - p.remind_before_ms
          AND NEW.at_ms < coalesce(r.db_expires_at_ms, r.expires_at_ms))
BEGIN
    SELECT RAISE(ABORT, 'approval_events: a reminder is due once, before expiry, at the database''s time');
END;

-- trigger approval_events_no_delete
CREATE TRIGGER approval_events_no_delete BEFORE DELETE ON approval_events
WHEN EXISTS (SELECT 1 FROM approval_requests
             WHERE approval_request_id = OLD.approval_request_id)
BEGIN
    SELECT RAISE(ABORT, 'approval_events: an event goes only with its request');
END;

-- trigger approval_events_no_update
CREATE TRIGGER approval_events_no_update BEFORE UPDATE ON approval_events
BEGIN
    SELECT RAISE(ABORT, 'approval_events: an event never changes');
END;

-- trigger approval_events_tell
CREATE TRIGGER approval_events_tell AFTER INSERT ON approval_events
WHEN EXISTS (SELECT 1 FROM notification_subscriptions AS s
             WHERE instr(s.kinds_json, '"' || NEW.kind || '"') > 0)
BEGIN
    INSERT INTO notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    )
    SELECT NEW.kind, r.approval_request_id, r.project_id, r.action_type,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER),
        json_object(
            'approvalRequestId', r.approval_request_id,
            'actionRef', r.action_ref,
            'actionDigest', r.action_digest,
            'status', r.status,
            'expiresAtMs', coalesce(r.db_expires_at_ms, r.expires_at_ms),
            'policy', p.policy_name,
            'policyVersion', p.policy_version)
    FROM approval_requests AS r
    LEFT JOIN approval_request_policies AS p USING (approval_request_id)
    WHERE r.approval_request_id = NEW.approval_request_id;
END;

-- trigger approval_policies_audit
CREATE TRIGGER approval_policies_audit AFTER INSERT ON approval_policies
BEGIN
    INSERT INTO security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
    ) VALUES (
        CASE WHEN NEW.retired THEN 'approval.policy_retired' ELSE 'approval.policy_set' END,
        NEW.written_by, NEW.written_by, coalesce(NEW.project_id, ''), NEW.name,
        CAST(NEW.version AS TEXT),
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    );
END;

-- trigger approval_policies_groups
CREATE TRIGGER approval_policies_groups BEFORE INSERT ON approval_policies
WHEN EXISTS (SELECT 1 FROM json_each(NEW.approver_groups) AS g
             WHERE g.type <> 'text' OR length(g.value) NOT BETWEEN 1 AND 32
                OR g.value GLOB '*[^a-z0-9_]*' OR substr(g.value, 1, 1) NOT GLOB '[a-z]')
BEGIN
    SELECT RAISE(ABORT, 'approval_policies: an approver group is a lower-case identifier');
END;

-- trigger approval_policies_next_version
CREATE TRIGGER approval_policies_next_version BEFORE INSERT ON approval_policies
WHEN NEW.version IS NOT (SELECT coalesce(max(version), 0) + 1 FROM approval_policies
                         WHERE name = NEW.name)
BEGIN
    SELECT RAISE(ABORT, 'approval_policies: a policy''s versions count from 1, one after another');
END;

-- trigger approval_policies_no_delete
CREATE TRIGGER approval_policies_no_delete BEFORE DELETE ON approval_policies
BEGIN
    SELECT RAISE(ABORT, 'approval_policies: a policy version never changes');
END;

-- trigger approval_policies_no_update
CREATE TRIGGER approval_policies_no_update BEFORE UPDATE ON approval_policies
BEGIN
    SELECT RAISE(ABORT, 'approval_policies: a policy version never changes');
END;

-- trigger approval_policies_target_prefix
CREATE TRIGGER approval_policies_target_prefix BEFORE INSERT ON approval_policies
WHEN NEW.target_prefix IS NOT NULL AND (
    typeof(NEW.target_prefix) <> 'text'
    OR length(NEW.target_prefix) NOT BETWEEN 1 AND 128
    OR NEW.target_prefix GLOB '*[^!-~]*'
    OR instr(NEW.target_prefix, '*') > 0 OR instr(NEW.target_prefix, '?') > 0
    OR instr(NEW.target_prefix, '%') > 0)
BEGIN
    SELECT RAISE(ABORT, 'approval_policies: a target prefix is 1 to 128 printable characters, no space or wildcard');
END;

-- trigger approval_request_policies_in_force
CREATE TRIGGER approval_request_policies_in_force BEFORE INSERT ON approval_request_policies
WHEN NOT EXISTS (
    SELECT 1 FROM approval_requests AS r
    JOIN action_plans AS a ON a.project_id = r.project_id AND a.action_ref = r.action_ref
    JOIN approval_policies_in_force AS p
      ON p.name = NEW.policy_name AND p.version = NEW.policy_version
    WHERE r.approval_request_id = NEW.approval_request_id
      AND r.status = 'pending' AND r.version = 1
      AND p.name = (SELECT f.name FROM approval_policies_in_force AS f
                    WHERE f.action_type = r.action_type
                      AND (f.project_id IS NULL OR f.project_id = r.project_id)
                      AND (f.target_prefix IS NULL
                           OR substr(a.target, 1, length(f.target_prefix)) = f.target_prefix)
                    ORDER BY (f.target_prefix IS NULL), length(f.target_prefix) DESC,
                             (f.project_id IS NULL), f.name
                    LIMIT 1)
      AND NEW.approvals_required IS p.approvals_required
      AND NEW.denials_to_reject IS p.denials_to_reject
      AND NEW.approver_groups IS p.approver_groups
      AND NEW.reason_required IS p.reason_required
      AND NEW.lifetime_ms IS p.lifetime_ms
      AND NEW.remind_before_ms IS p.remind_before_ms
      AND NEW.target_prefix IS p.target_prefix)
BEGIN
    SELECT RAISE(ABORT, 'approval_request_policies: a request carries the policy in force');
END;

-- trigger approval_request_policies_no_delete
CREATE TRIGGER approval_request_policies_no_delete BEFORE DELETE ON approval_request_policies
WHEN EXISTS (SELECT 1 FROM approval_requests
             WHERE approval_request_id = OLD.approval_request_id)
BEGIN
    SELECT RAISE(ABORT, 'approval_request_policies: the policy of a request never changes');
END;

-- trigger approval_request_policies_no_update
CREATE TRIGGER approval_request_policies_no_update BEFORE UPDATE ON approval_request_policies
BEGIN
    SELECT RAISE(ABORT, 'approval_request_policies: the policy of a request never changes');
END;

-- trigger approval_request_policies_window_possible
CREATE TRIGGER approval_request_policies_window_possible
AFTER INSERT ON approval_request_policies
WHEN EXISTS (
    SELECT 1 FROM approval_requests AS a
    JOIN approval_policies AS p ON p.name = NEW.policy_name AND p.version = NEW.policy_version
    WHERE a.approval_request_id = NEW.approval_request_id AND a.window_for_ms IS NOT NULL
      AND coalesce(a.not_before_ms,
                   CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
          + a.window_for_ms
          <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
             + coalesce(p.not_before_delay_ms, 0))
BEGIN
    SELECT RAISE(ABORT, 'qinglong:window_empty: the requested window ends before the policy lets it start');
END;

-- trigger approval_requests_audit_insert
CREATE TRIGGER approval_requests_audit_insert AFTER INSERT ON approval_requests
BEGIN
    INSERT INTO security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
    ) VALUES (
        'approval.created', NEW.requested_by, NEW.requested_principal, NEW.project_id,
        NEW.approval_request_id, NEW.action_type,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    );
END;

-- trigger approval_requests_audit_update
CREATE TRIGGER approval_requests_audit_update AFTER UPDATE ON approval_requests
WHEN NEW.status IS NOT OLD.status
BEGIN
    INSERT INTO security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, comment, committed_at_ms
    ) VALUES (
        'approval.' || NEW.status,
        -- Consuming carries no label: the principal is the actor.
        CASE WHEN NEW.status = 'consumed' THEN NEW.consumed_principal ELSE NEW.decided_by END,
        CASE WHEN NEW.status = 'consumed' THEN NEW.consumed_principal
             ELSE NEW.decided_principal END,
        NEW.project_id, NEW.approval_request_id,
        CASE WHEN NEW.status = 'consumed' THEN NEW.action_type
             WHEN NEW.status = 'expired' THEN 'db_clock'
             WHEN NEW.decided_principal = NEW.requested_principal THEN 'by_requester'
             ELSE 'by_other' END,
        CASE WHEN NEW.status IN ('approved', 'rejected') THEN NEW.decision_comment END,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    );
END;

-- trigger approval_requests_clock_guard
CREATE TRIGGER approval_requests_clock_guard BEFORE UPDATE ON approval_requests
WHEN NEW.db_expires_at_ms IS NOT OLD.db_expires_at_ms
    OR ((NEW.status = 'approved' OR NEW.status = 'consumed') AND NEW.status IS NOT OLD.status
        AND CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
            >= coalesce(OLD.db_expires_at_ms, OLD.expires_at_ms))
BEGIN
    SELECT RAISE(ABORT, 'qinglong:approval_expired: the database clock says so');
END;

-- trigger approval_requests_decision_comment
CREATE TRIGGER approval_requests_decision_comment BEFORE UPDATE ON approval_requests
WHEN NEW.decision_comment IS NOT OLD.decision_comment
    AND (OLD.status IS NOT 'pending' OR NEW.status NOT IN ('approved', 'rejected'))
BEGIN
    SELECT RAISE(ABORT, 'qinglong:comment_refused: a decision''s comment is written with the decision, never after');
END;

-- trigger approval_requests_decision_comment_new
CREATE TRIGGER approval_requests_decision_comment_new BEFORE INSERT ON approval_requests
WHEN NEW.decision_comment IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'qinglong:comment_refused: a decision''s comment is written with the decision, never after');
END;

-- trigger approval_requests_direct_vote
CREATE TRIGGER approval_requests_direct_vote AFTER UPDATE ON approval_requests
WHEN OLD.status = 'pending' AND NEW.status = 'approved'
    AND EXISTS (SELECT 1 FROM approval_request_policies
                WHERE approval_request_id = NEW.approval_request_id)
BEGIN
    SELECT RAISE(ABORT, 'approval_votes: the request needs more approvals')
    FROM approval_request_policies AS p
    WHERE p.approval_request_id = NEW.approval_request_id AND p.approvals_required > 1
      AND (SELECT count(*) FROM approval_votes
           WHERE approval_request_id = NEW.approval_request_id AND vote = 'approve'
             AND principal IS NOT NEW.decided_principal) + 1 < p.approvals_required;
    INSERT INTO approval_votes (approval_request_id, principal, vote)
    SELECT NEW.approval_request_id, NEW.decided_principal, 'approve'
    WHERE NOT EXISTS (SELECT 1 FROM approval_votes
                      WHERE approval_request_id = NEW.approval_request_id
                        AND principal = NEW.decided_principal);
END;

-- trigger approval_requests_expiry_guard
CREATE TRIGGER approval_requests_expiry_guard BEFORE UPDATE ON approval_requests
WHEN NEW.status = 'expired' AND OLD.status IS NOT 'expired'
    AND CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
        < coalesce(OLD.db_expires_at_ms, OLD.expires_at_ms)
BEGIN
    SELECT RAISE(ABORT, 'approval_requests: a request expires only once the database clock says so');
END;

-- trigger approval_requests_insert_guard
CREATE TRIGGER approval_requests_insert_guard BEFORE INSERT ON approval_requests
WHEN NEW.status IS NOT 'pending' OR NEW.version IS NOT 1 OR NEW.requested_principal = ''
    OR NEW.decided_by IS NOT NULL OR NEW.decided_principal IS NOT NULL
    OR NEW.consumed_principal IS NOT NULL OR NEW.consumed_at_ms IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'approval_requests: a request starts pending@v1, undecided, with its principal');
END;

-- trigger approval_requests_lifetime_guard
CREATE TRIGGER approval_requests_lifetime_guard BEFORE INSERT ON approval_requests
WHEN NEW.expires_at_ms - NEW.created_at_ms <= 0
    OR NEW.expires_at_ms - NEW.created_at_ms > 2592000000
    OR NEW.db_expires_at_ms IS NULL
    OR NEW.db_expires_at_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
        + (NEW.expires_at_ms - NEW.created_at_ms)
BEGIN
    SELECT RAISE(ABORT, 'approval_requests: a lifetime of more than 0 s and at most 30 days');
END;

-- trigger approval_requests_plan_first
CREATE TRIGGER approval_requests_plan_first BEFORE INSERT ON approval_requests
WHEN EXISTS (SELECT 1 FROM approval_policies WHERE action_type = NEW.action_type)
    AND NOT EXISTS (SELECT 1 FROM action_plans
                    WHERE project_id = NEW.project_id AND action_ref = NEW.action_ref)
BEGIN
    SELECT RAISE(ABORT, 'approval_requests: a request''s plan is written before it');
END;

-- trigger approval_requests_policy
CREATE TRIGGER approval_requests_policy AFTER INSERT ON approval_requests
WHEN EXISTS (SELECT 1 FROM approval_policies WHERE action_type = NEW.action_type)
BEGIN
    INSERT INTO approval_request_policies (
        approval_request_id, policy_name, policy_version, approvals_required,
        denials_to_reject, approver_groups, reason_required, lifetime_ms, remind_before_ms,
        target_prefix
    )
    SELECT NEW.approval_request_id, p.name, p.version, p.approvals_required,
           p.denials_to_reject, p.approver_groups, p.reason_required, p.lifetime_ms,
           p.remind_before_ms, p.target_prefix
    FROM action_plans AS a
    JOIN approval_policies_in_force AS p
      ON p.action_type = NEW.action_type
     AND (p.project_id IS NULL OR p.project_id = NEW.project_id)
     AND (p.target_prefix IS NULL
          OR substr(a.target, 1, length(p.target_prefix)) = p.target_prefix)
    WHERE a.project_id = NEW.project_id AND a.action_ref = NEW.action_ref
    ORDER BY (p.target_prefix IS NULL), length(p.target_prefix) DESC,
             (p.project_id IS NULL), p.name
    LIMIT 1;
END;

-- trigger approval_requests_policy_lifetime
CREATE TRIGGER approval_requests_policy_lifetime BEFORE INSERT ON approval_requests
WHEN EXISTS (SELECT 1 FROM approval_policies WHERE action_type = NEW.action_type)
    AND NEW.expires_at_ms - NEW.created_at_ms IS NOT coalesce(
        (SELECT p.lifetime_ms FROM action_plans AS a
         JOIN approval_policies_in_force AS p
           ON p.action_type = NEW.action_type
          AND (p.project_id IS NULL OR p.project_id = NEW.project_id)
          AND (p.target_prefix IS NULL
               OR substr(a.target, 1, length(p.target_prefix)) = p.target_prefix)
         WHERE a.project_id = NEW.project_id AND a.action_ref = NEW.action_ref
         ORDER BY (p.target_prefix IS NULL), length(p.target_prefix) DESC,
                  (p.project_id IS NULL), p.name
         LIMIT 1),
        NEW.expires_at_ms - NEW.created_at_ms)
BEGIN
    SELECT RAISE(ABORT, 'approval_requests: a request under a policy lives its lifetime');
END;

-- trigger approval_requests_prune_only
CREATE TRIGGER approval_requests_prune_only BEFORE DELETE ON approval_requests
WHEN NOT EXISTS (
    SELECT 1 FROM prune_permits AS p WHERE p.approval_request_id = OLD.approval_request_id
)
BEGIN SELECT RAISE(ABORT, 'approval_requests: only a prune deletes a request'); END;

-- trigger approval_requests_resubmitted_from
CREATE TRIGGER approval_requests_resubmitted_from BEFORE UPDATE ON approval_requests
WHEN NEW.resubmitted_from IS NOT OLD.resubmitted_from
BEGIN
    SELECT RAISE(ABORT, 'qinglong:resubmit_refused: what a request was made again from never changes');
END;

-- trigger approval_requests_resubmitted_from_new
CREATE TRIGGER approval_requests_resubmitted_from_new BEFORE INSERT ON approval_requests
WHEN NEW.resubmitted_from IS NOT NULL
    AND NOT EXISTS (
        SELECT 1 FROM approved_action_dispatches AS d
        JOIN approved_action_dispatch_executions AS e ON e.dispatch_id = d.dispatch_id
        WHERE d.dispatch_id = NEW.resubmitted_from
          AND e.status IN ('failed', 'blocked', 'cancelled')
          AND d.project_id = NEW.project_id AND d.action_type = NEW.action_type)
    AND NOT EXISTS (
        SELECT 1 FROM approval_requests AS a
        WHERE a.approval_request_id = NEW.resubmitted_from AND a.status = 'expired'
          AND a.project_id = NEW.project_id AND a.action_type = NEW.action_type)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:resubmit_refused: a request is made again only from a failed, blocked or cancelled dispatch or an expired request of its project and action type');
END;

-- trigger approval_requests_tell_insert
CREATE TRIGGER approval_requests_tell_insert AFTER INSERT ON approval_requests
WHEN EXISTS (SELECT 1 FROM notification_subscriptions AS s
             WHERE instr(s.kinds_json, '"approval.requested"') > 0)
BEGIN
    INSERT INTO notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    ) VALUES (
        'approval.requested', NEW.approval_request_id, NEW.project_id, NEW.action_type,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER),
        (SELECT json_object(
            'approvalRequestId', NEW.approval_request_id,
            'actionRef', NEW.action_ref,
            'actionDigest', NEW.action_digest,
            'status', NEW.status,
            'expiresAtMs', coalesce(NEW.db_expires_at_ms, NEW.expires_at_ms),
            'policy', p.name,
            'policyVersion', p.version)
         FROM (SELECT NULL) LEFT JOIN (
             SELECT f.name, f.version
             FROM action_plans AS a
             JOIN approval_policies_in_force AS f
               ON f.action_type = NEW.action_type
              AND (f.project_id IS NULL OR f.project_id = NEW.project_id)
              AND (f.target_prefix IS NULL
                   OR substr(a.target, 1, length(f.target_prefix)) = f.target_prefix)
             WHERE a.project_id = NEW.project_id AND a.action_ref = NEW.action_ref
             ORDER BY (f.target_prefix IS NULL), length(f.target_prefix) DESC,
                      (f.project_id IS NULL), f.name
             LIMIT 1) AS p)
    );
END;

-- trigger approval_requests_tell_update
CREATE TRIGGER approval_requests_tell_update AFTER UPDATE ON approval_requests
WHEN NEW.status IS NOT OLD.status AND NEW.status IN ('approved', 'rejected', 'expired')
 AND EXISTS (SELECT 1 FROM notification_subscriptions AS s
             WHERE instr(s.kinds_json, '"approval.' || NEW.status || '"') > 0)
BEGIN
    INSERT INTO notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    ) VALUES (
        'approval.' || NEW.status, NEW.approval_request_id, NEW.project_id, NEW.action_type,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER),
        (SELECT json_object(
            'approvalRequestId', NEW.approval_request_id,
            'actionRef', NEW.action_ref,
            'actionDigest', NEW.action_digest,
            'status', NEW.status,
            'expiresAtMs', coalesce(NEW.db_expires_at_ms, NEW.expires_at_ms),
            'policy', p.policy_name,
            'policyVersion', p.policy_version)
         FROM (SELECT NULL) LEFT JOIN approval_request_policies AS p
             ON p.approval_request_id = NEW.approval_request_id)
    );
END;

-- trigger approval_requests_traceparent_immutable
CREATE TRIGGER approval_requests_traceparent_immutable
BEFORE UPDATE OF traceparent ON approval_requests
WHEN NEW.traceparent IS NOT OLD.traceparent
BEGIN
    SELECT RAISE(ABORT, 'qinglong:traceparent_refused: a request''s traceparent never changes');
END;

-- trigger approval_requests_update_guard
CREATE TRIGGER approval_requests_update_guard BEFORE UPDATE ON approval_requests
WHEN OLD.status IN ('consumed', 'rejected', 'expired')
    OR NEW.approval_request_id IS NOT OLD.approval_request_id
    OR NEW.project_id IS NOT OLD.project_id OR NEW.action_type IS NOT OLD.action_type
    OR NEW.action_ref IS NOT OLD.action_ref OR NEW.action_digest IS NOT OLD.action_digest
    OR NEW.requested_by IS NOT OLD.requested_by
    OR NEW.requested_principal IS NOT OLD.requested_principal
    OR NEW.expires_at_ms IS NOT OLD.expires_at_ms OR NEW.created_at_ms IS NOT OLD.created_at_ms
    OR NOT (
        (OLD.status = 'pending' AND NEW.status IN ('approved', 'rejected', 'expired')
            AND NEW.version = 2 AND NEW.decided_by IS NOT NULL
            AND NEW.decided_principal IS NOT NULL AND NEW.decided_principal <> ''
            AND NEW.consumed_principal IS NULL AND NEW.consumed_at_ms IS NULL)
        OR (OLD.status = 'approved' AND NEW.status = 'consumed' AND NEW.version = 3
            AND NEW.consumed_at_ms IS NOT NULL
            AND NEW.consumed_principal IS NOT NULL AND NEW.consumed_principal <> ''
            AND NEW.decided_by IS OLD.decided_by
            AND NEW.decided_principal IS OLD.decided_principal)
    )
BEGIN
    SELECT RAISE(ABORT, 'approval_requests: not a permitted change of the request');
END;

-- trigger approval_requests_window_immutable
CREATE TRIGGER approval_requests_window_immutable
BEFORE UPDATE OF not_before_ms, window_for_ms ON approval_requests
WHEN NEW.not_before_ms IS NOT OLD.not_before_ms OR NEW.window_for_ms IS NOT OLD.window_for_ms
BEGIN
    SELECT RAISE(ABORT, 'qinglong:window_refused: a request''s window never changes');
END;

-- trigger approval_requests_window_possible
CREATE TRIGGER approval_requests_window_possible
BEFORE INSERT ON approval_requests
WHEN NEW.window_for_ms IS NOT NULL
    AND coalesce(NEW.not_before_ms, CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
        + NEW.window_for_ms <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:window_empty: the requested window ends before it can start');
END;

-- trigger approval_votes_decide
CREATE TRIGGER approval_votes_decide AFTER INSERT ON approval_votes
WHEN (SELECT status FROM approval_requests
      WHERE approval_request_id = NEW.approval_request_id) = 'pending'
BEGIN
    UPDATE approval_requests
    SET status = CASE NEW.vote WHEN 'deny' THEN 'rejected' ELSE 'approved' END, version = 2,
        decided_by = coalesce(NEW.decided_by, NEW.principal),
        decided_principal = NEW.principal, updated_at_ms = NEW.voted_at_ms
    WHERE approval_request_id = NEW.approval_request_id AND status = 'pending'
      AND (SELECT count(*) FROM approval_votes
           WHERE approval_request_id = NEW.approval_request_id AND vote = NEW.vote)
          >= coalesce((SELECT CASE NEW.vote WHEN 'deny' THEN denials_to_reject
                                            ELSE approvals_required END
                       FROM approval_request_policies
                       WHERE approval_request_id = NEW.approval_request_id), 1);
END;

-- trigger approval_votes_no_update
CREATE TRIGGER approval_votes_no_update BEFORE UPDATE ON approval_votes
BEGIN
    SELECT RAISE(ABORT, 'approval_votes: a vote never changes');
END;

-- trigger approval_votes_prune_only
CREATE TRIGGER approval_votes_prune_only BEFORE DELETE ON approval_votes
WHEN NOT EXISTS (
    SELECT 1 FROM prune_permits AS p WHERE p.approval_request_id = OLD.approval_request_id
)
BEGIN SELECT RAISE(ABORT, 'approval_votes: only a prune deletes a vote'); END;

-- trigger approval_votes_rules
CREATE TRIGGER approval_votes_rules BEFORE INSERT ON approval_votes
BEGIN
    SELECT CASE
        WHEN NEW.voted_at_ms > v.now_ms OR NEW.voted_at_ms < v.now_ms - 1000
            THEN RAISE(ABORT, 'approval_votes: a vote carries the database''s time')
        -- A direct approval records its decider's approve vote after the request moved.
        WHEN r.status IS NULL
            OR NOT (r.status = 'pending'
                    OR (r.status = 'approved' AND NEW.vote = 'approve'
                        AND r.decided_principal = NEW.principal))
            THEN RAISE(ABORT, 'approval_votes: the request is decided: it takes no votes')
        WHEN r.status = 'pending'
            AND v.now_ms >= coalesce(r.db_expires_at_ms, r.expires_at_ms)
            THEN RAISE(ABORT, 'qinglong:approval_expired: the database clock says so')
        WHEN p.approval_request_id IS NULL THEN NULL
        WHEN r.requested_principal = NEW.principal
            THEN RAISE(ABORT, 'approval_votes: the requester may not vote on its own request')
        WHEN json_array_length(p.approver_groups) > 0 AND NOT EXISTS (
                SELECT 1 FROM json_each(p.approver_groups) AS g
                JOIN approval_group_members AS m
                  ON m.group_name = g.value AND m.principal = NEW.principal)
            THEN RAISE(ABORT, 'approval_votes: the principal is in none of the policy''s groups')
        WHEN p.reason_required AND trim(coalesce(NEW.reason, '')) = ''
            THEN RAISE(ABORT, 'approval_votes: this policy asks every vote for a reason')
    END
    FROM (SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) AS now_ms) AS v
    LEFT JOIN approval_requests AS r ON r.approval_request_id = NEW.approval_request_id
    LEFT JOIN approval_request_policies AS p
      ON p.approval_request_id = NEW.approval_request_id;
END;

-- trigger approved_action_dispatch_executions_cancel_audited
CREATE TRIGGER approved_action_dispatch_executions_cancel_audited
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN NEW.status = 'cancelled' AND (OLD.status = 'pending' OR OLD.status = 'retry_wait')
    AND NEW.result_code IS NOT 'window_expired'
    AND NOT EXISTS (
    SELECT 1 FROM security_audit_events AS a
    WHERE a.subject_id = OLD.dispatch_id AND a.kind = 'dispatch.cancelled'
      AND a.detail_code = substr(OLD.status || ':' || coalesce(NEW.result_code, ''), 1, 128)
)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:transition_refused: unaudited');
END;

-- trigger approved_action_dispatch_executions_exhaust_guard
CREATE TRIGGER approved_action_dispatch_executions_exhaust_guard
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN NEW.status = 'blocked' AND (OLD.status = 'pending' OR OLD.status = 'retry_wait')
    AND (OLD.attempt < OLD.max_attempts OR NEW.result_code IS NOT 'attempts_exhausted')
BEGIN
    SELECT RAISE(ABORT, 'qinglong:transition_refused: blocked');
END;

-- trigger approved_action_dispatch_executions_freeze
CREATE TRIGGER approved_action_dispatch_executions_freeze
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN ((NEW.status = 'leased' AND (OLD.status <> 'leased'
                                  OR NEW.lease_token IS NOT OLD.lease_token))
      OR (NEW.status = 'executing' AND OLD.status <> 'executing')
      OR (NEW.status = 'succeeded' AND OLD.status = 'pending'))
    AND EXISTS (SELECT 1 FROM dispatch_freezes AS z WHERE z.dispatch_id = NEW.dispatch_id)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:freeze_refused: a freeze covers this dispatch');
END;

-- trigger approved_action_dispatch_executions_insert_state
CREATE TRIGGER approved_action_dispatch_executions_insert_state
BEFORE INSERT ON approved_action_dispatch_executions
WHEN NEW.status IS NOT 'pending' OR NEW.version IS NOT 0 OR NEW.attempt IS NOT 0
    OR NEW.takeovers IS NOT 0
    OR NEW.lease_owner IS NOT NULL OR NEW.lease_token IS NOT NULL
    OR NEW.lease_expires_at_ms IS NOT NULL OR NEW.started_at_ms IS NOT NULL
    OR NEW.retry_at_ms IS NOT NULL OR NEW.result_mutation_id IS NOT NULL
    OR NEW.result_code IS NOT NULL OR NEW.completed_at_ms IS NOT NULL
BEGIN SELECT RAISE(ABORT, 'qinglong:transition_refused: insert'); END;

-- trigger approved_action_dispatch_executions_lease_due_guard
CREATE TRIGGER approved_action_dispatch_executions_lease_due_guard
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN NEW.status = 'leased' AND (NEW.lease_expires_at_ms IS NULL
    OR NEW.eligible_at_ms IS NOT NEW.lease_expires_at_ms)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:transition_refused: due');
END;

-- trigger approved_action_dispatch_executions_ledger_insert
CREATE TRIGGER approved_action_dispatch_executions_ledger_insert
AFTER INSERT ON approved_action_dispatch_executions
BEGIN
    INSERT INTO execution_events (
        dispatch_id, version, from_status, to_status, attempt, lease_owner, lease_token,
        mutation_id, result_code, committed_at_ms
    ) VALUES (
        NEW.dispatch_id, NEW.version, NULL, NEW.status, NEW.attempt, NULL, NULL, NULL, NULL,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    );
END;

-- trigger approved_action_dispatch_executions_ledger_update
CREATE TRIGGER approved_action_dispatch_executions_ledger_update
AFTER UPDATE ON approved_action_dispatch_executions
WHEN NEW.status IS NOT OLD.status OR NEW.attempt IS NOT OLD.attempt
    OR NEW.takeovers IS NOT OLD.takeovers
BEGIN
    INSERT INTO execution_events (
        dispatch_id, version, from_status, to_status, attempt, lease_owner, lease_token,
        mutation_id, result_code, committed_at_ms
    ) VALUES (
        NEW.dispatch_id, NEW.version, OLD.status, NEW.status, NEW.attempt, NEW.lease_owner,
        NEW.lease_token,
        CASE WHEN NEW.result_mutation_id IS NOT OLD.result_mutation_id
             THEN NEW.result_mutation_id END,
        CASE WHEN NEW.status <> 'leased' AND NEW.status <> 'executing' THEN NEW.result_code END,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    );
END;

-- trigger approved_action_dispatch_executions_manual_audited
CREATE TRIGGER approved_action_dispatch_executions_manual_audited
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN OLD.status = 'executing'
    AND (NEW.status = 'succeeded' OR NEW.status = 'failed' OR NEW.status = 'blocked')
    AND EXISTS (
        SELECT 1 FROM recovery_resolutions AS r
        WHERE r.dispatch_id = OLD.dispatch_id AND r.source = 'manual')
    AND NOT EXISTS (
        SELECT 1 FROM security_audit_events AS a
        WHERE a.subject_id = OLD.dispatch_id AND a.kind = 'recovery.manual_resolution'
          AND a.detail_code = substr(NEW.status || ':' || coalesce(NEW.result_code, ''), 1, 128))
BEGIN
    SELECT RAISE(ABORT, 'qinglong:transition_refused: unaudited');
END;

-- trigger approved_action_dispatch_executions_prune_only
CREATE TRIGGER approved_action_dispatch_executions_prune_only
BEFORE DELETE ON approved_action_dispatch_executions
WHEN NOT (OLD.status = 'blocked' OR OLD.status = 'cancelled' OR OLD.status = 'failed'
          OR OLD.status = 'succeeded')
    OR NOT EXISTS (SELECT 1 FROM prune_permits AS p WHERE p.dispatch_id = OLD.dispatch_id)
BEGIN
    SELECT RAISE(ABORT, 'approved_action_dispatch_executions: only a prune deletes a finished row');
END;

-- trigger approved_action_dispatch_executions_receipt_insert
CREATE TRIGGER approved_action_dispatch_executions_receipt_insert
BEFORE INSERT ON approved_action_dispatch_executions
WHEN NEW.result_receipt_json IS NOT NULL OR NEW.result_receipt_digest IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'qinglong:transition_refused: receipt');
END;

-- trigger approved_action_dispatch_executions_receipt_update
CREATE TRIGGER approved_action_dispatch_executions_receipt_update
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN (NEW.result_receipt_json IS NOT OLD.result_receipt_json
        OR NEW.result_receipt_digest IS NOT OLD.result_receipt_digest)
    AND NOT (OLD.status = 'executing' AND (NEW.status = 'succeeded' OR NEW.status = 'failed')
             AND OLD.result_receipt_json IS NULL
             AND (NEW.result_receipt_json IS NULL) = (NEW.result_receipt_digest IS NULL))
BEGIN
    SELECT RAISE(ABORT, 'qinglong:transition_refused: receipt');
END;

-- trigger approved_action_dispatch_executions_rule_immutable
CREATE TRIGGER approved_action_dispatch_executions_rule_immutable
BEFORE UPDATE OF proceed_on_unknown ON approved_action_dispatch_executions
WHEN NEW.proceed_on_unknown IS NOT OLD.proceed_on_unknown
BEGIN
    SELECT RAISE(ABORT, 'qinglong:target_refused: a rule never changes');
END;

-- trigger approved_action_dispatch_executions_rule_of_policy
CREATE TRIGGER approved_action_dispatch_executions_rule_of_policy
BEFORE INSERT ON approved_action_dispatch_executions
WHEN NEW.proceed_on_unknown IS NOT coalesce((
    SELECT u.proceed_on_unknown FROM dispatch_unknown_rules AS u
    WHERE u.dispatch_id = NEW.dispatch_id), 0)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:target_refused: an execution carries its policy''s rule');
END;

-- trigger approved_action_dispatch_executions_settle_guard
CREATE TRIGGER approved_action_dispatch_executions_settle_guard
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN OLD.status = 'executing'
    AND (NEW.status = 'succeeded' OR NEW.status = 'failed' OR NEW.status = 'blocked')
    AND NEW.result_mutation_id IS OLD.result_mutation_id
BEGIN
    SELECT RAISE(ABORT, 'qinglong:transition_refused: settle');
END;

-- trigger approved_action_dispatch_executions_state_machine
CREATE TRIGGER approved_action_dispatch_executions_state_machine
BEFORE UPDATE ON approved_action_dispatch_executions
BEGIN
    SELECT CASE
        WHEN OLD.status = 'succeeded' OR OLD.status = 'failed' OR OLD.status = 'blocked'
            OR OLD.status = 'cancelled'
            THEN RAISE(ABORT, 'qinglong:transition_refused: terminal')
        WHEN NEW.dispatch_id IS NOT OLD.dispatch_id OR NEW.project_id IS NOT OLD.project_id
            OR NEW.max_attempts IS NOT OLD.max_attempts
            OR NEW.created_at_ms IS NOT OLD.created_at_ms
            THEN RAISE(ABORT, 'qinglong:transition_refused: identity')
        WHEN NEW.version IS NULL OR NEW.version <= OLD.version
            THEN RAISE(ABORT, 'qinglong:transition_refused: version')
        WHEN NOT CASE OLD.status
            WHEN 'pending' THEN NEW.status = 'leased' OR NEW.status = 'blocked'
                OR NEW.status = 'cancelled' OR NEW.status = 'pending'
                OR NEW.status = 'succeeded'
            WHEN 'retry_wait' THEN NEW.status = 'leased' OR NEW.status = 'blocked'
                OR NEW.status = 'cancelled'
            WHEN 'leased' THEN NEW.status = 'leased' OR NEW.status = 'blocked'
                OR NEW.status = 'retry_wait' OR NEW.status = 'pending'
                OR NEW.status = 'executing'
                OR (NEW.status = 'cancelled' AND NEW.result_code IS 'window_expired')
            WHEN 'executing' THEN NEW.status = 'executing' OR NEW.status = 'succeeded'
                OR NEW.status = 'failed' OR NEW.status = 'blocked'
            ELSE 0
        END
            THEN RAISE(ABORT, 'qinglong:transition_refused: transition')
        -- A passage (points 2 and 3): for a type marked transactional, the next attempt
        -- within the budget as a claim would take it, its holder, start and completion named,
        -- its receipt named under foreign keys enforced (the receipt's own guard binds it to
        -- exactly this attempt and start when it is written).
        WHEN OLD.status = 'pending' AND NEW.status = 'succeeded'
            THEN CASE
                WHEN NOT EXISTS (
                        SELECT 1 FROM approved_action_dispatches AS d
                        JOIN transactional_action_types AS t ON t.action_type = d.action_type
                        WHERE d.dispatch_id = NEW.dispatch_id)
                    THEN RAISE(ABORT, 'qinglong:transition_refused: not transactional')
                WHEN NEW.attempt IS NOT OLD.attempt + 1 OR NEW.attempt > NEW.max_attempts
                    OR NEW.takeovers IS NOT OLD.takeovers
                    OR NEW.lease_owner IS NULL OR NEW.lease_token IS NULL
                    OR NEW.started_at_ms IS NULL OR NEW.completed_at_ms IS NULL
                    OR NEW.result_mutation_id IS NULL
                    THEN RAISE(ABORT, 'qinglong:transition_refused: passage')
                WHEN NEW.passage_receipt IS NOT NEW.dispatch_id
                    OR NOT (SELECT foreign_keys FROM pragma_foreign_keys)
                    THEN RAISE(ABORT, 'qinglong:transition_refused: a passage commits with its receipt')
            END
        -- A handler wait made due earlier: only its due time moves back, nothing else.
        WHEN OLD.status = 'pending' AND NEW.status = 'pending'
            THEN CASE
                WHEN OLD.result_code IS NOT 'handler_missing'
                    OR NOT NEW.eligible_at_ms < OLD.eligible_at_ms
                    OR NEW.attempt IS NOT OLD.attempt OR NEW.takeovers IS NOT OLD.takeovers
                    OR NEW.lease_owner IS NOT OLD.lease_owner
                    OR NEW.lease_token IS NOT OLD.lease_token
                    OR NEW.lease_expires_at_ms IS NOT OLD.lease_expires_at_ms
                    OR NEW.started_at_ms IS NOT OLD.started_at_ms
                    OR NEW.retry_at_ms IS NOT OLD.retry_at_ms
                    OR NEW.result_mutation_id IS NOT OLD.result_mutation_id
                    OR NEW.result_code IS NOT OLD.result_code
                    OR NEW.completed_at_ms IS NOT OLD.completed_at_ms
                    THEN RAISE(ABORT, 'qinglong:transition_refused: wake')
            END
        -- A takeover: a new claim of a leased row (a new token, or the same claimant again
        -- with its lease run out). It keeps the attempt (the dead holder's claim is refunded)
        -- and counts one takeover within the bound, once the old lease expired on the
        -- database clock.
        WHEN OLD.status = 'leased' AND NEW.status = 'leased'
            AND (NEW.lease_token IS NOT OLD.lease_token OR NEW.takeovers IS NOT OLD.takeovers)
            THEN CASE
                WHEN NEW.attempt IS NOT OLD.attempt OR NEW.takeovers IS NOT OLD.takeovers + 1
                    OR NEW.takeovers > 4 * NEW.max_attempts OR NEW.started_at_ms IS NOT NULL
                    OR OLD.lease_expires_at_ms
                        > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
                    THEN RAISE(ABORT, 'qinglong:transition_refused: takeover')
            END
        -- A claim of a waiting row takes the next attempt within the budget, starts nothing.
        WHEN NEW.status = 'leased' AND OLD.status <> 'leased'
            THEN CASE
                WHEN NEW.attempt IS NOT OLD.attempt + 1 OR NEW.attempt > NEW.max_attempts
                    OR NEW.started_at_ms IS NOT NULL OR NEW.takeovers IS NOT OLD.takeovers
                    THEN RAISE(ABORT, 'qinglong:transition_refused: attempt')
            END
        WHEN NEW.takeovers IS NOT OLD.takeovers
            THEN RAISE(ABORT, 'qinglong:transition_refused: takeover')
        -- Anything else keeps the fence; a yield refunds the attempt.
        WHEN NEW.attempt IS NOT OLD.attempt
                - (CASE WHEN OLD.status = 'leased' AND NEW.status = 'pending' THEN 1 ELSE 0 END)
            THEN RAISE(ABORT, 'qinglong:transition_refused: attempt')
        WHEN NEW.lease_owner IS NOT OLD.lease_owner OR NEW.lease_token IS NOT OLD.lease_token
            OR NEW.passage_receipt IS NOT OLD.passage_receipt
            OR (NEW.started_at_ms IS NOT OLD.started_at_ms
                AND NOT (OLD.status = 'leased' AND NEW.status = 'executing'))
            THEN RAISE(ABORT, 'qinglong:transition_refused: fence')
    END;
END;

-- trigger approved_action_dispatch_executions_target_holder
CREATE TRIGGER approved_action_dispatch_executions_target_holder
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN NEW.target IS NOT NULL AND NEW.proceed_on_unknown = 1 AND NEW.status = 'executing'
    AND (OLD.status <> 'executing' OR NEW.lease_expires_at_ms IS NOT OLD.lease_expires_at_ms)
    AND EXISTS (
        SELECT 1 FROM approved_action_dispatch_executions AS b
        WHERE b.target = NEW.target AND b.status IN ('leased', 'executing')
          AND b.dispatch_id <> NEW.dispatch_id
          AND (b.status = 'leased' OR b.proceed_on_unknown = 0
               OR b.lease_expires_at_ms
                  > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)))
BEGIN
    SELECT RAISE(ABORT, 'qinglong:target_refused: another execution holds the target');
END;

-- trigger approved_action_dispatch_executions_target_immutable
CREATE TRIGGER approved_action_dispatch_executions_target_immutable
BEFORE UPDATE OF target ON approved_action_dispatch_executions
WHEN NEW.target IS NOT OLD.target
BEGIN
    SELECT RAISE(ABORT, 'qinglong:target_refused: a target never changes');
END;

-- trigger approved_action_dispatch_executions_target_of_dispatch
CREATE TRIGGER approved_action_dispatch_executions_target_of_dispatch
BEFORE INSERT ON approved_action_dispatch_executions
WHEN NEW.target IS NOT (
    SELECT d.target FROM approved_action_dispatches AS d WHERE d.dispatch_id = NEW.dispatch_id)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:target_refused: an execution names its dispatch''s target');
END;

-- trigger approved_action_dispatch_executions_target_proceeding
CREATE TRIGGER approved_action_dispatch_executions_target_proceeding
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN NEW.target IS NOT NULL AND NEW.status = 'leased'
    AND (OLD.status <> 'leased' OR NEW.lease_token IS NOT OLD.lease_token)
    AND EXISTS (
        SELECT 1 FROM approved_action_dispatch_executions AS b
        WHERE b.target = NEW.target AND b.status = 'executing' AND b.proceed_on_unknown = 1
          AND b.dispatch_id <> NEW.dispatch_id
          AND b.lease_expires_at_ms
              > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
BEGIN
    SELECT RAISE(ABORT, 'qinglong:target_refused: another execution holds the target');
END;

-- trigger approved_action_dispatch_executions_tell
CREATE TRIGGER approved_action_dispatch_executions_tell
AFTER UPDATE ON approved_action_dispatch_executions
WHEN NEW.status IS NOT OLD.status AND NEW.status IN ('failed', 'blocked', 'succeeded')
 AND EXISTS (SELECT 1 FROM notification_subscriptions AS s
             WHERE instr(s.kinds_json, '"dispatch.' || NEW.status || '"') > 0)
BEGIN
    INSERT INTO notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    )
    SELECT 'dispatch.' || NEW.status, NEW.dispatch_id, d.project_id, d.action_type,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER),
        json_object(
            'dispatchId', NEW.dispatch_id,
            'approvalRequestId', d.approval_request_id,
            'actionRef', d.action_ref,
            'actionDigest', d.action_digest,
            'status', NEW.status,
            'attempt', NEW.attempt,
            'resultCode', NEW.result_code)
    FROM approved_action_dispatches AS d
    WHERE d.dispatch_id = NEW.dispatch_id;
END;

-- trigger approved_action_dispatch_executions_window
CREATE TRIGGER approved_action_dispatch_executions_window
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN (NEW.not_before_ms IS NOT NULL OR NEW.not_after_ms IS NOT NULL)
    AND ((NEW.status = 'leased' AND (OLD.status <> 'leased'
                                     OR NEW.lease_token IS NOT OLD.lease_token))
         OR (NEW.status = 'executing' AND OLD.status <> 'executing')
         OR (NEW.status = 'succeeded' AND OLD.status = 'pending'))
    AND (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) < NEW.not_before_ms
         OR CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) >= NEW.not_after_ms)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:window_refused: outside its execution window');
END;

-- trigger approved_action_dispatch_executions_window_expired
CREATE TRIGGER approved_action_dispatch_executions_window_expired
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN NEW.status = 'cancelled' AND NEW.result_code IS 'window_expired'
    AND (OLD.not_after_ms IS NULL
         OR OLD.not_after_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
BEGIN
    SELECT RAISE(ABORT, 'qinglong:window_refused: the window is still open');
END;

-- trigger approved_action_dispatch_executions_window_expired_lease
CREATE TRIGGER approved_action_dispatch_executions_window_expired_lease
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN NEW.status = 'cancelled' AND OLD.status = 'leased'
    AND (NEW.result_code IS NOT 'window_expired'
         OR OLD.lease_expires_at_ms
            > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
BEGIN
    SELECT RAISE(ABORT, 'qinglong:transition_refused: a claimed row ends only past its window and lease');
END;

-- trigger approved_action_dispatch_executions_window_immutable
CREATE TRIGGER approved_action_dispatch_executions_window_immutable
BEFORE UPDATE OF not_before_ms, not_after_ms ON approved_action_dispatch_executions
WHEN NEW.not_before_ms IS NOT OLD.not_before_ms OR NEW.not_after_ms IS NOT OLD.not_after_ms
BEGIN
    SELECT RAISE(ABORT, 'qinglong:window_refused: a window never changes');
END;

-- trigger approved_action_dispatch_executions_window_of_dispatch
CREATE TRIGGER approved_action_dispatch_executions_window_of_dispatch
BEFORE INSERT ON approved_action_dispatch_executions
WHEN NEW.not_before_ms IS NOT (
        SELECT d.not_before_ms FROM approved_action_dispatches AS d
        WHERE d.dispatch_id = NEW.dispatch_id)
    OR NEW.not_after_ms IS NOT (
        SELECT d.not_after_ms FROM approved_action_dispatches AS d
        WHERE d.dispatch_id = NEW.dispatch_id)
    OR NEW.eligible_at_ms < NEW.not_before_ms
BEGIN
    SELECT RAISE(ABORT, 'qinglong:window_refused: an execution carries its dispatch''s window');
END;

-- trigger approved_action_dispatches_immutable_delete
CREATE TRIGGER approved_action_dispatches_immutable_delete
BEFORE DELETE ON approved_action_dispatches
WHEN NOT EXISTS (SELECT 1 FROM prune_permits AS p WHERE p.dispatch_id = OLD.dispatch_id)
BEGIN SELECT RAISE(ABORT, 'approved_action_dispatches is immutable'); END;

-- trigger approved_action_dispatches_immutable_update
CREATE TRIGGER approved_action_dispatches_immutable_update
BEFORE UPDATE ON approved_action_dispatches
BEGIN SELECT RAISE(ABORT, 'approved_action_dispatches is immutable'); END;

-- trigger approved_action_dispatches_insert_guard
CREATE TRIGGER approved_action_dispatches_insert_guard BEFORE INSERT ON approved_action_dispatches
WHEN NOT EXISTS (
    SELECT 1 FROM approval_requests AS a
    WHERE a.approval_request_id = NEW.approval_request_id AND a.status = 'consumed'
      AND a.project_id = NEW.project_id AND a.action_type = NEW.action_type
      AND a.action_ref = NEW.action_ref AND a.action_digest = NEW.action_digest
      AND a.decided_by = NEW.approved_by
)
BEGIN
    SELECT RAISE(ABORT, 'approved_action_dispatches: needs its consumed approval, same action');
END;

-- trigger approved_action_dispatches_target_of_plan
CREATE TRIGGER approved_action_dispatches_target_of_plan
BEFORE INSERT ON approved_action_dispatches
WHEN NEW.target IS NOT (
    SELECT p.target FROM action_plans AS p
    WHERE p.project_id = NEW.project_id AND p.action_ref = NEW.action_ref)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:target_refused: a dispatch names its plan''s target');
END;

-- trigger approved_action_dispatches_traceparent_of_request
CREATE TRIGGER approved_action_dispatches_traceparent_of_request
BEFORE INSERT ON approved_action_dispatches
WHEN NEW.traceparent IS NOT (
    SELECT a.traceparent FROM approval_requests AS a
    WHERE a.approval_request_id = NEW.approval_request_id)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:traceparent_refused: a dispatch names its request''s traceparent');
END;

-- trigger approved_action_dispatches_window_of_policy
CREATE TRIGGER approved_action_dispatches_window_of_policy
BEFORE INSERT ON approved_action_dispatches
WHEN NEW.not_before_ms IS NOT (
        SELECT w.not_before_ms FROM approval_request_windows AS w
        WHERE w.approval_request_id = NEW.approval_request_id)
    OR NEW.not_after_ms IS NOT (
        SELECT w.not_after_ms FROM approval_request_windows AS w
        WHERE w.approval_request_id = NEW.approval_request_id)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:window_refused: a dispatch carries its policy''s window');
END;

-- trigger approved_run_action_receipts_guard
CREATE TRIGGER approved_run_action_receipts_guard BEFORE INSERT ON approved_run_action_receipts
WHEN NOT EXISTS (
    SELECT 1
    FROM approved_action_dispatch_executions AS e
    JOIN approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
    JOIN runs AS r ON r.run_id = NEW.resource_id
    WHERE e.dispatch_id = NEW.dispatch_id
      AND (e.status = 'executing' OR e.status = 'succeeded')
      AND e.attempt = NEW.execution_attempt AND e.started_at_ms = NEW.started_at_ms
      AND d.approval_request_id = NEW.approval_request_id
      AND d.project_id = NEW.project_id AND d.action_type = NEW.action_type
      AND d.action_digest = NEW.action_digest
      AND r.project_id = NEW.project_id AND r.idempotency_key = NEW.idempotency_key
      AND r.idempotency_key = NEW.dispatch_id AND r.request_id IS NEW.approval_request_id
)
BEGIN
    SELECT RAISE(ABORT, 'approved_run_action_receipts: binds its started execution and Run');
END;

-- trigger approved_run_action_receipts_immutable_delete
CREATE TRIGGER approved_run_action_receipts_immutable_delete
BEFORE DELETE ON approved_run_action_receipts
WHEN NOT EXISTS (SELECT 1 FROM prune_permits AS p WHERE p.dispatch_id = OLD.dispatch_id)
BEGIN SELECT RAISE(ABORT, 'approved_run_action_receipts is immutable'); END;

-- trigger approved_run_action_receipts_immutable_update
CREATE TRIGGER approved_run_action_receipts_immutable_update
BEFORE UPDATE ON approved_run_action_receipts
BEGIN SELECT RAISE(ABORT, 'approved_run_action_receipts is immutable'); END;

-- trigger audit_prune_permits_immutable_update
CREATE TRIGGER audit_prune_permits_immutable_update BEFORE UPDATE ON audit_prune_permits
BEGIN SELECT RAISE(ABORT, 'audit_prune_permits is immutable'); END;

-- trigger audit_prune_permits_insert_guard
CREATE TRIGGER audit_prune_permits_insert_guard BEFORE INSERT ON audit_prune_permits
WHEN NEW.cutoff_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
BEGIN SELECT RAISE(ABORT, 'audit_prune_permits: the cutoff may not be in the future'); END;

-- trigger audit_receipts_immutable_delete
CREATE TRIGGER audit_receipts_immutable_delete BEFORE DELETE ON audit_receipts
BEGIN SELECT RAISE(ABORT, 'audit_receipts is immutable'); END;

-- trigger audit_receipts_immutable_update
CREATE TRIGGER audit_receipts_immutable_update BEFORE UPDATE ON audit_receipts
BEGIN SELECT RAISE(ABORT, 'audit_receipts is immutable'); END;

-- trigger execution_events_immutable_delete
CREATE TRIGGER execution_events_immutable_delete BEFORE DELETE ON execution_events
WHEN NOT EXISTS (SELECT 1 FROM prune_permits AS p WHERE p.dispatch_id = OLD.dispatch_id)
BEGIN SELECT RAISE(ABORT, 'execution_events is immutable'); END;

-- trigger execution_events_immutable_update
CREATE TRIGGER execution_events_immutable_update BEFORE UPDATE ON execution_events
BEGIN SELECT RAISE(ABORT, 'execution_events is immutable'); END;

-- trigger execution_events_insert_guard
CREATE TRIGGER execution_events_insert_guard BEFORE INSERT ON execution_events
WHEN NOT EXISTS (
    SELECT 1 FROM approved_action_dispatch_executions AS e
    WHERE e.dispatch_id = NEW.dispatch_id AND e.version = NEW.version
      AND e.status = NEW.to_status AND e.attempt = NEW.attempt
      AND e.lease_owner IS NEW.lease_owner AND e.lease_token IS NEW.lease_token
)
BEGIN
    SELECT RAISE(ABORT, 'execution_events: a ledger line records the row''s own change');
END;

-- trigger freeze_lifts_audit
CREATE TRIGGER freeze_lifts_audit AFTER INSERT ON freeze_lifts
BEGIN
    INSERT INTO security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
    ) SELECT 'approval.freeze_lifted', NEW.lifted_by, NEW.lifted_by, d.project_id, NEW.dispatch_id,
             CAST(NEW.freeze_id AS TEXT), NEW.lifted_at_ms
      FROM approved_action_dispatches AS d WHERE d.dispatch_id = NEW.dispatch_id;
END;

-- trigger freeze_lifts_no_update
CREATE TRIGGER freeze_lifts_no_update BEFORE UPDATE ON freeze_lifts
BEGIN
    SELECT RAISE(ABORT, 'qinglong:freeze_refused: a freeze lift never changes');
END;

-- trigger freeze_lifts_not_the_requester
CREATE TRIGGER freeze_lifts_not_the_requester BEFORE INSERT ON freeze_lifts
WHEN EXISTS (SELECT 1 FROM approved_action_dispatches AS d
             JOIN approval_requests AS r ON r.approval_request_id = d.approval_request_id
             WHERE d.dispatch_id = NEW.dispatch_id AND r.requested_principal = NEW.lifted_by)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:freeze_refused: the requester may not lift a freeze');
END;

-- trigger freezes_audit_added
CREATE TRIGGER freezes_audit_added AFTER INSERT ON freezes
BEGIN
    INSERT INTO security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
    ) VALUES (
        'approval.freeze_added', NEW.created_by, NEW.created_by, coalesce(NEW.project_id, ''),
        'freeze:' || NEW.freeze_id, substr(NEW.reason, 1, 128), NEW.created_at_ms
    );
END;

-- trigger freezes_audit_ended
CREATE TRIGGER freezes_audit_ended AFTER UPDATE ON freezes
BEGIN
    INSERT INTO security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
    ) VALUES (
        'approval.freeze_ended', NEW.ended_by, NEW.ended_by, coalesce(NEW.project_id, ''),
        'freeze:' || NEW.freeze_id, 'ended', NEW.ended_at_ms
    );
END;

-- trigger freezes_born_open
CREATE TRIGGER freezes_born_open BEFORE INSERT ON freezes
WHEN NEW.ended_by IS NOT NULL OR NEW.ended_at_ms IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'qinglong:freeze_refused: a freeze is written open');
END;

-- trigger freezes_no_delete
CREATE TRIGGER freezes_no_delete BEFORE DELETE ON freezes
BEGIN
    SELECT RAISE(ABORT, 'qinglong:freeze_refused: a freeze is never deleted: end it');
END;

-- trigger freezes_only_end
CREATE TRIGGER freezes_only_end BEFORE UPDATE ON freezes
WHEN OLD.ended_at_ms IS NOT NULL OR NEW.ended_at_ms IS NULL
    OR NEW.freeze_id IS NOT OLD.freeze_id OR NEW.action_type IS NOT OLD.action_type
    OR NEW.project_id IS NOT OLD.project_id OR NEW.target_prefix IS NOT OLD.target_prefix
    OR NEW.from_ms IS NOT OLD.from_ms OR NEW.until_ms IS NOT OLD.until_ms
    OR NEW.reason IS NOT OLD.reason OR NEW.created_by IS NOT OLD.created_by
    OR NEW.created_at_ms IS NOT OLD.created_at_ms
    OR NEW.ended_at_ms IS NOT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:freeze_refused: a freeze only ends, once, now');
END;

-- trigger inbox_notes_immutable
CREATE TRIGGER inbox_notes_immutable BEFORE UPDATE ON inbox_notes
BEGIN SELECT RAISE(ABORT, 'inbox_notes is immutable'); END;

-- trigger notification_attempts_prune_guard
CREATE TRIGGER notification_attempts_prune_guard BEFORE DELETE ON notification_attempts
WHEN EXISTS (SELECT 1 FROM notification_deliveries AS d
             WHERE d.event_id = OLD.event_id AND d.subscription = OLD.subscription
               AND d.status = 'pending')
BEGIN
    SELECT RAISE(ABORT, 'notification_attempts: an attempt of a pending delivery is kept');
END;

-- trigger notification_deliveries_prune_guard
CREATE TRIGGER notification_deliveries_prune_guard BEFORE DELETE ON notification_deliveries
WHEN OLD.status = 'pending'
  AND EXISTS (SELECT 1 FROM notification_subscriptions AS s WHERE s.name = OLD.subscription)
BEGIN
    SELECT RAISE(ABORT, 'notification_deliveries: a pending delivery is never deleted');
END;

-- trigger notification_events_change_holds
CREATE TRIGGER notification_events_change_holds BEFORE INSERT ON notification_events
WHEN NEW.at_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    OR NEW.at_ms < CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) - 1000
    OR NOT CASE
        WHEN NEW.kind = 'approval.requested' THEN EXISTS (
            SELECT 1 FROM approval_requests AS r
            WHERE r.approval_request_id = NEW.subject_id AND r.project_id = NEW.project_id
              AND r.action_type = NEW.action_type)
        WHEN NEW.kind = 'approval.expiring' THEN EXISTS (
            SELECT 1 FROM approval_events AS e JOIN approval_requests AS r
                USING (approval_request_id)
            WHERE e.approval_request_id = NEW.subject_id AND e.kind = NEW.kind
              AND r.project_id = NEW.project_id AND r.action_type = NEW.action_type)
        WHEN NEW.kind LIKE 'approval.%' THEN EXISTS (
            SELECT 1 FROM approval_requests AS r
            WHERE r.approval_request_id = NEW.subject_id AND r.project_id = NEW.project_id
              AND r.action_type = NEW.action_type AND 'approval.' || r.status = NEW.kind)
        WHEN NEW.kind IN ('dispatch.recovery_required', 'target.held') THEN EXISTS (
            SELECT 1 FROM recovery_required_marks AS m
            JOIN approved_action_dispatches AS d USING (dispatch_id)
            WHERE m.dispatch_id = NEW.subject_id AND d.project_id = NEW.project_id
              AND d.action_type = NEW.action_type
              AND (NEW.kind = 'dispatch.recovery_required' OR d.target IS NOT NULL))
        ELSE EXISTS (
            SELECT 1 FROM approved_action_dispatch_executions AS e
            JOIN approved_action_dispatches AS d USING (dispatch_id)
            WHERE e.dispatch_id = NEW.subject_id AND d.project_id = NEW.project_id
              AND d.action_type = NEW.action_type AND 'dispatch.' || e.status = NEW.kind)
    END
BEGIN
    SELECT RAISE(ABORT, 'notification_events: an event is written with its change, at the file''s time');
END;

-- trigger notification_events_no_delete
CREATE TRIGGER notification_events_no_delete BEFORE DELETE ON notification_events
WHEN OLD.id > (SELECT fanned_out_through FROM notification_deliverer)
  OR OLD.id = (SELECT max(id) FROM notification_events)
  OR EXISTS (SELECT 1 FROM notification_deliveries AS d
             WHERE d.event_id = OLD.id AND d.status = 'pending')
BEGIN
    SELECT RAISE(ABORT, 'notification_events: an event goes only once matched and delivered or dead-lettered');
END;

-- trigger notification_events_no_update
CREATE TRIGGER notification_events_no_update BEFORE UPDATE ON notification_events
WHEN NOT (OLD.target IS NULL
          AND NEW.id IS OLD.id AND NEW.kind IS OLD.kind AND NEW.subject_id IS OLD.subject_id
          AND NEW.project_id IS OLD.project_id AND NEW.action_type IS OLD.action_type
          AND NEW.at_ms IS OLD.at_ms AND NEW.payload_json IS OLD.payload_json
          AND NEW.target IS CASE WHEN OLD.kind LIKE 'approval.%' THEN (
        SELECT a.target FROM approval_requests AS r
        JOIN action_plans AS a ON a.project_id = r.project_id AND a.action_ref = r.action_ref
        WHERE r.approval_request_id = OLD.subject_id)
    ELSE (
        SELECT t.target FROM approved_action_dispatches AS t WHERE t.dispatch_id = OLD.subject_id)
    END)
BEGIN
    SELECT RAISE(ABORT, 'notification_events: an event never changes');
END;

-- trigger notification_events_target
CREATE TRIGGER notification_events_target AFTER INSERT ON notification_events
BEGIN
    UPDATE notification_events SET target = CASE WHEN NEW.kind LIKE 'approval.%' THEN (
        SELECT a.target FROM approval_requests AS r
        JOIN action_plans AS a ON a.project_id = r.project_id AND a.action_ref = r.action_ref
        WHERE r.approval_request_id = NEW.subject_id)
    ELSE (
        SELECT t.target FROM approved_action_dispatches AS t WHERE t.dispatch_id = NEW.subject_id)
    END
    WHERE id = NEW.id;
END;

-- trigger notification_events_while_someone_listens
CREATE TRIGGER notification_events_while_someone_listens BEFORE INSERT ON notification_events
WHEN NOT EXISTS (SELECT 1 FROM notification_subscriptions AS s
                 WHERE instr(s.kinds_json, '"' || NEW.kind || '"') > 0)
BEGIN
    SELECT RAISE(IGNORE);
END;

-- trigger notification_fanouts_prune_guard
CREATE TRIGGER notification_fanouts_prune_guard BEFORE DELETE ON notification_fanouts
WHEN OLD.event_id > (SELECT fanned_out_through FROM notification_deliverer)
BEGIN
    SELECT RAISE(ABORT, 'notification_fanouts: an event not yet matched keeps its match');
END;

-- trigger prune_permits_immutable_update
CREATE TRIGGER prune_permits_immutable_update BEFORE UPDATE ON prune_permits
BEGIN SELECT RAISE(ABORT, 'prune_permits is immutable'); END;

-- trigger prune_permits_insert_guard
CREATE TRIGGER prune_permits_insert_guard BEFORE INSERT ON prune_permits
WHEN NEW.cutoff_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    OR NOT EXISTS (
        SELECT 1
        FROM approved_action_dispatches AS d
        JOIN approved_action_dispatch_executions AS e ON e.dispatch_id = d.dispatch_id
        WHERE d.dispatch_id = NEW.dispatch_id
          AND d.approval_request_id = NEW.approval_request_id
          AND d.project_id = NEW.project_id AND d.action_ref = NEW.action_ref
          AND (e.status = 'blocked' OR e.status = 'cancelled' OR e.status = 'failed'
               OR e.status = 'succeeded')
          AND e.updated_at_ms < NEW.cutoff_ms
    )
BEGIN
    SELECT RAISE(ABORT, 'prune_permits: only a terminal dispatch tree older than a past cutoff');
END;

-- trigger recovery_observations_mark
CREATE TRIGGER recovery_observations_mark AFTER INSERT ON recovery_observations
BEGIN
    INSERT OR IGNORE INTO recovery_required_marks (
        dispatch_id, execution_attempt, execution_version, lease_owner, lease_expires_at_ms,
        noticed_by, committed_at_ms
    )
    SELECT e.dispatch_id, e.attempt, e.version, e.lease_owner, e.lease_expires_at_ms,
           'recovery_pass', CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    FROM approved_action_dispatch_executions AS e
    WHERE e.dispatch_id = NEW.dispatch_id AND e.status = 'executing';
END;

-- trigger recovery_observations_prune_only
CREATE TRIGGER recovery_observations_prune_only BEFORE DELETE ON recovery_observations
WHEN NOT EXISTS (SELECT 1 FROM prune_permits AS p WHERE p.dispatch_id = OLD.dispatch_id)
BEGIN SELECT RAISE(ABORT, 'recovery_observations: only a prune deletes an observation'); END;

-- trigger recovery_required_marks_guard
CREATE TRIGGER recovery_required_marks_guard BEFORE INSERT ON recovery_required_marks
WHEN NOT EXISTS (
        SELECT 1 FROM approved_action_dispatch_executions AS e
        WHERE e.dispatch_id = NEW.dispatch_id AND e.status = 'executing'
          AND e.attempt = NEW.execution_attempt AND e.version = NEW.execution_version
    )
    OR NOT (EXISTS (SELECT 1 FROM recovery_observations AS o WHERE o.dispatch_id = NEW.dispatch_id)
            OR EXISTS (SELECT 1 FROM recovery_resolutions AS r
                       WHERE r.dispatch_id = NEW.dispatch_id))
BEGIN
    SELECT RAISE(ABORT, 'qinglong:transition_refused: a mark follows an observation or a resolution');
END;

-- trigger recovery_required_marks_immutable_update
CREATE TRIGGER recovery_required_marks_immutable_update BEFORE UPDATE ON recovery_required_marks
BEGIN SELECT RAISE(ABORT, 'recovery_required_marks is immutable'); END;

-- trigger recovery_required_marks_prune_only
CREATE TRIGGER recovery_required_marks_prune_only BEFORE DELETE ON recovery_required_marks
WHEN NOT EXISTS (SELECT 1 FROM prune_permits AS p WHERE p.dispatch_id = OLD.dispatch_id)
BEGIN SELECT RAISE(ABORT, 'recovery_required_marks: only a prune deletes a mark'); END;

-- trigger recovery_required_marks_tell
CREATE TRIGGER recovery_required_marks_tell AFTER INSERT ON recovery_required_marks
WHEN EXISTS (SELECT 1 FROM notification_subscriptions AS s
             WHERE instr(s.kinds_json, '"dispatch.recovery_required"') > 0
                OR instr(s.kinds_json, '"target.held"') > 0)
BEGIN
    INSERT INTO notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    )
    SELECT k.kind, d.dispatch_id, d.project_id, d.action_type,
        CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER),
        json_object(
            'dispatchId', d.dispatch_id,
            'approvalRequestId', d.approval_request_id,
            'actionRef', d.action_ref,
            'actionDigest', d.action_digest,
            'status', 'recovery_required',
            'attempt', NEW.execution_attempt,
            'resultCode', u.result_code,
            'target', d.target,
            'noticedBy', NEW.noticed_by)
    FROM approved_action_dispatches AS d
    JOIN (SELECT 1 AS ord, 'dispatch.recovery_required' AS kind
          UNION ALL SELECT 2, 'target.held') AS k
    LEFT JOIN uncertain_outcomes AS u
        ON u.dispatch_id = d.dispatch_id AND u.execution_attempt = NEW.execution_attempt
    WHERE d.dispatch_id = NEW.dispatch_id AND (k.ord = 1 OR d.target IS NOT NULL)
    ORDER BY k.ord;
    SELECT RAISE(ABORT, 'notification_events: a recovery_required mark is told with it')
    WHERE (EXISTS (SELECT 1 FROM notification_subscriptions AS s
                   WHERE instr(s.kinds_json, '"dispatch.recovery_required"') > 0)
           AND NOT EXISTS (
               SELECT 1 FROM notification_events AS n
               WHERE n.subject_id = NEW.dispatch_id AND n.kind = 'dispatch.recovery_required'))
       OR (EXISTS (SELECT 1 FROM notification_subscriptions AS s
                   WHERE instr(s.kinds_json, '"target.held"') > 0)
           AND EXISTS (
               SELECT 1 FROM approved_action_dispatches AS d
               WHERE d.dispatch_id = NEW.dispatch_id AND d.target IS NOT NULL
                 AND NOT EXISTS (
                     SELECT 1 FROM notification_events AS n
                     WHERE n.subject_id = NEW.dispatch_id AND n.kind = 'target.held')));
END;

-- trigger recovery_resolutions_fence_guard
CREATE TRIGGER recovery_resolutions_fence_guard BEFORE INSERT ON recovery_resolutions
WHEN NOT EXISTS (
    SELECT 1 FROM approved_action_dispatch_executions AS e
    WHERE e.dispatch_id = NEW.dispatch_id AND e.status = 'executing'
      AND e.attempt = NEW.execution_attempt AND e.version = NEW.execution_version
      AND e.lease_owner = NEW.lease_owner AND e.lease_token = NEW.lease_token
      AND e.started_at_ms = NEW.started_at_ms
      AND e.lease_expires_at_ms <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
)
BEGIN
    SELECT RAISE(ABORT, 'recovery_resolutions: names its expired started execution''s fence');
END;

-- trigger recovery_resolutions_immutable_delete
CREATE TRIGGER recovery_resolutions_immutable_delete BEFORE DELETE ON recovery_resolutions
WHEN NOT EXISTS (SELECT 1 FROM prune_permits AS p WHERE p.dispatch_id = OLD.dispatch_id)
BEGIN SELECT RAISE(ABORT, 'recovery_resolutions is immutable'); END;

-- trigger recovery_resolutions_immutable_update
CREATE TRIGGER recovery_resolutions_immutable_update BEFORE UPDATE ON recovery_resolutions
BEGIN SELECT RAISE(ABORT, 'recovery_resolutions is immutable'); END;

-- trigger recovery_resolutions_mark
CREATE TRIGGER recovery_resolutions_mark AFTER INSERT ON recovery_resolutions
BEGIN
    INSERT OR IGNORE INTO recovery_required_marks (
        dispatch_id, execution_attempt, execution_version, lease_owner, lease_expires_at_ms,
        noticed_by, committed_at_ms
    )
    SELECT e.dispatch_id, e.attempt, e.version, e.lease_owner, e.lease_expires_at_ms,
           CASE WHEN NEW.source = 'evidence' THEN 'recovery_pass' ELSE 'resolution' END,
           CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
    FROM approved_action_dispatch_executions AS e
    WHERE e.dispatch_id = NEW.dispatch_id AND e.status = 'executing';
END;

-- trigger run_events_immutable_delete
CREATE TRIGGER run_events_immutable_delete BEFORE DELETE ON run_events
BEGIN SELECT RAISE(ABORT, 'run_events is immutable'); END;

-- trigger run_events_immutable_update
CREATE TRIGGER run_events_immutable_update BEFORE UPDATE ON run_events
BEGIN SELECT RAISE(ABORT, 'run_events is immutable'); END;

-- trigger runs_held_guard
CREATE TRIGGER runs_held_guard BEFORE INSERT ON runs
WHEN NEW.trigger_type = 'approved_action'
    AND EXISTS (SELECT 1 FROM approved_action_dispatches AS d WHERE d.dispatch_id = NEW.idempotency_key)
    AND NOT EXISTS (
        SELECT 1 FROM approved_action_dispatch_executions AS e
        WHERE e.dispatch_id = NEW.idempotency_key
          AND (e.status = 'leased' OR e.status = 'executing' OR e.status = 'succeeded'))
BEGIN
    SELECT RAISE(ABORT, 'runs: a Run of a dispatch is written while the dispatch is held');
END;

-- trigger runs_identity
CREATE TRIGGER runs_identity BEFORE UPDATE ON runs
WHEN NEW.run_id IS NOT OLD.run_id OR NEW.project_id IS NOT OLD.project_id
    OR NEW.task_id IS NOT OLD.task_id OR NEW.task_revision IS NOT OLD.task_revision
    OR NEW.executor_type IS NOT OLD.executor_type OR NEW.priority IS NOT OLD.priority
    OR NEW.task_name IS NOT OLD.task_name OR NEW.task_snapshot_ref IS NOT OLD.task_snapshot_ref
    OR NEW.input_ref IS NOT OLD.input_ref OR NEW.trigger_type IS NOT OLD.trigger_type
    OR NEW.execution_origin IS NOT OLD.execution_origin
    OR NEW.execution_owner IS NOT OLD.execution_owner OR NEW.request_id IS NOT OLD.request_id
    OR NEW.idempotency_key IS NOT OLD.idempotency_key
    OR NEW.accepted_at_ms IS NOT OLD.accepted_at_ms OR NEW.created_at_ms IS NOT OLD.created_at_ms
BEGIN
    SELECT RAISE(ABORT, 'runs: the identity of a Run never changes');
END;

-- trigger security_audit_events_immutable_delete
CREATE TRIGGER security_audit_events_immutable_delete BEFORE DELETE ON security_audit_events
WHEN NOT EXISTS (
    SELECT 1 FROM audit_prune_permits AS p WHERE OLD.committed_at_ms < p.cutoff_ms
)
BEGIN SELECT RAISE(ABORT, 'security_audit_events is immutable'); END;

-- trigger security_audit_events_immutable_update
CREATE TRIGGER security_audit_events_immutable_update BEFORE UPDATE ON security_audit_events
BEGIN SELECT RAISE(ABORT, 'security_audit_events is immutable'); END;

-- trigger security_audit_events_request_whole
CREATE TRIGGER security_audit_events_request_whole BEFORE INSERT ON security_audit_events
WHEN NOT ((NEW.token_id IS NULL AND NEW.client_address IS NULL AND NEW.request_id IS NULL)
    OR (NEW.token_id IS NOT NULL AND NEW.request_id IS NOT NULL)
    OR (NEW.kind = 'api.auth_failed' AND NEW.token_id IS NULL
        AND NEW.client_address IS NOT NULL AND NEW.request_id IS NOT NULL))
BEGIN
    SELECT RAISE(ABORT, 'security_audit_events: a request names its token and its id');
END;

-- trigger security_audit_events_subject_finished
CREATE TRIGGER security_audit_events_subject_finished BEFORE DELETE ON security_audit_events
WHEN EXISTS (
    SELECT 1 FROM audit_prune_permits AS p WHERE OLD.committed_at_ms < p.cutoff_ms
) AND NOT EXISTS (
    SELECT 1 FROM audit_prune_permits AS p
    WHERE OLD.committed_at_ms < p.cutoff_ms
      AND NOT EXISTS (
          SELECT 1 FROM approval_requests AS a
          WHERE a.approval_request_id = OLD.subject_id
            AND NOT (
                ((a.status = 'rejected' OR a.status = 'expired') AND a.updated_at_ms < p.cutoff_ms)
                OR ((a.status = 'pending' OR a.status = 'approved')
                    AND coalesce(a.db_expires_at_ms, a.expires_at_ms) < p.cutoff_ms)
                OR (a.status = 'consumed' AND EXISTS (
                    SELECT 1
                    FROM approved_action_dispatches AS d
                    JOIN approved_action_dispatch_executions AS e
                        ON e.dispatch_id = d.dispatch_id
                    WHERE d.approval_request_id = a.approval_request_id
                      AND (e.status = 'blocked' OR e.status = 'cancelled'
                           OR e.status = 'failed' OR e.status = 'succeeded')
                      AND e.updated_at_ms < p.cutoff_ms
                ))
            )
      )
      AND NOT EXISTS (
          SELECT 1 FROM approved_action_dispatch_executions AS e
          WHERE e.dispatch_id = OLD.subject_id
            AND NOT ((e.status = 'blocked' OR e.status = 'cancelled' OR e.status = 'failed'
                      OR e.status = 'succeeded')
                     AND e.updated_at_ms < p.cutoff_ms)
      )
)
BEGIN
    SELECT RAISE(ABORT, 'security_audit_events: the audit of a live subject stays');
END;

-- trigger step_run_mutations_immutable_delete
CREATE TRIGGER step_run_mutations_immutable_delete BEFORE DELETE ON step_run_mutations
BEGIN SELECT RAISE(ABORT, 'step_run_mutations is immutable'); END;

-- trigger step_run_mutations_immutable_update
CREATE TRIGGER step_run_mutations_immutable_update BEFORE UPDATE ON step_run_mutations
BEGIN SELECT RAISE(ABORT, 'step_run_mutations is immutable'); END;

-- trigger step_runs_insert_state
CREATE TRIGGER step_runs_insert_state
BEFORE INSERT ON step_runs
WHEN NOT (NEW.status = 'ready' OR NEW.status = 'waiting_approval') OR NEW.version IS NOT 1
    OR NEW.result_code IS NOT NULL
BEGIN SELECT RAISE(ABORT, 'qinglong:transition_refused: insert'); END;

-- trigger step_runs_state_machine
CREATE TRIGGER step_runs_state_machine
BEFORE UPDATE ON step_runs
BEGIN
    SELECT CASE
        WHEN OLD.status = 'succeeded' OR OLD.status = 'failed'
            THEN RAISE(ABORT, 'qinglong:transition_refused: terminal')
        -- The binding digest covers these columns; the row may never drift from it.
        WHEN NEW.step_run_id IS NOT OLD.step_run_id OR NEW.run_id IS NOT OLD.run_id
            OR NEW.project_id IS NOT OLD.project_id OR NEW.step_kind IS NOT OLD.step_kind
            OR NEW.tool_id IS NOT OLD.tool_id OR NEW.tool_version IS NOT OLD.tool_version
            OR NEW.definition_digest IS NOT OLD.definition_digest
            OR NEW.action_type IS NOT OLD.action_type OR NEW.action_ref IS NOT OLD.action_ref
            OR NEW.action_digest IS NOT OLD.action_digest
            OR NEW.approval_request_id IS NOT OLD.approval_request_id
            OR NEW.binding_digest IS NOT OLD.binding_digest
            OR NEW.created_at_ms IS NOT OLD.created_at_ms
            THEN RAISE(ABORT, 'qinglong:transition_refused: identity')
        WHEN NEW.version IS NULL OR NEW.version <= OLD.version
            THEN RAISE(ABORT, 'qinglong:transition_refused: version')
        WHEN NOT CASE OLD.status
            WHEN 'ready' THEN NEW.status = 'running' OR NEW.status = 'failed'
            WHEN 'waiting_approval' THEN NEW.status = 'running' OR NEW.status = 'failed'
            WHEN 'running' THEN NEW.status = 'succeeded' OR NEW.status = 'failed'
                OR NEW.status = 'lost'
            WHEN 'lost' THEN NEW.status = 'ready'
            ELSE 0
        END
            THEN RAISE(ABORT, 'qinglong:transition_refused: transition')
    END;
END;

-- trigger tool_execution_start_barriers_immutable_delete
CREATE TRIGGER tool_execution_start_barriers_immutable_delete
BEFORE DELETE ON tool_execution_start_barriers
BEGIN SELECT RAISE(ABORT, 'tool_execution_start_barriers is immutable'); END;

-- trigger tool_execution_start_barriers_immutable_update
CREATE TRIGGER tool_execution_start_barriers_immutable_update
BEFORE UPDATE ON tool_execution_start_barriers
BEGIN SELECT RAISE(ABORT, 'tool_execution_start_barriers is immutable'); END;

-- trigger trace_anchors_immutable_delete
CREATE TRIGGER trace_anchors_immutable_delete BEFORE DELETE ON trace_anchors
BEGIN SELECT RAISE(ABORT, 'trace_anchors is immutable'); END;

-- trigger trace_anchors_immutable_update
CREATE TRIGGER trace_anchors_immutable_update BEFORE UPDATE ON trace_anchors
BEGIN SELECT RAISE(ABORT, 'trace_anchors is immutable'); END;

-- trigger ui_sessions_guard
CREATE TRIGGER ui_sessions_guard BEFORE UPDATE ON ui_sessions
WHEN NEW.session_sha256 IS NOT OLD.session_sha256 OR NEW.token_id IS NOT OLD.token_id
    OR NEW.principal IS NOT OLD.principal OR NEW.created_at_ms IS NOT OLD.created_at_ms
    OR NEW.idle_ms IS NOT OLD.idle_ms OR NEW.expires_at_ms IS NOT OLD.expires_at_ms
    OR NEW.last_seen_at_ms < OLD.last_seen_at_ms
    OR (OLD.revoked_at_ms IS NOT NULL AND NEW.revoked_at_ms IS NOT OLD.revoked_at_ms)
BEGIN
    SELECT RAISE(ABORT, 'ui_sessions: a session changes only its last use and, once, its revocation');
END;

-- trigger uncertain_outcomes_holder
CREATE TRIGGER uncertain_outcomes_holder BEFORE INSERT ON uncertain_outcomes
WHEN NOT EXISTS (
    SELECT 1 FROM approved_action_dispatch_executions AS e
    WHERE e.dispatch_id = NEW.dispatch_id AND e.status = 'executing'
      AND e.attempt = NEW.execution_attempt AND e.lease_owner = NEW.lease_owner
)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:fence_refused: an uncertain outcome names its started row');
END;

-- trigger uncertain_outcomes_immutable_update
CREATE TRIGGER uncertain_outcomes_immutable_update BEFORE UPDATE ON uncertain_outcomes
BEGIN SELECT RAISE(ABORT, 'uncertain_outcomes is immutable'); END;

-- trigger uncertain_outcomes_prune_only
CREATE TRIGGER uncertain_outcomes_prune_only BEFORE DELETE ON uncertain_outcomes
WHEN NOT EXISTS (SELECT 1 FROM prune_permits AS p WHERE p.dispatch_id = OLD.dispatch_id)
BEGIN SELECT RAISE(ABORT, 'uncertain_outcomes: only a prune deletes an outcome'); END;

-- views (4)

-- view approval_policies_in_force
CREATE VIEW approval_policies_in_force AS
SELECT p.* FROM approval_policies AS p
WHERE NOT p.retired
  AND p.version = (SELECT max(q.version) FROM approval_policies AS q WHERE q.name = p.name);

-- view approval_request_windows
CREATE VIEW approval_request_windows AS
SELECT w.approval_request_id,
       CASE WHEN w.delay IS NULL THEN w.asked_from
            WHEN w.asked_from IS NULL THEN w.now_ms + w.delay
            ELSE max(w.now_ms + w.delay, w.asked_from) END AS not_before_ms,
       CASE WHEN w.asked_for IS NULL THEN w.now_ms + coalesce(w.delay, 0) + w.span
            WHEN w.span IS NULL THEN coalesce(w.asked_from, w.now_ms) + w.asked_for
            ELSE min(w.now_ms + coalesce(w.delay, 0) + w.span,
                     coalesce(w.asked_from, w.now_ms) + w.asked_for) END AS not_after_ms
FROM (SELECT a.approval_request_id,
             CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) AS now_ms,
             p.not_before_delay_ms AS delay, p.window_ms AS span,
             a.not_before_ms AS asked_from, a.window_for_ms AS asked_for
      FROM approval_requests AS a
      LEFT JOIN approval_request_policies AS r ON r.approval_request_id = a.approval_request_id
      LEFT JOIN approval_policies AS p
        ON p.name = r.policy_name AND p.version = r.policy_version) AS w;

-- view dispatch_freezes
CREATE VIEW dispatch_freezes AS
SELECT d.dispatch_id, f.freeze_id
FROM freezes AS f
JOIN approved_action_dispatches AS d
    ON (f.action_type IS NULL OR f.action_type = d.action_type)
   AND (f.project_id IS NULL OR f.project_id = d.project_id)
   AND (f.target_prefix IS NULL OR substr(d.target, 1, length(f.target_prefix)) = f.target_prefix)
WHERE f.ended_at_ms IS NULL
  AND f.until_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
  AND f.from_ms <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
  AND NOT EXISTS (SELECT 1 FROM freeze_lifts AS l
                  WHERE l.dispatch_id = d.dispatch_id AND l.freeze_id = f.freeze_id);

-- view dispatch_unknown_rules
CREATE VIEW dispatch_unknown_rules AS
SELECT d.dispatch_id, coalesce(p.proceed_on_unknown, 0) AS proceed_on_unknown
FROM approved_action_dispatches AS d
LEFT JOIN approval_request_policies AS r ON r.approval_request_id = d.approval_request_id
LEFT JOIN approval_policies AS p ON p.name = r.policy_name AND p.version = r.policy_version;
