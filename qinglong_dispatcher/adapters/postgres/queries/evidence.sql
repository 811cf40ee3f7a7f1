-- PostgreSQL statements: what the daemon knew when it lost track of an effect (migration 0029).

-- insert_uncertain_outcome --
-- The holder's proof is checked and cleared by the table's trigger, which also sets the time
-- from the database clock; a replay of the same dispatch writes nothing.
INSERT INTO qinglong.uncertain_outcomes (
    dispatch_id, execution_attempt, lease_owner, result_code, evidence_json, recorded_at_ms,
    lease_proof
) VALUES (
    :dispatch_id::text, :attempt::integer, :owner::text, :result_code::text,
    :evidence_json::text, 0, :proof::text
)
ON CONFLICT (dispatch_id) DO NOTHING

-- select_uncertain_outcome --
SELECT dispatch_id, execution_attempt, lease_owner, result_code, evidence_json, recorded_at_ms
FROM qinglong.uncertain_outcomes
WHERE dispatch_id = :dispatch_id::text
