-- insert_subscription --
-- `notify add`: the schema's owner only (on PostgreSQL nobody else has INSERT: 42501).
INSERT INTO notification_subscriptions (
    name, url, secret_ref, kinds_json, action_type, project_id, target_prefix, format,
    created_at_ms
) VALUES (
    :name, :url, :secret_ref, :kinds_json, :action_type, :project_id, :target_prefix, :format, CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
)
RETURNING *

-- delete_subscription --
-- `notify remove`: its pending deliveries go with it (the key's cascade).
DELETE FROM notification_subscriptions WHERE name = :name RETURNING name

-- list_subscriptions --
SELECT * FROM notification_subscriptions ORDER BY name

-- get_subscription --
SELECT * FROM notification_subscriptions WHERE name = :name

-- claim_deliverer --
-- The cluster's one deliverer: the lease is taken when it has run out on the database's
-- clock, or renewed by its holder; no row back: another holds it.
UPDATE notification_deliverer
SET owner = :owner, lease_expires_at_ms = CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + :lease_ms
WHERE lease_expires_at_ms <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) OR owner = :owner
RETURNING fanned_out_through

-- release_deliverer --
UPDATE notification_deliverer SET lease_expires_at_ms = 0 WHERE owner = :owner

-- unfanned_events --
-- Events not yet matched against the subscriptions, in the order they were written, past the
-- watermark below which every event is matched (the target: the one the database wrote on it).
SELECT e.id, e.kind, e.subject_id, e.project_id, e.action_type, e.at_ms, e.payload_json,
    e.target
FROM notification_events AS e
CROSS JOIN notification_deliverer AS d
WHERE e.id > d.fanned_out_through
  AND NOT EXISTS (SELECT 1 FROM notification_fanouts AS f WHERE f.event_id = e.id)
ORDER BY e.id
LIMIT :limit

-- insert_fanout --
INSERT INTO notification_fanouts (event_id) VALUES (:event_id) ON CONFLICT DO NOTHING

-- insert_delivery --
INSERT INTO notification_deliveries (event_id, subscription, subject_id, next_attempt_at_ms)
VALUES (:event_id, :subscription, :subject_id, CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
ON CONFLICT DO NOTHING

-- advance_watermark --
-- Every event at or below the last one matched and older than the settling time is matched:
-- a transaction still open that long would have been cut off by the statement timeouts. Asked
-- on every pass, with nothing new matched too (`:through` NULL: the last event matched), so
-- the watermark reaches the events matched before they had settled once they have; the row
-- is written only when the watermark moves.
WITH settled AS (
    SELECT max(e.id) AS through
    FROM notification_events AS e, notification_deliverer AS w
    WHERE e.id > w.fanned_out_through AND e.at_ms < CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) - :settle_ms
      AND e.id <= coalesce(:through,
                           (SELECT max(f.event_id) FROM notification_fanouts AS f))
)
UPDATE notification_deliverer
SET fanned_out_through = settled.through
FROM settled
WHERE settled.through IS NOT NULL
  AND owner = :owner AND lease_expires_at_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)

-- holds_deliverer --
-- The lease's time left, when `:owner` holds it.
SELECT lease_expires_at_ms - CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) AS remaining_ms FROM notification_deliverer
WHERE owner = :owner AND lease_expires_at_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)

-- due_deliveries --
-- Pending deliveries due on the database's clock, each the earliest pending one of its
-- subject for its subscription (so a subject's events arrive in order), oldest first.
SELECT d.event_id AS id, d.subscription, d.attempts, e.kind, e.subject_id, e.project_id,
       e.action_type, e.at_ms, e.payload_json, s.url, s.secret_ref, s.format
FROM notification_deliveries AS d
JOIN notification_events AS e ON e.id = d.event_id
JOIN notification_subscriptions AS s ON s.name = d.subscription
WHERE d.status = 'pending' AND d.next_attempt_at_ms <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
  AND NOT EXISTS (
      SELECT 1 FROM notification_deliveries AS p
      WHERE p.status = 'pending' AND p.subscription = d.subscription
        AND p.subject_id = d.subject_id AND p.event_id < d.event_id)
ORDER BY d.event_id
LIMIT :limit

-- record_delivery --
-- One attempt's outcome, by the lease's holder, once per attempt (the attempts it saw).
UPDATE notification_deliveries
SET status = :status, attempts = attempts + 1,
    next_attempt_at_ms = CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + :delay_ms, last_code = :code,
    done_at_ms = CASE WHEN :status = 'pending' THEN NULL ELSE CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) END
WHERE event_id = :event_id AND subscription = :subscription AND status = 'pending'
  AND attempts = :attempts_before
  AND EXISTS (SELECT 1 FROM notification_deliverer
              WHERE owner = :owner AND lease_expires_at_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
RETURNING attempts

-- insert_attempt --
INSERT INTO notification_attempts (
    event_id, subscription, attempt, outcome, response_code, error_code, latency_ms, at_ms
) VALUES (
    :event_id, :subscription, :attempt, :outcome, :code, :error_code, :latency_ms, CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
)

-- notification_stats --
-- The metrics' reading: pending deliveries, dead letters, and the oldest undelivered event's
-- age on the database's clock (0: none waits).
SELECT
    (SELECT count(*) FROM notification_deliveries WHERE status = 'pending') AS pending,
    (SELECT count(*) FROM notification_deliveries WHERE status = 'dead') AS dead,
    coalesce((SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) - min(e.at_ms)
              FROM notification_deliveries AS d
              JOIN notification_events AS e ON e.id = d.event_id
              WHERE d.status = 'pending'), 0) AS oldest_pending_age_ms

-- dead_letters --
-- The operator's inbox: deliveries given up after the bound, newest first.
SELECT d.event_id, d.subscription, d.attempts, d.last_code, d.done_at_ms, e.kind,
       e.subject_id, e.project_id, e.action_type
FROM notification_deliveries AS d
JOIN notification_events AS e ON e.id = d.event_id
WHERE d.status = 'dead'
ORDER BY d.done_at_ms DESC, d.event_id DESC
LIMIT :limit
