-- The requester's narrowing of the execution window (docs/state-machine.md#windows-and-freezes,
-- decision 0051): the requester may only narrow what the policy allows.
-- 1. A request may carry `not_before_ms` (start no earlier than that moment) and
--    `window_for_ms` (and then only within that long of it, or of the moment its dispatch is
--    written when no start is named): the requester's window, written with the request and
--    never changed, so what was approved is what runs.
-- 2. The dispatch's window is the INTERSECTION of the policy's (migration 0035) and the
--    requester's: the view the dispatch's statement reads, and its trigger compares with, now
--    takes the later start and the earlier end, so a dispatch naming a wider window is refused.
-- 3. A narrowing that can never meet the policy's window is refused when the request is
--    written: its end falls before the policy's earliest start (now plus the policy's delay;
--    now alone without a policy). One the consume leaves empty (approved after the
--    requester's end) is written empty, never widened: the claim never starts it, and the
--    reconcile pass ends it `cancelled` `window_expired` at its end.

ALTER TABLE approval_requests ADD COLUMN not_before_ms INTEGER CHECK (not_before_ms > 0);
ALTER TABLE approval_requests ADD COLUMN window_for_ms INTEGER
    CHECK (window_for_ms BETWEEN 1000 AND 2592000000);

CREATE TRIGGER approval_requests_window_immutable
BEFORE UPDATE OF not_before_ms, window_for_ms ON approval_requests
WHEN NEW.not_before_ms IS NOT OLD.not_before_ms OR NEW.window_for_ms IS NOT OLD.window_for_ms
BEGIN
    SELECT RAISE(ABORT, 'qinglong:window_refused: a request''s window never changes');
END;

-- Point 3, without a policy (its end before now) and with one (before now plus its delay).
CREATE TRIGGER approval_requests_window_possible
BEFORE INSERT ON approval_requests
WHEN NEW.window_for_ms IS NOT NULL
    AND coalesce(NEW.not_before_ms, CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
        + NEW.window_for_ms <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:window_empty: the requested window ends before it can start');
END;

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

-- Point 2: the window of a request, its policy's narrowed by its own, from now (the
-- database's clock). Every request has a row (NULLs: open on that side).
DROP VIEW approval_request_windows;
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

-- Holding a target on an unknown outcome (docs/operations.md#freezes-and-holds, decision
-- 0051). A target whose last effect has an unknown outcome (`recovery_required`: an
-- `executing` row whose lease expired) is held until the row is settled; a policy may say
-- `proceed` instead.
-- 4. `proceed_on_unknown` (0: hold, the default) is the policy's; the execution carries the
--    policy version's its request carries (the statement reads it, and a trigger refuses any
--    other value), and it never changes: no one can flip the rule of an execution.
-- 5. The unique index of migration 0030 is narrowed to what holds whatever happens: a
--    `leased` row, and an `executing` row of a hold policy. An `executing` row of a proceed
--    policy holds its target only while its lease is live, a test of the database's clock
--    that no index can make: a trigger on every lease of a targeted row refuses while such a
--    row on its target is live (the index refuses the rest), and on the start and every
--    renewal of a proceeding row while any other row holds its target. A renewal is refused
--    too: a row whose target another took once its lease ran out never comes back to life
--    beside it. The file's one writer serialises them.
-- 6. The rows past a claim keep a plain partial index of their own, which the claim's busy
--    probe and the target reads use, filtering the proceeding rows whose lease ran out.

ALTER TABLE approval_policies ADD COLUMN proceed_on_unknown INTEGER NOT NULL DEFAULT 0
    CHECK (proceed_on_unknown IN (0, 1));
ALTER TABLE approved_action_dispatch_executions
    ADD COLUMN proceed_on_unknown INTEGER NOT NULL DEFAULT 0 CHECK (proceed_on_unknown IN (0, 1));

-- The rule of a dispatch's policy (0 without one).
CREATE VIEW dispatch_unknown_rules AS
SELECT d.dispatch_id, coalesce(p.proceed_on_unknown, 0) AS proceed_on_unknown
FROM approved_action_dispatches AS d
LEFT JOIN approval_request_policies AS r ON r.approval_request_id = d.approval_request_id
LEFT JOIN approval_policies AS p ON p.name = r.policy_name AND p.version = r.policy_version;

CREATE TRIGGER approved_action_dispatch_executions_rule_of_policy
BEFORE INSERT ON approved_action_dispatch_executions
WHEN NEW.proceed_on_unknown IS NOT coalesce((
    SELECT u.proceed_on_unknown FROM dispatch_unknown_rules AS u
    WHERE u.dispatch_id = NEW.dispatch_id), 0)
BEGIN
    SELECT RAISE(ABORT, 'qinglong:target_refused: an execution carries its policy''s rule');
END;

CREATE TRIGGER approved_action_dispatch_executions_rule_immutable
BEFORE UPDATE OF proceed_on_unknown ON approved_action_dispatch_executions
WHEN NEW.proceed_on_unknown IS NOT OLD.proceed_on_unknown
BEGIN
    SELECT RAISE(ABORT, 'qinglong:target_refused: a rule never changes');
END;

-- Point 5.
DROP INDEX approved_action_dispatch_executions_one_per_target;
CREATE UNIQUE INDEX approved_action_dispatch_executions_one_per_target
    ON approved_action_dispatch_executions (target)
    WHERE target IS NOT NULL
      AND (status = 'leased' OR (status = 'executing' AND proceed_on_unknown = 0));
-- Point 6.
CREATE INDEX approved_action_dispatch_executions_past_claim
    ON approved_action_dispatch_executions (target)
    WHERE target IS NOT NULL AND status IN ('leased', 'executing');

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
