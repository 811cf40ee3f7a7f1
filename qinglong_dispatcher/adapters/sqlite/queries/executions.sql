-- SQLite statements: claims, leases, the start barrier, releases and completions of execution rows.

-- execution_columns --
e.dispatch_id, e.project_id, e.status, e.version, e.attempt, e.max_attempts,
e.eligible_at_ms, e.retry_at_ms, e.lease_owner, e.lease_token, e.lease_expires_at_ms,
e.started_at_ms, e.result_mutation_id, e.result_code, e.completed_at_ms,
e.created_at_ms, e.updated_at_ms, e.takeovers

-- select_due --
SELECT {execution_columns},
       d.approval_request_id, d.action_type, d.action_ref, d.action_digest, d.approved_by,
       d.created_at_ms AS dispatch_created_at_ms, d.target,
       d.traceparent
FROM approved_action_dispatch_executions AS e
JOIN approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
WHERE e.eligible_at_ms IS NOT NULL AND e.eligible_at_ms <= :now_ms
  AND (e.eligible_at_ms, e.dispatch_id) > (:after_eligible_at_ms, :after_dispatch_id)
ORDER BY e.eligible_at_ms, e.dispatch_id
LIMIT :limit

-- page_plans --
-- Nothing to set: SQLite's due reads stay on the due index, in its order, and its page writes
-- on the primary key, by how they are written (a status or due condition beside the key
-- carries the unary +, which keeps its index out of the planner's choice). PostgreSQL's
-- planner is told (its `page_plans`).
SELECT 1

-- due_window --
-- The key of the `:ahead`-th row down the due index, or a key after every row when fewer are
-- due or `:ahead` is 0 (no window). A claim that skips the actions of full passages stops
-- there, so that its cost is that window's, not the backlog's (decision 0060). It costs one
-- read of the due index's first `:ahead` keys: SQLite sorts a subquery's rows before an
-- outer ORDER BY may take them, so a window in FROM (PostgreSQL's) would read them all first.
-- (The aggregates of one row or none: that row's key, or the key after every row.)
(SELECT coalesce(max(w.eligible_at_ms), :now_ms), coalesce(max(w.dispatch_id), char(1114111))
 FROM (SELECT a.eligible_at_ms, a.dispatch_id FROM approved_action_dispatch_executions AS a
       WHERE :ahead > 0 AND a.eligible_at_ms IS NOT NULL AND a.eligible_at_ms <= :now_ms
       ORDER BY a.eligible_at_ms, a.dispatch_id
       LIMIT 1 OFFSET :ahead - 1) AS w)

-- claim_due_rows --
-- The due observation of `claim_due`. BEGIN IMMEDIATE already holds the database's one write
-- lock, so no other writer can take an observed row: the plain due read is the locked one.
-- A row whose target another row holds past its claim (busy, or held: recovery_required) is
-- not observed at all, so its claim spends nothing; the probe is one read of the partial
-- unique index, and a row without a target never makes it.
-- While it skips the actions of full passages it looks among the next `:ahead` due rows only
-- (`due_window`): behind a backlog of those actions its cost is that window's, not the
-- backlog's (decision 0060).
SELECT {execution_columns},
       d.approval_request_id, d.action_type, d.action_ref, d.action_digest, d.approved_by,
       d.created_at_ms AS dispatch_created_at_ms, d.target,
       d.traceparent
FROM approved_action_dispatch_executions AS e
JOIN approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
-- The window's last key is due by `:now_ms` (its key after every row, too), so it is the
-- read's one upper bound: with a second one SQLite would bound the index by that one.
WHERE e.eligible_at_ms IS NOT NULL AND (e.eligible_at_ms, e.dispatch_id) <= {due_window}
  AND (e.target IS NULL OR NOT EXISTS (
      SELECT 1 FROM approved_action_dispatch_executions AS b
      WHERE b.target = e.target AND b.status IN ('leased', 'executing')
        AND b.dispatch_id <> e.dispatch_id
        -- A proceeding row holds only while its lease lives (migration 0040).
        AND (b.status = 'leased' OR b.proceed_on_unknown = 0
             OR b.lease_expires_at_ms
                > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))))
  -- The actions a passage has just taken a full page of wait for the next claim (decision
  -- 0055); an empty list skips nothing.
  AND d.action_type NOT IN (SELECT value FROM json_each(:skip_action_types))
  -- A row past its window waits for the reconcile pass to end it (migration 0035).
  AND (e.not_after_ms IS NULL OR e.not_after_ms > :now_ms)
  -- A dispatch a freeze covers waits, unless lifted for it (migration 0035); the probe
  -- reads the freezes in force only (a partial index, empty but during a freeze), on the
  -- database's clock as the trigger does: this transaction holds the file's one write lock, so
  -- no freeze begins between this read and the lease but by the clock's microseconds.
  AND NOT EXISTS (
      SELECT 1 FROM freezes AS f
      WHERE f.ended_at_ms IS NULL
        AND f.until_ms > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
        AND f.from_ms <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
        AND (f.action_type IS NULL OR f.action_type = d.action_type)
        AND (f.project_id IS NULL OR f.project_id = d.project_id)
        AND (f.target_prefix IS NULL OR substr(d.target, 1, length(f.target_prefix)) = f.target_prefix)
        AND NOT EXISTS (SELECT 1 FROM freeze_lifts AS l
                        WHERE l.dispatch_id = e.dispatch_id AND l.freeze_id = f.freeze_id))
ORDER BY e.eligible_at_ms, e.dispatch_id
LIMIT :limit

-- select_execution --
SELECT {execution_columns},
       d.approval_request_id, d.action_type, d.action_ref, d.action_digest, d.approved_by,
       d.created_at_ms AS dispatch_created_at_ms, d.target,
       d.traceparent
FROM approved_action_dispatch_executions AS e
JOIN approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
WHERE e.dispatch_id = :dispatch_id

-- lock_execution --
-- BEGIN IMMEDIATE already holds the database's one write lock: the plain read is the locked one.
{select_execution}

-- lease_page --
-- The fenced claim of a page, one statement: each JSON element {dispatch_id, version, token}
-- leases its row only at the version the claim observed. The unary `+` keeps the planner off
-- the status and due indexes, so each element is one primary-key probe (as in start_page).
-- The trigger writes each ledger line; RETURNING names the rows that took, so a lease is
-- reported, never assumed.
UPDATE approved_action_dispatch_executions AS e
SET status = 'leased', version = e.version + 1,
    attempt = e.attempt + (CASE WHEN e.status = 'leased' THEN 0 ELSE 1 END),
    takeovers = e.takeovers + (CASE WHEN e.status = 'leased' THEN 1 ELSE 0 END),
    lease_owner = :owner, lease_token = k.value ->> 'token', lease_expires_at_ms = :expires_at_ms,
    eligible_at_ms = :expires_at_ms, retry_at_ms = NULL, started_at_ms = NULL,
    updated_at_ms = :now_ms
FROM json_each(:page) AS k
WHERE e.dispatch_id = k.value ->> 'dispatch_id' AND e.version = k.value ->> 'version'
  AND +e.status IN ('pending', 'leased', 'retry_wait') AND +e.eligible_at_ms <= :now_ms
  AND CASE WHEN e.status = 'leased' THEN e.takeovers < 4 * e.max_attempts
           ELSE e.attempt < e.max_attempts END
  AND (e.target IS NULL OR NOT EXISTS (
      SELECT 1 FROM approved_action_dispatch_executions AS b
      WHERE b.target = e.target AND b.status IN ('leased', 'executing')
        AND b.dispatch_id <> e.dispatch_id
        -- A proceeding row holds only while its lease lives (migration 0040).
        AND (b.status = 'leased' OR b.proceed_on_unknown = 0
             OR b.lease_expires_at_ms
                > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))))
  -- Within the window on the database's clock, a second short of its end so the trigger
  -- (QLW01) never undoes the page (migration 0035); a row without one tests two NULLs.
  AND CASE WHEN e.not_before_ms IS NULL AND e.not_after_ms IS NULL THEN true
           ELSE CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) BETWEEN coalesce(e.not_before_ms, 0)
                AND coalesce(e.not_after_ms, 9007199254740991) - 1000 END
RETURNING dispatch_id, version, attempt

-- exhaust_row --
UPDATE approved_action_dispatch_executions
SET status = 'blocked', version = version + 1, eligible_at_ms = NULL, retry_at_ms = NULL,
    result_code = :result_code, completed_at_ms = :now_ms, updated_at_ms = :now_ms
WHERE dispatch_id = :dispatch_id AND version = :version
  AND status IN ('pending', 'leased', 'retry_wait') AND eligible_at_ms <= :now_ms
  AND CASE WHEN status = 'leased' THEN takeovers >= 4 * max_attempts
           ELSE attempt >= max_attempts END
RETURNING version, attempt

-- renew_lease --
UPDATE approved_action_dispatch_executions
SET lease_expires_at_ms = :expires_at_ms,
    eligible_at_ms = CASE WHEN status = 'leased' THEN :expires_at_ms ELSE NULL END,
    version = version + 1, updated_at_ms = :now_ms
WHERE dispatch_id = :dispatch_id AND version = :version
  AND lease_owner = :owner AND lease_token = :token AND attempt = :attempt
  AND status IN ('leased', 'executing') AND lease_expires_at_ms > :now_ms
RETURNING version, lease_expires_at_ms

-- start_row --
-- The barrier grants a fresh lease (never a shorter one): an item that waited in its page
-- starts with a whole lease ahead of its execute, not with what the wait left of it.
-- The fence and the binding (the approval and action digest the dispatch was created for) in
-- the update itself: no row back and the caller diagnoses with `lock_execution`.
UPDATE approved_action_dispatch_executions AS e
SET status = 'executing', started_at_ms = :now_ms, eligible_at_ms = NULL,
    lease_expires_at_ms = max(e.lease_expires_at_ms, :expires_at_ms),
    version = e.version + 1, updated_at_ms = :now_ms
FROM approved_action_dispatches AS d
WHERE e.dispatch_id = :dispatch_id AND d.dispatch_id = e.dispatch_id
  AND d.approval_request_id = :approval_request_id AND d.action_digest = :action_digest
  AND e.version = :version AND e.lease_owner = :owner AND e.lease_token = :token
  AND e.attempt = :attempt AND e.status = 'leased' AND e.lease_expires_at_ms > :now_ms
RETURNING version, lease_expires_at_ms

-- start_fast --
-- PostgreSQL's one-statement start barrier: a data-modifying CTE writes `start_row` and its
-- ledger event together. SQLite has no data-modifying CTE and no round trip to save: its
-- barrier is the shared transaction (`start_row`, then `insert_event`), one hop. The name
-- stays so both files name the same blocks; nothing runs this one. It matches no row, and it
-- names the parameters of PostgreSQL's block, because the two files bind the same names.
SELECT NULL AS version, NULL AS lease_expires_at_ms
WHERE 0 AND coalesce(:dispatch_id, :approval_request_id, :action_digest, :version, :owner,
                     :token, :attempt, :now_ms, :expires_at_ms) IS NOT NULL

-- release_row --
UPDATE approved_action_dispatch_executions
SET status = :to_status, eligible_at_ms = :eligible_at_ms, retry_at_ms = :retry_at_ms,
    attempt = attempt - :refund, result_mutation_id = :mutation_id,
    result_code = :result_code, completed_at_ms = :completed_at_ms,
    version = version + 1, updated_at_ms = :now_ms
WHERE dispatch_id = :dispatch_id AND version = :version
  AND lease_owner = :owner AND lease_token = :token AND attempt = :attempt
  AND status = 'leased'
RETURNING version, attempt

-- complete_row --
UPDATE approved_action_dispatch_executions
SET status = :to_status, result_mutation_id = :mutation_id, result_code = :result_code,
    result_receipt_json = :receipt_json, result_receipt_digest = :receipt_digest,
    completed_at_ms = :now_ms, version = version + 1, updated_at_ms = :now_ms
WHERE dispatch_id = :dispatch_id AND status = 'executing'
  AND lease_owner = :owner AND lease_token = :token AND attempt = :attempt
  AND started_at_ms = :started_at_ms AND version >= :version
RETURNING version, attempt

-- select_event_by_mutation --
SELECT dispatch_id, version, from_status, to_status, attempt, lease_owner, lease_token,
       mutation_id, result_code, committed_at_ms
FROM execution_events
WHERE dispatch_id = :dispatch_id AND mutation_id = :mutation_id

-- select_events --
SELECT dispatch_id, version, from_status, to_status, attempt, lease_owner, lease_token,
       mutation_id, result_code, committed_at_ms
FROM execution_events
WHERE dispatch_id = :dispatch_id
ORDER BY version

-- select_dispatch --
SELECT dispatch_id, approval_request_id, project_id, action_type, action_ref, action_digest,
       approved_by, created_at_ms
FROM approved_action_dispatches
WHERE dispatch_id = :dispatch_id

-- wake_handler_waits --
-- A daemon's start: the handler waits of the action types it has become due now. Only the due
-- time moves back (the trigger admits nothing else); no ledger line, as for a renew.
UPDATE approved_action_dispatch_executions
SET eligible_at_ms = :now_ms, version = version + 1, updated_at_ms = :now_ms
WHERE status = 'pending' AND result_code = 'handler_missing' AND eligible_at_ms > :now_ms
  AND dispatch_id IN (
      SELECT d.dispatch_id FROM approved_action_dispatches AS d
      WHERE d.action_type IN (SELECT value FROM json_each(:action_types)))
RETURNING dispatch_id
