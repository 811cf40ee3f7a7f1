-- PostgreSQL statements: the database clock and the savepoints of a transaction.

-- database_now --
-- The server's wall clock now (clock_timestamp, not the transaction's start): the skew guard.
SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms

-- savepoint --
-- One item (or the whole page) of the page transaction, undone alone when it fails.
SAVEPOINT page_part

-- rollback_to_savepoint --
ROLLBACK TO SAVEPOINT page_part

-- release_savepoint --
RELEASE SAVEPOINT page_part
