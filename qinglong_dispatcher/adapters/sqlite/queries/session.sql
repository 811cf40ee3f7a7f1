-- SQLite statements: the database clock and the savepoints of a transaction.

-- database_now --
SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) AS now_ms

-- savepoint --
-- One item (or the whole page) of the page transaction, undone alone when it fails.
SAVEPOINT page_part

-- rollback_to_savepoint --
ROLLBACK TO SAVEPOINT page_part

-- release_savepoint --
RELEASE SAVEPOINT page_part
