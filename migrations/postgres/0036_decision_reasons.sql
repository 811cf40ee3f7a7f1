-- Decided approvals show why (docs/api.md, decision 0047): the reject
-- reason, each deny vote's reason, and the comment an approve, reject or settle carried.
--
-- A comment is one printable line kept in the write's own audit row (`comment`, at most 500
-- characters): the row commits with the decision or not at all, so a comment cannot be
-- added afterwards nor written for another principal (the audit guard already holds every
-- row to the acting principal).
--
-- A viewer reads requests but neither the votes nor the audit table. It reads the reasons of
-- one request through `qinglong.decision_reasons(id)`: a definer function owned by the
-- recorder that returns, for a decided request only, its deny votes (principal and reason)
-- and its API decision rows (kind, principal, reason code, comment) — no token id, client
-- address, request id, nor any other audit kind. The recorder is given the few columns it
-- reads, nothing to write.
ALTER TABLE qinglong.security_audit_events ADD COLUMN comment pg_catalog.text
    CONSTRAINT security_audit_events_comment_line CHECK (
        comment IS NULL OR (
            pg_catalog.length(comment) BETWEEN 1 AND 500
            AND comment !~ '[[:cntrl:]]'
        )
    );

-- `approval list --status S`: one status's page newest first, without reading the others.
CREATE INDEX approval_requests_by_status
    ON qinglong.approval_requests (status, created_at_ms DESC, approval_request_id DESC);

GRANT SELECT (approval_request_id, status) ON qinglong.approval_requests TO qinglong_recorder;
GRANT SELECT (approval_request_id, principal, vote, reason, voted_at_ms)
    ON qinglong.approval_votes TO qinglong_recorder;
GRANT SELECT (event_id, kind, principal, subject_id, detail_code, comment)
    ON qinglong.security_audit_events TO qinglong_recorder;

CREATE FUNCTION qinglong.decision_reasons(p_approval_request_id pg_catalog.text)
RETURNS TABLE (
    decision pg_catalog.text, principal pg_catalog.text, reason pg_catalog.text,
    comment pg_catalog.text
)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT r.decision, r.principal, r.reason, r.comment
    FROM (
        SELECT 'deny'::pg_catalog.text AS decision, v.principal, v.reason,
               NULL::pg_catalog.text AS comment, v.voted_at_ms AS at_ms, 0::pg_catalog.int8 AS n
        FROM qinglong.approval_votes AS v
        WHERE v.approval_request_id = p_approval_request_id AND v.vote = 'deny'
        UNION ALL
        SELECT pg_catalog.substr(e.kind, 5), e.principal,
               CASE WHEN e.kind = 'api.reject' THEN e.detail_code END, e.comment,
               0::pg_catalog.int8, e.event_id
        FROM qinglong.security_audit_events AS e
        WHERE e.subject_id = p_approval_request_id
          AND e.kind IN ('api.approve', 'api.reject')
    ) AS r
    WHERE EXISTS (
        SELECT 1 FROM qinglong.approval_requests AS a
        WHERE a.approval_request_id = p_approval_request_id AND a.status <> 'pending'
    )
    ORDER BY r.at_ms, r.n, r.principal
$$;
REVOKE ALL ON FUNCTION qinglong.decision_reasons(pg_catalog.text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION qinglong.decision_reasons(pg_catalog.text)
    TO qinglong_approver, qinglong_operator, qinglong_runtime, qinglong_submitter,
       qinglong_viewer;
GRANT CREATE ON SCHEMA qinglong TO qinglong_recorder;
ALTER FUNCTION qinglong.decision_reasons(pg_catalog.text) OWNER TO qinglong_recorder;
REVOKE CREATE ON SCHEMA qinglong FROM qinglong_recorder;
