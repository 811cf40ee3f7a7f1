-- Named statements the benchmark reads a scratch database's server-side counters with: what a
-- dispatch costs the server (WAL, rows and blocks per table, trigger time, statements).

-- other_backends --
SELECT count(*) AS n FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()

-- wal --
SELECT pg_current_wal_lsn() - '0/0'::pg_lsn AS lsn_bytes, w.wal_records, w.wal_fpi
FROM pg_stat_wal AS w

-- database --
SELECT xact_commit, xact_rollback, blks_hit, blks_read
FROM pg_stat_database WHERE datname = current_database()

-- tables --
SELECT t.relname, t.n_tup_ins, t.n_tup_upd, t.n_tup_hot_upd, t.n_tup_del,
       coalesce(io.heap_blks_hit, 0) + coalesce(io.heap_blks_read, 0) AS heap_blks,
       coalesce(io.idx_blks_hit, 0) + coalesce(io.idx_blks_read, 0) AS idx_blks
FROM pg_stat_user_tables AS t
JOIN pg_statio_user_tables AS io USING (relid)
WHERE t.schemaname = 'qinglong'

-- functions --
SELECT funcname, calls, total_time, self_time
FROM pg_stat_user_functions WHERE schemaname = 'qinglong'

-- statements_preloaded --
SELECT 'pg_stat_statements' = ANY (
    string_to_array(replace(current_setting('shared_preload_libraries'), ' ', ''), ',')
) AS preloaded

-- create_statements --
CREATE EXTENSION IF NOT EXISTS pg_stat_statements

-- statements --
SELECT s.userid, s.queryid, s.toplevel,
       left(regexp_replace(s.query, '\s+', ' ', 'g'), 100) AS query,
       s.calls, s.total_exec_time, s.rows, s.wal_bytes
FROM pg_stat_statements AS s
WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
