-- PostgreSQL statements: claims, leases, the start barrier, releases and completions of execution rows.

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
FROM qinglong.approved_action_dispatch_executions AS e
JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
WHERE e.eligible_at_ms IS NOT NULL AND e.eligible_at_ms <= :now_ms::bigint
  AND (e.eligible_at_ms, e.dispatch_id) > (:after_eligible_at_ms::bigint, :after_dispatch_id::text)
ORDER BY e.eligible_at_ms, e.dispatch_id
LIMIT :limit::bigint

-- page_plans --
-- A page transaction (the claim's, a passage's) reads its page in the due index's order and
-- writes each row of it through its primary key, whatever the statistics say: no sort, no
-- bitmap scan, no hash or merge join, no materialised rescan for the rest of the transaction.
-- Right after a burst of submits the statistics still count few due rows, and the planner
-- would read every due row, join and sort them, or read every waiting row (or every dispatch,
-- for the claim's window) once to join the page to, for each page: a page's cost would grow
-- with the backlog or the history (docs/performance.md, "Pages read in index order and
-- written by key").
SELECT pg_catalog.set_config('enable_sort', 'off', true),
       pg_catalog.set_config('enable_bitmapscan', 'off', true),
       pg_catalog.set_config('enable_hashjoin', 'off', true),
       pg_catalog.set_config('enable_mergejoin', 'off', true),
       pg_catalog.set_config('enable_material', 'off', true)

-- due_window --
-- The next `:ahead` due rows (every due row when `:ahead` is 0), in the due index's order:
-- what a claim that skips the actions of full passages looks among (decision 0060). The read
-- that joins it takes its rows one at a time and stops once its page is full, so the window
-- costs the rows it gave, and at most `:ahead` whatever else is due before them. The read
-- joins each row again by its tuple id (`ctid`, the row version this statement's snapshot
-- saw; no index descent), since only a table, not a subquery, is locked.
(SELECT a.eligible_at_ms, a.dispatch_id, a.ctid
 FROM qinglong.approved_action_dispatch_executions AS a
 WHERE a.eligible_at_ms IS NOT NULL AND a.eligible_at_ms <= :now_ms::bigint
 ORDER BY a.eligible_at_ms, a.dispatch_id
 LIMIT NULLIF(:ahead::bigint, 0)) AS w

-- claim_due_rows --
-- The due observation of `claim_due` locks what it sees, and skips (never waits for) the
-- rows another replica holds: their claims are that replica's.
-- A row whose target another row holds past its claim (busy, or held: recovery_required) is
-- not observed, so its claim spends nothing; the probe is one read of the partial unique
-- index, and a row without a target never makes it. A row with a target also takes the
-- target's transaction lock, or is skipped like a locked row: two replicas never lease two
-- rows of one target in transactions that cannot see each other (the index would refuse the
-- second, 23505, undoing its whole page). CASE keeps the order: no probe, no lock, for a row
-- without a target; no lock for a busy one.
-- While it skips the actions of full passages it looks among the next `:ahead` due rows only
-- (`due_window`): behind a backlog of those actions its cost is that window's, not the
-- backlog's (decision 0060). Each row of the window is read again by its tuple id, the
-- version the window saw; its due time is asked again, inside CASE where no index can serve
-- it, so that a row another replica leased meanwhile is checked again in its newest version
-- when it is locked.
SELECT {execution_columns},
       d.approval_request_id, d.action_type, d.action_ref, d.action_digest, d.approved_by,
       d.created_at_ms AS dispatch_created_at_ms, d.target,
       d.traceparent
FROM {due_window}
JOIN qinglong.approved_action_dispatch_executions AS e ON e.ctid = w.ctid
JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
WHERE CASE WHEN e.eligible_at_ms <= :now_ms::bigint THEN true ELSE false END
  AND CASE WHEN e.target IS NULL THEN true
           WHEN EXISTS (SELECT 1 FROM qinglong.approved_action_dispatch_executions AS b
                        WHERE b.target = e.target AND b.status IN ('leased', 'executing')
                          AND b.dispatch_id <> e.dispatch_id
                          -- A proceeding row holds only while its lease lives (0040).
                          AND (b.status = 'leased' OR NOT b.proceed_on_unknown
                               OR b.lease_expires_at_ms > (SELECT qinglong.db_now_ms())))
                THEN false
           ELSE pg_catalog.pg_try_advisory_xact_lock(1903326210, pg_catalog.hashtext(e.target))
      END
  -- The actions a passage has just taken a full page of wait for the next claim (decision
  -- 0055); an empty list skips nothing.
  AND d.action_type NOT IN (SELECT jsonb_array_elements_text(:skip_action_types::jsonb))
  -- A row past its window waits for the reconcile pass to end it (migration 0035).
  AND (e.not_after_ms IS NULL OR e.not_after_ms > :now_ms::bigint)
  -- A dispatch a freeze covers waits, unless lifted for it (migration 0035); the probe
  -- reads the freezes in force only (a partial index, empty but during a freeze).
  AND NOT EXISTS (
      SELECT 1 FROM qinglong.freezes AS f
      WHERE f.ended_at_ms IS NULL AND f.until_ms > :now_ms::bigint AND f.from_ms <= :now_ms::bigint
        AND (f.action_type IS NULL OR f.action_type = d.action_type)
        AND (f.project_id IS NULL OR f.project_id = d.project_id)
        AND (f.target_prefix IS NULL OR pg_catalog.starts_with(d.target, f.target_prefix))
        AND NOT EXISTS (SELECT 1 FROM qinglong.freeze_lifts AS l
                        WHERE l.dispatch_id = e.dispatch_id AND l.freeze_id = f.freeze_id))
ORDER BY w.eligible_at_ms, w.dispatch_id
LIMIT :limit::bigint
FOR UPDATE OF e SKIP LOCKED

-- select_execution --
SELECT {execution_columns},
       d.approval_request_id, d.action_type, d.action_ref, d.action_digest, d.approved_by,
       d.created_at_ms AS dispatch_created_at_ms, d.target,
       d.traceparent
FROM qinglong.approved_action_dispatch_executions AS e
JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
WHERE e.dispatch_id = :dispatch_id

-- lock_execution --
-- The same read under a row lock, so a fencing decision and its update see one row.
{select_execution}
FOR UPDATE OF e

-- lease_page --
-- The fenced claim of a page, one statement: each JSON element {dispatch_id, version, token,
-- proof} leases its row only at the version the claim observed (the rows are already locked
-- by claim_due_rows), and a live lease only once the database's clock also says it expired
-- (the trigger would refuse it: QLF02). The trigger keeps the proof's digest and writes the
-- ledger line; RETURNING names the rows that took, so a lease is reported, never assumed.
UPDATE qinglong.approved_action_dispatch_executions AS e
SET status = 'leased', version = e.version + 1,
    attempt = e.attempt + (CASE WHEN e.status = 'leased' THEN 0 ELSE 1 END),
    takeovers = e.takeovers + (CASE WHEN e.status = 'leased' THEN 1 ELSE 0 END),
    lease_owner = :owner::text, lease_token = k.token, lease_proof = k.proof,
    lease_expires_at_ms = :expires_at_ms::bigint, eligible_at_ms = :expires_at_ms::bigint,
    retry_at_ms = NULL, started_at_ms = NULL, updated_at_ms = :now_ms::bigint
FROM jsonb_to_recordset(:page::jsonb) AS k (dispatch_id text, version bigint, token text,
                                            proof text)
WHERE e.dispatch_id = k.dispatch_id AND e.version = k.version
  -- Due, and within its budget; a live lease only once it expired on the database's clock too.
  -- Inside CASE, no index but the primary key can serve these conditions (`page_plans`).
  AND CASE WHEN e.eligible_at_ms IS NULL OR e.eligible_at_ms > :now_ms::bigint THEN false
           WHEN e.status = 'leased' THEN e.takeovers < 4 * e.max_attempts
                                         AND e.lease_expires_at_ms <= qinglong.db_now_ms()
           WHEN e.status IN ('pending', 'retry_wait') THEN e.attempt < e.max_attempts
           ELSE false END
  AND (e.target IS NULL OR NOT EXISTS (
      SELECT 1 FROM qinglong.approved_action_dispatch_executions AS b
      WHERE b.target = e.target AND b.status IN ('leased', 'executing')
        AND b.dispatch_id <> e.dispatch_id
        AND (b.status = 'leased' OR NOT b.proceed_on_unknown
             OR b.lease_expires_at_ms > (SELECT qinglong.db_now_ms()))))
  -- Within the window on the database's clock, a second short of its end so the trigger
  -- (QLW01) never undoes the page (migration 0035); a row without one tests two NULLs.
  AND CASE WHEN e.not_before_ms IS NULL AND e.not_after_ms IS NULL THEN true
           ELSE qinglong.db_now_ms() BETWEEN coalesce(e.not_before_ms, 0)
                AND coalesce(e.not_after_ms, 9007199254740991) - 1000 END
  -- And on the database's clock (the trigger's, QLZ01): a freeze that began since is kept.
  AND NOT EXISTS (
      SELECT 1 FROM qinglong.freezes AS f
      JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
      WHERE f.ended_at_ms IS NULL AND f.until_ms > (SELECT qinglong.db_now_ms()) AND f.from_ms <= (SELECT qinglong.db_now_ms())
        AND (f.action_type IS NULL OR f.action_type = d.action_type)
        AND (f.project_id IS NULL OR f.project_id = d.project_id)
        AND (f.target_prefix IS NULL OR pg_catalog.starts_with(d.target, f.target_prefix))
        AND NOT EXISTS (SELECT 1 FROM qinglong.freeze_lifts AS l
                        WHERE l.dispatch_id = e.dispatch_id AND l.freeze_id = f.freeze_id))
RETURNING e.dispatch_id, e.version, e.attempt

-- exhaust_row --
-- An expired lease of another holder needs no proof here: the budget is spent (QLF01 else).
UPDATE qinglong.approved_action_dispatch_executions
SET status = 'blocked', version = version + 1, lease_proof = :proof, eligible_at_ms = NULL, retry_at_ms = NULL,
    result_code = :result_code, completed_at_ms = :now_ms::bigint,
    updated_at_ms = :now_ms::bigint
WHERE dispatch_id = :dispatch_id AND version = :version
  AND status IN ('pending', 'leased', 'retry_wait') AND eligible_at_ms <= :now_ms::bigint
  AND CASE WHEN status = 'leased' THEN takeovers >= 4 * max_attempts
           ELSE attempt >= max_attempts END
  AND (status <> 'leased' OR lease_expires_at_ms <= qinglong.db_now_ms())
RETURNING version, attempt

-- renew_lease --
UPDATE qinglong.approved_action_dispatch_executions
SET lease_expires_at_ms = :expires_at_ms::bigint,
    eligible_at_ms = CASE WHEN status = 'leased' THEN :expires_at_ms::bigint ELSE NULL END,
    version = version + 1, updated_at_ms = :now_ms::bigint, lease_proof = :proof
WHERE dispatch_id = :dispatch_id AND version = :version
  AND lease_owner = :owner AND lease_token = :token AND attempt = :attempt
  AND status IN ('leased', 'executing') AND lease_expires_at_ms > :now_ms::bigint
RETURNING version, lease_expires_at_ms

-- start_row --
-- The barrier grants a fresh lease (never a shorter one): an item that waited in its page
-- starts with a whole lease ahead of its execute, not with what the wait left of it.
-- The fence and the binding (the approval and action digest the dispatch was created for) in
-- the update itself: no row back and the caller diagnoses with `lock_execution`.
UPDATE qinglong.approved_action_dispatch_executions AS e
SET status = 'executing', started_at_ms = :now_ms::bigint, eligible_at_ms = NULL,
    lease_expires_at_ms = greatest(e.lease_expires_at_ms, :expires_at_ms::bigint),
    version = e.version + 1, updated_at_ms = :now_ms::bigint, lease_proof = :proof::text
FROM qinglong.approved_action_dispatches AS d
WHERE e.dispatch_id = :dispatch_id::text AND d.dispatch_id = e.dispatch_id
  AND d.approval_request_id = :approval_request_id::text
  AND d.action_digest = :action_digest::text
  AND e.version = :version::bigint AND e.lease_owner = :owner::text
  AND e.lease_token = :token::text AND e.attempt = :attempt::integer
  AND e.status = 'leased' AND e.lease_expires_at_ms > :now_ms::bigint
RETURNING e.dispatch_id, e.version, e.attempt, e.lease_owner, e.lease_token,
          e.lease_expires_at_ms

-- start_fast --
-- The start barrier's happy path as ONE statement (one round trip, its own transaction):
-- `start_row`, whose ledger line the trigger writes. No row back means "not the happy path":
-- the store then runs the shared transaction (`start_row`, diagnosed with `lock_execution`).
WITH started AS (
    {start_row}
)
SELECT version, lease_expires_at_ms FROM started

-- release_row --
UPDATE qinglong.approved_action_dispatch_executions
SET status = :to_status, eligible_at_ms = :eligible_at_ms::bigint,
    retry_at_ms = :retry_at_ms::bigint, attempt = attempt - :refund::integer,
    result_mutation_id = :mutation_id, result_code = :result_code,
    completed_at_ms = :completed_at_ms::bigint, version = version + 1,
    updated_at_ms = :now_ms::bigint, lease_proof = :proof
WHERE dispatch_id = :dispatch_id AND version = :version
  AND lease_owner = :owner AND lease_token = :token AND attempt = :attempt
  AND status = 'leased'
RETURNING version, attempt

-- complete_row --
UPDATE qinglong.approved_action_dispatch_executions
SET status = :to_status, result_mutation_id = :mutation_id, result_code = :result_code,
    result_receipt_json = :receipt_json, result_receipt_digest = :receipt_digest,
    completed_at_ms = :now_ms::bigint, version = version + 1, updated_at_ms = :now_ms::bigint,
    lease_proof = :proof
WHERE dispatch_id = :dispatch_id AND status = 'executing'
  AND lease_owner = :owner AND lease_token = :token AND attempt = :attempt
  AND started_at_ms = :started_at_ms AND version >= :version
RETURNING version, attempt

-- select_event_by_mutation --
SELECT dispatch_id, version, from_status, to_status, attempt, lease_owner, lease_token,
       mutation_id, result_code, committed_at_ms
FROM qinglong.execution_events
WHERE dispatch_id = :dispatch_id AND mutation_id = :mutation_id

-- select_events --
SELECT dispatch_id, version, from_status, to_status, attempt, lease_owner, lease_token,
       mutation_id, result_code, committed_at_ms
FROM qinglong.execution_events
WHERE dispatch_id = :dispatch_id
ORDER BY version

-- select_dispatch --
SELECT dispatch_id, approval_request_id, project_id, action_type, action_ref, action_digest,
       approved_by, created_at_ms
FROM qinglong.approved_action_dispatches
WHERE dispatch_id = :dispatch_id

-- wake_handler_waits --
-- A daemon's start: the handler waits of the action types it has become due now. Only the due
-- time moves back (the trigger admits nothing else); no ledger line, as for a renew.
UPDATE qinglong.approved_action_dispatch_executions AS e
SET eligible_at_ms = :now_ms::bigint, version = e.version + 1, updated_at_ms = :now_ms::bigint
FROM qinglong.approved_action_dispatches AS d
WHERE d.dispatch_id = e.dispatch_id
  AND e.status = 'pending' AND e.result_code = 'handler_missing'
  AND e.eligible_at_ms > :now_ms::bigint
  AND d.action_type IN (SELECT pg_catalog.jsonb_array_elements_text(:action_types::jsonb))
RETURNING e.dispatch_id
