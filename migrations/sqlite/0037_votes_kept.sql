-- A vote is part of how its request was decided, so on the edge file it is deleted only with
-- its request, by a prune (the cascade of `approval_requests`), never on its own: a writer
-- with the file could otherwise delete a deny vote and let the approvals decide alone.
-- PostgreSQL's roles already hold no DELETE on `approval_votes`.

CREATE TRIGGER approval_votes_prune_only BEFORE DELETE ON approval_votes
WHEN NOT EXISTS (
    SELECT 1 FROM prune_permits AS p WHERE p.approval_request_id = OLD.approval_request_id
)
BEGIN SELECT RAISE(ABORT, 'approval_votes: only a prune deletes a vote'); END;
