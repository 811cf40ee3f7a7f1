-- reminder_due --
-- Whether any waiting request's reminder is due: a pass with none writes nothing.
SELECT 1 AS due
FROM approval_request_policies AS p
JOIN approval_requests AS r ON r.approval_request_id = p.approval_request_id
WHERE p.remind_before_ms IS NOT NULL
  AND r.status = 'pending'
  AND CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
      >= coalesce(r.db_expires_at_ms, r.expires_at_ms) - p.remind_before_ms
  AND CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) < coalesce(r.db_expires_at_ms, r.expires_at_ms)
  AND NOT EXISTS (SELECT 1 FROM approval_events AS e
                  WHERE e.approval_request_id = r.approval_request_id
                    AND e.kind = 'approval.expiring')
LIMIT 1

-- remind_approvals --
-- The reconcile pass's reminders (migration 0027): at most :limit waiting requests whose
-- policy asks for a reminder and whose expiry less that reminder has passed on the database's
-- clock, not yet expired, get their one `approval.expiring` event (oldest first); the event's
-- trigger holds the same clock.
INSERT INTO approval_events (kind, approval_request_id)
SELECT 'approval.expiring', r.approval_request_id
FROM approval_request_policies AS p
JOIN approval_requests AS r ON r.approval_request_id = p.approval_request_id
WHERE p.remind_before_ms IS NOT NULL
  AND r.status = 'pending'
  AND CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
      >= coalesce(r.db_expires_at_ms, r.expires_at_ms) - p.remind_before_ms
  AND CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
      < coalesce(r.db_expires_at_ms, r.expires_at_ms)
  AND NOT EXISTS (SELECT 1 FROM approval_events AS e
                  WHERE e.approval_request_id = r.approval_request_id
                    AND e.kind = 'approval.expiring')
ORDER BY r.created_at_ms, r.approval_request_id
LIMIT :limit
ON CONFLICT (approval_request_id, kind) DO NOTHING
RETURNING approval_request_id
