-- reminder_due --
-- Whether any waiting request's reminder is due (the index of reminded copies): a pass with
-- none writes nothing, so a login without the insert (a `tick` by another login) passes.
SELECT 1 AS due
FROM qinglong.approval_request_policies AS p
JOIN qinglong.approval_requests AS r ON r.approval_request_id = p.approval_request_id
WHERE p.remind_before_ms IS NOT NULL
  AND r.status = 'pending'
  AND qinglong.db_now_ms() >= COALESCE(r.db_expires_at_ms, r.expires_at_ms) - p.remind_before_ms
  AND qinglong.db_now_ms() < COALESCE(r.db_expires_at_ms, r.expires_at_ms)
  AND NOT EXISTS (SELECT 1 FROM qinglong.approval_events AS e
                  WHERE e.approval_request_id = r.approval_request_id
                    AND e.kind = 'approval.expiring')
LIMIT 1

-- remind_approvals --
-- The reconcile pass's reminders (migration 0027): at most :limit waiting requests whose
-- policy asks for a reminder and whose expiry less that reminder has passed on the database's
-- clock, not yet expired, get their one `approval.expiring` event (oldest first). The event's
-- guard admits only the runtime and holds the same clock; a twin written by another pass is
-- skipped by the key.
INSERT INTO qinglong.approval_events (kind, approval_request_id)
SELECT 'approval.expiring', r.approval_request_id
FROM qinglong.approval_request_policies AS p
JOIN qinglong.approval_requests AS r ON r.approval_request_id = p.approval_request_id
CROSS JOIN (SELECT qinglong.db_now_ms() AS now_ms) AS clock
WHERE p.remind_before_ms IS NOT NULL
  AND r.status = 'pending'
  AND clock.now_ms >= COALESCE(r.db_expires_at_ms, r.expires_at_ms) - p.remind_before_ms
  AND clock.now_ms < COALESCE(r.db_expires_at_ms, r.expires_at_ms)
  AND NOT EXISTS (SELECT 1 FROM qinglong.approval_events AS e
                  WHERE e.approval_request_id = r.approval_request_id
                    AND e.kind = 'approval.expiring')
ORDER BY r.created_at_ms, r.approval_request_id
LIMIT :limit::bigint
ON CONFLICT (approval_request_id, kind) DO NOTHING
RETURNING approval_request_id
