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
