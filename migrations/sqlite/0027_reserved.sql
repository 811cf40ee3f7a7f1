-- Reserved: migration 0027 is written on another branch; this placeholder keeps the chain
-- contiguous until the two are merged (drop it then). A statement that does nothing: the
-- PostgreSQL driver refuses a file of comments only.
SELECT 1;
