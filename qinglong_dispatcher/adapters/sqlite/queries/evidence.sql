-- SQLite statements: what the daemon knew when it lost track of an effect (migration 0029).

-- insert_uncertain_outcome --
-- The table's trigger refuses a row that names no started row of this attempt and owner (the
-- proof is PostgreSQL's); a replay of the same dispatch writes nothing.
INSERT INTO uncertain_outcomes (
    dispatch_id, execution_attempt, lease_owner, result_code, evidence_json, recorded_at_ms
) VALUES (
    :dispatch_id, :attempt, :owner, :result_code, :evidence_json,
    CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
)
ON CONFLICT (dispatch_id) DO NOTHING

-- select_uncertain_outcome --
SELECT dispatch_id, execution_attempt, lease_owner, result_code, evidence_json, recorded_at_ms
FROM uncertain_outcomes
WHERE dispatch_id = :dispatch_id
