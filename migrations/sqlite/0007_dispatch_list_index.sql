-- `dispatch list` pages newest first by (created_at_ms, dispatch_id): without this index each
-- page scanned and sorted the whole dispatches table (about 250 ms a page at 200,000
-- dispatches on SQLite, 0.3 ms with it). Dispatch ids begin with their creation time, so each
-- submit adds its entry at the right edge.
CREATE INDEX approved_action_dispatches_created
    ON approved_action_dispatches (created_at_ms, dispatch_id);
