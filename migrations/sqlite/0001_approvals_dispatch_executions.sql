-- Approvals, immutable plans and dispatches, the mutable execution row and its event ledger
-- (docs/decisions/0001 and 0009). Immutable tables abort UPDATE and DELETE.
--
-- Amended in place: its comments point at docs/; the SQL is unchanged. A database that
-- applied the earlier text matches this checksum:
-- amends checksum a44954ee13a2ffa91587cdce1035f344df2ac66f957488fd65caefa4ae121508

CREATE TABLE action_plans (
    project_id    TEXT NOT NULL,
    action_ref    TEXT NOT NULL,
    action_type   TEXT NOT NULL,
    plan_json     TEXT NOT NULL,
    plan_digest   TEXT NOT NULL CHECK (length(plan_digest) = 64),
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (project_id, action_ref)
) STRICT;

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
    updated_at_ms       INTEGER NOT NULL,
    FOREIGN KEY (project_id, action_ref) REFERENCES action_plans (project_id, action_ref)
) STRICT;

CREATE TABLE approved_action_dispatches (
    dispatch_id         TEXT PRIMARY KEY,
    approval_request_id TEXT NOT NULL UNIQUE REFERENCES approval_requests (approval_request_id),
    project_id          TEXT NOT NULL,
    action_type         TEXT NOT NULL,
    action_ref          TEXT NOT NULL,
    action_digest       TEXT NOT NULL CHECK (length(action_digest) = 64),
    approved_by         TEXT NOT NULL,
    created_at_ms       INTEGER NOT NULL
) STRICT;

CREATE TABLE approved_action_dispatch_executions (
    dispatch_id         TEXT PRIMARY KEY REFERENCES approved_action_dispatches (dispatch_id),
    project_id          TEXT NOT NULL,
    status              TEXT NOT NULL CHECK (status IN
        ('pending', 'leased', 'retry_wait', 'executing', 'succeeded', 'failed', 'blocked')),
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
    updated_at_ms       INTEGER NOT NULL,
    -- eligible_at_ms is the due-index key: set exactly in the claimable states.
    CHECK ((eligible_at_ms IS NOT NULL) = (status IN ('pending', 'leased', 'retry_wait'))),
    CHECK (status NOT IN ('leased', 'executing')
           OR (lease_owner IS NOT NULL AND lease_token IS NOT NULL
               AND lease_expires_at_ms IS NOT NULL)),
    CHECK (status <> 'executing' OR started_at_ms IS NOT NULL)
) STRICT;

-- The one due scan of both dialects; executing and terminal rows are never in it.
CREATE INDEX approved_action_dispatch_executions_due
    ON approved_action_dispatch_executions (eligible_at_ms, dispatch_id)
    WHERE eligible_at_ms IS NOT NULL;

-- Bounded recovery scan: started rows ordered by lease expiry.
CREATE INDEX approved_action_dispatch_executions_executing
    ON approved_action_dispatch_executions (lease_expires_at_ms, dispatch_id)
    WHERE status = 'executing';

CREATE INDEX approved_action_dispatch_executions_status
    ON approved_action_dispatch_executions (status);

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

-- Replays of release/complete look their mutation up here.
CREATE UNIQUE INDEX execution_events_mutation
    ON execution_events (dispatch_id, mutation_id) WHERE mutation_id IS NOT NULL;

CREATE TRIGGER action_plans_immutable_update BEFORE UPDATE ON action_plans
BEGIN SELECT RAISE(ABORT, 'action_plans is immutable'); END;
CREATE TRIGGER action_plans_immutable_delete BEFORE DELETE ON action_plans
BEGIN SELECT RAISE(ABORT, 'action_plans is immutable'); END;
CREATE TRIGGER approved_action_dispatches_immutable_update
BEFORE UPDATE ON approved_action_dispatches
BEGIN SELECT RAISE(ABORT, 'approved_action_dispatches is immutable'); END;
CREATE TRIGGER approved_action_dispatches_immutable_delete
BEFORE DELETE ON approved_action_dispatches
BEGIN SELECT RAISE(ABORT, 'approved_action_dispatches is immutable'); END;
CREATE TRIGGER execution_events_immutable_update BEFORE UPDATE ON execution_events
BEGIN SELECT RAISE(ABORT, 'execution_events is immutable'); END;
CREATE TRIGGER execution_events_immutable_delete BEFORE DELETE ON execution_events
BEGIN SELECT RAISE(ABORT, 'execution_events is immutable'); END;
