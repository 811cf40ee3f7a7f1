-- Execution windows (migration 0035; adapters/sql/windows.py).

-- expire_past_window --
-- The reconcile pass's sweep: at most :limit waiting rows whose window closed on the
-- database's clock end `cancelled` `window_expired` (the state machine admits that end for
-- the runtime only, and only then); a `leased` row too once its lease expired before its
-- start (its holder died: outside its window nobody may take it over). Rows a transaction
-- holds are skipped, never waited for.
UPDATE qinglong.approved_action_dispatch_executions AS e
SET status = 'cancelled', version = e.version + 1, eligible_at_ms = NULL, retry_at_ms = NULL,
    result_code = 'window_expired', completed_at_ms = :now_ms::bigint,
    updated_at_ms = :now_ms::bigint
WHERE e.dispatch_id IN (
    SELECT w.dispatch_id FROM qinglong.approved_action_dispatch_executions AS w
    WHERE w.not_after_ms IS NOT NULL AND w.status IN ('pending', 'retry_wait', 'leased')
      AND w.not_after_ms <= qinglong.db_now_ms()
      AND (w.status <> 'leased' OR w.lease_expires_at_ms <= qinglong.db_now_ms())
    ORDER BY w.not_after_ms
    LIMIT :limit::bigint
    FOR UPDATE SKIP LOCKED)
  AND e.status IN ('pending', 'retry_wait', 'leased') AND e.not_after_ms <= qinglong.db_now_ms()
  AND (e.status <> 'leased' OR e.lease_expires_at_ms <= qinglong.db_now_ms())
RETURNING e.dispatch_id
