-- Named statements the benchmark uses on a scratch PostgreSQL database (the SQLite file has
-- the same names).

-- create_counter --
CREATE TABLE IF NOT EXISTS qinglong.bench_counter (id integer PRIMARY KEY, n bigint NOT NULL)

-- seed_counter --
INSERT INTO qinglong.bench_counter (id, n) VALUES (1, 0) ON CONFLICT (id) DO NOTHING

-- bump_counter --
UPDATE qinglong.bench_counter SET n = n + 1 WHERE id = 1

-- seed_terminal_dispatches --
-- Terminal rows only: they must never be read by the due scan, whatever their number.
INSERT INTO qinglong.approved_action_dispatches (
    dispatch_id, approval_request_id, project_id, action_type, action_ref, action_digest,
    approved_by, created_at_ms
)
SELECT 'scan-' || i, 'scan-approval-' || i, 'bench', 'run.create', 'scan-' || i,
       repeat('0', 64), 'bench', $2
FROM generate_series(1, $1::bigint) AS i

-- seed_terminal_executions --
INSERT INTO qinglong.approved_action_dispatch_executions (
    dispatch_id, project_id, status, version, attempt, max_attempts, eligible_at_ms,
    lease_owner, lease_token, lease_expires_at_ms, started_at_ms, result_code,
    completed_at_ms, created_at_ms, updated_at_ms
)
SELECT dispatch_id, 'bench', 'succeeded', 3, 1, 5, NULL, 'bench', 'bench', $1, $1,
       'seeded', $1, $1, $1
FROM qinglong.approved_action_dispatches WHERE dispatch_id LIKE 'scan-%'

-- write_policy --
-- The owner's policy for the bench's action (the policy phase): $1 approvals, any approver.
INSERT INTO qinglong.approval_policies (name, version, action_type, approvals_required)
VALUES ('bench', 1, 'run.create', $1::integer)

-- principal_roles --
-- The principals' roles of a scratch installation ($1: its `<name>_p_%` pattern).
SELECT rolname FROM pg_catalog.pg_roles WHERE rolname LIKE $1 ORDER BY rolname
