-- Nothing changes on PostgreSQL: its roles hold no DELETE on approval_votes (the edge file's
-- trigger of the same number keeps a vote until its request is pruned).
SELECT 1;
