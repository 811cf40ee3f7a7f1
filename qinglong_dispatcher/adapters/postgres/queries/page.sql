-- PostgreSQL statements: the page transaction of transactional actions (`adapters/sql/page.py`).
-- Each binds the items' values as one JSON array (jsonb_to_recordset: one round trip for the
-- page); run.create's rows of a page are its own (`actions/run_create/queries/postgres.sql`).

-- start_page --
-- `start_row` for a page: every item's fence and binding in the update itself; RETURNING
-- names the rows that started, and any other item takes the per-item path.
UPDATE qinglong.approved_action_dispatch_executions AS e
SET status = 'executing', started_at_ms = :now_ms::bigint, eligible_at_ms = NULL,
    lease_expires_at_ms = greatest(e.lease_expires_at_ms, k.expires_at_ms),
    version = e.version + 1, updated_at_ms = :now_ms::bigint, lease_proof = k.proof
FROM jsonb_to_recordset(:page::jsonb) AS k (
         dispatch_id text, approval_request_id text, action_digest text, version bigint,
         owner text, token text, proof text, attempt integer, expires_at_ms bigint),
     qinglong.approved_action_dispatches AS d
WHERE e.dispatch_id = k.dispatch_id AND d.dispatch_id = e.dispatch_id
  AND d.approval_request_id = k.approval_request_id AND d.action_digest = k.action_digest
  AND e.version = k.version AND e.lease_owner = k.owner AND e.lease_token = k.token
  AND e.attempt = k.attempt AND e.status = 'leased' AND e.lease_expires_at_ms > :now_ms::bigint
RETURNING e.dispatch_id, e.version, e.lease_expires_at_ms

-- complete_page --
-- `complete_row` for the items this transaction started, with `create_run_fast`'s extra
-- condition (the project): RETURNING names the rows it completed.
UPDATE qinglong.approved_action_dispatch_executions AS e
SET status = 'succeeded', result_mutation_id = k.mutation_id,
    result_code = :result_code::text, completed_at_ms = :now_ms::bigint,
    version = e.version + 1, updated_at_ms = :now_ms::bigint, lease_proof = k.proof
FROM jsonb_to_recordset(:page::jsonb) AS k (
    dispatch_id text, project_id text, owner text, token text, proof text, attempt integer,
    version bigint, mutation_id text)
WHERE e.dispatch_id = k.dispatch_id AND e.status = 'executing'
  AND e.project_id = k.project_id AND e.lease_owner = k.owner AND e.lease_token = k.token
  AND e.attempt = k.attempt AND e.started_at_ms = :now_ms::bigint AND e.version = k.version
RETURNING e.dispatch_id, e.version
