-- Reserved: migration 0027 is written on another branch in parallel; this placeholder keeps the
-- numbers contiguous and is dropped when the branches merge (a no-op statement: the
-- PostgreSQL driver cannot run a file of comments only).
SELECT 1;
