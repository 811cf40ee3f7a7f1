-- Recovery (docs/decisions/0002, docs/operations.md), in schema qinglong: one resolution per settled
-- recovery_required execution, the last reconcile observation per dispatch, and the operator
-- audit trail. Resolutions and audit events are immutable.
--
-- Amended in place: every function pins pg_temp last (migration 0011 says why). A
-- database that applied the first text of this file matches this checksum:
-- amends checksum 0963b258121b2258cd62c4f90f85133c1fa7666ad27d3ee7c0770f12d9068b58
-- Amended again, to point its comments at docs/ (the SQL is unchanged):
-- amends checksum 3f064163ac42fb032150a24c4ac410fc1c48e8db6786b6eec051eee09a8b3cee

CREATE TABLE qinglong.recovery_resolutions (
    dispatch_id         TEXT PRIMARY KEY
        REFERENCES qinglong.approved_action_dispatches (dispatch_id),
    source              TEXT NOT NULL CHECK (source IN ('evidence', 'manual')),
    resolution          TEXT NOT NULL CHECK (resolution IN ('succeeded', 'failed', 'blocked')),
    evidence_digest     TEXT CHECK (evidence_digest IS NULL OR length(evidence_digest) = 64),
    resolved_by         TEXT NOT NULL,
    principal           TEXT NOT NULL,
    reason_code         TEXT NOT NULL,
    execution_attempt   INTEGER NOT NULL,
    execution_version   BIGINT NOT NULL,
    lease_owner         TEXT NOT NULL,
    lease_token         TEXT NOT NULL,
    started_at_ms       BIGINT NOT NULL,
    committed_at_ms     BIGINT NOT NULL,
    CHECK ((source = 'evidence') = (evidence_digest IS NOT NULL))
);

CREATE TABLE qinglong.recovery_observations (
    dispatch_id       TEXT PRIMARY KEY
        REFERENCES qinglong.approved_action_dispatches (dispatch_id),
    outcome           TEXT NOT NULL CHECK (outcome IN ('missing', 'conflict', 'unavailable')),
    reason_code       TEXT NOT NULL,
    observation_count BIGINT NOT NULL CHECK (observation_count >= 1),
    first_seen_at_ms  BIGINT NOT NULL,
    last_seen_at_ms   BIGINT NOT NULL
);

CREATE TABLE qinglong.security_audit_events (
    event_id        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind            TEXT NOT NULL,
    actor           TEXT NOT NULL,
    principal       TEXT NOT NULL,
    project_id      TEXT NOT NULL,
    subject_id      TEXT NOT NULL,
    detail_code     TEXT NOT NULL,
    committed_at_ms BIGINT NOT NULL
);

CREATE INDEX security_audit_events_subject ON qinglong.security_audit_events (subject_id);

-- docs/operations.md: the database itself refuses a manual resolution from a session whose login is
-- not a member of qinglong_operator (the runtime may settle by evidence only), and the recorded
-- principal must be the session's own login: nobody writes another role's name there.
CREATE FUNCTION qinglong.check_resolution_principal() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NEW.principal IS DISTINCT FROM session_user::text THEN
        RAISE EXCEPTION 'the recorded principal must be the session login'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.source = 'manual'
            AND NOT pg_has_role(session_user, 'qinglong_operator', 'MEMBER') THEN
        RAISE EXCEPTION 'a manual recovery resolution needs a qinglong_operator login'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION qinglong.check_resolution_principal() FROM PUBLIC;

CREATE TRIGGER recovery_resolutions_principal
    BEFORE INSERT ON qinglong.recovery_resolutions
    FOR EACH ROW EXECUTE FUNCTION qinglong.check_resolution_principal();

CREATE TRIGGER recovery_resolutions_immutable
    BEFORE UPDATE OR DELETE OR TRUNCATE ON qinglong.recovery_resolutions
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER security_audit_events_immutable
    BEFORE UPDATE OR DELETE OR TRUNCATE ON qinglong.security_audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();

-- Grants (docs/security.md): see 0001. The runtime settles by evidence and keeps observations
-- (an upsert: INSERT and UPDATE); the operator appends resolutions and audit records.
GRANT SELECT, INSERT ON qinglong.recovery_resolutions, qinglong.security_audit_events
    TO qinglong_runtime;
GRANT SELECT, INSERT, UPDATE ON qinglong.recovery_observations TO qinglong_runtime;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA qinglong TO qinglong_runtime, qinglong_operator;

GRANT SELECT ON qinglong.recovery_resolutions, qinglong.recovery_observations,
    qinglong.security_audit_events TO qinglong_operator;
GRANT INSERT ON qinglong.recovery_resolutions, qinglong.security_audit_events
    TO qinglong_operator;
