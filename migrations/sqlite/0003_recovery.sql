-- Recovery (docs/decisions/0002, docs/operations.md): one resolution per settled recovery_required
-- execution, the last reconcile observation per dispatch, and the operator audit trail.
--
-- Amended in place: its comments point at docs/; the SQL is unchanged. A database that
-- applied the earlier text matches this checksum:
-- amends checksum 7695afc44c61b669a9a0e757c38980a68c478b2f8db4760f6065c2ed2e2bb08c

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

CREATE TABLE recovery_observations (
    dispatch_id       TEXT PRIMARY KEY REFERENCES approved_action_dispatches (dispatch_id),
    outcome           TEXT NOT NULL CHECK (outcome IN ('missing', 'conflict', 'unavailable')),
    reason_code       TEXT NOT NULL,
    observation_count INTEGER NOT NULL CHECK (observation_count >= 1),
    first_seen_at_ms  INTEGER NOT NULL,
    last_seen_at_ms   INTEGER NOT NULL
) STRICT;

CREATE TABLE security_audit_events (
    event_id        INTEGER PRIMARY KEY,
    kind            TEXT NOT NULL,
    actor           TEXT NOT NULL,
    principal       TEXT NOT NULL,
    project_id      TEXT NOT NULL,
    subject_id      TEXT NOT NULL,
    detail_code     TEXT NOT NULL,
    committed_at_ms INTEGER NOT NULL
) STRICT;

CREATE INDEX security_audit_events_subject ON security_audit_events (subject_id);

CREATE TRIGGER recovery_resolutions_immutable_update BEFORE UPDATE ON recovery_resolutions
BEGIN SELECT RAISE(ABORT, 'recovery_resolutions is immutable'); END;
CREATE TRIGGER recovery_resolutions_immutable_delete BEFORE DELETE ON recovery_resolutions
BEGIN SELECT RAISE(ABORT, 'recovery_resolutions is immutable'); END;
CREATE TRIGGER security_audit_events_immutable_update BEFORE UPDATE ON security_audit_events
BEGIN SELECT RAISE(ABORT, 'security_audit_events is immutable'); END;
CREATE TRIGGER security_audit_events_immutable_delete BEFORE DELETE ON security_audit_events
BEGIN SELECT RAISE(ABORT, 'security_audit_events is immutable'); END;
