-- Change freezes (migration 0035; adapters/sql/freezes.py). The guard names the writer
-- (`session_user`) and the database's time; only the schema's owner writes freezes (42501
-- for any other login); a lift's guard names the acting principal and refuses the requester.

-- freeze_columns --
freeze_id, action_type, project_id, target_prefix, from_ms, until_ms, reason, created_by,
created_at_ms, ended_by, ended_at_ms

-- insert_freeze --
INSERT INTO qinglong.freezes (action_type, project_id, target_prefix, from_ms, until_ms,
                              reason)
VALUES (:action_type, :project_id, :target_prefix, :from_ms::bigint, :until_ms::bigint,
        :reason)
RETURNING {freeze_columns}

-- end_freeze --
UPDATE qinglong.freezes SET ended_by = :principal, ended_at_ms = 0
WHERE freeze_id = :freeze_id::bigint AND ended_at_ms IS NULL
RETURNING {freeze_columns}

-- list_freezes --
-- In force or still to come (the database's clock), or every one when asked; newest first.
SELECT {freeze_columns} FROM qinglong.freezes
WHERE :with_ended::boolean OR (ended_at_ms IS NULL AND until_ms > qinglong.db_now_ms())
ORDER BY freeze_id DESC
LIMIT 200

-- freezes_covering --
-- The freezes holding one dispatch now (the database's clock), not lifted for it.
SELECT f.freeze_id FROM qinglong.freezes AS f
JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = :dispatch_id::text
WHERE f.ended_at_ms IS NULL AND f.until_ms > qinglong.db_now_ms()
  AND f.from_ms <= qinglong.db_now_ms()
  AND (f.action_type IS NULL OR f.action_type = d.action_type)
  AND (f.project_id IS NULL OR f.project_id = d.project_id)
  AND (f.target_prefix IS NULL OR pg_catalog.starts_with(d.target, f.target_prefix))
  AND NOT EXISTS (SELECT 1 FROM qinglong.freeze_lifts AS l
                  WHERE l.dispatch_id = d.dispatch_id AND l.freeze_id = f.freeze_id)
ORDER BY f.freeze_id

-- lift_freezes --
-- One lift per freeze covering the dispatch now; the guard names the lifter.
INSERT INTO qinglong.freeze_lifts (dispatch_id, freeze_id, reason, lifted_by)
SELECT :dispatch_id::text, c.freeze_id, :reason::text, :principal::text
FROM ({freezes_covering}) AS c
RETURNING freeze_id

-- count_frozen --
-- Waiting rows a freeze holds now: nothing to count, and no row read, while none is in force.
SELECT count(*) AS n FROM qinglong.approved_action_dispatch_executions AS e
WHERE EXISTS (SELECT 1 FROM qinglong.freezes AS f
              WHERE f.ended_at_ms IS NULL AND f.until_ms > qinglong.db_now_ms()
                AND f.from_ms <= qinglong.db_now_ms())
  AND e.status IN ('pending', 'retry_wait')
  AND qinglong.freeze_covering(e.dispatch_id, qinglong.db_now_ms()) IS NOT NULL

-- frozen_dispatches --
-- The waiting rows a freeze holds now (the inbox), each with the least freeze holding it (as
-- `frozen_by` names it) and its requester; nothing read while no freeze is in force; oldest
-- wait first, at most :limit.
SELECT d.dispatch_id, d.action_type, d.project_id, e.target, r.requested_principal,
       d.created_at_ms, f.freeze_id, f.reason, f.from_ms, f.until_ms
FROM qinglong.approved_action_dispatch_executions AS e
JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
JOIN qinglong.approval_requests AS r ON r.approval_request_id = d.approval_request_id
JOIN qinglong.freezes AS f
    ON f.freeze_id = qinglong.freeze_covering(e.dispatch_id, qinglong.db_now_ms())
WHERE EXISTS (SELECT 1 FROM qinglong.freezes AS g
              WHERE g.ended_at_ms IS NULL AND g.until_ms > qinglong.db_now_ms()
                AND g.from_ms <= qinglong.db_now_ms())
  AND e.status IN ('pending', 'retry_wait')
ORDER BY greatest(f.from_ms, d.created_at_ms), d.dispatch_id
LIMIT :limit::bigint
