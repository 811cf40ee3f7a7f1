-- `dispatch list` pages newest first by (created_at_ms, dispatch_id): without this index each
-- page scanned and sorted the whole dispatches table. Dispatch ids begin with their creation
-- time, so each submit adds its entry at the right edge.
CREATE INDEX approved_action_dispatches_created
    ON qinglong.approved_action_dispatches (created_at_ms, dispatch_id);
