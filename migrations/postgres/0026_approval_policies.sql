-- Approval policies and votes (docs/security.md#approval-policies), in schema qinglong: the
-- database decides who may vote on a request and when the votes decide it.
-- 1. `approval_policies` holds every version of every policy, append-only, written by the
--    schema's owner alone (no grant to any role; 42501 for everyone else); each version is
--    audited (`approval.policy_set`, `approval.policy_retired`) by the recorder.
-- 2. A new request carries the policy in force for its action type and project (a project's
--    policy before an any-project one, then by name) in `approval_request_policies`, copied
--    by the database (no role may write that table: 42501) and never changed (QLA03), so a
--    later policy change never re-decides a waiting request. No policy: the columns stay NULL and
--    the request is decided as before (one approver, one rejection).
-- 3. `approval_votes`: one vote per principal per request (the key), the acting principal's
--    (QLA01), at the database's clock; the requester's vote is refused (QLA02; a request
--    without a policy keeps the self-approver rule), a principal in none of the policy's
--    groups (`<installation>_g_<group>` roles) is refused (QLA01), and so is a vote on a
--    decided (QLA03) or expired (QLA04) request. In the vote's transaction the request
--    becomes `approved` when the distinct approve votes reach the policy's number and
--    `rejected` when the denials reach its threshold. Approving a request under a policy
--    directly is one approve vote: it is refused while the other approvals fall short, and it
--    is recorded; approving one without a policy writes no vote (today's path).

CREATE TABLE qinglong.approval_policies (
    name               TEXT NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    version            BIGINT NOT NULL CHECK (version >= 1),
    action_type        TEXT NOT NULL,
    project_id         TEXT,
    target_prefix      TEXT,
    approvals_required INTEGER NOT NULL CHECK (approvals_required BETWEEN 1 AND 100),
    denials_to_reject  INTEGER NOT NULL DEFAULT 1 CHECK (denials_to_reject BETWEEN 1 AND 100),
    approver_groups    TEXT[] NOT NULL DEFAULT '{}',
    reason_required    BOOLEAN NOT NULL DEFAULT false,
    retired            BOOLEAN NOT NULL DEFAULT false,
    written_by         TEXT NOT NULL DEFAULT session_user,
    written_at_ms      BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (name, version)
);

CREATE INDEX approval_policies_action ON qinglong.approval_policies (action_type);

-- The policy in force: the newest version of each name, unless that version retired it.
CREATE FUNCTION qinglong.policy_in_force(p_action_type pg_catalog.text,
        p_project_id pg_catalog.text)
RETURNS SETOF qinglong.approval_policies
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT p.* FROM qinglong.approval_policies AS p
    WHERE p.action_type = p_action_type
      AND (p.project_id IS NULL OR p.project_id = p_project_id)
      AND NOT p.retired
      AND p.version = (SELECT max(q.version) FROM qinglong.approval_policies AS q
                       WHERE q.name = p.name)
    ORDER BY (p.project_id IS NULL), p.name
    LIMIT 1
$$;

CREATE FUNCTION qinglong.guard_approval_policy() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION 'a policy version never changes: write a new one'
            USING ERRCODE = 'QLA03';
    END IF;
    -- A group names a role (`<installation>_g_<group>`): a plain identifier, never quoted.
    IF EXISTS (SELECT 1 FROM pg_catalog.unnest(NEW.approver_groups) AS g(name)
               WHERE g.name IS NULL OR g.name !~ '^[a-z][a-z0-9_]{0,31}$') THEN
        RAISE EXCEPTION 'an approver group is a lower-case identifier of at most 32 characters'
            USING ERRCODE = 'QLA05';
    END IF;
    -- Versions count from 1 per name, one after another (the key refuses a racing twin).
    NEW.version := COALESCE((SELECT max(version) FROM qinglong.approval_policies
                             WHERE name = NEW.name), 0) OPERATOR(pg_catalog.+) 1;
    NEW.written_by := SESSION_USER::pg_catalog.text;
    NEW.written_at_ms := qinglong.db_now_ms();
    RETURN NEW;
END
$$;

CREATE TRIGGER approval_policies_guard
    BEFORE INSERT OR UPDATE OR DELETE ON qinglong.approval_policies
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_approval_policy();

-- A definer (the recorder), like the approval audit.
CREATE FUNCTION qinglong.audit_approval_policy() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO qinglong.security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
    ) VALUES (
        CASE WHEN NEW.retired THEN 'approval.policy_retired' ELSE 'approval.policy_set' END,
        NEW.written_by, NEW.written_by, COALESCE(NEW.project_id, ''), NEW.name,
        NEW.version::pg_catalog.text, NEW.written_at_ms
    );
    RETURN NULL;
END
$$;

CREATE TRIGGER approval_policies_audit
    AFTER INSERT ON qinglong.approval_policies
    FOR EACH ROW EXECUTE FUNCTION qinglong.audit_approval_policy();

REVOKE ALL ON FUNCTION qinglong.audit_approval_policy() FROM PUBLIC;
GRANT CREATE ON SCHEMA qinglong TO qinglong_recorder;
ALTER FUNCTION qinglong.audit_approval_policy() OWNER TO qinglong_recorder;
REVOKE CREATE ON SCHEMA qinglong FROM qinglong_recorder;

-- SQLite's membership of the approver groups. On PostgreSQL a group is the role
-- `<installation>_g_<group>` and this table stays empty: no role may write it.
CREATE TABLE qinglong.approval_group_members (
    group_name TEXT NOT NULL,
    principal  TEXT NOT NULL,
    PRIMARY KEY (group_name, principal)
);

-- The policy a request carries, written by the copy below only (no role may write it).
CREATE TABLE qinglong.approval_request_policies (
    approval_request_id TEXT PRIMARY KEY
        REFERENCES qinglong.approval_requests (approval_request_id) ON DELETE CASCADE,
    policy_name         TEXT NOT NULL,
    policy_version      BIGINT NOT NULL,
    approvals_required  INTEGER NOT NULL,
    denials_to_reject   INTEGER NOT NULL,
    approver_groups     TEXT[] NOT NULL,
    reason_required     BOOLEAN NOT NULL,
    FOREIGN KEY (policy_name, policy_version)
        REFERENCES qinglong.approval_policies (name, version)
);

-- A definer (the recorder, like every definer): the requester's login may not write the copy.
-- With no policy for the action type the index finds nothing and the copy never runs.
CREATE FUNCTION qinglong.copy_approval_policy() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM qinglong.approval_policies
                   WHERE action_type = NEW.action_type) THEN
        RETURN NULL;
    END IF;
    INSERT INTO qinglong.approval_request_policies (
        approval_request_id, policy_name, policy_version, approvals_required,
        denials_to_reject, approver_groups, reason_required
    )
    SELECT NEW.approval_request_id, p.name, p.version, p.approvals_required,
           p.denials_to_reject, p.approver_groups, p.reason_required
    FROM qinglong.policy_in_force(NEW.action_type, NEW.project_id) AS p;
    RETURN NULL;
END
$$;

GRANT SELECT ON qinglong.approval_policies TO qinglong_recorder;
GRANT INSERT ON qinglong.approval_request_policies TO qinglong_recorder;
GRANT EXECUTE ON FUNCTION qinglong.policy_in_force(pg_catalog.text, pg_catalog.text)
    TO qinglong_recorder;
REVOKE ALL ON FUNCTION qinglong.copy_approval_policy() FROM PUBLIC;
GRANT CREATE ON SCHEMA qinglong TO qinglong_recorder;
ALTER FUNCTION qinglong.copy_approval_policy() OWNER TO qinglong_recorder;
REVOKE CREATE ON SCHEMA qinglong FROM qinglong_recorder;

CREATE TRIGGER approval_requests_policy
    AFTER INSERT ON qinglong.approval_requests
    FOR EACH ROW EXECUTE FUNCTION qinglong.copy_approval_policy();

CREATE FUNCTION qinglong.guard_request_policy() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'DELETE' AND NOT EXISTS (SELECT 1 FROM qinglong.approval_requests
            WHERE approval_request_id = OLD.approval_request_id) THEN
        RETURN OLD;  -- pruned with its request (the key's cascade)
    END IF;
    RAISE EXCEPTION 'the policy of an approval request never changes' USING ERRCODE = 'QLA03';
END
$$;

CREATE TRIGGER approval_request_policies_guard
    BEFORE UPDATE OR DELETE ON qinglong.approval_request_policies
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_request_policy();

CREATE TABLE qinglong.approval_votes (
    approval_request_id TEXT NOT NULL
        REFERENCES qinglong.approval_requests (approval_request_id) ON DELETE CASCADE,
    principal           TEXT NOT NULL,
    vote                TEXT NOT NULL CHECK (vote IN ('approve', 'deny')),
    reason              TEXT,
    voted_at_ms         BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (approval_request_id, principal)
);

CREATE FUNCTION qinglong.guard_approval_vote() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    acting pg_catalog.text := qinglong.acting_role();
    login  pg_catalog.text := qinglong.acting_principal();
    now_ms pg_catalog.int8 := qinglong.db_now_ms();
    prefix pg_catalog.text := pg_catalog.regexp_replace('qinglong_api', 'api$', 'g_');
    req    qinglong.approval_requests%ROWTYPE;
    pol    qinglong.approval_request_policies%ROWTYPE;
BEGIN
    IF TG_OP = 'DELETE' AND NOT EXISTS (SELECT 1 FROM qinglong.approval_requests
            WHERE approval_request_id = OLD.approval_request_id) THEN
        RETURN OLD;  -- pruned with its request (the key's cascade)
    END IF;
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION 'a vote never changes' USING ERRCODE = 'QLA03';
    END IF;
    IF acting IS NULL OR login IS NULL OR NEW.principal IS DISTINCT FROM login THEN
        RAISE EXCEPTION 'a vote is the acting principal''s own' USING ERRCODE = 'QLA01';
    END IF;
    IF NOT pg_catalog.pg_has_role(acting, 'qinglong_approver', 'MEMBER') THEN
        RAISE EXCEPTION 'voting needs a qinglong_approver principal' USING ERRCODE = 'QLA01';
    END IF;
    -- The row lock orders the votes of one request: each counts the ones before it.
    SELECT * INTO req FROM qinglong.approval_requests
        WHERE approval_request_id = NEW.approval_request_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no approval request %', NEW.approval_request_id
            USING ERRCODE = 'QLA03';
    END IF;
    SELECT * INTO pol FROM qinglong.approval_request_policies
        WHERE approval_request_id = req.approval_request_id;
    -- A direct approval records its decider's approve vote after the request moved.
    IF req.status IS DISTINCT FROM 'pending'
            AND NOT (req.status = 'approved' AND NEW.vote = 'approve'
                     AND req.decided_principal = NEW.principal) THEN
        RAISE EXCEPTION 'approval request % is %: it takes no votes',
            req.approval_request_id, req.status USING ERRCODE = 'QLA03';
    END IF;
    IF req.status = 'pending'
            AND now_ms >= COALESCE(req.db_expires_at_ms, req.expires_at_ms) THEN
        RAISE EXCEPTION 'approval request % expired (database clock)', req.approval_request_id
            USING ERRCODE = 'QLA04';
    END IF;
    IF login = req.requested_principal AND (pol.policy_name IS NOT NULL
            OR NOT pg_catalog.pg_has_role(acting, 'qinglong_self_approver', 'MEMBER')) THEN
        RAISE EXCEPTION 'the requester may not vote on its own request'
            USING ERRCODE = 'QLA02';
    END IF;
    IF pg_catalog.cardinality(COALESCE(pol.approver_groups, '{}')) > 0 AND NOT EXISTS (
            SELECT 1 FROM pg_catalog.unnest(pol.approver_groups) AS g(name)
            WHERE pg_catalog.to_regrole(prefix OPERATOR(pg_catalog.||) g.name) IS NOT NULL
              AND pg_catalog.pg_has_role(acting, prefix OPERATOR(pg_catalog.||) g.name,
                  'MEMBER')) THEN
        RAISE EXCEPTION 'principal % is in none of the policy''s approver groups', login
            USING ERRCODE = 'QLA01';
    END IF;
    IF COALESCE(pol.reason_required, false)
            AND pg_catalog.btrim(COALESCE(NEW.reason, '')) = '' THEN
        RAISE EXCEPTION 'this policy asks every vote for a reason' USING ERRCODE = 'QLA03';
    END IF;
    NEW.voted_at_ms := now_ms;
    RETURN NEW;
END
$$;

CREATE TRIGGER approval_votes_guard
    BEFORE INSERT OR UPDATE OR DELETE ON qinglong.approval_votes
    FOR EACH ROW EXECUTE FUNCTION qinglong.guard_approval_vote();

-- The votes decide in their own transaction, as the voter (the request's guard applies).
CREATE FUNCTION qinglong.count_approval_votes() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    req     qinglong.approval_requests%ROWTYPE;
    pol     qinglong.approval_request_policies%ROWTYPE;
    approve pg_catalog.int8;
    deny    pg_catalog.int8;
BEGIN
    SELECT * INTO req FROM qinglong.approval_requests
        WHERE approval_request_id = NEW.approval_request_id;
    IF req.status IS DISTINCT FROM 'pending' THEN
        RETURN NULL;
    END IF;
    SELECT * INTO pol FROM qinglong.approval_request_policies
        WHERE approval_request_id = NEW.approval_request_id;
    SELECT count(*) FILTER (WHERE vote = 'approve'), count(*) FILTER (WHERE vote = 'deny')
        INTO approve, deny
        FROM qinglong.approval_votes WHERE approval_request_id = NEW.approval_request_id;
    IF deny >= COALESCE(pol.denials_to_reject, 1) THEN
        UPDATE qinglong.approval_requests
            SET status = 'rejected', version = 2, decided_by = NEW.principal,
                decided_principal = NEW.principal, updated_at_ms = NEW.voted_at_ms
            WHERE approval_request_id = NEW.approval_request_id;
    ELSIF approve >= COALESCE(pol.approvals_required, 1) THEN
        UPDATE qinglong.approval_requests
            SET status = 'approved', version = 2, decided_by = NEW.principal,
                decided_principal = NEW.principal, updated_at_ms = NEW.voted_at_ms
            WHERE approval_request_id = NEW.approval_request_id;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER approval_votes_count
    AFTER INSERT ON qinglong.approval_votes
    FOR EACH ROW EXECUTE FUNCTION qinglong.count_approval_votes();

-- A direct approval of a request under a policy is one approve vote: it needs the others'
-- approvals to reach the number less its own, and it is recorded as a vote (whose guard
-- applies the policy's rules). Without a policy: one key lookup, no vote (today's path).
CREATE FUNCTION qinglong.check_direct_approval() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    others   pg_catalog.int8;
    required pg_catalog.int4;
BEGIN
    SELECT approvals_required INTO required FROM qinglong.approval_request_policies
        WHERE approval_request_id = NEW.approval_request_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT count(*) INTO others FROM qinglong.approval_votes
        WHERE approval_request_id = NEW.approval_request_id AND vote = 'approve'
          AND principal IS DISTINCT FROM NEW.decided_principal;
    IF others OPERATOR(pg_catalog.+) 1 < required THEN
        RAISE EXCEPTION 'approval request % needs % approvals', NEW.approval_request_id,
            required USING ERRCODE = 'QLA03';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM qinglong.approval_votes
                   WHERE approval_request_id = NEW.approval_request_id
                     AND principal = NEW.decided_principal) THEN
        INSERT INTO qinglong.approval_votes (approval_request_id, principal, vote)
            VALUES (NEW.approval_request_id, NEW.decided_principal, 'approve');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER approval_requests_vote_recorded
    AFTER UPDATE ON qinglong.approval_requests
    FOR EACH ROW WHEN (OLD.status = 'pending' AND NEW.status = 'approved')
    EXECUTE FUNCTION qinglong.check_direct_approval();

REVOKE ALL ON FUNCTION qinglong.policy_in_force(pg_catalog.text, pg_catalog.text),
    qinglong.guard_approval_policy(), qinglong.guard_request_policy(),
    qinglong.guard_approval_vote(), qinglong.count_approval_votes(),
    qinglong.check_direct_approval() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION qinglong.policy_in_force(pg_catalog.text, pg_catalog.text)
    TO qinglong_approver, qinglong_submitter, qinglong_runtime, qinglong_operator;
GRANT SELECT ON qinglong.approval_policies, qinglong.approval_votes,
    qinglong.approval_request_policies
    TO qinglong_approver, qinglong_submitter, qinglong_runtime, qinglong_operator;
GRANT INSERT ON qinglong.approval_votes TO qinglong_approver;
