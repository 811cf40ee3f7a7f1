-- Reserved: this number belongs to a migration written in parallel; this placeholder is
-- dropped when the branches merge. (A statement that does nothing: PostgreSQL's driver refuses
-- a script of comments only.)
SELECT 1;
