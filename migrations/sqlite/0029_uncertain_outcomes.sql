-- What the daemon knew when it lost track of an effect, and when recovery first saw the row
-- (docs/state-machine.md "Recovery evidence", docs/decisions/0040).
--
-- 1. `uncertain_outcomes`: one row per dispatch whose execute answered `uncertain`: the
--    handler's code and what it knew, as canonical JSON it redacted itself. Written only for
--    the started row of the same attempt and owner (the file's owner is the one daemon; no
--    proof is kept on SQLite), never changed, pruned with its tree.
-- 2. `recovery_required_marks`: the ledger's `recovery_required` line, written by the
--    database the first time a recovery pass records an observation of the row, or a
--    resolution settles it before any pass did; never changed, pruned with its tree.

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

CREATE TRIGGER uncertain_outcomes_holder BEFORE INSERT ON uncertain_outcomes
WHEN NOT EXISTS (
    SELECT 1 FROM approved_action_dispatch_executions AS e
    WHERE e.dispatch_id = NEW.dispatch_id AND e.status = 'executing'
      AND e.attempt = NEW.execution_attempt AND e.lease_owner = NEW.lease_owner
)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:fence_refused: an uncertain outcome names its started row');
END;

CREATE TRIGGER uncertain_outcomes_immutable_update BEFORE UPDATE ON uncertain_outcomes
BEGIN SELECT RAISE(ABORT, 'uncertain_outcomes is immutable'); END;
CREATE TRIGGER uncertain_outcomes_prune_only BEFORE DELETE ON uncertain_outcomes
WHEN NOT EXISTS (SELECT 1 FROM prune_permits AS p WHERE p.dispatch_id = OLD.dispatch_id)
BEGIN SELECT RAISE(ABORT, 'uncertain_outcomes: only a prune deletes an outcome'); END;

CREATE TABLE recovery_required_marks (
    dispatch_id         TEXT PRIMARY KEY REFERENCES approved_action_dispatches (dispatch_id),
    execution_attempt   INTEGER NOT NULL,
    execution_version   INTEGER NOT NULL,
    lease_owner         TEXT,
    lease_expires_at_ms INTEGER,
    noticed_by          TEXT NOT NULL CHECK (noticed_by IN ('recovery_pass', 'resolution')),
    committed_at_ms     INTEGER NOT NULL
) STRICT;

-- Only the triggers below write a mark: one that follows an observation or a resolution of a
-- started row, with that row's fence.
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

CREATE TRIGGER recovery_required_marks_immutable_update BEFORE UPDATE ON recovery_required_marks
BEGIN SELECT RAISE(ABORT, 'recovery_required_marks is immutable'); END;
CREATE TRIGGER recovery_required_marks_prune_only BEFORE DELETE ON recovery_required_marks
WHEN NOT EXISTS (SELECT 1 FROM prune_permits AS p WHERE p.dispatch_id = OLD.dispatch_id)
BEGIN SELECT RAISE(ABORT, 'recovery_required_marks: only a prune deletes a mark'); END;

-- A row a pass observed before this migration is marked when that pass first saw it.
INSERT INTO recovery_required_marks (
    dispatch_id, execution_attempt, execution_version, lease_owner, lease_expires_at_ms,
    noticed_by, committed_at_ms
)
SELECT e.dispatch_id, e.attempt, e.version, e.lease_owner, e.lease_expires_at_ms,
       'recovery_pass', o.first_seen_at_ms
FROM approved_action_dispatch_executions AS e
JOIN recovery_observations AS o ON o.dispatch_id = e.dispatch_id
WHERE e.status = 'executing';
