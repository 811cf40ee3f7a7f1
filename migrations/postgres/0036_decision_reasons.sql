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

-- A note per inbox row (docs/ui.md): an approver or an operator writes a short line on a
-- request or a dispatch that waits on people. Notes are appended, never changed; each names
-- the principal that wrote it, which the guard below holds to the acting one (a note is
-- never written for another), and its time is the database's. No role deletes one: a note
-- goes with its request or dispatch when the pruner removes those (the foreign keys cascade
-- as the table's owner).
CREATE TABLE qinglong.inbox_notes (
    note_id pg_catalog.int8 GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    approval_request_id pg_catalog.text
        REFERENCES qinglong.approval_requests (approval_request_id) ON DELETE CASCADE,
    dispatch_id pg_catalog.text
        REFERENCES qinglong.approved_action_dispatches (dispatch_id) ON DELETE CASCADE,
    principal pg_catalog.text NOT NULL,
    note pg_catalog.text NOT NULL CONSTRAINT inbox_notes_note_line CHECK (
        pg_catalog.length(note) BETWEEN 1 AND 500 AND note !~ '[[:cntrl:]]'
    ),
    written_at_ms pg_catalog.int8 NOT NULL,
    CONSTRAINT inbox_notes_one_subject CHECK (
        (approval_request_id IS NULL) <> (dispatch_id IS NULL)
    )
);
CREATE INDEX inbox_notes_approval ON qinglong.inbox_notes (approval_request_id)
    WHERE approval_request_id IS NOT NULL;
CREATE INDEX inbox_notes_dispatch ON qinglong.inbox_notes (dispatch_id)
    WHERE dispatch_id IS NOT NULL;

CREATE FUNCTION qinglong.guard_inbox_note() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF qinglong.acting_role() IS NULL
            OR NEW.principal IS DISTINCT FROM qinglong.acting_principal() THEN
        RAISE EXCEPTION 'a note names the acting principal' USING ERRCODE = 'QLI01';
    END IF;
    NEW.written_at_ms := (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
        OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8;
    RETURN NEW;
END
$$;
CREATE TRIGGER inbox_notes_guard BEFORE INSERT ON qinglong.inbox_notes
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_inbox_note();
CREATE TRIGGER inbox_notes_immutable BEFORE UPDATE OR TRUNCATE ON qinglong.inbox_notes
    FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
GRANT SELECT, INSERT ON qinglong.inbox_notes TO qinglong_approver, qinglong_operator;
GRANT SELECT ON qinglong.inbox_notes TO qinglong_runtime, qinglong_viewer;
