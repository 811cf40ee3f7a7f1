-- Execution windows (docs/state-machine.md#windows-and-freezes, decision 0046): the file
-- decides when an approved action may start.
-- 1. A policy may carry a window: `not_before_delay_ms` (the dispatch may start only that long
--    after it is created) and `window_ms` (and then only within that long). The dispatch
--    carries it from the policy version its request carries and the database's clock (the
--    statement reads it, and a trigger refuses any other value: 'now' is one value within a
--    statement and its triggers), and its execution carries the dispatch's, its first due
--    time the window's start (the claim's due index then skips a row before its window).
-- 2. A lease (a claim or a takeover) or a start barrier outside the window, on the database's
--    clock, is refused; a window never changes.
-- 3. Past its window a waiting row (`pending`, `retry_wait`, or `leased` under a lease that
--    expired before its start: a holder that died between claim and barrier) ends
--    `cancelled` with the code `window_expired` (the reconcile pass), never while the window
--    is open nor under a live lease; that end needs no cancel audit row (the trigger of
--    migration 0023 is made again without it), and the state machine of migration 0022 is
--    made again with that one edge more (`leased → cancelled`, for it alone). Without it such
--    a row could never be taken over (outside its window) nor ended.

ALTER TABLE approval_policies ADD COLUMN not_before_delay_ms INTEGER
    CHECK (not_before_delay_ms BETWEEN 0 AND 2592000000);
ALTER TABLE approval_policies ADD COLUMN window_ms INTEGER
    CHECK (window_ms BETWEEN 1000 AND 2592000000);
ALTER TABLE approved_action_dispatches ADD COLUMN not_before_ms INTEGER;
ALTER TABLE approved_action_dispatches ADD COLUMN not_after_ms INTEGER;
ALTER TABLE approved_action_dispatch_executions ADD COLUMN not_before_ms INTEGER;
ALTER TABLE approved_action_dispatch_executions ADD COLUMN not_after_ms INTEGER;

-- The window of a request's policy: its start and end from now (the database's clock).
CREATE VIEW approval_request_windows AS
SELECT r.approval_request_id,
       CASE WHEN p.not_before_delay_ms IS NOT NULL
            THEN CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
                 + p.not_before_delay_ms END AS not_before_ms,
       CASE WHEN p.window_ms IS NOT NULL
            THEN CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
                 + coalesce(p.not_before_delay_ms, 0) + p.window_ms END AS not_after_ms
FROM approval_request_policies AS r
JOIN approval_policies AS p ON p.name = r.policy_name AND p.version = r.policy_version;

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

CREATE TRIGGER approved_action_dispatch_executions_window_immutable
BEFORE UPDATE OF not_before_ms, not_after_ms ON approved_action_dispatch_executions
WHEN NEW.not_before_ms IS NOT OLD.not_before_ms OR NEW.not_after_ms IS NOT OLD.not_after_ms
BEGIN
    SELECT RAISE(ABORT, 'qinglong:window_refused: a window never changes');
END;

-- No lease and no start outside the window, on the database's clock.
CREATE TRIGGER approved_action_dispatch_executions_window
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN (NEW.not_before_ms IS NOT NULL OR NEW.not_after_ms IS NOT NULL)
    AND ((NEW.status = 'leased' AND (OLD.status <> 'leased'
                                     OR NEW.lease_token IS NOT OLD.lease_token))
         OR (NEW.status = 'executing' AND OLD.status <> 'executing'))
    AND (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) < NEW.not_before_ms
         OR CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) >= NEW.not_after_ms)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:window_refused: outside its execution window');
END;

-- The end of a wait past its window, and only then.
CREATE TRIGGER approved_action_dispatch_executions_window_expired
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN NEW.status = 'cancelled' AND NEW.result_code IS 'window_expired'
    AND (OLD.not_after_ms IS NULL
         OR OLD.not_after_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
BEGIN
    SELECT RAISE(ABORT, 'qinglong:window_refused: the window is still open');
END;

-- A claimed row's end past its window waits for its lease to run out: its holder may still
-- be about to give it back.
CREATE TRIGGER approved_action_dispatch_executions_window_expired_lease
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN NEW.status = 'cancelled' AND OLD.status = 'leased'
    AND (NEW.result_code IS NOT 'window_expired'
         OR OLD.lease_expires_at_ms
            > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
BEGIN
    SELECT RAISE(ABORT, 'qinglong:transition_refused: a claimed row ends only past its window and lease');
END;

-- The state machine of migration 0022, with the edge of point 3.
DROP TRIGGER approved_action_dispatch_executions_state_machine;
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
            OR (NEW.started_at_ms IS NOT OLD.started_at_ms
                AND NOT (OLD.status = 'leased' AND NEW.status = 'executing'))
            THEN RAISE(ABORT, 'qinglong:transition_refused: fence')
    END;
END;

-- As in migration 0023, but a wait ended past its window is no one's cancel.
DROP TRIGGER approved_action_dispatch_executions_cancel_audited;
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

-- The expiry sweep reads the waiting rows with a window.
CREATE INDEX approved_action_dispatch_executions_windowed
    ON approved_action_dispatch_executions (not_after_ms)
    WHERE not_after_ms IS NOT NULL AND status IN ('pending', 'retry_wait', 'leased');

-- Freezes (docs/operations.md#freezes-and-holds, decision 0046). On an edge device the file's
-- owner is the administrator: the freezes are the file's to write; the file refuses what the
-- rules forbid whoever writes.
-- 4. `freezes`: a freeze covers the dispatches of its scope (every one, or an action type, a
--    project, a target prefix; the set ones all match) from `from_ms` until `until_ms`, for a
--    reason, audited (`approval.freeze_added`, `approval.freeze_ended`); ending one stamps who
--    and when, nothing else changes; a freeze is never deleted.
-- 5. A covered dispatch waits: no lease and no start while a freeze covers it, and the claim
--    leaves it out without spending anything.
-- 6. `freeze_lifts`: a principal who is not the dispatch's requester lifts one freeze for one
--    dispatch, with a reason, audited (`approval.freeze_lifted`); never changed, nor deleted but with
--    its dispatch.

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

-- The freezes that may be in force: the claim's and the triggers' probe.
CREATE INDEX freezes_in_force ON freezes (until_ms) WHERE ended_at_ms IS NULL;

CREATE TRIGGER freezes_born_open BEFORE INSERT ON freezes
WHEN NEW.ended_by IS NOT NULL OR NEW.ended_at_ms IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'qinglong:freeze_refused: a freeze is written open');
END;

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

CREATE TRIGGER freezes_no_delete BEFORE DELETE ON freezes
BEGIN
    SELECT RAISE(ABORT, 'qinglong:freeze_refused: a freeze is never deleted: end it');
END;

CREATE TRIGGER freezes_audit_added AFTER INSERT ON freezes
BEGIN
    INSERT INTO security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
    ) VALUES (
        'approval.freeze_added', NEW.created_by, NEW.created_by, coalesce(NEW.project_id, ''),
        'freeze:' || NEW.freeze_id, substr(NEW.reason, 1, 128), NEW.created_at_ms
    );
END;

CREATE TRIGGER freezes_audit_ended AFTER UPDATE ON freezes
BEGIN
    INSERT INTO security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
    ) VALUES (
        'approval.freeze_ended', NEW.ended_by, NEW.ended_by, coalesce(NEW.project_id, ''),
        'freeze:' || NEW.freeze_id, 'ended', NEW.ended_at_ms
    );
END;

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

CREATE INDEX freeze_lifts_freeze ON freeze_lifts (freeze_id);

CREATE TRIGGER freeze_lifts_not_the_requester BEFORE INSERT ON freeze_lifts
WHEN EXISTS (SELECT 1 FROM approved_action_dispatches AS d
             JOIN approval_requests AS r ON r.approval_request_id = d.approval_request_id
             WHERE d.dispatch_id = NEW.dispatch_id AND r.requested_principal = NEW.lifted_by)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:freeze_refused: the requester may not lift a freeze');
END;

CREATE TRIGGER freeze_lifts_no_update BEFORE UPDATE ON freeze_lifts
BEGIN
    SELECT RAISE(ABORT, 'qinglong:freeze_refused: a freeze lift never changes');
END;

CREATE TRIGGER freeze_lifts_audit AFTER INSERT ON freeze_lifts
BEGIN
    INSERT INTO security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
    ) SELECT 'approval.freeze_lifted', NEW.lifted_by, NEW.lifted_by, d.project_id, NEW.dispatch_id,
             CAST(NEW.freeze_id AS TEXT), NEW.lifted_at_ms
      FROM approved_action_dispatches AS d WHERE d.dispatch_id = NEW.dispatch_id;
END;

-- The freezes covering each dispatch now (the database's clock), not lifted for it.
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

-- No lease and no start while a freeze covers the dispatch.
CREATE TRIGGER approved_action_dispatch_executions_freeze
BEFORE UPDATE ON approved_action_dispatch_executions
WHEN ((NEW.status = 'leased' AND (OLD.status <> 'leased'
                                  OR NEW.lease_token IS NOT OLD.lease_token))
      OR (NEW.status = 'executing' AND OLD.status <> 'executing'))
    AND EXISTS (SELECT 1 FROM dispatch_freezes AS z WHERE z.dispatch_id = NEW.dispatch_id)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:freeze_refused: a freeze covers this dispatch');
END;
