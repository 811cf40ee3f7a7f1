-- The index of `approval list` (docs/cli.md): the waiting requests, newest first, one keyset
-- page at a time. (A whole plan is read here by the file's owner, the authority on edge:
-- `dispatch show ID --plan` writes its `plan.read` audit row in the read's own transaction;
-- PostgreSQL's migration 0014 adds the plan reader role and its definer function.)

CREATE INDEX approval_requests_waiting
    ON approval_requests (created_at_ms DESC, approval_request_id DESC)
    WHERE status = 'pending';
