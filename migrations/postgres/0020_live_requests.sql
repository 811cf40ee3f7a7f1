-- Live requests (docs/security.md#one-plan-one-dispatch, docs/operations.md#retention).
--
-- One plan, one dispatch: a plan has at most one request that is pending, approved or
-- consumed, and at most one dispatch, whoever writes the row (unique indexes: a second
-- writer waits for the first and then gets 23505, at any isolation level). A copy of a
-- consumed request inserted past the store would otherwise be approved and consumed into a
-- second dispatch of the same effect. A rejected or expired request leaves the index, so a
-- new request for its plan may follow it.
--
-- A database holding two such requests for one plan was written past the store: building
-- the index then fails (23505) and this migration applies nothing, until the operator has
-- settled them (docs/operations.md#one-request-per-plan).
CREATE UNIQUE INDEX approval_requests_one_live_per_plan
    ON qinglong.approval_requests (project_id, action_ref)
    WHERE status IN ('pending', 'approved', 'consumed');

CREATE UNIQUE INDEX approved_action_dispatches_one_per_plan
    ON qinglong.approved_action_dispatches (project_id, action_ref);

-- The audit of a live subject stays: an audit permit admits an audit row only when its
-- subject, an approval request or a dispatch still stored, finished before the permit's
-- cutoff: a request rejected or expired, or whose lifetime ran out (the database refuses to
-- approve or consume it since), or consumed into a dispatch whose execution is terminal; a
-- dispatch whose execution is terminal. A subject already pruned, or one that is
-- neither, keeps the rule of migration 0009, whose trigger still refuses a row no permit
-- covers, and any role outside qinglong_pruner. The prune's own scan writes the same rule out.
CREATE FUNCTION qinglong.audit_subject_finished(
    p_subject_id pg_catalog.text, p_cutoff_ms pg_catalog.int8
) RETURNS pg_catalog.bool
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT NOT EXISTS (
        SELECT 1 FROM qinglong.approval_requests AS a
        WHERE a.approval_request_id OPERATOR(pg_catalog.=) p_subject_id
          AND NOT (
              (a.status OPERATOR(pg_catalog.=) ANY (ARRAY['rejected', 'expired'])
               AND a.updated_at_ms OPERATOR(pg_catalog.<) p_cutoff_ms)
              OR (a.status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'approved'])
                  AND COALESCE(a.db_expires_at_ms, a.expires_at_ms)
                      OPERATOR(pg_catalog.<) p_cutoff_ms)
              OR (a.status OPERATOR(pg_catalog.=) 'consumed' AND EXISTS (
                  SELECT 1
                  FROM qinglong.approved_action_dispatches AS d
                  JOIN qinglong.approved_action_dispatch_executions AS e
                      ON e.dispatch_id OPERATOR(pg_catalog.=) d.dispatch_id
                  WHERE d.approval_request_id OPERATOR(pg_catalog.=) a.approval_request_id
                    AND e.status OPERATOR(pg_catalog.=)
                        ANY (ARRAY['blocked', 'cancelled', 'failed', 'succeeded'])
                    AND e.updated_at_ms OPERATOR(pg_catalog.<) p_cutoff_ms
              ))
          )
    ) AND NOT EXISTS (
        SELECT 1 FROM qinglong.approved_action_dispatch_executions AS e
        WHERE e.dispatch_id OPERATOR(pg_catalog.=) p_subject_id
          AND NOT (e.status OPERATOR(pg_catalog.=)
                       ANY (ARRAY['blocked', 'cancelled', 'failed', 'succeeded'])
                   AND e.updated_at_ms OPERATOR(pg_catalog.<) p_cutoff_ms)
    )
$$;
REVOKE ALL ON FUNCTION qinglong.audit_subject_finished(pg_catalog.text, pg_catalog.int8)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION qinglong.audit_subject_finished(pg_catalog.text, pg_catalog.int8)
    TO qinglong_pruner;

-- A second row check beside 0009's: where a permit covers the row, its subject must be
-- finished before that permit's cutoff. SECURITY INVOKER: the pruner reads these tables.
CREATE FUNCTION qinglong.guard_audit_subject_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM qinglong.audit_prune_permits AS p
               WHERE OLD.committed_at_ms < p.cutoff_ms)
            AND NOT EXISTS (
                SELECT 1 FROM qinglong.audit_prune_permits AS p
                WHERE OLD.committed_at_ms < p.cutoff_ms
                  AND qinglong.audit_subject_finished(OLD.subject_id, p.cutoff_ms)) THEN
        RAISE EXCEPTION 'security_audit_events: the audit of a live subject stays'
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN OLD;
END
$$;
REVOKE ALL ON FUNCTION qinglong.guard_audit_subject_delete() FROM PUBLIC;

CREATE TRIGGER security_audit_events_subject_finished
    BEFORE DELETE ON qinglong.security_audit_events
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_audit_subject_delete();
