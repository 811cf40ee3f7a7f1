-- Transactional actions (docs/state-machine.md#passages, decision 0055): an action whose
-- whole effect is rows in this file (`run.create`) may commit its claim, start barrier,
-- effect, receipt and completion in one transaction, a passage: its execution row goes from
-- `pending` straight to `succeeded`, written once, one ledger line naming the path.
-- 1. `transactional_action_types`: the action types that may take a passage; `run.create` is
--    one. On an edge device the file's owner is the administrator: the marks are the file's.
-- 2. The edge `pending → succeeded` (the state machine of migration 0035 rebuilt with it):
--    only for a type of point 1, the next attempt within the budget, no takeover, the holder,
--    its start and its completion named. The row is written first, as on PostgreSQL, so the
--    Run's and the receipt's guards admit them as they admit a started row's (no guard is
--    widened: a Run is still written only while its dispatch is held or has succeeded).
-- 3. A passage commits only with the dispatch's receipt. SQLite has no deferred trigger, but
--    it has deferred foreign keys: the edge names the receipt it will write
--    (`passage_receipt`, the dispatch's own id, a key deferred to the commit), and is refused
--    on a connection that does not enforce foreign keys (`PRAGMA foreign_keys` is fixed for a
--    transaction once it began), so a commit without the receipt fails: `FOREIGN KEY
--    constraint failed`. The product's connections enforce them; a plain `sqlite3` session
--    must say `PRAGMA foreign_keys = ON` to take the edge at all. The column is set by that
--    edge alone and never changed.
-- 4. A passage is a claim and a start: the window and freeze checks of migration 0035 take
--    that edge too.

CREATE TABLE transactional_action_types (
    action_type TEXT PRIMARY KEY CHECK (length(action_type) BETWEEN 1 AND 128)
);
INSERT INTO transactional_action_types (action_type) VALUES ('run.create');

-- Point 3: the receipt a passage commits with, checked at commit.
ALTER TABLE approved_action_dispatch_executions ADD COLUMN passage_receipt TEXT
    REFERENCES approved_run_action_receipts (dispatch_id) DEFERRABLE INITIALLY DEFERRED
    CHECK (passage_receipt IS NULL OR (passage_receipt = dispatch_id AND status = 'succeeded'));
-- A receipt deleted (by a prune) looks for the rows naming it through this index, not a scan.
CREATE INDEX approved_action_dispatch_executions_passage_receipt
    ON approved_action_dispatch_executions (passage_receipt) WHERE passage_receipt IS NOT NULL;

-- The state machine of migration 0035, with the edge of point 2.
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

-- Point 4: the window and freeze checks of migration 0035 on the passage edge too.
DROP TRIGGER approved_action_dispatch_executions_window;
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

DROP TRIGGER approved_action_dispatch_executions_freeze;
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
