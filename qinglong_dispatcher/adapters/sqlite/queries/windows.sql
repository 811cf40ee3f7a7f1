-- Execution windows (migration 0035; adapters/sql/windows.py).

-- expire_past_window --
-- The reconcile pass's sweep: at most :limit waiting rows whose window closed on the
-- database's clock end `cancelled` `window_expired` (a trigger admits that end only then); a
-- `leased` row too once its lease expired before its start (its holder died: outside its
-- window nobody may take it over).
UPDATE approved_action_dispatch_executions
SET status = 'cancelled', version = version + 1, eligible_at_ms = NULL, retry_at_ms = NULL,
    result_code = 'window_expired', completed_at_ms = :now_ms, updated_at_ms = :now_ms
WHERE dispatch_id IN (
    SELECT w.dispatch_id FROM approved_action_dispatch_executions AS w
    WHERE w.not_after_ms IS NOT NULL AND w.status IN ('pending', 'retry_wait', 'leased')
      AND w.not_after_ms <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
      AND (w.status <> 'leased' OR w.lease_expires_at_ms
           <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
    ORDER BY w.not_after_ms
    LIMIT :limit)
RETURNING dispatch_id
