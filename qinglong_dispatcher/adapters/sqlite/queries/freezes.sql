-- Change freezes (migration 0035; adapters/sql/freezes.py): written by the store's principal
-- (the file's owner) at the database's time; a lift names the store's principal, and the file
-- refuses the requester's.

-- freeze_columns --
freeze_id, action_type, project_id, target_prefix, from_ms, until_ms, reason, created_by,
created_at_ms, ended_by, ended_at_ms

-- insert_freeze --
INSERT INTO freezes (action_type, project_id, target_prefix, from_ms, until_ms, reason,
                     created_by)
VALUES (:action_type, :project_id, :target_prefix, :from_ms, :until_ms, :reason, :principal)
RETURNING {freeze_columns}

-- end_freeze --
UPDATE freezes
SET ended_by = :principal,
    ended_at_ms = CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
WHERE freeze_id = :freeze_id AND ended_at_ms IS NULL
RETURNING {freeze_columns}

-- list_freezes --
-- In force or still to come (the database's clock), or every one when asked; newest first.
SELECT {freeze_columns} FROM freezes
WHERE :with_ended
   OR (ended_at_ms IS NULL
       AND until_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
ORDER BY freeze_id DESC
LIMIT 200

-- freezes_covering --
-- The freezes holding one dispatch now (the database's clock), not lifted for it.
SELECT freeze_id FROM dispatch_freezes WHERE dispatch_id = :dispatch_id ORDER BY freeze_id

-- lift_freezes --
-- One lift per freeze covering the dispatch now, named for the store's principal.
INSERT INTO freeze_lifts (dispatch_id, freeze_id, reason, lifted_by)
SELECT :dispatch_id, freeze_id, :reason, :principal
FROM dispatch_freezes WHERE dispatch_id = :dispatch_id
RETURNING freeze_id

-- count_frozen --
-- Waiting rows a freeze holds now.
SELECT count(DISTINCT z.dispatch_id) AS n
FROM dispatch_freezes AS z
JOIN approved_action_dispatch_executions AS e ON e.dispatch_id = z.dispatch_id
WHERE e.status IN ('pending', 'retry_wait')

-- frozen_dispatches --
-- The waiting rows a freeze holds now (the inbox), each with the least freeze holding it (as
-- `frozen_by` names it) and its requester; nothing read while no freeze is in force; oldest
-- wait first, at most :limit.
SELECT d.dispatch_id, d.action_type, d.project_id, e.target, r.requested_principal,
       d.created_at_ms, f.freeze_id, f.reason, f.from_ms, f.until_ms
FROM approved_action_dispatch_executions AS e
JOIN approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
JOIN approval_requests AS r ON r.approval_request_id = d.approval_request_id
JOIN freezes AS f
    ON f.freeze_id = (SELECT min(z.freeze_id) FROM dispatch_freezes AS z
                      WHERE z.dispatch_id = e.dispatch_id)
WHERE EXISTS (SELECT 1 FROM freezes AS g
              WHERE g.ended_at_ms IS NULL
                AND g.until_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
                AND g.from_ms <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
  AND e.status IN ('pending', 'retry_wait')
ORDER BY max(f.from_ms, d.created_at_ms), d.dispatch_id
LIMIT :limit
