-- Reserved for a migration being written in parallel; this placeholder is dropped at merge.
-- A statement that does nothing: asyncpg refuses a script of comments alone.
SELECT 1;
