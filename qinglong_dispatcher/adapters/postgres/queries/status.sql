-- PostgreSQL statements: the counts of `status` and the metrics gauges.

-- count_by_status --
SELECT status, count(*) AS n
FROM qinglong.approved_action_dispatch_executions
GROUP BY status

-- count_recovery_required --
SELECT count(*) AS n
FROM qinglong.approved_action_dispatch_executions
-- A started lease has expired only when the caller's clock and the database's both say so.
WHERE status = 'executing'
  AND lease_expires_at_ms <= least(:now_ms::bigint,
      (extract(epoch FROM clock_timestamp()) * 1000)::bigint)

-- due_summary --
SELECT count(*) AS n, min(eligible_at_ms) AS oldest
FROM qinglong.approved_action_dispatch_executions
WHERE eligible_at_ms IS NOT NULL AND eligible_at_ms <= :now_ms::bigint

-- expired_leases_by_owner --
-- Claimed rows whose lease ran out before their start (their owner stalled or died: the next
-- claim takes them over), per owner, the largest first; `total` counts them all. Read through
-- the due index (a leased row is due again at its lease's expiry).
SELECT lease_owner AS owner, count(*) AS n, CAST(sum(count(*)) OVER () AS bigint) AS total
FROM qinglong.approved_action_dispatch_executions
WHERE eligible_at_ms IS NOT NULL AND eligible_at_ms <= :now_ms::bigint
  AND status = 'leased' AND lease_expires_at_ms <= :now_ms::bigint
GROUP BY lease_owner
ORDER BY n DESC, lease_owner
LIMIT :owners::bigint

-- backlog_due --
-- Bounded: the due index is read for at most :cap rows, whatever the table holds.
SELECT count(*) AS n, min(eligible_at_ms) AS oldest
FROM (
    SELECT eligible_at_ms FROM qinglong.approved_action_dispatch_executions
    WHERE eligible_at_ms IS NOT NULL AND eligible_at_ms <= :now_ms::bigint
    ORDER BY eligible_at_ms
    LIMIT :cap::bigint
) AS due

-- backlog_started --
-- Bounded by the started rows (the executing partial index), never the terminal ones.
SELECT count(*) AS n,
       coalesce(sum(CASE
           WHEN lease_expires_at_ms <= least(:now_ms::bigint,
               (extract(epoch FROM clock_timestamp()) * 1000)::bigint) THEN 1
           ELSE 0 END), 0)
           AS expired
FROM qinglong.approved_action_dispatch_executions
WHERE status = 'executing'

-- target_holders --
-- The targets past a claim (their one row each, read through the partial unique index of
-- targets): `held` where that row is recovery_required (as count_recovery_required decides).
SELECT count(*) AS n,
       coalesce(sum(CASE
           WHEN status = 'executing' AND lease_expires_at_ms <= least(:now_ms::bigint,
               (extract(epoch FROM clock_timestamp()) * 1000)::bigint) THEN 1
           ELSE 0 END), 0) AS held
FROM qinglong.approved_action_dispatch_executions
WHERE target IS NOT NULL AND status IN ('leased', 'executing')
  -- A proceeding row whose lease ran out holds nothing (migration 0040).
  AND (status = 'leased' OR NOT proceed_on_unknown OR lease_expires_at_ms > qinglong.db_now_ms())

-- held_targets --
-- The held targets others wait on (the inbox): each one's holder, recovery_required as
-- target_holders decides, with its lease's expiry (since when it holds), and how many waiting
-- rows name its target; the oldest hold first, at most :limit.
SELECT h.target, h.dispatch_id, d.action_type, d.project_id, h.lease_expires_at_ms,
       (SELECT count(*) FROM qinglong.approved_action_dispatch_executions AS w
        WHERE w.target = h.target AND w.status IN ('pending', 'retry_wait')) AS waiting
FROM qinglong.approved_action_dispatch_executions AS h
JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = h.dispatch_id
WHERE h.target IS NOT NULL AND h.status = 'executing' AND NOT h.proceed_on_unknown
  AND h.lease_expires_at_ms <= least(:now_ms::bigint,
      (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
  AND EXISTS (SELECT 1 FROM qinglong.approved_action_dispatch_executions AS w
              WHERE w.target = h.target AND w.status IN ('pending', 'retry_wait'))
ORDER BY h.lease_expires_at_ms, h.dispatch_id
LIMIT :limit::bigint
