-- Named statements the benchmark uses on a scratch SQLite store (the PostgreSQL file has the
-- same names).

-- create_counter --
CREATE TABLE IF NOT EXISTS bench_counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL) STRICT

-- seed_counter --
INSERT OR IGNORE INTO bench_counter (id, n) VALUES (1, 0)

-- bump_counter --
UPDATE bench_counter SET n = n + 1 WHERE id = 1

-- seed_terminal_dispatches --
-- Terminal rows only: they must never be read by the due scan, whatever their number.
WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < :rows)
INSERT INTO approved_action_dispatches (
    dispatch_id, approval_request_id, project_id, action_type, action_ref, action_digest,
    approved_by, created_at_ms
)
SELECT 'scan-' || i, 'scan-approval-' || i, 'bench', 'run.create', 'scan-' || i,
       '0000000000000000000000000000000000000000000000000000000000000000', 'bench', :now_ms
FROM seq

-- seed_terminal_executions --
INSERT INTO approved_action_dispatch_executions (
    dispatch_id, project_id, status, version, attempt, max_attempts, eligible_at_ms,
    lease_owner, lease_token, lease_expires_at_ms, started_at_ms, result_code,
    completed_at_ms, created_at_ms, updated_at_ms
)
SELECT dispatch_id, 'bench', 'succeeded', 3, 1, 5, NULL, 'bench', 'bench', :now_ms, :now_ms,
       'seeded', :now_ms, :now_ms, :now_ms
FROM approved_action_dispatches WHERE dispatch_id LIKE 'scan-%'

-- write_policy --
-- The owner's policy for the bench's action (the policy phase): :approvals approvals, any
-- approver.
INSERT INTO approval_policies (name, version, action_type, approvals_required, written_by)
VALUES ('bench', 1, 'run.create', :approvals, 'bench')

-- principal_roles --
-- PostgreSQL's principals' roles of a scratch installation: a SQLite file has none.
SELECT NULL AS rolname WHERE 0
