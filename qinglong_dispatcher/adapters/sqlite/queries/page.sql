-- SQLite statements: the page transaction of transactional actions (`adapters/sql/page.py`).
-- Each binds the items' values as one JSON array, so a page of 64 is a handful of statements;
-- run.create's rows of a page are its own (`actions/run_create/queries/sqlite.sql`).

-- start_page --
-- `start_row` for a page: every item's fence and binding in the update itself; RETURNING
-- names the rows that started, and any other item takes the per-item path.
UPDATE approved_action_dispatch_executions AS e
SET status = 'executing', started_at_ms = :now_ms, eligible_at_ms = NULL,
    lease_expires_at_ms = max(e.lease_expires_at_ms, k.value ->> 'expires_at_ms'),
    version = e.version + 1, updated_at_ms = :now_ms
FROM json_each(:page) AS k, approved_action_dispatches AS d
WHERE e.dispatch_id = k.value ->> 'dispatch_id' AND d.dispatch_id = e.dispatch_id
  AND d.approval_request_id = k.value ->> 'approval_request_id'
  AND d.action_digest = k.value ->> 'action_digest'
  AND e.version = k.value ->> 'version' AND e.lease_owner = k.value ->> 'owner'
  AND e.lease_token = k.value ->> 'token' AND e.attempt = k.value ->> 'attempt'
  AND +e.status = 'leased' AND e.lease_expires_at_ms > :now_ms
RETURNING dispatch_id, version, lease_expires_at_ms

-- complete_page --
-- `complete_row` for the items this transaction started, with `create_run_fast`'s extra
-- condition (the project): RETURNING names the rows it completed.
UPDATE approved_action_dispatch_executions AS e
SET status = 'succeeded', result_mutation_id = k.value ->> 'mutation_id',
    result_code = :result_code, completed_at_ms = :now_ms, version = e.version + 1,
    updated_at_ms = :now_ms
FROM json_each(:page) AS k
WHERE e.dispatch_id = k.value ->> 'dispatch_id' AND +e.status = 'executing'
  AND e.project_id = k.value ->> 'project_id' AND e.lease_owner = k.value ->> 'owner'
  AND e.lease_token = k.value ->> 'token' AND e.attempt = k.value ->> 'attempt'
  AND e.started_at_ms = :now_ms AND e.version = k.value ->> 'version'
RETURNING dispatch_id, version
