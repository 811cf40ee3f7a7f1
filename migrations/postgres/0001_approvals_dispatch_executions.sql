-- Approvals, immutable plans and dispatches, the mutable execution row and its event ledger
-- (docs/decisions/0001 and 0009), in schema qinglong. Runs as qinglong_migrator, which owns every object.
-- Immutable tables refuse UPDATE, DELETE and TRUNCATE by trigger (even for their owner) and
-- the runtime role holds only SELECT, INSERT on them.
--
-- Amended in place: every function pins pg_temp last (migration 0011 says why). A
-- database that applied the first text of this file matches this checksum:
-- amends checksum 8ccf07a8f3864fbdeb480952b76fd9cefc844edc46f3a6b3fa52391e0702bdf4
-- Amended again, to point its comments at docs/ (the SQL is unchanged):
-- amends checksum c0e369936d69ba6b234cf39aa4166546c351fe19eb222654b741b7981b13cce1

CREATE TABLE qinglong.action_plans (
    project_id    TEXT NOT NULL,
    action_ref    TEXT NOT NULL,
    action_type   TEXT NOT NULL,
    plan_json     TEXT NOT NULL,
    plan_digest   TEXT NOT NULL CHECK (length(plan_digest) = 64),
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (project_id, action_ref)
);

CREATE TABLE qinglong.approval_requests (
    approval_request_id TEXT PRIMARY KEY,
    project_id          TEXT NOT NULL,
    action_type         TEXT NOT NULL,
    action_ref          TEXT NOT NULL,
    action_digest       TEXT NOT NULL CHECK (length(action_digest) = 64),
    status              TEXT NOT NULL
        CHECK (status IN ('pending', 'approved', 'consumed', 'rejected', 'expired')),
    version             BIGINT NOT NULL CHECK (version >= 1),
    requested_by        TEXT NOT NULL,
    decided_by          TEXT,
    expires_at_ms       BIGINT NOT NULL,
    consumed_at_ms      BIGINT,
    created_at_ms       BIGINT NOT NULL,
    updated_at_ms       BIGINT NOT NULL,
    FOREIGN KEY (project_id, action_ref) REFERENCES qinglong.action_plans (project_id, action_ref)
);

CREATE TABLE qinglong.approved_action_dispatches (
    dispatch_id         TEXT PRIMARY KEY,
    approval_request_id TEXT NOT NULL UNIQUE
        REFERENCES qinglong.approval_requests (approval_request_id),
    project_id          TEXT NOT NULL,
    action_type         TEXT NOT NULL,
    action_ref          TEXT NOT NULL,
    action_digest       TEXT NOT NULL CHECK (length(action_digest) = 64),
    approved_by         TEXT NOT NULL,
    created_at_ms       BIGINT NOT NULL
);

CREATE TABLE qinglong.approved_action_dispatch_executions (
    dispatch_id         TEXT PRIMARY KEY
        REFERENCES qinglong.approved_action_dispatches (dispatch_id),
    project_id          TEXT NOT NULL,
    status              TEXT NOT NULL CHECK (status IN
        ('pending', 'leased', 'retry_wait', 'executing', 'succeeded', 'failed', 'blocked')),
    version             BIGINT NOT NULL CHECK (version >= 0),
    attempt             INTEGER NOT NULL CHECK (attempt >= 0),
    max_attempts        INTEGER NOT NULL CHECK (max_attempts >= 1),
    eligible_at_ms      BIGINT,
    retry_at_ms         BIGINT,
    lease_owner         TEXT,
    lease_token         TEXT,
    lease_expires_at_ms BIGINT,
    started_at_ms       BIGINT,
    result_mutation_id  TEXT,
    result_code         TEXT,
    completed_at_ms     BIGINT,
    created_at_ms       BIGINT NOT NULL,
    updated_at_ms       BIGINT NOT NULL,
    -- eligible_at_ms is the due-index key: set exactly in the claimable states.
    CHECK ((eligible_at_ms IS NOT NULL) = (status IN ('pending', 'leased', 'retry_wait'))),
    CHECK (status NOT IN ('leased', 'executing')
           OR (lease_owner IS NOT NULL AND lease_token IS NOT NULL
               AND lease_expires_at_ms IS NOT NULL)),
    CHECK (status <> 'executing' OR started_at_ms IS NOT NULL)
);

-- The one due scan of both dialects (claim_due locks through it with SKIP LOCKED);
-- executing and terminal rows are never in it.
CREATE INDEX approved_action_dispatch_executions_due
    ON qinglong.approved_action_dispatch_executions (eligible_at_ms, dispatch_id)
    WHERE eligible_at_ms IS NOT NULL;

-- Bounded recovery scan: started rows ordered by lease expiry.
CREATE INDEX approved_action_dispatch_executions_executing
    ON qinglong.approved_action_dispatch_executions (lease_expires_at_ms, dispatch_id)
    WHERE status = 'executing';

CREATE INDEX approved_action_dispatch_executions_status
    ON qinglong.approved_action_dispatch_executions (status);

CREATE TABLE qinglong.execution_events (
    event_id        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dispatch_id     TEXT NOT NULL REFERENCES qinglong.approved_action_dispatches (dispatch_id),
    version         BIGINT NOT NULL,
    from_status     TEXT,
    to_status       TEXT NOT NULL,
    attempt         INTEGER NOT NULL,
    lease_owner     TEXT,
    lease_token     TEXT,
    mutation_id     TEXT,
    result_code     TEXT,
    committed_at_ms BIGINT NOT NULL,
    UNIQUE (dispatch_id, version)
);

-- Replays of release/complete look their mutation up here.
CREATE UNIQUE INDEX execution_events_mutation
    ON qinglong.execution_events (dispatch_id, mutation_id) WHERE mutation_id IS NOT NULL;

-- One function raises for every immutable table; statement-level triggers fire even when no
-- row matches, so a refused UPDATE never depends on the table's contents.
CREATE FUNCTION qinglong.refuse_mutation() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION '% is immutable', TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END
$$;
REVOKE ALL ON FUNCTION qinglong.refuse_mutation() FROM PUBLIC;

CREATE TRIGGER action_plans_immutable
    BEFORE UPDATE OR DELETE OR TRUNCATE ON qinglong.action_plans
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER approved_action_dispatches_immutable
    BEFORE UPDATE OR DELETE OR TRUNCATE ON qinglong.approved_action_dispatches
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER execution_events_immutable
    BEFORE UPDATE OR DELETE OR TRUNCATE ON qinglong.execution_events
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();

-- Grants (docs/security.md). The runtime: SELECT, INSERT on immutable tables, SELECT, INSERT,
-- UPDATE on mutable ones, never DELETE. The operator reads everything, appends execution
-- events, and may change only the state columns of an execution when resolving recovery.
GRANT SELECT, INSERT ON qinglong.action_plans, qinglong.approved_action_dispatches,
    qinglong.execution_events TO qinglong_runtime;
GRANT SELECT, INSERT, UPDATE ON qinglong.approval_requests,
    qinglong.approved_action_dispatch_executions TO qinglong_runtime;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA qinglong TO qinglong_runtime, qinglong_operator;

GRANT SELECT ON qinglong.action_plans, qinglong.approval_requests,
    qinglong.approved_action_dispatches, qinglong.approved_action_dispatch_executions,
    qinglong.execution_events TO qinglong_operator;
GRANT INSERT ON qinglong.execution_events TO qinglong_operator;
GRANT UPDATE (status, version, result_mutation_id, result_code, completed_at_ms, updated_at_ms)
    ON qinglong.approved_action_dispatch_executions TO qinglong_operator;
