-- What the daemon knew when it lost track of an effect, and when recovery first saw the row
-- (docs/state-machine.md "Recovery evidence", docs/decisions/0040).
--
-- 1. `uncertain_outcomes`: one row per dispatch whose execute answered `uncertain` (the effect
--    may or may not have happened): the handler's low-sensitivity code and what it knew, as
--    canonical JSON it redacted itself (a command's exit code, signal, duration and redacted
--    stderr head; an HTTP status or transport error and how far the request got; a tool's
--    last step). Written only by the lease holder of the started row, with its proof (QLF01),
--    never changed, pruned with its tree. Nobody but the runtime may insert one.
-- 2. `recovery_required_marks`: the ledger's `recovery_required` line. The status is derived
--    (decision 0013), so nothing moves a row there; the database writes the mark the first
--    time a recovery pass records an observation of the row, or a resolution settles it
--    before any pass did, with the execution's fence and lease expiry and its own clock. A
--    definer owned by the recorder writes it; nobody holds INSERT on it.

-- -- 1. what the daemon knew ------------------------------------------------------------------

CREATE TABLE qinglong.uncertain_outcomes (
    dispatch_id       TEXT PRIMARY KEY
        REFERENCES qinglong.approved_action_dispatches (dispatch_id),
    execution_attempt INTEGER NOT NULL CHECK (execution_attempt >= 1),
    lease_owner       TEXT NOT NULL,
    result_code       TEXT NOT NULL CHECK (length(result_code) BETWEEN 1 AND 128),
    evidence_json     TEXT NOT NULL
        CHECK (octet_length(evidence_json) <= 16384 AND left(evidence_json, 1) = '{'),
    recorded_at_ms    BIGINT NOT NULL,
    lease_proof       TEXT,
    CONSTRAINT uncertain_outcomes_proof_not_stored CHECK (lease_proof IS NULL)
);

-- The holder of the started row, with its proof, for the attempt it started; the database's
-- clock. Not a definer: it reads the row as the inserting login, which must be the runtime.
CREATE FUNCTION qinglong.guard_uncertain_outcome() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NEW.lease_proof IS NULL OR NOT EXISTS (
            SELECT 1 FROM qinglong.approved_action_dispatch_executions AS e
            WHERE e.dispatch_id = NEW.dispatch_id AND e.status = 'executing'
              AND e.attempt = NEW.execution_attempt AND e.lease_owner = NEW.lease_owner
              AND e.lease_proof_digest = pg_catalog.encode(pg_catalog.sha256(
                  pg_catalog.convert_to(NEW.lease_proof, 'UTF8')), 'hex')) THEN
        RAISE EXCEPTION 'qinglong:fence_refused: an uncertain outcome presents its holder''s proof'
            USING ERRCODE = 'QLF01';
    END IF;
    NEW.lease_proof := NULL;
    NEW.recorded_at_ms := (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
        OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION qinglong.guard_uncertain_outcome() FROM PUBLIC;

CREATE TRIGGER uncertain_outcomes_holder_proof
    BEFORE INSERT ON qinglong.uncertain_outcomes
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_uncertain_outcome();
CREATE TRIGGER uncertain_outcomes_immutable
    BEFORE UPDATE OR TRUNCATE ON qinglong.uncertain_outcomes
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER uncertain_outcomes_prune_only
    BEFORE DELETE ON qinglong.uncertain_outcomes
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();

GRANT SELECT, INSERT ON qinglong.uncertain_outcomes TO qinglong_runtime;
GRANT SELECT ON qinglong.uncertain_outcomes
    TO qinglong_operator, qinglong_viewer, qinglong_submitter;
GRANT SELECT, DELETE ON qinglong.uncertain_outcomes TO qinglong_pruner;

-- -- 2. the ledger's recovery_required line -------------------------------------------------

CREATE TABLE qinglong.recovery_required_marks (
    dispatch_id         TEXT PRIMARY KEY
        REFERENCES qinglong.approved_action_dispatches (dispatch_id),
    execution_attempt   INTEGER NOT NULL,
    execution_version   BIGINT NOT NULL,
    lease_owner         TEXT,
    lease_expires_at_ms BIGINT,
    noticed_by          TEXT NOT NULL CHECK (noticed_by IN ('recovery_pass', 'resolution')),
    committed_at_ms     BIGINT NOT NULL
);

-- A definer (the recorder): the runtime's observation and an operator's resolution write the
-- mark, neither may write it directly. Only a started row is marked, once.
CREATE FUNCTION qinglong.mark_recovery_required() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    noticed pg_catalog.text := 'recovery_pass';
BEGIN
    -- A pass observed it, or settled it by evidence; otherwise an operator settled it first.
    IF TG_TABLE_NAME = 'recovery_resolutions' THEN
        IF NEW.source <> 'evidence' THEN
            noticed := 'resolution';
        END IF;
    END IF;
    INSERT INTO qinglong.recovery_required_marks (
        dispatch_id, execution_attempt, execution_version, lease_owner, lease_expires_at_ms,
        noticed_by, committed_at_ms
    )
    SELECT e.dispatch_id, e.attempt, e.version, e.lease_owner, e.lease_expires_at_ms,
           noticed,
           (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
               OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8
    FROM qinglong.approved_action_dispatch_executions AS e
    WHERE e.dispatch_id = NEW.dispatch_id AND e.status = 'executing'
    ON CONFLICT (dispatch_id) DO NOTHING;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION qinglong.mark_recovery_required() FROM PUBLIC;
-- ON CONFLICT reads the key it arbitrates on.
GRANT INSERT, SELECT (dispatch_id) ON qinglong.recovery_required_marks TO qinglong_recorder;
GRANT SELECT (dispatch_id, status, attempt, version, lease_owner, lease_expires_at_ms)
    ON qinglong.approved_action_dispatch_executions TO qinglong_recorder;
GRANT CREATE ON SCHEMA qinglong TO qinglong_recorder;
ALTER FUNCTION qinglong.mark_recovery_required() OWNER TO qinglong_recorder;
REVOKE CREATE ON SCHEMA qinglong FROM qinglong_recorder;

CREATE TRIGGER recovery_observations_mark
    AFTER INSERT ON qinglong.recovery_observations
    FOR EACH ROW EXECUTE FUNCTION qinglong.mark_recovery_required();
CREATE TRIGGER recovery_resolutions_mark
    AFTER INSERT ON qinglong.recovery_resolutions
    FOR EACH ROW EXECUTE FUNCTION qinglong.mark_recovery_required();
CREATE TRIGGER recovery_required_marks_immutable
    BEFORE UPDATE OR TRUNCATE ON qinglong.recovery_required_marks
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER recovery_required_marks_prune_only
    BEFORE DELETE ON qinglong.recovery_required_marks
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();

GRANT SELECT ON qinglong.recovery_required_marks
    TO qinglong_runtime, qinglong_operator, qinglong_viewer, qinglong_submitter;
GRANT SELECT, DELETE ON qinglong.recovery_required_marks TO qinglong_pruner;

-- A row a pass observed before this migration is marked when that pass first saw it.
INSERT INTO qinglong.recovery_required_marks (
    dispatch_id, execution_attempt, execution_version, lease_owner, lease_expires_at_ms,
    noticed_by, committed_at_ms
)
SELECT e.dispatch_id, e.attempt, e.version, e.lease_owner, e.lease_expires_at_ms,
       'recovery_pass', o.first_seen_at_ms
FROM qinglong.approved_action_dispatch_executions AS e
JOIN qinglong.recovery_observations AS o ON o.dispatch_id = e.dispatch_id
WHERE e.status = 'executing';
