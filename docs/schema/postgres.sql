-- The postgres schema a fresh `migrate` leaves: every migration of migrations/postgres/ applied.
-- Generated; do not edit. A test compares it with a fresh migration; after a new migration run
--     python -m tests.support.schema_reference --write
-- (docs/schema/README.md says what is in it and in which order).

-- Every object of schema qinglong is owned by its owner, qinglong_migrator, unless an
-- OWNER TO line says otherwise; an owner's own privileges are not listed.
-- <administrator> is the login that ran `migrate`. Roles of another installation
-- are named after it instead of `qinglong`.

-- roles (server-wide; made by `migrate`, not by a file)
CREATE ROLE qinglong_api NOLOGIN NOINHERIT;
CREATE ROLE qinglong_approver NOLOGIN INHERIT;
CREATE ROLE qinglong_migrator NOLOGIN INHERIT;
CREATE ROLE qinglong_operator NOLOGIN INHERIT;
CREATE ROLE qinglong_plan_reader NOLOGIN INHERIT;
CREATE ROLE qinglong_pruner NOLOGIN INHERIT;
CREATE ROLE qinglong_recorder NOLOGIN INHERIT;
CREATE ROLE qinglong_runtime NOLOGIN INHERIT;
CREATE ROLE qinglong_self_approver NOLOGIN INHERIT;
CREATE ROLE qinglong_submitter NOLOGIN INHERIT;
CREATE ROLE qinglong_viewer NOLOGIN INHERIT;
GRANT qinglong_recorder TO qinglong_migrator;

-- schema
CREATE SCHEMA qinglong AUTHORIZATION qinglong_migrator;
GRANT USAGE ON SCHEMA qinglong TO qinglong_approver;
GRANT USAGE ON SCHEMA qinglong TO qinglong_operator;
GRANT USAGE ON SCHEMA qinglong TO qinglong_plan_reader;
GRANT USAGE ON SCHEMA qinglong TO qinglong_pruner;
GRANT USAGE ON SCHEMA qinglong TO qinglong_recorder;
GRANT USAGE ON SCHEMA qinglong TO qinglong_runtime;
GRANT USAGE ON SCHEMA qinglong TO qinglong_submitter;
GRANT USAGE ON SCHEMA qinglong TO qinglong_viewer;

-- tables (40)

-- table action_plans
CREATE TABLE qinglong.action_plans (
    project_id text NOT NULL,
    action_ref text NOT NULL,
    action_type text NOT NULL,
    plan_json text NOT NULL,
    plan_digest text NOT NULL,
    created_at_ms bigint NOT NULL,
    plan_key_id text,
    plan_algorithm text,
    plan_sealed bytea,
    plan_schema_version integer,
    target text,
    CONSTRAINT action_plans_clear_or_sealed CHECK ((((plan_sealed IS NULL) AND (plan_key_id IS NULL) AND (plan_algorithm IS NULL) AND (plan_json <> ''::text)) OR ((plan_sealed IS NOT NULL) AND (plan_key_id IS NOT NULL) AND (plan_algorithm IS NOT NULL) AND (plan_schema_version IS NOT NULL) AND (plan_json = ''::text)))),
    CONSTRAINT action_plans_key_registered FOREIGN KEY (plan_key_id) REFERENCES qinglong.plan_keys(key_id) NOT VALID,
    CONSTRAINT action_plans_pkey PRIMARY KEY (project_id, action_ref),
    CONSTRAINT action_plans_plan_algorithm_check CHECK (((plan_algorithm IS NULL) OR (plan_algorithm = 'AES-256-GCM'::text))),
    CONSTRAINT action_plans_plan_digest_check CHECK ((length(plan_digest) = 64)),
    CONSTRAINT action_plans_target_check CHECK (((target IS NULL) OR ((length(target) >= 1) AND (length(target) <= 128))))
);
GRANT INSERT, SELECT ON TABLE qinglong.action_plans TO qinglong_approver;
GRANT SELECT ON TABLE qinglong.action_plans TO qinglong_operator;
GRANT DELETE, SELECT ON TABLE qinglong.action_plans TO qinglong_pruner;
GRANT SELECT ON TABLE qinglong.action_plans TO qinglong_recorder;
GRANT INSERT, SELECT ON TABLE qinglong.action_plans TO qinglong_runtime;
GRANT INSERT ON TABLE qinglong.action_plans TO qinglong_submitter;
GRANT SELECT (project_id, action_ref) ON TABLE qinglong.action_plans TO qinglong_submitter;

-- table api_tokens
CREATE TABLE qinglong.api_tokens (
    token_id text NOT NULL,
    secret_sha256 text NOT NULL,
    principal text NOT NULL,
    role text NOT NULL,
    created_by text NOT NULL,
    created_at_ms bigint NOT NULL,
    expires_at_ms bigint NOT NULL,
    last_used_at_ms bigint,
    revoked_at_ms bigint,
    CONSTRAINT api_tokens_check CHECK ((expires_at_ms > created_at_ms)),
    CONSTRAINT api_tokens_pkey PRIMARY KEY (token_id),
    CONSTRAINT api_tokens_principal_check CHECK ((principal ~ '^[a-z][a-z0-9_]{0,51}$'::text)),
    CONSTRAINT api_tokens_role_check CHECK ((role = ANY (ARRAY['viewer'::text, 'submitter'::text, 'approver'::text, 'operator'::text]))),
    CONSTRAINT api_tokens_secret_sha256_check CHECK ((secret_sha256 ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT api_tokens_secret_sha256_key UNIQUE (secret_sha256),
    CONSTRAINT api_tokens_token_id_check CHECK ((token_id ~ '^tok_[0-9a-f]{16}$'::text))
);
GRANT SELECT (token_id, secret_sha256, principal, role, expires_at_ms, last_used_at_ms, revoked_at_ms) ON TABLE qinglong.api_tokens TO qinglong_runtime;
GRANT UPDATE (last_used_at_ms) ON TABLE qinglong.api_tokens TO qinglong_runtime;

-- table approval_events
CREATE TABLE qinglong.approval_events (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    kind text NOT NULL,
    approval_request_id text NOT NULL,
    at_ms bigint DEFAULT 0 NOT NULL,
    CONSTRAINT approval_events_approval_request_id_fkey FOREIGN KEY (approval_request_id) REFERENCES qinglong.approval_requests(approval_request_id) ON DELETE CASCADE,
    CONSTRAINT approval_events_approval_request_id_kind_key UNIQUE (approval_request_id, kind),
    CONSTRAINT approval_events_kind_check CHECK ((kind = 'approval.expiring'::text)),
    CONSTRAINT approval_events_pkey PRIMARY KEY (id)
);
GRANT SELECT ON TABLE qinglong.approval_events TO qinglong_approver;
GRANT SELECT ON TABLE qinglong.approval_events TO qinglong_operator;
GRANT INSERT, SELECT ON TABLE qinglong.approval_events TO qinglong_runtime;
GRANT SELECT ON TABLE qinglong.approval_events TO qinglong_submitter;

-- table approval_group_members
CREATE TABLE qinglong.approval_group_members (
    group_name text NOT NULL,
    principal text NOT NULL,
    CONSTRAINT approval_group_members_pkey PRIMARY KEY (group_name, principal)
);

-- table approval_policies
CREATE TABLE qinglong.approval_policies (
    name text NOT NULL,
    version bigint NOT NULL,
    action_type text NOT NULL,
    project_id text,
    target_prefix text,
    approvals_required integer NOT NULL,
    denials_to_reject integer DEFAULT 1 NOT NULL,
    approver_groups text[] DEFAULT '{}'::text[] NOT NULL,
    reason_required boolean DEFAULT false NOT NULL,
    retired boolean DEFAULT false NOT NULL,
    written_by text DEFAULT SESSION_USER NOT NULL,
    written_at_ms bigint DEFAULT 0 NOT NULL,
    lifetime_ms bigint,
    remind_before_ms bigint,
    not_before_delay_ms bigint,
    window_ms bigint,
    proceed_on_unknown boolean DEFAULT false NOT NULL,
    CONSTRAINT approval_policies_approvals_required_check CHECK (((approvals_required >= 1) AND (approvals_required <= 100))),
    CONSTRAINT approval_policies_denials_to_reject_check CHECK (((denials_to_reject >= 1) AND (denials_to_reject <= 100))),
    CONSTRAINT approval_policies_lifetime_ms_check CHECK (((lifetime_ms >= 1000) AND (lifetime_ms <= '2592000000'::bigint))),
    CONSTRAINT approval_policies_name_check CHECK ((name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'::text)),
    CONSTRAINT approval_policies_not_before_delay_ms_check CHECK (((not_before_delay_ms >= 0) AND (not_before_delay_ms <= '2592000000'::bigint))),
    CONSTRAINT approval_policies_pkey PRIMARY KEY (name, version),
    CONSTRAINT approval_policies_remind_before_ms_check CHECK (((remind_before_ms >= 1000) AND (remind_before_ms <= '2592000000'::bigint))),
    CONSTRAINT approval_policies_remind_within_lifetime CHECK ((remind_before_ms < lifetime_ms)),
    CONSTRAINT approval_policies_target_prefix CHECK (((target_prefix IS NULL) OR ((target_prefix ~ '^[!-~]{1,128}$'::text) AND (target_prefix !~ '[*?%]'::text)))),
    CONSTRAINT approval_policies_version_check CHECK ((version >= 1)),
    CONSTRAINT approval_policies_window_ms_check CHECK (((window_ms >= 1000) AND (window_ms <= '2592000000'::bigint)))
);
GRANT SELECT ON TABLE qinglong.approval_policies TO qinglong_approver;
GRANT SELECT ON TABLE qinglong.approval_policies TO qinglong_operator;
GRANT SELECT ON TABLE qinglong.approval_policies TO qinglong_recorder;
GRANT SELECT ON TABLE qinglong.approval_policies TO qinglong_runtime;
GRANT SELECT ON TABLE qinglong.approval_policies TO qinglong_submitter;

-- table approval_request_policies
CREATE TABLE qinglong.approval_request_policies (
    approval_request_id text NOT NULL,
    policy_name text NOT NULL,
    policy_version bigint NOT NULL,
    approvals_required integer NOT NULL,
    denials_to_reject integer NOT NULL,
    approver_groups text[] NOT NULL,
    reason_required boolean NOT NULL,
    lifetime_ms bigint,
    remind_before_ms bigint,
    target_prefix text,
    CONSTRAINT approval_request_policies_approval_request_id_fkey FOREIGN KEY (approval_request_id) REFERENCES qinglong.approval_requests(approval_request_id) ON DELETE CASCADE,
    CONSTRAINT approval_request_policies_pkey PRIMARY KEY (approval_request_id),
    CONSTRAINT approval_request_policies_policy_name_policy_version_fkey FOREIGN KEY (policy_name, policy_version) REFERENCES qinglong.approval_policies(name, version)
);
GRANT SELECT ON TABLE qinglong.approval_request_policies TO qinglong_approver;
GRANT SELECT ON TABLE qinglong.approval_request_policies TO qinglong_operator;
GRANT INSERT, SELECT ON TABLE qinglong.approval_request_policies TO qinglong_recorder;
GRANT SELECT ON TABLE qinglong.approval_request_policies TO qinglong_runtime;
GRANT SELECT ON TABLE qinglong.approval_request_policies TO qinglong_submitter;

-- table approval_requests
CREATE TABLE qinglong.approval_requests (
    approval_request_id text NOT NULL,
    project_id text NOT NULL,
    action_type text NOT NULL,
    action_ref text NOT NULL,
    action_digest text NOT NULL,
    status text NOT NULL,
    version bigint NOT NULL,
    requested_by text NOT NULL,
    decided_by text,
    expires_at_ms bigint NOT NULL,
    consumed_at_ms bigint,
    created_at_ms bigint NOT NULL,
    updated_at_ms bigint NOT NULL,
    requested_principal text NOT NULL,
    decided_principal text,
    consumed_principal text,
    db_expires_at_ms bigint,
    traceparent text,
    not_before_ms bigint,
    window_for_ms bigint,
    decision_comment text,
    resubmitted_from text,
    CONSTRAINT approval_requests_action_digest_check CHECK ((length(action_digest) = 64)),
    CONSTRAINT approval_requests_decision_comment_line CHECK (((decision_comment IS NULL) OR (((length(decision_comment) >= 1) AND (length(decision_comment) <= 500)) AND (decision_comment !~ '[[:cntrl:]]'::text)))),
    CONSTRAINT approval_requests_not_before_ms_check CHECK ((not_before_ms > 0)),
    CONSTRAINT approval_requests_pkey PRIMARY KEY (approval_request_id),
    CONSTRAINT approval_requests_project_id_action_ref_fkey FOREIGN KEY (project_id, action_ref) REFERENCES qinglong.action_plans(project_id, action_ref),
    CONSTRAINT approval_requests_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'approved'::text, 'consumed'::text, 'rejected'::text, 'expired'::text]))),
    CONSTRAINT approval_requests_traceparent_w3c CHECK (((traceparent IS NULL) OR ((traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'::text) AND (substr(traceparent, 4, 32) <> repeat('0'::text, 32)) AND (substr(traceparent, 37, 16) <> repeat('0'::text, 16))))),
    CONSTRAINT approval_requests_version_check CHECK ((version >= 1)),
    CONSTRAINT approval_requests_window_for_ms_check CHECK (((window_for_ms >= 1000) AND (window_for_ms <= '2592000000'::bigint)))
);
GRANT INSERT, SELECT, UPDATE ON TABLE qinglong.approval_requests TO qinglong_approver;
GRANT SELECT ON TABLE qinglong.approval_requests TO qinglong_operator;
GRANT DELETE, SELECT ON TABLE qinglong.approval_requests TO qinglong_pruner;
GRANT SELECT ON TABLE qinglong.approval_requests TO qinglong_recorder;
GRANT INSERT, SELECT, UPDATE ON TABLE qinglong.approval_requests TO qinglong_runtime;
GRANT INSERT, SELECT ON TABLE qinglong.approval_requests TO qinglong_submitter;
GRANT SELECT ON TABLE qinglong.approval_requests TO qinglong_viewer;
GRANT SELECT (approval_request_id, project_id, action_type, status) ON TABLE qinglong.approval_requests TO qinglong_recorder;

-- table approval_votes
CREATE TABLE qinglong.approval_votes (
    approval_request_id text NOT NULL,
    principal text NOT NULL,
    vote text NOT NULL,
    reason text,
    voted_at_ms bigint DEFAULT 0 NOT NULL,
    decided_by text,
    CONSTRAINT approval_votes_approval_request_id_fkey FOREIGN KEY (approval_request_id) REFERENCES qinglong.approval_requests(approval_request_id) ON DELETE CASCADE,
    CONSTRAINT approval_votes_decided_by_check CHECK (((decided_by IS NULL) OR ((length(decided_by) >= 1) AND (length(decided_by) <= 200)))),
    CONSTRAINT approval_votes_pkey PRIMARY KEY (approval_request_id, principal),
    CONSTRAINT approval_votes_vote_check CHECK ((vote = ANY (ARRAY['approve'::text, 'deny'::text])))
);
GRANT INSERT, SELECT ON TABLE qinglong.approval_votes TO qinglong_approver;
GRANT SELECT ON TABLE qinglong.approval_votes TO qinglong_operator;
GRANT SELECT ON TABLE qinglong.approval_votes TO qinglong_runtime;
GRANT SELECT ON TABLE qinglong.approval_votes TO qinglong_submitter;
GRANT SELECT (approval_request_id, principal, vote, reason, voted_at_ms) ON TABLE qinglong.approval_votes TO qinglong_recorder;

-- table approved_action_dispatch_executions
CREATE TABLE qinglong.approved_action_dispatch_executions (
    dispatch_id text NOT NULL,
    project_id text NOT NULL,
    status text NOT NULL,
    version bigint NOT NULL,
    attempt integer NOT NULL,
    max_attempts integer NOT NULL,
    eligible_at_ms bigint,
    retry_at_ms bigint,
    lease_owner text,
    lease_token text,
    lease_expires_at_ms bigint,
    started_at_ms bigint,
    result_mutation_id text,
    result_code text,
    completed_at_ms bigint,
    created_at_ms bigint NOT NULL,
    updated_at_ms bigint NOT NULL,
    lease_proof_digest text,
    lease_proof text,
    result_receipt_json text,
    result_receipt_digest text,
    takeovers integer DEFAULT 0 NOT NULL,
    target text,
    not_before_ms bigint,
    not_after_ms bigint,
    proceed_on_unknown boolean DEFAULT false NOT NULL,
    passage_receipt text,
    CONSTRAINT approved_action_dispatch_executions_attempt_check CHECK ((attempt >= 0)),
    CONSTRAINT approved_action_dispatch_executions_cancelled_unstarted CHECK (((status <> 'cancelled'::text) OR (started_at_ms IS NULL))),
    CONSTRAINT approved_action_dispatch_executions_check CHECK (((eligible_at_ms IS NOT NULL) = (status = ANY (ARRAY['pending'::text, 'leased'::text, 'retry_wait'::text])))),
    CONSTRAINT approved_action_dispatch_executions_check1 CHECK (((status <> ALL (ARRAY['leased'::text, 'executing'::text])) OR ((lease_owner IS NOT NULL) AND (lease_token IS NOT NULL) AND (lease_expires_at_ms IS NOT NULL)))),
    CONSTRAINT approved_action_dispatch_executions_check2 CHECK (((status <> 'executing'::text) OR (started_at_ms IS NOT NULL))),
    CONSTRAINT approved_action_dispatch_executions_check3 CHECK (((passage_receipt IS NULL) OR ((passage_receipt = dispatch_id) AND (status = 'succeeded'::text)))),
    CONSTRAINT approved_action_dispatch_executions_dispatch_id_fkey FOREIGN KEY (dispatch_id) REFERENCES qinglong.approved_action_dispatches(dispatch_id),
    CONSTRAINT approved_action_dispatch_executions_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT approved_action_dispatch_executions_passage_receipt TRIGGER DEFERRABLE INITIALLY DEFERRED,
    CONSTRAINT approved_action_dispatch_executions_pkey PRIMARY KEY (dispatch_id),
    CONSTRAINT approved_action_dispatch_executions_proof_not_stored CHECK ((lease_proof IS NULL)),
    CONSTRAINT approved_action_dispatch_executions_result_receipt_digest_check CHECK (((result_receipt_digest IS NULL) OR (length(result_receipt_digest) = 64))),
    CONSTRAINT approved_action_dispatch_executions_result_receipt_json_check CHECK (((result_receipt_json IS NULL) OR (octet_length(result_receipt_json) <= 16384))),
    CONSTRAINT approved_action_dispatch_executions_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'leased'::text, 'retry_wait'::text, 'executing'::text, 'succeeded'::text, 'failed'::text, 'blocked'::text, 'cancelled'::text]))),
    CONSTRAINT approved_action_dispatch_executions_takeovers_check CHECK ((takeovers >= 0)),
    CONSTRAINT approved_action_dispatch_executions_version_check CHECK ((version >= 0))
);
GRANT INSERT, SELECT ON TABLE qinglong.approved_action_dispatch_executions TO qinglong_approver;
GRANT SELECT ON TABLE qinglong.approved_action_dispatch_executions TO qinglong_operator;
GRANT DELETE, SELECT ON TABLE qinglong.approved_action_dispatch_executions TO qinglong_pruner;
GRANT INSERT, SELECT, UPDATE ON TABLE qinglong.approved_action_dispatch_executions TO qinglong_runtime;
GRANT SELECT ON TABLE qinglong.approved_action_dispatch_executions TO qinglong_submitter;
GRANT SELECT ON TABLE qinglong.approved_action_dispatch_executions TO qinglong_viewer;
GRANT SELECT (dispatch_id, status, version, attempt, lease_owner, lease_expires_at_ms) ON TABLE qinglong.approved_action_dispatch_executions TO qinglong_recorder;
GRANT UPDATE (status, version, eligible_at_ms, retry_at_ms, result_mutation_id, result_code, completed_at_ms, updated_at_ms) ON TABLE qinglong.approved_action_dispatch_executions TO qinglong_operator;
GRANT UPDATE (passage_receipt) ON TABLE qinglong.approved_action_dispatch_executions TO qinglong_runtime;

-- table approved_action_dispatches
CREATE TABLE qinglong.approved_action_dispatches (
    dispatch_id text NOT NULL,
    approval_request_id text NOT NULL,
    project_id text NOT NULL,
    action_type text NOT NULL,
    action_ref text NOT NULL,
    action_digest text NOT NULL,
    approved_by text NOT NULL,
    created_at_ms bigint NOT NULL,
    target text,
    not_before_ms bigint,
    not_after_ms bigint,
    traceparent text,
    CONSTRAINT approved_action_dispatches_action_digest_check CHECK ((length(action_digest) = 64)),
    CONSTRAINT approved_action_dispatches_approval_request_id_fkey FOREIGN KEY (approval_request_id) REFERENCES qinglong.approval_requests(approval_request_id),
    CONSTRAINT approved_action_dispatches_approval_request_id_key UNIQUE (approval_request_id),
    CONSTRAINT approved_action_dispatches_pkey PRIMARY KEY (dispatch_id),
    CONSTRAINT approved_action_dispatches_traceparent_w3c CHECK (((traceparent IS NULL) OR ((traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'::text) AND (substr(traceparent, 4, 32) <> repeat('0'::text, 32)) AND (substr(traceparent, 37, 16) <> repeat('0'::text, 16)))))
);
GRANT INSERT, SELECT ON TABLE qinglong.approved_action_dispatches TO qinglong_approver;
GRANT SELECT ON TABLE qinglong.approved_action_dispatches TO qinglong_operator;
GRANT DELETE, SELECT ON TABLE qinglong.approved_action_dispatches TO qinglong_pruner;
GRANT SELECT ON TABLE qinglong.approved_action_dispatches TO qinglong_recorder;
GRANT INSERT, SELECT ON TABLE qinglong.approved_action_dispatches TO qinglong_runtime;
GRANT SELECT ON TABLE qinglong.approved_action_dispatches TO qinglong_submitter;
GRANT SELECT ON TABLE qinglong.approved_action_dispatches TO qinglong_viewer;
GRANT SELECT (dispatch_id, project_id, action_type) ON TABLE qinglong.approved_action_dispatches TO qinglong_recorder;

-- table approved_run_action_receipts
CREATE TABLE qinglong.approved_run_action_receipts (
    dispatch_id text NOT NULL,
    schema_version integer NOT NULL,
    approval_request_id text NOT NULL,
    project_id text NOT NULL,
    action_type text NOT NULL,
    action_digest text NOT NULL,
    execution_attempt integer NOT NULL,
    execution_version bigint NOT NULL,
    started_at_ms bigint NOT NULL,
    idempotency_key text NOT NULL,
    outcome text NOT NULL,
    result_code text NOT NULL,
    resource_type text NOT NULL,
    resource_id text NOT NULL,
    created_at_ms bigint NOT NULL,
    evidence_digest text NOT NULL,
    lease_proof text,
    CONSTRAINT approved_run_action_receipts_dispatch_id_fkey FOREIGN KEY (dispatch_id) REFERENCES qinglong.approved_action_dispatches(dispatch_id),
    CONSTRAINT approved_run_action_receipts_evidence_digest_check CHECK ((length(evidence_digest) = 64)),
    CONSTRAINT approved_run_action_receipts_pkey PRIMARY KEY (dispatch_id),
    CONSTRAINT approved_run_action_receipts_proof_not_stored CHECK ((lease_proof IS NULL)),
    CONSTRAINT approved_run_action_receipts_resource_id_fkey FOREIGN KEY (resource_id) REFERENCES qinglong.runs(run_id),
    CONSTRAINT approved_run_action_receipts_resource_type_resource_id_key UNIQUE (resource_type, resource_id)
);
GRANT SELECT ON TABLE qinglong.approved_run_action_receipts TO qinglong_operator;
GRANT DELETE, SELECT ON TABLE qinglong.approved_run_action_receipts TO qinglong_pruner;
GRANT INSERT, SELECT ON TABLE qinglong.approved_run_action_receipts TO qinglong_runtime;

-- table audit_prune_permits
CREATE TABLE qinglong.audit_prune_permits (
    cutoff_ms bigint NOT NULL,
    CONSTRAINT audit_prune_permits_pkey PRIMARY KEY (cutoff_ms)
);
GRANT DELETE, INSERT, SELECT ON TABLE qinglong.audit_prune_permits TO qinglong_pruner;

-- table audit_receipts
CREATE TABLE qinglong.audit_receipts (
    receipt_id text NOT NULL,
    audit_event_id bigint NOT NULL,
    trace_id text NOT NULL,
    start_id text NOT NULL,
    receipt_digest text NOT NULL,
    committed_at_ms bigint NOT NULL,
    CONSTRAINT audit_receipts_audit_event_id_fkey FOREIGN KEY (audit_event_id) REFERENCES qinglong.security_audit_events(event_id),
    CONSTRAINT audit_receipts_audit_event_id_key UNIQUE (audit_event_id),
    CONSTRAINT audit_receipts_pkey PRIMARY KEY (receipt_id),
    CONSTRAINT audit_receipts_receipt_digest_check CHECK ((length(receipt_digest) = 64)),
    CONSTRAINT audit_receipts_start_id_key UNIQUE (start_id),
    CONSTRAINT audit_receipts_trace_id_fkey FOREIGN KEY (trace_id) REFERENCES qinglong.trace_anchors(trace_id),
    CONSTRAINT audit_receipts_trace_id_key UNIQUE (trace_id)
);
GRANT SELECT ON TABLE qinglong.audit_receipts TO qinglong_operator;
GRANT SELECT ON TABLE qinglong.audit_receipts TO qinglong_pruner;
GRANT INSERT, SELECT ON TABLE qinglong.audit_receipts TO qinglong_runtime;

-- table execution_events
CREATE TABLE qinglong.execution_events (
    event_id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    dispatch_id text NOT NULL,
    version bigint NOT NULL,
    from_status text,
    to_status text NOT NULL,
    attempt integer NOT NULL,
    lease_owner text,
    lease_token text,
    mutation_id text,
    result_code text,
    committed_at_ms bigint NOT NULL,
    CONSTRAINT execution_events_dispatch_id_fkey FOREIGN KEY (dispatch_id) REFERENCES qinglong.approved_action_dispatches(dispatch_id),
    CONSTRAINT execution_events_dispatch_id_version_key UNIQUE (dispatch_id, version),
    CONSTRAINT execution_events_pkey PRIMARY KEY (event_id)
);
GRANT SELECT ON TABLE qinglong.execution_events TO qinglong_approver;
GRANT SELECT ON TABLE qinglong.execution_events TO qinglong_operator;
GRANT DELETE, SELECT ON TABLE qinglong.execution_events TO qinglong_pruner;
GRANT INSERT ON TABLE qinglong.execution_events TO qinglong_recorder;
GRANT SELECT ON TABLE qinglong.execution_events TO qinglong_runtime;
GRANT SELECT ON TABLE qinglong.execution_events TO qinglong_submitter;
GRANT SELECT ON TABLE qinglong.execution_events TO qinglong_viewer;

-- table freeze_lifts
CREATE TABLE qinglong.freeze_lifts (
    dispatch_id text NOT NULL,
    freeze_id bigint NOT NULL,
    reason text NOT NULL,
    lifted_by text DEFAULT ''::text NOT NULL,
    lifted_at_ms bigint DEFAULT 0 NOT NULL,
    CONSTRAINT freeze_lifts_dispatch_id_fkey FOREIGN KEY (dispatch_id) REFERENCES qinglong.approved_action_dispatches(dispatch_id) ON DELETE CASCADE,
    CONSTRAINT freeze_lifts_freeze_id_fkey FOREIGN KEY (freeze_id) REFERENCES qinglong.freezes(freeze_id),
    CONSTRAINT freeze_lifts_pkey PRIMARY KEY (dispatch_id, freeze_id),
    CONSTRAINT freeze_lifts_reason_check CHECK (((length(reason) >= 1) AND (length(reason) <= 200)))
);
GRANT SELECT ON TABLE qinglong.freeze_lifts TO qinglong_approver;
GRANT INSERT, SELECT ON TABLE qinglong.freeze_lifts TO qinglong_operator;
GRANT SELECT ON TABLE qinglong.freeze_lifts TO qinglong_recorder;
GRANT SELECT ON TABLE qinglong.freeze_lifts TO qinglong_runtime;
GRANT SELECT ON TABLE qinglong.freeze_lifts TO qinglong_submitter;
GRANT SELECT ON TABLE qinglong.freeze_lifts TO qinglong_viewer;

-- table freezes
CREATE TABLE qinglong.freezes (
    freeze_id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    action_type text,
    project_id text,
    target_prefix text,
    from_ms bigint NOT NULL,
    until_ms bigint NOT NULL,
    reason text NOT NULL,
    created_by text DEFAULT ''::text NOT NULL,
    created_at_ms bigint DEFAULT 0 NOT NULL,
    ended_by text,
    ended_at_ms bigint,
    CONSTRAINT freezes_action_type_check CHECK (((action_type IS NULL) OR ((length(action_type) >= 1) AND (length(action_type) <= 128)))),
    CONSTRAINT freezes_check CHECK ((until_ms > from_ms)),
    CONSTRAINT freezes_pkey PRIMARY KEY (freeze_id),
    CONSTRAINT freezes_project_id_check CHECK (((project_id IS NULL) OR ((length(project_id) >= 1) AND (length(project_id) <= 128)))),
    CONSTRAINT freezes_reason_check CHECK (((length(reason) >= 1) AND (length(reason) <= 200))),
    CONSTRAINT freezes_target_prefix_check CHECK (((target_prefix IS NULL) OR ((target_prefix ~ '^[!-~]{1,128}$'::text) AND (target_prefix !~ '[*?%]'::text))))
);
GRANT SELECT ON TABLE qinglong.freezes TO qinglong_approver;
GRANT SELECT ON TABLE qinglong.freezes TO qinglong_operator;
GRANT SELECT ON TABLE qinglong.freezes TO qinglong_recorder;
GRANT SELECT ON TABLE qinglong.freezes TO qinglong_runtime;
GRANT SELECT ON TABLE qinglong.freezes TO qinglong_submitter;
GRANT SELECT ON TABLE qinglong.freezes TO qinglong_viewer;

-- table inbox_notes
CREATE TABLE qinglong.inbox_notes (
    note_id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    approval_request_id text,
    dispatch_id text,
    principal text NOT NULL,
    note text NOT NULL,
    written_at_ms bigint NOT NULL,
    CONSTRAINT inbox_notes_approval_request_id_fkey FOREIGN KEY (approval_request_id) REFERENCES qinglong.approval_requests(approval_request_id) ON DELETE CASCADE,
    CONSTRAINT inbox_notes_dispatch_id_fkey FOREIGN KEY (dispatch_id) REFERENCES qinglong.approved_action_dispatches(dispatch_id) ON DELETE CASCADE,
    CONSTRAINT inbox_notes_note_line CHECK ((((length(note) >= 1) AND (length(note) <= 500)) AND (note !~ '[[:cntrl:]]'::text))),
    CONSTRAINT inbox_notes_one_subject CHECK (((approval_request_id IS NULL) <> (dispatch_id IS NULL))),
    CONSTRAINT inbox_notes_pkey PRIMARY KEY (note_id)
);
GRANT INSERT, SELECT ON TABLE qinglong.inbox_notes TO qinglong_approver;
GRANT INSERT, SELECT ON TABLE qinglong.inbox_notes TO qinglong_operator;
GRANT SELECT ON TABLE qinglong.inbox_notes TO qinglong_runtime;
GRANT SELECT ON TABLE qinglong.inbox_notes TO qinglong_viewer;

-- table notification_attempts
CREATE TABLE qinglong.notification_attempts (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    event_id bigint NOT NULL,
    subscription text NOT NULL,
    attempt integer NOT NULL,
    outcome text NOT NULL,
    response_code integer,
    error_code text,
    latency_ms bigint NOT NULL,
    at_ms bigint NOT NULL,
    CONSTRAINT notification_attempts_attempt_check CHECK ((attempt >= 1)),
    CONSTRAINT notification_attempts_error_code_check CHECK ((error_code ~ '^[a-z_]{1,40}$'::text)),
    CONSTRAINT notification_attempts_latency_ms_check CHECK ((latency_ms >= 0)),
    CONSTRAINT notification_attempts_outcome_check CHECK ((outcome = ANY (ARRAY['delivered'::text, 'failed'::text, 'dead'::text]))),
    CONSTRAINT notification_attempts_pkey PRIMARY KEY (id)
);
GRANT SELECT ON TABLE qinglong.notification_attempts TO qinglong_operator;
GRANT DELETE, SELECT ON TABLE qinglong.notification_attempts TO qinglong_pruner;
GRANT INSERT, SELECT ON TABLE qinglong.notification_attempts TO qinglong_runtime;

-- table notification_deliverer
CREATE TABLE qinglong.notification_deliverer (
    singleton boolean DEFAULT true NOT NULL,
    owner text,
    lease_expires_at_ms bigint DEFAULT 0 NOT NULL,
    fanned_out_through bigint DEFAULT 0 NOT NULL,
    CONSTRAINT notification_deliverer_pkey PRIMARY KEY (singleton),
    CONSTRAINT notification_deliverer_singleton_check CHECK (singleton)
);
GRANT SELECT ON TABLE qinglong.notification_deliverer TO qinglong_operator;
GRANT SELECT ON TABLE qinglong.notification_deliverer TO qinglong_pruner;
GRANT SELECT, UPDATE ON TABLE qinglong.notification_deliverer TO qinglong_runtime;

-- table notification_deliveries
CREATE TABLE qinglong.notification_deliveries (
    event_id bigint NOT NULL,
    subscription text NOT NULL,
    subject_id text NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at_ms bigint NOT NULL,
    last_code integer,
    done_at_ms bigint,
    CONSTRAINT notification_deliveries_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT notification_deliveries_event_id_fkey FOREIGN KEY (event_id) REFERENCES qinglong.notification_events(id),
    CONSTRAINT notification_deliveries_pkey PRIMARY KEY (event_id, subscription),
    CONSTRAINT notification_deliveries_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'delivered'::text, 'dead'::text]))),
    CONSTRAINT notification_deliveries_subscription_fkey FOREIGN KEY (subscription) REFERENCES qinglong.notification_subscriptions(name) ON DELETE CASCADE
);
GRANT SELECT ON TABLE qinglong.notification_deliveries TO qinglong_operator;
GRANT DELETE, SELECT ON TABLE qinglong.notification_deliveries TO qinglong_pruner;
GRANT INSERT, SELECT, UPDATE ON TABLE qinglong.notification_deliveries TO qinglong_runtime;

-- table notification_events
CREATE TABLE qinglong.notification_events (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    kind text NOT NULL,
    subject_id text NOT NULL,
    project_id text NOT NULL,
    action_type text NOT NULL,
    at_ms bigint NOT NULL,
    payload_json text NOT NULL,
    target text,
    CONSTRAINT notification_events_kind_check CHECK ((kind = ANY (ARRAY['approval.requested'::text, 'approval.expiring'::text, 'approval.approved'::text, 'approval.rejected'::text, 'approval.expired'::text, 'dispatch.failed'::text, 'dispatch.blocked'::text, 'dispatch.succeeded'::text, 'dispatch.recovery_required'::text, 'target.held'::text]))),
    CONSTRAINT notification_events_payload_json_check CHECK ((octet_length(payload_json) <= 4096)),
    CONSTRAINT notification_events_pkey PRIMARY KEY (id),
    CONSTRAINT notification_events_subject_id_kind_key UNIQUE (subject_id, kind)
);
GRANT SELECT ON TABLE qinglong.notification_events TO qinglong_operator;
GRANT DELETE, SELECT ON TABLE qinglong.notification_events TO qinglong_pruner;
GRANT INSERT ON TABLE qinglong.notification_events TO qinglong_recorder;
GRANT SELECT ON TABLE qinglong.notification_events TO qinglong_runtime;

-- table notification_fanouts
CREATE TABLE qinglong.notification_fanouts (
    event_id bigint NOT NULL,
    CONSTRAINT notification_fanouts_event_id_fkey FOREIGN KEY (event_id) REFERENCES qinglong.notification_events(id),
    CONSTRAINT notification_fanouts_pkey PRIMARY KEY (event_id)
);
GRANT SELECT ON TABLE qinglong.notification_fanouts TO qinglong_operator;
GRANT DELETE, SELECT ON TABLE qinglong.notification_fanouts TO qinglong_pruner;
GRANT INSERT, SELECT ON TABLE qinglong.notification_fanouts TO qinglong_runtime;

-- table notification_subscriptions
CREATE TABLE qinglong.notification_subscriptions (
    name text NOT NULL,
    url text NOT NULL,
    secret_ref text NOT NULL,
    kinds_json text NOT NULL,
    action_type text,
    project_id text,
    format text DEFAULT 'raw'::text NOT NULL,
    created_at_ms bigint NOT NULL,
    target_prefix text,
    CONSTRAINT notification_subscriptions_format_check CHECK ((format = ANY (ARRAY['raw'::text, 'slack'::text]))),
    CONSTRAINT notification_subscriptions_name_check CHECK ((name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'::text)),
    CONSTRAINT notification_subscriptions_pkey PRIMARY KEY (name),
    CONSTRAINT notification_subscriptions_secret_ref_check CHECK ((secret_ref ~ '^(credential|file|env):[^[:space:]]+$'::text)),
    CONSTRAINT notification_subscriptions_target_prefix CHECK (((target_prefix IS NULL) OR ((target_prefix ~ '^[!-~]{1,128}$'::text) AND (target_prefix !~ '[*?%]'::text)))),
    CONSTRAINT notification_subscriptions_url_check CHECK (((url ~ '^https?://[^[:space:]]+$'::text) AND (octet_length(url) <= 2048)))
);
GRANT SELECT ON TABLE qinglong.notification_subscriptions TO qinglong_operator;
GRANT SELECT ON TABLE qinglong.notification_subscriptions TO qinglong_pruner;
GRANT SELECT ON TABLE qinglong.notification_subscriptions TO qinglong_recorder;
GRANT SELECT ON TABLE qinglong.notification_subscriptions TO qinglong_runtime;

-- table plan_keys
CREATE TABLE qinglong.plan_keys (
    key_id text NOT NULL,
    registered_at_ms bigint NOT NULL,
    CONSTRAINT plan_keys_key_id_check CHECK ((key_id ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'::text)),
    CONSTRAINT plan_keys_pkey PRIMARY KEY (key_id)
);
GRANT SELECT ON TABLE qinglong.plan_keys TO qinglong_approver;
GRANT SELECT ON TABLE qinglong.plan_keys TO qinglong_operator;
GRANT SELECT ON TABLE qinglong.plan_keys TO qinglong_pruner;
GRANT SELECT ON TABLE qinglong.plan_keys TO qinglong_runtime;

-- table prune_permits
CREATE TABLE qinglong.prune_permits (
    dispatch_id text NOT NULL,
    approval_request_id text NOT NULL,
    project_id text NOT NULL,
    action_ref text NOT NULL,
    cutoff_ms bigint NOT NULL,
    CONSTRAINT prune_permits_approval_request_id_key UNIQUE (approval_request_id),
    CONSTRAINT prune_permits_pkey PRIMARY KEY (dispatch_id)
);
GRANT DELETE, INSERT, SELECT ON TABLE qinglong.prune_permits TO qinglong_pruner;

-- table recovery_observations
CREATE TABLE qinglong.recovery_observations (
    dispatch_id text NOT NULL,
    outcome text NOT NULL,
    reason_code text NOT NULL,
    observation_count bigint NOT NULL,
    first_seen_at_ms bigint NOT NULL,
    last_seen_at_ms bigint NOT NULL,
    CONSTRAINT recovery_observations_dispatch_id_fkey FOREIGN KEY (dispatch_id) REFERENCES qinglong.approved_action_dispatches(dispatch_id),
    CONSTRAINT recovery_observations_observation_count_check CHECK ((observation_count >= 1)),
    CONSTRAINT recovery_observations_outcome_check CHECK ((outcome = ANY (ARRAY['missing'::text, 'conflict'::text, 'unavailable'::text]))),
    CONSTRAINT recovery_observations_pkey PRIMARY KEY (dispatch_id)
);
GRANT SELECT ON TABLE qinglong.recovery_observations TO qinglong_operator;
GRANT DELETE, SELECT ON TABLE qinglong.recovery_observations TO qinglong_pruner;
GRANT INSERT, SELECT, UPDATE ON TABLE qinglong.recovery_observations TO qinglong_runtime;
GRANT SELECT ON TABLE qinglong.recovery_observations TO qinglong_submitter;
GRANT SELECT ON TABLE qinglong.recovery_observations TO qinglong_viewer;

-- table recovery_required_marks
CREATE TABLE qinglong.recovery_required_marks (
    dispatch_id text NOT NULL,
    execution_attempt integer NOT NULL,
    execution_version bigint NOT NULL,
    lease_owner text,
    lease_expires_at_ms bigint,
    noticed_by text NOT NULL,
    committed_at_ms bigint NOT NULL,
    CONSTRAINT recovery_required_marks_dispatch_id_fkey FOREIGN KEY (dispatch_id) REFERENCES qinglong.approved_action_dispatches(dispatch_id),
    CONSTRAINT recovery_required_marks_noticed_by_check CHECK ((noticed_by = ANY (ARRAY['recovery_pass'::text, 'resolution'::text]))),
    CONSTRAINT recovery_required_marks_pkey PRIMARY KEY (dispatch_id)
);
GRANT SELECT ON TABLE qinglong.recovery_required_marks TO qinglong_operator;
GRANT DELETE, SELECT ON TABLE qinglong.recovery_required_marks TO qinglong_pruner;
GRANT INSERT ON TABLE qinglong.recovery_required_marks TO qinglong_recorder;
GRANT SELECT ON TABLE qinglong.recovery_required_marks TO qinglong_runtime;
GRANT SELECT ON TABLE qinglong.recovery_required_marks TO qinglong_submitter;
GRANT SELECT ON TABLE qinglong.recovery_required_marks TO qinglong_viewer;
GRANT SELECT (dispatch_id) ON TABLE qinglong.recovery_required_marks TO qinglong_recorder;

-- table recovery_resolutions
CREATE TABLE qinglong.recovery_resolutions (
    dispatch_id text NOT NULL,
    source text NOT NULL,
    resolution text NOT NULL,
    evidence_digest text,
    resolved_by text NOT NULL,
    principal text NOT NULL,
    reason_code text NOT NULL,
    execution_attempt integer NOT NULL,
    execution_version bigint NOT NULL,
    lease_owner text NOT NULL,
    lease_token text NOT NULL,
    started_at_ms bigint NOT NULL,
    committed_at_ms bigint NOT NULL,
    CONSTRAINT recovery_resolutions_check CHECK (((source = 'evidence'::text) = (evidence_digest IS NOT NULL))),
    CONSTRAINT recovery_resolutions_dispatch_id_fkey FOREIGN KEY (dispatch_id) REFERENCES qinglong.approved_action_dispatches(dispatch_id),
    CONSTRAINT recovery_resolutions_evidence_digest_check CHECK (((evidence_digest IS NULL) OR (length(evidence_digest) = 64))),
    CONSTRAINT recovery_resolutions_pkey PRIMARY KEY (dispatch_id),
    CONSTRAINT recovery_resolutions_resolution_check CHECK ((resolution = ANY (ARRAY['succeeded'::text, 'failed'::text, 'blocked'::text]))),
    CONSTRAINT recovery_resolutions_source_check CHECK ((source = ANY (ARRAY['evidence'::text, 'manual'::text])))
);
GRANT INSERT, SELECT ON TABLE qinglong.recovery_resolutions TO qinglong_operator;
GRANT DELETE, SELECT ON TABLE qinglong.recovery_resolutions TO qinglong_pruner;
GRANT INSERT, SELECT ON TABLE qinglong.recovery_resolutions TO qinglong_runtime;
GRANT SELECT ON TABLE qinglong.recovery_resolutions TO qinglong_submitter;
GRANT SELECT ON TABLE qinglong.recovery_resolutions TO qinglong_viewer;

-- table run_attempts
CREATE TABLE qinglong.run_attempts (
    run_id text NOT NULL,
    attempt_no integer NOT NULL,
    status text NOT NULL,
    created_at_ms bigint NOT NULL,
    CONSTRAINT run_attempts_attempt_no_check CHECK ((attempt_no >= 1)),
    CONSTRAINT run_attempts_pkey PRIMARY KEY (run_id, attempt_no),
    CONSTRAINT run_attempts_run_id_fkey FOREIGN KEY (run_id) REFERENCES qinglong.runs(run_id)
);
GRANT SELECT ON TABLE qinglong.run_attempts TO qinglong_operator;
GRANT INSERT, SELECT, UPDATE ON TABLE qinglong.run_attempts TO qinglong_runtime;

-- table run_events
CREATE TABLE qinglong.run_events (
    run_id text NOT NULL,
    seq bigint NOT NULL,
    event_type text NOT NULL,
    run_version bigint NOT NULL,
    committed_at_ms bigint NOT NULL,
    CONSTRAINT run_events_pkey PRIMARY KEY (run_id, seq),
    CONSTRAINT run_events_run_id_fkey FOREIGN KEY (run_id) REFERENCES qinglong.runs(run_id),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);
GRANT INSERT, SELECT ON TABLE qinglong.run_events TO qinglong_operator;
GRANT INSERT, SELECT ON TABLE qinglong.run_events TO qinglong_runtime;

-- table runs
CREATE TABLE qinglong.runs (
    run_id text NOT NULL,
    project_id text NOT NULL,
    task_id text NOT NULL,
    task_revision bigint NOT NULL,
    executor_type text NOT NULL,
    priority integer NOT NULL,
    task_name text,
    task_snapshot_ref text,
    input_ref text,
    status text NOT NULL,
    trigger_type text NOT NULL,
    execution_origin text NOT NULL,
    execution_owner text NOT NULL,
    request_id text,
    idempotency_key text NOT NULL,
    accepted_at_ms bigint NOT NULL,
    version bigint NOT NULL,
    event_seq bigint NOT NULL,
    created_at_ms bigint NOT NULL,
    updated_at_ms bigint NOT NULL,
    lease_proof text,
    CONSTRAINT runs_event_seq_check CHECK ((event_seq >= 0)),
    CONSTRAINT runs_pkey PRIMARY KEY (run_id),
    CONSTRAINT runs_priority_check CHECK (((priority >= '-1000'::integer) AND (priority <= 1000))),
    CONSTRAINT runs_project_id_idempotency_key_key UNIQUE (project_id, idempotency_key),
    CONSTRAINT runs_proof_not_stored CHECK ((lease_proof IS NULL)),
    CONSTRAINT runs_status_check CHECK ((status = ANY (ARRAY['queued'::text, 'running'::text, 'succeeded'::text, 'failed'::text, 'cancelled'::text]))),
    CONSTRAINT runs_task_revision_check CHECK ((task_revision >= 0)),
    CONSTRAINT runs_version_check CHECK ((version >= 1))
);
GRANT SELECT ON TABLE qinglong.runs TO qinglong_approver;
GRANT SELECT ON TABLE qinglong.runs TO qinglong_operator;
GRANT INSERT, SELECT, UPDATE ON TABLE qinglong.runs TO qinglong_runtime;
GRANT SELECT ON TABLE qinglong.runs TO qinglong_submitter;
GRANT SELECT ON TABLE qinglong.runs TO qinglong_viewer;
GRANT UPDATE (updated_at_ms) ON TABLE qinglong.runs TO qinglong_approver;
GRANT UPDATE (status, version, event_seq, updated_at_ms) ON TABLE qinglong.runs TO qinglong_operator;

-- table schema_migrations
CREATE TABLE qinglong.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at_ms bigint NOT NULL,
    CONSTRAINT schema_migrations_pkey PRIMARY KEY (version)
);
GRANT SELECT ON TABLE qinglong.schema_migrations TO qinglong_approver;
GRANT SELECT ON TABLE qinglong.schema_migrations TO qinglong_operator;
GRANT SELECT ON TABLE qinglong.schema_migrations TO qinglong_plan_reader;
GRANT SELECT ON TABLE qinglong.schema_migrations TO qinglong_pruner;
GRANT SELECT ON TABLE qinglong.schema_migrations TO qinglong_runtime;
GRANT SELECT ON TABLE qinglong.schema_migrations TO qinglong_submitter;
GRANT SELECT ON TABLE qinglong.schema_migrations TO qinglong_viewer;

-- table security_audit_events
CREATE TABLE qinglong.security_audit_events (
    event_id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    kind text NOT NULL,
    actor text NOT NULL,
    principal text NOT NULL,
    project_id text NOT NULL,
    subject_id text NOT NULL,
    detail_code text NOT NULL,
    committed_at_ms bigint NOT NULL,
    token_id text,
    client_address text,
    request_id text,
    comment text,
    CONSTRAINT security_audit_events_comment_line CHECK (((comment IS NULL) OR (((length(comment) >= 1) AND (length(comment) <= 500)) AND (comment !~ '[[:cntrl:]]'::text)))),
    CONSTRAINT security_audit_events_pkey PRIMARY KEY (event_id),
    CONSTRAINT security_audit_events_request_whole CHECK ((((token_id IS NULL) AND (client_address IS NULL) AND (request_id IS NULL)) OR ((token_id IS NOT NULL) AND (request_id IS NOT NULL)) OR ((kind = 'api.auth_failed'::text) AND (token_id IS NULL) AND (client_address IS NOT NULL) AND (request_id IS NOT NULL))))
);
GRANT INSERT ON TABLE qinglong.security_audit_events TO qinglong_approver;
GRANT INSERT, SELECT ON TABLE qinglong.security_audit_events TO qinglong_operator;
GRANT DELETE, SELECT ON TABLE qinglong.security_audit_events TO qinglong_pruner;
GRANT INSERT ON TABLE qinglong.security_audit_events TO qinglong_recorder;
GRANT INSERT, SELECT ON TABLE qinglong.security_audit_events TO qinglong_runtime;
GRANT INSERT ON TABLE qinglong.security_audit_events TO qinglong_submitter;
GRANT SELECT (event_id, kind, principal, subject_id, detail_code, comment) ON TABLE qinglong.security_audit_events TO qinglong_recorder;

-- table step_run_mutations
CREATE TABLE qinglong.step_run_mutations (
    mutation_id text NOT NULL,
    step_run_id text NOT NULL,
    run_id text NOT NULL,
    project_id text NOT NULL,
    from_status text NOT NULL,
    to_status text NOT NULL,
    from_version bigint NOT NULL,
    to_version bigint NOT NULL,
    run_event_seq bigint NOT NULL,
    run_version bigint NOT NULL,
    reason_code text NOT NULL,
    mutation_digest text NOT NULL,
    committed_at_ms bigint NOT NULL,
    CONSTRAINT step_run_mutations_mutation_digest_check CHECK ((length(mutation_digest) = 64)),
    CONSTRAINT step_run_mutations_pkey PRIMARY KEY (mutation_id),
    CONSTRAINT step_run_mutations_run_id_fkey FOREIGN KEY (run_id) REFERENCES qinglong.runs(run_id),
    CONSTRAINT step_run_mutations_run_id_run_event_seq_fkey FOREIGN KEY (run_id, run_event_seq) REFERENCES qinglong.run_events(run_id, seq),
    CONSTRAINT step_run_mutations_step_run_id_fkey FOREIGN KEY (step_run_id) REFERENCES qinglong.step_runs(step_run_id),
    CONSTRAINT step_run_mutations_step_run_id_to_version_key UNIQUE (step_run_id, to_version)
);
GRANT INSERT, SELECT ON TABLE qinglong.step_run_mutations TO qinglong_operator;
GRANT INSERT, SELECT ON TABLE qinglong.step_run_mutations TO qinglong_runtime;

-- table step_runs
CREATE TABLE qinglong.step_runs (
    step_run_id text NOT NULL,
    run_id text NOT NULL,
    project_id text NOT NULL,
    step_kind text NOT NULL,
    tool_id text NOT NULL,
    tool_version integer NOT NULL,
    definition_digest text NOT NULL,
    action_type text NOT NULL,
    action_ref text NOT NULL,
    action_digest text NOT NULL,
    approval_request_id text,
    binding_digest text NOT NULL,
    status text NOT NULL,
    version bigint NOT NULL,
    result_code text,
    created_at_ms bigint NOT NULL,
    updated_at_ms bigint NOT NULL,
    CONSTRAINT step_runs_action_digest_check CHECK ((length(action_digest) = 64)),
    CONSTRAINT step_runs_approval_request_id_fkey FOREIGN KEY (approval_request_id) REFERENCES qinglong.approval_requests(approval_request_id),
    CONSTRAINT step_runs_approval_request_id_key UNIQUE (approval_request_id),
    CONSTRAINT step_runs_binding_digest_check CHECK ((length(binding_digest) = 64)),
    CONSTRAINT step_runs_check CHECK (((status <> 'waiting_approval'::text) OR (approval_request_id IS NOT NULL))),
    CONSTRAINT step_runs_definition_digest_check CHECK ((length(definition_digest) = 64)),
    CONSTRAINT step_runs_pkey PRIMARY KEY (step_run_id),
    CONSTRAINT step_runs_run_id_fkey FOREIGN KEY (run_id) REFERENCES qinglong.runs(run_id),
    CONSTRAINT step_runs_status_check CHECK ((status = ANY (ARRAY['ready'::text, 'waiting_approval'::text, 'running'::text, 'succeeded'::text, 'failed'::text, 'lost'::text]))),
    CONSTRAINT step_runs_step_kind_check CHECK ((step_kind = 'tool'::text)),
    CONSTRAINT step_runs_tool_version_check CHECK ((tool_version >= 1)),
    CONSTRAINT step_runs_version_check CHECK ((version >= 1))
);
GRANT INSERT, SELECT ON TABLE qinglong.step_runs TO qinglong_approver;
GRANT SELECT ON TABLE qinglong.step_runs TO qinglong_operator;
GRANT SELECT ON TABLE qinglong.step_runs TO qinglong_pruner;
GRANT INSERT, SELECT, UPDATE ON TABLE qinglong.step_runs TO qinglong_runtime;
GRANT SELECT ON TABLE qinglong.step_runs TO qinglong_submitter;
GRANT SELECT ON TABLE qinglong.step_runs TO qinglong_viewer;
GRANT UPDATE (status, version, result_code, updated_at_ms) ON TABLE qinglong.step_runs TO qinglong_operator;

-- table tool_execution_start_barriers
CREATE TABLE qinglong.tool_execution_start_barriers (
    start_id text NOT NULL,
    schema_version integer NOT NULL,
    project_id text NOT NULL,
    run_id text NOT NULL,
    step_run_id text NOT NULL,
    started_step_run_version bigint NOT NULL,
    started_step_run_digest text NOT NULL,
    command_digest text NOT NULL,
    snapshot_digest text NOT NULL,
    tool_id text NOT NULL,
    tool_version integer NOT NULL,
    definition_digest text NOT NULL,
    policy_fence text NOT NULL,
    action_digest text NOT NULL,
    admission_digest text NOT NULL,
    approval_request_id text,
    dispatch_id text,
    mutation_id text NOT NULL,
    mutation_digest text NOT NULL,
    run_event_seq bigint NOT NULL,
    run_version bigint NOT NULL,
    trace_id text NOT NULL,
    trace_digest text NOT NULL,
    audit_event_id bigint NOT NULL,
    audit_receipt_id text NOT NULL,
    audit_receipt_digest text NOT NULL,
    barrier_json text NOT NULL,
    barrier_digest text NOT NULL,
    committed_at_ms bigint NOT NULL,
    CONSTRAINT tool_execution_start_barriers_action_digest_check CHECK ((length(action_digest) = 64)),
    CONSTRAINT tool_execution_start_barriers_admission_digest_check CHECK ((length(admission_digest) = 64)),
    CONSTRAINT tool_execution_start_barriers_approval_request_id_fkey FOREIGN KEY (approval_request_id) REFERENCES qinglong.approval_requests(approval_request_id),
    CONSTRAINT tool_execution_start_barriers_audit_event_id_fkey FOREIGN KEY (audit_event_id) REFERENCES qinglong.security_audit_events(event_id),
    CONSTRAINT tool_execution_start_barriers_audit_event_id_key UNIQUE (audit_event_id),
    CONSTRAINT tool_execution_start_barriers_audit_receipt_digest_check CHECK ((length(audit_receipt_digest) = 64)),
    CONSTRAINT tool_execution_start_barriers_audit_receipt_id_fkey FOREIGN KEY (audit_receipt_id) REFERENCES qinglong.audit_receipts(receipt_id),
    CONSTRAINT tool_execution_start_barriers_audit_receipt_id_key UNIQUE (audit_receipt_id),
    CONSTRAINT tool_execution_start_barriers_barrier_digest_check CHECK ((length(barrier_digest) = 64)),
    CONSTRAINT tool_execution_start_barriers_barrier_json_check CHECK ((octet_length(barrier_json) <= 16384)),
    CONSTRAINT tool_execution_start_barriers_check CHECK (((approval_request_id IS NULL) = (dispatch_id IS NULL))),
    CONSTRAINT tool_execution_start_barriers_command_digest_check CHECK ((length(command_digest) = 64)),
    CONSTRAINT tool_execution_start_barriers_definition_digest_check CHECK ((length(definition_digest) = 64)),
    CONSTRAINT tool_execution_start_barriers_dispatch_id_fkey FOREIGN KEY (dispatch_id) REFERENCES qinglong.approved_action_dispatches(dispatch_id),
    CONSTRAINT tool_execution_start_barriers_dispatch_id_key UNIQUE (dispatch_id),
    CONSTRAINT tool_execution_start_barriers_mutation_digest_check CHECK ((length(mutation_digest) = 64)),
    CONSTRAINT tool_execution_start_barriers_mutation_id_fkey FOREIGN KEY (mutation_id) REFERENCES qinglong.step_run_mutations(mutation_id),
    CONSTRAINT tool_execution_start_barriers_mutation_id_key UNIQUE (mutation_id),
    CONSTRAINT tool_execution_start_barriers_pkey PRIMARY KEY (start_id),
    CONSTRAINT tool_execution_start_barriers_policy_fence_check CHECK ((length(policy_fence) = 64)),
    CONSTRAINT tool_execution_start_barriers_run_id_fkey FOREIGN KEY (run_id) REFERENCES qinglong.runs(run_id),
    CONSTRAINT tool_execution_start_barriers_run_id_run_event_seq_fkey FOREIGN KEY (run_id, run_event_seq) REFERENCES qinglong.run_events(run_id, seq),
    CONSTRAINT tool_execution_start_barriers_run_id_run_event_seq_key UNIQUE (run_id, run_event_seq),
    CONSTRAINT tool_execution_start_barriers_run_id_step_run_id_started_st_key UNIQUE (run_id, step_run_id, started_step_run_version),
    CONSTRAINT tool_execution_start_barriers_schema_version_check CHECK ((schema_version = 1)),
    CONSTRAINT tool_execution_start_barriers_snapshot_digest_check CHECK ((length(snapshot_digest) = 64)),
    CONSTRAINT tool_execution_start_barriers_started_step_run_digest_check CHECK ((length(started_step_run_digest) = 64)),
    CONSTRAINT tool_execution_start_barriers_started_step_run_version_check CHECK ((started_step_run_version >= 2)),
    CONSTRAINT tool_execution_start_barriers_step_run_id_fkey FOREIGN KEY (step_run_id) REFERENCES qinglong.step_runs(step_run_id),
    CONSTRAINT tool_execution_start_barriers_trace_digest_check CHECK ((length(trace_digest) = 64)),
    CONSTRAINT tool_execution_start_barriers_trace_id_fkey FOREIGN KEY (trace_id) REFERENCES qinglong.trace_anchors(trace_id),
    CONSTRAINT tool_execution_start_barriers_trace_id_key UNIQUE (trace_id)
);
GRANT SELECT ON TABLE qinglong.tool_execution_start_barriers TO qinglong_pruner;
GRANT INSERT, SELECT ON TABLE qinglong.tool_execution_start_barriers TO qinglong_runtime;

-- table trace_anchors
CREATE TABLE qinglong.trace_anchors (
    trace_id text NOT NULL,
    project_id text NOT NULL,
    run_id text NOT NULL,
    step_run_id text NOT NULL,
    start_id text NOT NULL,
    command_digest text NOT NULL,
    trace_digest text NOT NULL,
    committed_at_ms bigint NOT NULL,
    CONSTRAINT trace_anchors_command_digest_check CHECK ((length(command_digest) = 64)),
    CONSTRAINT trace_anchors_pkey PRIMARY KEY (trace_id),
    CONSTRAINT trace_anchors_run_id_fkey FOREIGN KEY (run_id) REFERENCES qinglong.runs(run_id),
    CONSTRAINT trace_anchors_start_id_key UNIQUE (start_id),
    CONSTRAINT trace_anchors_step_run_id_fkey FOREIGN KEY (step_run_id) REFERENCES qinglong.step_runs(step_run_id),
    CONSTRAINT trace_anchors_trace_digest_check CHECK ((length(trace_digest) = 64))
);
GRANT SELECT ON TABLE qinglong.trace_anchors TO qinglong_operator;
GRANT INSERT, SELECT ON TABLE qinglong.trace_anchors TO qinglong_runtime;

-- table transactional_action_types
CREATE TABLE qinglong.transactional_action_types (
    action_type text NOT NULL,
    CONSTRAINT transactional_action_types_action_type_check CHECK (((length(action_type) >= 1) AND (length(action_type) <= 128))),
    CONSTRAINT transactional_action_types_pkey PRIMARY KEY (action_type)
);
GRANT SELECT ON TABLE qinglong.transactional_action_types TO qinglong_operator;
GRANT SELECT ON TABLE qinglong.transactional_action_types TO qinglong_runtime;
GRANT SELECT ON TABLE qinglong.transactional_action_types TO qinglong_viewer;

-- table ui_sessions
CREATE TABLE qinglong.ui_sessions (
    session_sha256 text NOT NULL,
    token_id text NOT NULL,
    principal text NOT NULL,
    created_at_ms bigint NOT NULL,
    last_seen_at_ms bigint NOT NULL,
    idle_ms bigint NOT NULL,
    expires_at_ms bigint NOT NULL,
    revoked_at_ms bigint,
    CONSTRAINT ui_sessions_check CHECK ((expires_at_ms > created_at_ms)),
    CONSTRAINT ui_sessions_idle_ms_check CHECK ((idle_ms > 0)),
    CONSTRAINT ui_sessions_pkey PRIMARY KEY (session_sha256),
    CONSTRAINT ui_sessions_principal_check CHECK ((principal ~ '^[a-z][a-z0-9_]{0,51}$'::text)),
    CONSTRAINT ui_sessions_session_sha256_check CHECK ((session_sha256 ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT ui_sessions_token_id_check CHECK ((token_id ~ '^tok_[0-9a-f]{16}$'::text))
);
GRANT DELETE, INSERT, SELECT ON TABLE qinglong.ui_sessions TO qinglong_runtime;
GRANT UPDATE (last_seen_at_ms, revoked_at_ms) ON TABLE qinglong.ui_sessions TO qinglong_runtime;

-- table uncertain_outcomes
CREATE TABLE qinglong.uncertain_outcomes (
    dispatch_id text NOT NULL,
    execution_attempt integer NOT NULL,
    lease_owner text NOT NULL,
    result_code text NOT NULL,
    evidence_json text NOT NULL,
    recorded_at_ms bigint NOT NULL,
    lease_proof text,
    CONSTRAINT uncertain_outcomes_dispatch_id_fkey FOREIGN KEY (dispatch_id) REFERENCES qinglong.approved_action_dispatches(dispatch_id),
    CONSTRAINT uncertain_outcomes_evidence_json_check CHECK (((octet_length(evidence_json) <= 16384) AND ("left"(evidence_json, 1) = '{'::text))),
    CONSTRAINT uncertain_outcomes_execution_attempt_check CHECK ((execution_attempt >= 1)),
    CONSTRAINT uncertain_outcomes_pkey PRIMARY KEY (dispatch_id),
    CONSTRAINT uncertain_outcomes_proof_not_stored CHECK ((lease_proof IS NULL)),
    CONSTRAINT uncertain_outcomes_result_code_check CHECK (((length(result_code) >= 1) AND (length(result_code) <= 128)))
);
GRANT SELECT ON TABLE qinglong.uncertain_outcomes TO qinglong_operator;
GRANT DELETE, SELECT ON TABLE qinglong.uncertain_outcomes TO qinglong_pruner;
GRANT INSERT, SELECT ON TABLE qinglong.uncertain_outcomes TO qinglong_runtime;
GRANT SELECT ON TABLE qinglong.uncertain_outcomes TO qinglong_submitter;
GRANT SELECT ON TABLE qinglong.uncertain_outcomes TO qinglong_viewer;
GRANT SELECT (dispatch_id, execution_attempt, result_code) ON TABLE qinglong.uncertain_outcomes TO qinglong_recorder;

-- sequences (7)

CREATE SEQUENCE qinglong.approval_events_id_seq AS bigint START 1 INCREMENT 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1 OWNED BY qinglong.approval_events.id;

CREATE SEQUENCE qinglong.execution_events_event_id_seq AS bigint START 1 INCREMENT 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1 OWNED BY qinglong.execution_events.event_id;
GRANT USAGE ON SEQUENCE qinglong.execution_events_event_id_seq TO qinglong_approver;
GRANT USAGE ON SEQUENCE qinglong.execution_events_event_id_seq TO qinglong_operator;
GRANT USAGE ON SEQUENCE qinglong.execution_events_event_id_seq TO qinglong_recorder;
GRANT USAGE ON SEQUENCE qinglong.execution_events_event_id_seq TO qinglong_runtime;
GRANT USAGE ON SEQUENCE qinglong.execution_events_event_id_seq TO qinglong_submitter;

CREATE SEQUENCE qinglong.freezes_freeze_id_seq AS bigint START 1 INCREMENT 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1 OWNED BY qinglong.freezes.freeze_id;

CREATE SEQUENCE qinglong.inbox_notes_note_id_seq AS bigint START 1 INCREMENT 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1 OWNED BY qinglong.inbox_notes.note_id;

CREATE SEQUENCE qinglong.notification_attempts_id_seq AS bigint START 1 INCREMENT 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1 OWNED BY qinglong.notification_attempts.id;

CREATE SEQUENCE qinglong.notification_events_id_seq AS bigint START 1 INCREMENT 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1 OWNED BY qinglong.notification_events.id;

CREATE SEQUENCE qinglong.security_audit_events_event_id_seq AS bigint START 1 INCREMENT 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1 OWNED BY qinglong.security_audit_events.event_id;
GRANT USAGE ON SEQUENCE qinglong.security_audit_events_event_id_seq TO qinglong_approver;
GRANT USAGE ON SEQUENCE qinglong.security_audit_events_event_id_seq TO qinglong_operator;
GRANT USAGE ON SEQUENCE qinglong.security_audit_events_event_id_seq TO qinglong_recorder;
GRANT USAGE ON SEQUENCE qinglong.security_audit_events_event_id_seq TO qinglong_runtime;
GRANT USAGE ON SEQUENCE qinglong.security_audit_events_event_id_seq TO qinglong_submitter;

-- indexes (98; those of primary keys and UNIQUE constraints too)
CREATE UNIQUE INDEX action_plans_pkey ON qinglong.action_plans USING btree (project_id, action_ref);
CREATE UNIQUE INDEX api_tokens_pkey ON qinglong.api_tokens USING btree (token_id);
CREATE INDEX api_tokens_principal ON qinglong.api_tokens USING btree (principal);
CREATE UNIQUE INDEX api_tokens_secret_sha256_key ON qinglong.api_tokens USING btree (secret_sha256);
CREATE UNIQUE INDEX approval_events_approval_request_id_kind_key ON qinglong.approval_events USING btree (approval_request_id, kind);
CREATE UNIQUE INDEX approval_events_pkey ON qinglong.approval_events USING btree (id);
CREATE UNIQUE INDEX approval_group_members_pkey ON qinglong.approval_group_members USING btree (group_name, principal);
CREATE INDEX approval_policies_action ON qinglong.approval_policies USING btree (action_type);
CREATE UNIQUE INDEX approval_policies_pkey ON qinglong.approval_policies USING btree (name, version);
CREATE UNIQUE INDEX approval_request_policies_pkey ON qinglong.approval_request_policies USING btree (approval_request_id);
CREATE INDEX approval_request_policies_reminded ON qinglong.approval_request_policies USING btree (approval_request_id) WHERE (remind_before_ms IS NOT NULL);
CREATE INDEX approval_requests_by_status ON qinglong.approval_requests USING btree (status, created_at_ms DESC, approval_request_id DESC);
CREATE UNIQUE INDEX approval_requests_one_live_per_plan ON qinglong.approval_requests USING btree (project_id, action_ref) WHERE (status = ANY (ARRAY['pending'::text, 'approved'::text, 'consumed'::text]));
CREATE UNIQUE INDEX approval_requests_pkey ON qinglong.approval_requests USING btree (approval_request_id);
CREATE INDEX approval_requests_plan ON qinglong.approval_requests USING btree (project_id, action_ref);
CREATE INDEX approval_requests_resubmitted_from ON qinglong.approval_requests USING btree (resubmitted_from) WHERE (resubmitted_from IS NOT NULL);
CREATE INDEX approval_requests_waiting ON qinglong.approval_requests USING btree (created_at_ms DESC, approval_request_id DESC) WHERE (status = 'pending'::text);
CREATE UNIQUE INDEX approval_votes_pkey ON qinglong.approval_votes USING btree (approval_request_id, principal);
CREATE INDEX approved_action_dispatch_executions_due ON qinglong.approved_action_dispatch_executions USING btree (eligible_at_ms, dispatch_id) WHERE (eligible_at_ms IS NOT NULL);
CREATE INDEX approved_action_dispatch_executions_executing ON qinglong.approved_action_dispatch_executions USING btree (lease_expires_at_ms, dispatch_id) WHERE (status = 'executing'::text);
CREATE INDEX approved_action_dispatch_executions_finished ON qinglong.approved_action_dispatch_executions USING btree (updated_at_ms, dispatch_id) WHERE (status = ANY (ARRAY['blocked'::text, 'cancelled'::text, 'failed'::text, 'succeeded'::text]));
CREATE UNIQUE INDEX approved_action_dispatch_executions_one_per_target ON qinglong.approved_action_dispatch_executions USING btree (target) WHERE ((target IS NOT NULL) AND ((status = 'leased'::text) OR ((status = 'executing'::text) AND (NOT proceed_on_unknown))));
CREATE INDEX approved_action_dispatch_executions_past_claim ON qinglong.approved_action_dispatch_executions USING btree (target) WHERE ((target IS NOT NULL) AND (status = ANY (ARRAY['leased'::text, 'executing'::text])));
CREATE UNIQUE INDEX approved_action_dispatch_executions_pkey ON qinglong.approved_action_dispatch_executions USING btree (dispatch_id);
CREATE INDEX approved_action_dispatch_executions_status ON qinglong.approved_action_dispatch_executions USING btree (status);
CREATE INDEX approved_action_dispatch_executions_windowed ON qinglong.approved_action_dispatch_executions USING btree (not_after_ms) WHERE ((not_after_ms IS NOT NULL) AND (status = ANY (ARRAY['pending'::text, 'retry_wait'::text, 'leased'::text])));
CREATE UNIQUE INDEX approved_action_dispatches_approval_request_id_key ON qinglong.approved_action_dispatches USING btree (approval_request_id);
CREATE INDEX approved_action_dispatches_created ON qinglong.approved_action_dispatches USING btree (created_at_ms, dispatch_id);
CREATE UNIQUE INDEX approved_action_dispatches_one_per_plan ON qinglong.approved_action_dispatches USING btree (project_id, action_ref);
CREATE UNIQUE INDEX approved_action_dispatches_pkey ON qinglong.approved_action_dispatches USING btree (dispatch_id);
CREATE UNIQUE INDEX approved_run_action_receipts_pkey ON qinglong.approved_run_action_receipts USING btree (dispatch_id);
CREATE UNIQUE INDEX approved_run_action_receipts_resource_type_resource_id_key ON qinglong.approved_run_action_receipts USING btree (resource_type, resource_id);
CREATE UNIQUE INDEX audit_prune_permits_pkey ON qinglong.audit_prune_permits USING btree (cutoff_ms);
CREATE UNIQUE INDEX audit_receipts_audit_event_id_key ON qinglong.audit_receipts USING btree (audit_event_id);
CREATE UNIQUE INDEX audit_receipts_pkey ON qinglong.audit_receipts USING btree (receipt_id);
CREATE UNIQUE INDEX audit_receipts_start_id_key ON qinglong.audit_receipts USING btree (start_id);
CREATE UNIQUE INDEX audit_receipts_trace_id_key ON qinglong.audit_receipts USING btree (trace_id);
CREATE UNIQUE INDEX execution_events_dispatch_id_version_key ON qinglong.execution_events USING btree (dispatch_id, version);
CREATE UNIQUE INDEX execution_events_mutation ON qinglong.execution_events USING btree (dispatch_id, mutation_id) WHERE (mutation_id IS NOT NULL);
CREATE UNIQUE INDEX execution_events_pkey ON qinglong.execution_events USING btree (event_id);
CREATE INDEX freeze_lifts_freeze ON qinglong.freeze_lifts USING btree (freeze_id);
CREATE UNIQUE INDEX freeze_lifts_pkey ON qinglong.freeze_lifts USING btree (dispatch_id, freeze_id);
CREATE INDEX freezes_in_force ON qinglong.freezes USING btree (until_ms) WHERE (ended_at_ms IS NULL);
CREATE UNIQUE INDEX freezes_pkey ON qinglong.freezes USING btree (freeze_id);
CREATE INDEX inbox_notes_approval ON qinglong.inbox_notes USING btree (approval_request_id) WHERE (approval_request_id IS NOT NULL);
CREATE INDEX inbox_notes_dispatch ON qinglong.inbox_notes USING btree (dispatch_id) WHERE (dispatch_id IS NOT NULL);
CREATE UNIQUE INDEX inbox_notes_pkey ON qinglong.inbox_notes USING btree (note_id);
CREATE INDEX notification_attempts_event ON qinglong.notification_attempts USING btree (event_id);
CREATE UNIQUE INDEX notification_attempts_pkey ON qinglong.notification_attempts USING btree (id);
CREATE UNIQUE INDEX notification_deliverer_pkey ON qinglong.notification_deliverer USING btree (singleton);
CREATE INDEX notification_deliveries_dead ON qinglong.notification_deliveries USING btree (done_at_ms) WHERE (status = 'dead'::text);
CREATE INDEX notification_deliveries_due ON qinglong.notification_deliveries USING btree (next_attempt_at_ms, event_id) WHERE (status = 'pending'::text);
CREATE UNIQUE INDEX notification_deliveries_pkey ON qinglong.notification_deliveries USING btree (event_id, subscription);
CREATE INDEX notification_deliveries_subject ON qinglong.notification_deliveries USING btree (subscription, subject_id, event_id) WHERE (status = 'pending'::text);
CREATE INDEX notification_events_at ON qinglong.notification_events USING btree (at_ms, id);
CREATE UNIQUE INDEX notification_events_pkey ON qinglong.notification_events USING btree (id);
CREATE UNIQUE INDEX notification_events_subject_id_kind_key ON qinglong.notification_events USING btree (subject_id, kind);
CREATE UNIQUE INDEX notification_fanouts_pkey ON qinglong.notification_fanouts USING btree (event_id);
CREATE UNIQUE INDEX notification_subscriptions_pkey ON qinglong.notification_subscriptions USING btree (name);
CREATE UNIQUE INDEX plan_keys_pkey ON qinglong.plan_keys USING btree (key_id);
CREATE UNIQUE INDEX prune_permits_approval_request_id_key ON qinglong.prune_permits USING btree (approval_request_id);
CREATE UNIQUE INDEX prune_permits_pkey ON qinglong.prune_permits USING btree (dispatch_id);
CREATE INDEX prune_permits_plan ON qinglong.prune_permits USING btree (project_id, action_ref);
CREATE UNIQUE INDEX recovery_observations_pkey ON qinglong.recovery_observations USING btree (dispatch_id);
CREATE UNIQUE INDEX recovery_required_marks_pkey ON qinglong.recovery_required_marks USING btree (dispatch_id);
CREATE UNIQUE INDEX recovery_resolutions_pkey ON qinglong.recovery_resolutions USING btree (dispatch_id);
CREATE UNIQUE INDEX run_attempts_pkey ON qinglong.run_attempts USING btree (run_id, attempt_no);
CREATE UNIQUE INDEX run_events_pkey ON qinglong.run_events USING btree (run_id, seq);
CREATE INDEX runs_idempotency_key ON qinglong.runs USING btree (idempotency_key);
CREATE UNIQUE INDEX runs_pkey ON qinglong.runs USING btree (run_id);
CREATE UNIQUE INDEX runs_project_id_idempotency_key_key ON qinglong.runs USING btree (project_id, idempotency_key);
CREATE UNIQUE INDEX schema_migrations_pkey ON qinglong.schema_migrations USING btree (version);
CREATE INDEX security_audit_events_committed ON qinglong.security_audit_events USING btree (committed_at_ms);
CREATE UNIQUE INDEX security_audit_events_pkey ON qinglong.security_audit_events USING btree (event_id);
CREATE INDEX security_audit_events_subject ON qinglong.security_audit_events USING btree (subject_id);
CREATE UNIQUE INDEX step_run_mutations_pkey ON qinglong.step_run_mutations USING btree (mutation_id);
CREATE UNIQUE INDEX step_run_mutations_step_run_id_to_version_key ON qinglong.step_run_mutations USING btree (step_run_id, to_version);
CREATE UNIQUE INDEX step_runs_approval_request_id_key ON qinglong.step_runs USING btree (approval_request_id);
CREATE UNIQUE INDEX step_runs_pkey ON qinglong.step_runs USING btree (step_run_id);
CREATE INDEX step_runs_run ON qinglong.step_runs USING btree (run_id);
CREATE INDEX step_runs_status ON qinglong.step_runs USING btree (status);
CREATE INDEX tool_execution_start_barriers_approval ON qinglong.tool_execution_start_barriers USING btree (approval_request_id);
CREATE UNIQUE INDEX tool_execution_start_barriers_audit_event_id_key ON qinglong.tool_execution_start_barriers USING btree (audit_event_id);
CREATE UNIQUE INDEX tool_execution_start_barriers_audit_receipt_id_key ON qinglong.tool_execution_start_barriers USING btree (audit_receipt_id);
CREATE UNIQUE INDEX tool_execution_start_barriers_dispatch_id_key ON qinglong.tool_execution_start_barriers USING btree (dispatch_id);
CREATE UNIQUE INDEX tool_execution_start_barriers_mutation_id_key ON qinglong.tool_execution_start_barriers USING btree (mutation_id);
CREATE UNIQUE INDEX tool_execution_start_barriers_pkey ON qinglong.tool_execution_start_barriers USING btree (start_id);
CREATE UNIQUE INDEX tool_execution_start_barriers_run_id_run_event_seq_key ON qinglong.tool_execution_start_barriers USING btree (run_id, run_event_seq);
CREATE UNIQUE INDEX tool_execution_start_barriers_run_id_step_run_id_started_st_key ON qinglong.tool_execution_start_barriers USING btree (run_id, step_run_id, started_step_run_version);
CREATE UNIQUE INDEX tool_execution_start_barriers_trace_id_key ON qinglong.tool_execution_start_barriers USING btree (trace_id);
CREATE UNIQUE INDEX trace_anchors_pkey ON qinglong.trace_anchors USING btree (trace_id);
CREATE UNIQUE INDEX trace_anchors_start_id_key ON qinglong.trace_anchors USING btree (start_id);
CREATE UNIQUE INDEX transactional_action_types_pkey ON qinglong.transactional_action_types USING btree (action_type);
CREATE INDEX ui_sessions_expires ON qinglong.ui_sessions USING btree (expires_at_ms);
CREATE UNIQUE INDEX ui_sessions_pkey ON qinglong.ui_sessions USING btree (session_sha256);
CREATE INDEX ui_sessions_principal ON qinglong.ui_sessions USING btree (principal, created_at_ms);
CREATE INDEX ui_sessions_token ON qinglong.ui_sessions USING btree (token_id);
CREATE UNIQUE INDEX uncertain_outcomes_pkey ON qinglong.uncertain_outcomes USING btree (dispatch_id);

-- functions (72)

-- function qinglong.acting_principal()
CREATE OR REPLACE FUNCTION qinglong.acting_principal()
 RETURNS text
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    acting pg_catalog.text := qinglong.acting_role();
BEGIN
    IF acting IS DISTINCT FROM SESSION_USER::pg_catalog.text THEN
        -- A principal role's name without its prefix (`shop_p_alice` → `alice`); NULL stays.
        RETURN pg_catalog.substr(acting, pg_catalog.length(
            pg_catalog.regexp_replace('qinglong_api', 'api$', 'p_')) OPERATOR(pg_catalog.+) 1);
    END IF;
    RETURN acting;
END
$function$;
GRANT EXECUTE ON FUNCTION qinglong.acting_principal() TO PUBLIC;

-- function qinglong.acting_role()
CREATE OR REPLACE FUNCTION qinglong.acting_role()
 RETURNS text
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    api pg_catalog.oid := pg_catalog.to_regrole('qinglong_api');
BEGIN
    IF CURRENT_USER IS DISTINCT FROM SESSION_USER
            AND pg_catalog.starts_with(CURRENT_USER::pg_catalog.text,
                pg_catalog.regexp_replace('qinglong_api', 'api$', 'p_'))
            AND EXISTS (
                SELECT 1 FROM pg_catalog.pg_auth_members AS m
                WHERE m.roleid = pg_catalog.quote_ident(CURRENT_USER)::pg_catalog.regrole
                  AND m.member = api) THEN
        RETURN CURRENT_USER::pg_catalog.text;
    END IF;
    -- The API's login acting as itself is nobody: it may only become a principal.
    IF EXISTS (
            SELECT 1 FROM pg_catalog.pg_auth_members AS m
            WHERE m.roleid = api
              AND m.member = pg_catalog.quote_ident(SESSION_USER)::pg_catalog.regrole) THEN
        RETURN NULL;
    END IF;
    RETURN SESSION_USER::pg_catalog.text;
END
$function$;
GRANT EXECUTE ON FUNCTION qinglong.acting_role() TO PUBLIC;

-- function qinglong.audit_approval_policy()
CREATE OR REPLACE FUNCTION qinglong.audit_approval_policy()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;
ALTER FUNCTION qinglong.audit_approval_policy() OWNER TO qinglong_recorder;

-- function qinglong.audit_approval_request()
CREATE OR REPLACE FUNCTION qinglong.audit_approval_request()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    kind      pg_catalog.text;
    actor     pg_catalog.text;
    detail    pg_catalog.text;
    principal pg_catalog.text;
    said      pg_catalog.text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        kind := 'approval.created';
        actor := NEW.requested_by;
        detail := NEW.action_type;
        principal := NEW.requested_principal;
    ELSIF NEW.status IS DISTINCT FROM OLD.status THEN
        kind := 'approval.' OPERATOR(pg_catalog.||) NEW.status;
        IF NEW.status = 'consumed' THEN
            actor := NEW.consumed_principal;
            detail := NEW.action_type;
            principal := NEW.consumed_principal;
        ELSE
            actor := NEW.decided_by;
            detail := CASE WHEN NEW.status = 'expired' THEN 'db_clock'
                           WHEN NEW.decided_principal = NEW.requested_principal
                           THEN 'by_requester' ELSE 'by_other' END;
            principal := NEW.decided_principal;
            said := NEW.decision_comment;
        END IF;
    ELSE
        RETURN NULL;
    END IF;
    INSERT INTO qinglong.security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, comment, committed_at_ms
    ) VALUES (
        kind, actor, principal, NEW.project_id, NEW.approval_request_id, detail, said,
        (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
            OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8
    );
    RETURN NULL;
END
$function$;
ALTER FUNCTION qinglong.audit_approval_request() OWNER TO qinglong_recorder;

-- function qinglong.audit_freeze()
CREATE OR REPLACE FUNCTION qinglong.audit_freeze()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF TG_TABLE_NAME = 'freeze_lifts' THEN
        INSERT INTO qinglong.security_audit_events (
            kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
        ) SELECT 'approval.freeze_lifted', NEW.lifted_by, NEW.lifted_by, d.project_id, NEW.dispatch_id,
                 NEW.freeze_id::pg_catalog.text, NEW.lifted_at_ms
          FROM qinglong.approved_action_dispatches AS d WHERE d.dispatch_id = NEW.dispatch_id;
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO qinglong.security_audit_events (
            kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
        ) VALUES ('approval.freeze_added', NEW.created_by, NEW.created_by,
                  COALESCE(NEW.project_id, ''), 'freeze:' || NEW.freeze_id::pg_catalog.text, pg_catalog.left(NEW.reason, 128),
                  NEW.created_at_ms);
    ELSE
        INSERT INTO qinglong.security_audit_events (
            kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
        ) VALUES ('approval.freeze_ended', NEW.ended_by, NEW.ended_by,
                  COALESCE(NEW.project_id, ''), 'freeze:' || NEW.freeze_id::pg_catalog.text, 'ended', NEW.ended_at_ms);
    END IF;
    RETURN NULL;
END
$function$;
ALTER FUNCTION qinglong.audit_freeze() OWNER TO qinglong_recorder;

-- function qinglong.audit_subject_finished(p_subject_id text, p_cutoff_ms bigint)
CREATE OR REPLACE FUNCTION qinglong.audit_subject_finished(p_subject_id text, p_cutoff_ms bigint)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;
GRANT EXECUTE ON FUNCTION qinglong.audit_subject_finished(p_subject_id text, p_cutoff_ms bigint) TO qinglong_pruner;

-- function qinglong.check_direct_approval()
CREATE OR REPLACE FUNCTION qinglong.check_direct_approval()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    required pg_catalog.int4;
BEGIN
    SELECT approvals_required INTO required FROM qinglong.approval_request_policies
        WHERE approval_request_id = NEW.approval_request_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF required > 1 AND (SELECT pg_catalog.count(*) FROM qinglong.approval_votes
                         WHERE approval_request_id = NEW.approval_request_id
                           AND vote = 'approve'
                           AND principal IS DISTINCT FROM NEW.decided_principal)
                        OPERATOR(pg_catalog.+) 1 < required THEN
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
$function$;

-- function qinglong.check_execution_change()
CREATE OR REPLACE FUNCTION qinglong.check_execution_change()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    acting   pg_catalog.text;
    claim    pg_catalog.bool;
    takeover pg_catalog.bool;
    refund   pg_catalog.int4;
    now_ms   pg_catalog.int8 := qinglong.db_now_ms();
    proven   pg_catalog.bool;
    settled  pg_catalog.bool;
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- A consumed approval creates the row pending@v0 (docs/state-machine.md): nothing
        -- claimed, taken over, started or settled yet.
        IF NEW.status IS DISTINCT FROM 'pending' OR NEW.version IS DISTINCT FROM 0
                OR NEW.attempt IS DISTINCT FROM 0 OR NEW.takeovers IS DISTINCT FROM 0
                OR NEW.lease_owner IS NOT NULL
                OR NEW.lease_token IS NOT NULL OR NEW.lease_expires_at_ms IS NOT NULL
                OR NEW.started_at_ms IS NOT NULL OR NEW.retry_at_ms IS NOT NULL
                OR NEW.result_mutation_id IS NOT NULL OR NEW.result_code IS NOT NULL
                OR NEW.completed_at_ms IS NOT NULL OR NEW.lease_proof_digest IS NOT NULL
                OR NEW.lease_proof IS NOT NULL THEN
            RAISE EXCEPTION 'qinglong:transition_refused: insert (→ %)', NEW.status
                USING ERRCODE = 'QLT01';
        END IF;
        RETURN NEW;
    END IF;
    IF OLD.status IN ('succeeded', 'failed', 'blocked', 'cancelled') THEN
        RAISE EXCEPTION 'qinglong:transition_refused: terminal (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    IF (NEW.dispatch_id, NEW.project_id, NEW.max_attempts, NEW.created_at_ms)
            IS DISTINCT FROM (OLD.dispatch_id, OLD.project_id, OLD.max_attempts,
                              OLD.created_at_ms) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: identity (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    IF NEW.version IS NULL OR NEW.version <= OLD.version THEN
        RAISE EXCEPTION 'qinglong:transition_refused: version (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    IF (OLD.status, NEW.status) NOT IN (
            ('pending', 'leased'), ('retry_wait', 'leased'), ('leased', 'leased'),
            ('pending', 'pending'),
            ('pending', 'blocked'), ('retry_wait', 'blocked'), ('leased', 'blocked'),
            ('leased', 'retry_wait'), ('leased', 'pending'), ('leased', 'executing'),
            ('executing', 'executing'), ('executing', 'succeeded'),
            ('executing', 'failed'), ('executing', 'blocked'),
            ('pending', 'cancelled'), ('retry_wait', 'cancelled'), ('leased', 'cancelled'),
            ('pending', 'succeeded')) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: transition (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    -- Cancelling is an operator's decision: the runtime login never makes it.
    -- (Asked only for a cancel: every claim and start passes here, and must stay cheap.)
    IF NEW.status = 'cancelled' THEN
        acting := qinglong.acting_role();
    END IF;
    -- Or the runtime's end of a wait whose execution window closed on the database clock
    -- (`window_expired`, migration 0035): never before, never by anyone else.
    IF NEW.status = 'cancelled' AND NEW.result_code IS NOT DISTINCT FROM 'window_expired' THEN
        IF acting IS NULL
                OR NOT pg_catalog.pg_has_role(acting, 'qinglong_runtime', 'MEMBER') THEN
            RAISE EXCEPTION 'qinglong:transition_refused: runtime (% → %)', OLD.status,
                NEW.status USING ERRCODE = 'QLT01';
        END IF;
        IF OLD.not_after_ms IS NULL OR OLD.not_after_ms > now_ms THEN
            RAISE EXCEPTION 'qinglong:window_refused: the window is still open (% → %)',
                OLD.status, NEW.status USING ERRCODE = 'QLW01';
        END IF;
        IF OLD.status = 'leased' AND OLD.lease_expires_at_ms > now_ms THEN
            RAISE EXCEPTION 'qinglong:fence_refused: live lease (% → %)', OLD.status,
                NEW.status USING ERRCODE = 'QLF02';
        END IF;
    ELSIF OLD.status = 'leased' AND NEW.status = 'cancelled' THEN
        -- A claimed row is cancelled by nobody: only its window's end takes it back.
        RAISE EXCEPTION 'qinglong:transition_refused: transition (% → %)', OLD.status,
            NEW.status USING ERRCODE = 'QLT01';
    ELSIF NEW.status = 'cancelled' AND (acting IS NULL
            OR NOT pg_catalog.pg_has_role(acting, 'qinglong_operator', 'MEMBER')) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: operator (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    -- No lease runs further ahead of the database clock than a day: a holder may delay work,
    -- not park a row out of every operator's reach.
    IF NEW.lease_expires_at_ms > now_ms + 86400000 THEN
        RAISE EXCEPTION 'qinglong:fence_refused: lease beyond the bound (% → %)', OLD.status,
            NEW.status USING ERRCODE = 'QLF03';
    END IF;
    -- A passage (migration 0043): taking the next attempt within the budget as a claim
    -- would, started and completed by this one write under the holder's proof (the Run and
    -- the receipt written after it in the same transaction present that proof; the receipt is
    -- checked at commit). Who passes it, and for which type, the statement's check asks once
    -- for all its rows (`check_passages`, below).
    IF OLD.status = 'pending' AND NEW.status = 'succeeded' THEN
        IF NEW.attempt IS DISTINCT FROM OLD.attempt + 1 OR NEW.attempt > NEW.max_attempts
                OR NEW.takeovers IS DISTINCT FROM OLD.takeovers
                OR NEW.lease_owner IS NULL OR NEW.lease_token IS NULL
                OR NEW.started_at_ms IS NULL OR NEW.completed_at_ms IS NULL
                OR NEW.result_mutation_id IS NULL
                OR NEW.passage_receipt IS DISTINCT FROM NEW.dispatch_id THEN
            RAISE EXCEPTION 'qinglong:transition_refused: passage (% → %)', OLD.status,
                NEW.status USING ERRCODE = 'QLT01';
        END IF;
        IF NEW.lease_proof IS NULL THEN
            RAISE EXCEPTION 'qinglong:fence_refused: a passage presents its proof (% → %)',
                OLD.status, NEW.status USING ERRCODE = 'QLF01';
        END IF;
        NEW.lease_proof_digest := pg_catalog.encode(pg_catalog.sha256(
            pg_catalog.convert_to(NEW.lease_proof, 'UTF8')), 'hex');
        NEW.lease_proof := NULL;
        RETURN NEW;
    END IF;
    -- Only a passage names a receipt on its row (point 3).
    IF NEW.passage_receipt IS DISTINCT FROM OLD.passage_receipt THEN
        RAISE EXCEPTION 'qinglong:transition_refused: passage receipt (% → %)', OLD.status,
            NEW.status USING ERRCODE = 'QLT01';
    END IF;
    -- A handler wait made due earlier: only its due time moves back, nothing else.
    IF OLD.status = 'pending' AND NEW.status = 'pending' THEN
        IF OLD.result_code IS DISTINCT FROM 'handler_missing'
                OR NOT NEW.eligible_at_ms < OLD.eligible_at_ms
                OR (NEW.attempt, NEW.takeovers, NEW.lease_owner, NEW.lease_token,
                    NEW.lease_expires_at_ms, NEW.started_at_ms, NEW.retry_at_ms,
                    NEW.result_mutation_id, NEW.result_code, NEW.completed_at_ms)
                   IS DISTINCT FROM
                   (OLD.attempt, OLD.takeovers, OLD.lease_owner, OLD.lease_token,
                    OLD.lease_expires_at_ms, OLD.started_at_ms, OLD.retry_at_ms,
                    OLD.result_mutation_id, OLD.result_code, OLD.completed_at_ms) THEN
            RAISE EXCEPTION 'qinglong:transition_refused: wake (% → %)', OLD.status,
                NEW.status USING ERRCODE = 'QLT01';
        END IF;
        NEW.lease_proof_digest := OLD.lease_proof_digest;
        NEW.lease_proof := NULL;
        RETURN NEW;
    END IF;
    -- A takeover: a new claim of a leased row (a new token, or the same claimant again with
    -- its lease run out). It keeps the attempt (the dead holder's claim is refunded) and
    -- counts one takeover within the bound; the old lease has expired.
    takeover := OLD.status = 'leased' AND NEW.status = 'leased'
        AND (NEW.lease_token IS DISTINCT FROM OLD.lease_token
             OR NEW.takeovers IS DISTINCT FROM OLD.takeovers);
    IF takeover THEN
        IF NEW.attempt IS DISTINCT FROM OLD.attempt
                OR NEW.takeovers IS DISTINCT FROM OLD.takeovers + 1
                OR NEW.takeovers > 4 * NEW.max_attempts
                OR NEW.started_at_ms IS NOT NULL THEN
            RAISE EXCEPTION 'qinglong:transition_refused: takeover (% → %)', OLD.status,
                NEW.status USING ERRCODE = 'QLT01';
        END IF;
    END IF;
    claim := takeover OR (NEW.status = 'leased' AND OLD.status <> 'leased');
    IF claim THEN
        IF NOT takeover AND (NEW.attempt IS DISTINCT FROM OLD.attempt + 1
                OR NEW.attempt > NEW.max_attempts OR NEW.started_at_ms IS NOT NULL
                OR NEW.takeovers IS DISTINCT FROM OLD.takeovers) THEN
            RAISE EXCEPTION 'qinglong:transition_refused: attempt (% → %)', OLD.status,
                NEW.status USING ERRCODE = 'QLT01';
        END IF;
        -- A takeover only once the old lease expired on the database's own clock.
        IF OLD.status = 'leased' AND OLD.lease_expires_at_ms > now_ms THEN
            RAISE EXCEPTION 'qinglong:fence_refused: live lease (% → %)', OLD.status,
                NEW.status USING ERRCODE = 'QLF02';
        END IF;
        IF NEW.lease_proof IS NULL THEN
            RAISE EXCEPTION 'qinglong:fence_refused: a claim presents its proof (% → %)',
                OLD.status, NEW.status USING ERRCODE = 'QLF01';
        END IF;
        NEW.lease_proof_digest := pg_catalog.encode(pg_catalog.sha256(
            pg_catalog.convert_to(NEW.lease_proof, 'UTF8')), 'hex');
        NEW.lease_proof := NULL;
        RETURN NEW;
    END IF;
    IF NEW.takeovers IS DISTINCT FROM OLD.takeovers THEN
        RAISE EXCEPTION 'qinglong:transition_refused: takeover (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    refund := CASE WHEN OLD.status = 'leased' AND NEW.status = 'pending' THEN 1 ELSE 0 END;
    IF NEW.attempt IS DISTINCT FROM OLD.attempt - refund THEN
        RAISE EXCEPTION 'qinglong:transition_refused: attempt (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    IF (NEW.lease_owner, NEW.lease_token) IS DISTINCT FROM (OLD.lease_owner, OLD.lease_token)
            OR (NEW.started_at_ms IS DISTINCT FROM OLD.started_at_ms
                AND NOT (OLD.status = 'leased' AND NEW.status = 'executing')) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: fence (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    IF OLD.status IN ('leased', 'executing') THEN
        proven := OLD.lease_proof_digest IS NOT NULL AND NEW.lease_proof IS NOT NULL
            AND pg_catalog.encode(pg_catalog.sha256(
                    pg_catalog.convert_to(NEW.lease_proof, 'UTF8')), 'hex')
                = OLD.lease_proof_digest;
        IF NOT proven THEN
            -- Without the holder's proof: an expired lease whose takeovers are spent may be
            -- blocked as such, and a recovery resolution for this exact fence may settle an
            -- expired started row.
            IF OLD.status = 'leased' THEN
                settled := OLD.lease_expires_at_ms <= now_ms AND (
                    (NEW.status = 'blocked'
                     AND OLD.takeovers >= 4 * OLD.max_attempts
                     AND NEW.result_code IS NOT DISTINCT FROM 'takeovers_exhausted')
                    OR (NEW.status = 'cancelled'
                        AND NEW.result_code IS NOT DISTINCT FROM 'window_expired'));
            ELSE
                settled := NEW.status IN ('succeeded', 'failed', 'blocked')
                    AND OLD.lease_expires_at_ms <= now_ms
                    AND EXISTS (
                        SELECT 1 FROM qinglong.recovery_resolutions AS r
                        WHERE r.dispatch_id = OLD.dispatch_id
                          AND r.resolution = NEW.status
                          AND r.execution_attempt = OLD.attempt
                          AND r.lease_owner = OLD.lease_owner
                          AND r.lease_token = OLD.lease_token
                          AND r.started_at_ms = OLD.started_at_ms);
            END IF;
            IF NOT settled THEN
                RAISE EXCEPTION 'qinglong:fence_refused: not the lease holder (% → %)',
                    OLD.status, NEW.status USING ERRCODE = 'QLF01';
            END IF;
        END IF;
    END IF;
    NEW.lease_proof_digest := OLD.lease_proof_digest;
    NEW.lease_proof := NULL;
    RETURN NEW;
END
$function$;

-- function qinglong.check_execution_freeze()
CREATE OR REPLACE FUNCTION qinglong.check_execution_freeze()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    now_ms    pg_catalog.int8;
    frozen_by pg_catalog.int8;
BEGIN
    -- Every lease and start comes here: with no freeze in force (nearly always), one probe of
    -- the partial index and nothing more.
    IF NOT EXISTS (SELECT 1 FROM qinglong.freezes WHERE ended_at_ms IS NULL) THEN
        RETURN NEW;
    END IF;
    now_ms := qinglong.db_now_ms();
    frozen_by := qinglong.freeze_covering(NEW.dispatch_id, now_ms);
    IF frozen_by IS NOT NULL THEN
        RAISE EXCEPTION 'qinglong:freeze_refused: % is frozen by freeze % (% → %)',
            NEW.dispatch_id, frozen_by, OLD.status, NEW.status USING ERRCODE = 'QLZ01';
    END IF;
    RETURN NEW;
END
$function$;

-- function qinglong.check_execution_window()
CREATE OR REPLACE FUNCTION qinglong.check_execution_window()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    now_ms pg_catalog.int8 := qinglong.db_now_ms();
BEGIN
    IF now_ms < NEW.not_before_ms OR now_ms >= NEW.not_after_ms THEN
        RAISE EXCEPTION 'qinglong:window_refused: % outside its execution window (% → %)',
            NEW.dispatch_id, OLD.status, NEW.status USING ERRCODE = 'QLW01';
    END IF;
    RETURN NEW;
END
$function$;
GRANT EXECUTE ON FUNCTION qinglong.check_execution_window() TO PUBLIC;

-- function qinglong.check_passage_receipt()
CREATE OR REPLACE FUNCTION qinglong.check_passage_receipt()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM qinglong.approved_run_action_receipts AS r
                   WHERE r.dispatch_id = NEW.dispatch_id
                     AND r.execution_attempt = NEW.attempt
                     AND r.execution_version = NEW.version
                     AND r.started_at_ms = NEW.started_at_ms) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: a passage commits with its receipt (% → %)',
            OLD.status, NEW.status USING ERRCODE = 'QLT01';
    END IF;
    RETURN NULL;
END
$function$;

-- function qinglong.check_passages()
CREATE OR REPLACE FUNCTION qinglong.check_passages()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    acting pg_catalog.text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM new_rows AS n WHERE n.passage_receipt IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    acting := qinglong.acting_role();
    IF acting IS NULL OR NOT pg_catalog.pg_has_role(acting, 'qinglong_runtime', 'MEMBER') THEN
        RAISE EXCEPTION 'qinglong:transition_refused: runtime (pending → succeeded)'
            USING ERRCODE = 'QLT01';
    END IF;
    IF EXISTS (SELECT 1 FROM new_rows AS n
               WHERE n.passage_receipt IS NOT NULL
                 AND NOT EXISTS (SELECT 1 FROM qinglong.approved_action_dispatches AS d
                                 JOIN qinglong.transactional_action_types AS t
                                   ON t.action_type = d.action_type
                                 WHERE d.dispatch_id = n.dispatch_id))
    THEN
        RAISE EXCEPTION 'qinglong:transition_refused: not transactional (pending → succeeded)'
            USING ERRCODE = 'QLT01';
    END IF;
    RETURN NULL;
END
$function$;

-- function qinglong.check_requested_window()
CREATE OR REPLACE FUNCTION qinglong.check_requested_window()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    now_ms pg_catalog.int8 := qinglong.db_now_ms();
    delay  pg_catalog.int8;
BEGIN
    SELECT p.not_before_delay_ms INTO delay
    FROM qinglong.approval_request_policies AS r
    JOIN qinglong.approval_policies AS p
        ON p.name = r.policy_name AND p.version = r.policy_version
    WHERE r.approval_request_id = NEW.approval_request_id;
    IF COALESCE(NEW.not_before_ms, now_ms) OPERATOR(pg_catalog.+) NEW.window_for_ms
            <= now_ms OPERATOR(pg_catalog.+) COALESCE(delay, 0) THEN
        RAISE EXCEPTION 'the requested window ends before the policy lets it start'
            USING ERRCODE = 'QLW02';
    END IF;
    RETURN NULL;
END
$function$;
ALTER FUNCTION qinglong.check_requested_window() OWNER TO qinglong_recorder;

-- function qinglong.check_resolution_principal()
CREATE OR REPLACE FUNCTION qinglong.check_resolution_principal()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    exe    qinglong.approved_action_dispatch_executions%ROWTYPE;
    acting pg_catalog.text := qinglong.acting_role();
BEGIN
    IF acting IS NULL
            OR NEW.principal IS DISTINCT FROM qinglong.acting_principal() THEN
        RAISE EXCEPTION 'the recorded principal must be the acting principal'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.source = 'manual'
            AND NOT pg_catalog.pg_has_role(acting, 'qinglong_operator', 'MEMBER') THEN
        RAISE EXCEPTION 'a manual recovery resolution needs a qinglong_operator principal'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT * INTO exe FROM qinglong.approved_action_dispatch_executions AS e
    WHERE e.dispatch_id = NEW.dispatch_id;
    IF NOT FOUND OR exe.status IS DISTINCT FROM 'executing'
            OR (exe.attempt, exe.version, exe.lease_owner, exe.lease_token, exe.started_at_ms)
               IS DISTINCT FROM
               (NEW.execution_attempt, NEW.execution_version, NEW.lease_owner,
                NEW.lease_token, NEW.started_at_ms) THEN
        RAISE EXCEPTION 'a resolution names its started execution''s exact fence'
            USING ERRCODE = 'QLR01';
    END IF;
    IF exe.lease_expires_at_ms > qinglong.db_now_ms() THEN
        RAISE EXCEPTION 'a resolution waits for the lease to expire (database clock)'
            USING ERRCODE = 'QLR01';
    END IF;
    NEW.committed_at_ms := (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
        OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8;
    RETURN NEW;
END
$function$;

-- function qinglong.check_step_run_change()
CREATE OR REPLACE FUNCTION qinglong.check_step_run_change()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    acting pg_catalog.text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.status NOT IN ('ready', 'waiting_approval') OR NEW.version IS DISTINCT FROM 1
                OR NEW.result_code IS NOT NULL THEN
            RAISE EXCEPTION 'qinglong:transition_refused: insert (→ %)', NEW.status
                USING ERRCODE = 'QLT01';
        END IF;
        RETURN NEW;
    END IF;
    IF OLD.status IN ('succeeded', 'failed') THEN
        RAISE EXCEPTION 'qinglong:transition_refused: terminal (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    -- The binding digest covers these columns; the row may never drift from it.
    IF (NEW.step_run_id, NEW.run_id, NEW.project_id, NEW.step_kind, NEW.tool_id,
        NEW.tool_version, NEW.definition_digest, NEW.action_type, NEW.action_ref,
        NEW.action_digest, NEW.approval_request_id, NEW.binding_digest, NEW.created_at_ms)
            IS DISTINCT FROM
       (OLD.step_run_id, OLD.run_id, OLD.project_id, OLD.step_kind, OLD.tool_id,
        OLD.tool_version, OLD.definition_digest, OLD.action_type, OLD.action_ref,
        OLD.action_digest, OLD.approval_request_id, OLD.binding_digest, OLD.created_at_ms) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: identity (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    IF NEW.version IS NULL OR NEW.version <= OLD.version THEN
        RAISE EXCEPTION 'qinglong:transition_refused: version (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    IF (OLD.status, NEW.status) NOT IN (
            ('ready', 'running'), ('waiting_approval', 'running'), ('running', 'succeeded'),
            ('running', 'failed'), ('running', 'lost'), ('waiting_approval', 'failed'),
            ('ready', 'failed'), ('lost', 'ready')) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: transition (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    -- Re-arming a lost StepRun lets its tool run again: an operator's decision (the runtime
    -- never makes it, docs/decisions/0019), so the database asks who is deciding.
    IF OLD.status = 'lost' THEN
        acting := qinglong.acting_role();
    END IF;
    IF OLD.status = 'lost' AND (acting IS NULL
            OR NOT pg_catalog.pg_has_role(acting, 'qinglong_operator', 'MEMBER')) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: operator (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    RETURN NEW;
END
$function$;

-- function qinglong.check_target_holder()
CREATE OR REPLACE FUNCTION qinglong.check_target_holder()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    now_ms pg_catalog.int8;
    holder pg_catalog.text;
BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock(1903326210, pg_catalog.hashtext(NEW.target));
    now_ms := qinglong.db_now_ms();
    -- A lease: the live proceeding rows (the unique index holds the others); a proceeding
    -- row's start or renewal: every row that holds the target.
    SELECT b.dispatch_id INTO holder
    FROM qinglong.approved_action_dispatch_executions AS b
    WHERE b.target = NEW.target AND b.status IN ('leased', 'executing')
      AND b.dispatch_id <> NEW.dispatch_id
      AND CASE WHEN NEW.status = 'leased'
               THEN b.status = 'executing' AND b.proceed_on_unknown
                    AND b.lease_expires_at_ms > now_ms
               ELSE b.status = 'leased' OR NOT b.proceed_on_unknown
                    OR b.lease_expires_at_ms > now_ms END
    LIMIT 1;
    IF holder IS NOT NULL THEN
        RAISE EXCEPTION 'qinglong:target_refused: % holds the target of % (% → %)', holder,
            NEW.dispatch_id, OLD.status, NEW.status USING ERRCODE = 'QLH01';
    END IF;
    RETURN NEW;
END
$function$;

-- function qinglong.copy_approval_policy()
CREATE OR REPLACE FUNCTION qinglong.copy_approval_policy()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    pol qinglong.approval_policies%ROWTYPE;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM qinglong.approval_policies
                   WHERE action_type = NEW.action_type) THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM qinglong.action_plans
                   WHERE project_id = NEW.project_id AND action_ref = NEW.action_ref) THEN
        RAISE EXCEPTION 'approval request %: its plan is written before it',
            NEW.approval_request_id USING ERRCODE = 'QLA03';
    END IF;
    SELECT * INTO pol FROM qinglong.request_policy_in_force(
        NEW.action_type, NEW.project_id, NEW.action_ref);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF pol.lifetime_ms IS NOT NULL AND pol.lifetime_ms IS DISTINCT FROM
            NEW.expires_at_ms OPERATOR(pg_catalog.-) NEW.created_at_ms THEN
        RAISE EXCEPTION 'the policy in force changed while the request was written'
            USING ERRCODE = '40001';
    END IF;
    INSERT INTO qinglong.approval_request_policies (
        approval_request_id, policy_name, policy_version, approvals_required,
        denials_to_reject, approver_groups, reason_required, lifetime_ms, remind_before_ms,
        target_prefix
    ) VALUES (
        NEW.approval_request_id, pol.name, pol.version, pol.approvals_required,
        pol.denials_to_reject, pol.approver_groups, pol.reason_required, pol.lifetime_ms,
        pol.remind_before_ms, pol.target_prefix
    );
    RETURN NULL;
END
$function$;
ALTER FUNCTION qinglong.copy_approval_policy() OWNER TO qinglong_recorder;

-- function qinglong.count_approval_votes()
CREATE OR REPLACE FUNCTION qinglong.count_approval_votes()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    -- As the voter: the request's guard and audit apply to the move.
    UPDATE qinglong.approval_requests AS r
        SET status = CASE NEW.vote WHEN 'deny' THEN 'rejected' ELSE 'approved' END,
            version = 2, decided_by = COALESCE(NEW.decided_by, NEW.principal),
            decided_principal = NEW.principal, updated_at_ms = NEW.voted_at_ms
        WHERE r.approval_request_id = NEW.approval_request_id AND r.status = 'pending'
          AND (SELECT pg_catalog.count(*) FROM qinglong.approval_votes AS v
               WHERE v.approval_request_id = NEW.approval_request_id
                 AND v.vote = NEW.vote)
              >= COALESCE((SELECT CASE NEW.vote WHEN 'deny' THEN p.denials_to_reject
                                               ELSE p.approvals_required END
                           FROM qinglong.approval_request_policies AS p
                           WHERE p.approval_request_id = NEW.approval_request_id), 1);
    RETURN NULL;
END
$function$;

-- function qinglong.db_now_ms()
CREATE OR REPLACE FUNCTION qinglong.db_now_ms()
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RETURN (pg_catalog.date_part('epoch', pg_catalog.clock_timestamp())
        OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8;
END
$function$;
GRANT EXECUTE ON FUNCTION qinglong.db_now_ms() TO PUBLIC;

-- function qinglong.decision_reasons(p_approval_request_id text)
CREATE OR REPLACE FUNCTION qinglong.decision_reasons(p_approval_request_id text)
 RETURNS TABLE(decision text, principal text, reason text, comment text)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT r.decision, r.principal, r.reason, r.comment
    FROM (
        SELECT 'deny'::pg_catalog.text AS decision, v.principal, v.reason,
               NULL::pg_catalog.text AS comment, v.voted_at_ms AS at_ms, 0::pg_catalog.int8 AS n
        FROM qinglong.approval_votes AS v
        WHERE v.approval_request_id = p_approval_request_id AND v.vote = 'deny'
        UNION ALL
        SELECT CASE e.kind WHEN 'approval.approved' THEN 'approve'
                           WHEN 'approval.rejected' THEN 'reject'
                           ELSE pg_catalog.substr(e.kind, 5) END,
               e.principal, CASE WHEN e.kind = 'api.reject' THEN e.detail_code END, e.comment,
               0::pg_catalog.int8, e.event_id
        FROM qinglong.security_audit_events AS e
        WHERE e.subject_id = p_approval_request_id
          AND (e.kind IN ('api.approve', 'api.reject')
               OR (e.kind IN ('approval.approved', 'approval.rejected')
                   AND e.comment IS NOT NULL))
    ) AS r
    WHERE EXISTS (
        SELECT 1 FROM qinglong.approval_requests AS a
        WHERE a.approval_request_id = p_approval_request_id AND a.status <> 'pending'
    )
    ORDER BY r.at_ms, r.n, r.principal
$function$;
ALTER FUNCTION qinglong.decision_reasons(p_approval_request_id text) OWNER TO qinglong_recorder;
GRANT EXECUTE ON FUNCTION qinglong.decision_reasons(p_approval_request_id text) TO qinglong_approver;
GRANT EXECUTE ON FUNCTION qinglong.decision_reasons(p_approval_request_id text) TO qinglong_operator;
GRANT EXECUTE ON FUNCTION qinglong.decision_reasons(p_approval_request_id text) TO qinglong_runtime;
GRANT EXECUTE ON FUNCTION qinglong.decision_reasons(p_approval_request_id text) TO qinglong_submitter;
GRANT EXECUTE ON FUNCTION qinglong.decision_reasons(p_approval_request_id text) TO qinglong_viewer;

-- function qinglong.dispatch_target_of_plan()
CREATE OR REPLACE FUNCTION qinglong.dispatch_target_of_plan()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    NEW.target := (SELECT p.target FROM qinglong.action_plans AS p
                   WHERE p.project_id = NEW.project_id AND p.action_ref = NEW.action_ref);
    RETURN NEW;
END
$function$;
ALTER FUNCTION qinglong.dispatch_target_of_plan() OWNER TO qinglong_recorder;

-- function qinglong.dispatch_traceparent_of_request()
CREATE OR REPLACE FUNCTION qinglong.dispatch_traceparent_of_request()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    NEW.traceparent := (SELECT a.traceparent FROM qinglong.approval_requests AS a
                        WHERE a.approval_request_id = NEW.approval_request_id);
    RETURN NEW;
END
$function$;
ALTER FUNCTION qinglong.dispatch_traceparent_of_request() OWNER TO qinglong_recorder;

-- function qinglong.dispatch_window_of_policy()
CREATE OR REPLACE FUNCTION qinglong.dispatch_window_of_policy()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    delay      pg_catalog.int8;
    span       pg_catalog.int8;
    asked_from pg_catalog.int8;
    asked_for  pg_catalog.int8;
    now_ms     pg_catalog.int8;
    opens      pg_catalog.int8;
BEGIN
    NEW.not_before_ms := NULL;
    NEW.not_after_ms := NULL;
    SELECT p.not_before_delay_ms, p.window_ms INTO delay, span
    FROM qinglong.approval_request_policies AS r
    JOIN qinglong.approval_policies AS p
        ON p.name = r.policy_name AND p.version = r.policy_version
    WHERE r.approval_request_id = NEW.approval_request_id;
    SELECT a.not_before_ms, a.window_for_ms INTO asked_from, asked_for
    FROM qinglong.approval_requests AS a
    WHERE a.approval_request_id = NEW.approval_request_id;
    IF delay IS NULL AND span IS NULL AND asked_from IS NULL AND asked_for IS NULL THEN
        RETURN NEW;
    END IF;
    now_ms := qinglong.db_now_ms();
    opens := now_ms OPERATOR(pg_catalog.+) COALESCE(delay, 0);
    IF delay IS NOT NULL THEN
        NEW.not_before_ms := opens;
    END IF;
    IF span IS NOT NULL THEN
        NEW.not_after_ms := opens OPERATOR(pg_catalog.+) span;
    END IF;
    -- GREATEST and LEAST pass over a NULL: an open side takes the other's bound.
    NEW.not_before_ms := GREATEST(NEW.not_before_ms, asked_from);
    IF asked_for IS NOT NULL THEN
        NEW.not_after_ms := LEAST(NEW.not_after_ms,
            COALESCE(asked_from, now_ms) OPERATOR(pg_catalog.+) asked_for);
    END IF;
    RETURN NEW;
END
$function$;
ALTER FUNCTION qinglong.dispatch_window_of_policy() OWNER TO qinglong_recorder;

-- function qinglong.event_target()
CREATE OR REPLACE FUNCTION qinglong.event_target()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF pg_catalog.starts_with(NEW.kind, 'approval.') THEN
        NEW.target := (
            SELECT a.target FROM qinglong.approval_requests AS r
            JOIN qinglong.action_plans AS a
              ON a.project_id = r.project_id AND a.action_ref = r.action_ref
            WHERE r.approval_request_id = NEW.subject_id);
    ELSE
        NEW.target := (
            SELECT d.target FROM qinglong.approved_action_dispatches AS d
            WHERE d.dispatch_id = NEW.subject_id);
    END IF;
    RETURN NEW;
END
$function$;
ALTER FUNCTION qinglong.event_target() OWNER TO qinglong_recorder;

-- function qinglong.execution_rule_of_policy()
CREATE OR REPLACE FUNCTION qinglong.execution_rule_of_policy()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    NEW.proceed_on_unknown := COALESCE((
        SELECT p.proceed_on_unknown
        FROM qinglong.approved_action_dispatches AS d
        JOIN qinglong.approval_request_policies AS r
            ON r.approval_request_id = d.approval_request_id
        JOIN qinglong.approval_policies AS p
            ON p.name = r.policy_name AND p.version = r.policy_version
        WHERE d.dispatch_id = NEW.dispatch_id), false);
    RETURN NEW;
END
$function$;
ALTER FUNCTION qinglong.execution_rule_of_policy() OWNER TO qinglong_recorder;

-- function qinglong.execution_target_of_dispatch()
CREATE OR REPLACE FUNCTION qinglong.execution_target_of_dispatch()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    NEW.target := (SELECT d.target FROM qinglong.approved_action_dispatches AS d
                   WHERE d.dispatch_id = NEW.dispatch_id);
    RETURN NEW;
END
$function$;
ALTER FUNCTION qinglong.execution_target_of_dispatch() OWNER TO qinglong_recorder;

-- function qinglong.execution_window_of_dispatch()
CREATE OR REPLACE FUNCTION qinglong.execution_window_of_dispatch()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    SELECT d.not_before_ms, d.not_after_ms INTO NEW.not_before_ms, NEW.not_after_ms
    FROM qinglong.approved_action_dispatches AS d WHERE d.dispatch_id = NEW.dispatch_id;
    IF NEW.not_before_ms IS NOT NULL THEN
        NEW.eligible_at_ms := GREATEST(NEW.eligible_at_ms, NEW.not_before_ms);
    END IF;
    RETURN NEW;
END
$function$;
ALTER FUNCTION qinglong.execution_window_of_dispatch() OWNER TO qinglong_recorder;

-- function qinglong.freeze_covering(p_dispatch_id text, p_now_ms bigint)
CREATE OR REPLACE FUNCTION qinglong.freeze_covering(p_dispatch_id text, p_now_ms bigint)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    -- PL/pgSQL, not SQL: a SQL function with a SET clause is planned again at every call
    -- (migration 0019), and the start guard calls this once per lease and start.
    RETURN (
        SELECT f.freeze_id FROM qinglong.freezes AS f
        JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = p_dispatch_id
        WHERE f.ended_at_ms IS NULL AND f.until_ms > p_now_ms AND f.from_ms <= p_now_ms
          AND (f.action_type IS NULL OR f.action_type = d.action_type)
          AND (f.project_id IS NULL OR f.project_id = d.project_id)
          AND (f.target_prefix IS NULL OR pg_catalog.starts_with(d.target, f.target_prefix))
          AND NOT EXISTS (SELECT 1 FROM qinglong.freeze_lifts AS l
                          WHERE l.dispatch_id = d.dispatch_id AND l.freeze_id = f.freeze_id)
        ORDER BY f.freeze_id
        LIMIT 1);
END
$function$;
ALTER FUNCTION qinglong.freeze_covering(p_dispatch_id text, p_now_ms bigint) OWNER TO qinglong_recorder;
GRANT EXECUTE ON FUNCTION qinglong.freeze_covering(p_dispatch_id text, p_now_ms bigint) TO qinglong_approver;
GRANT EXECUTE ON FUNCTION qinglong.freeze_covering(p_dispatch_id text, p_now_ms bigint) TO qinglong_operator;
GRANT EXECUTE ON FUNCTION qinglong.freeze_covering(p_dispatch_id text, p_now_ms bigint) TO qinglong_runtime;
GRANT EXECUTE ON FUNCTION qinglong.freeze_covering(p_dispatch_id text, p_now_ms bigint) TO qinglong_submitter;
GRANT EXECUTE ON FUNCTION qinglong.freeze_covering(p_dispatch_id text, p_now_ms bigint) TO qinglong_viewer;

-- function qinglong.guard_api_token_change()
CREATE OR REPLACE FUNCTION qinglong.guard_api_token_change()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF (NEW.token_id, NEW.secret_sha256, NEW.principal, NEW.role, NEW.created_by,
        NEW.created_at_ms, NEW.expires_at_ms)
            IS DISTINCT FROM
       (OLD.token_id, OLD.secret_sha256, OLD.principal, OLD.role, OLD.created_by,
        OLD.created_at_ms, OLD.expires_at_ms)
            OR (OLD.revoked_at_ms IS NOT NULL
                AND NEW.revoked_at_ms IS DISTINCT FROM OLD.revoked_at_ms) THEN
        RAISE EXCEPTION 'a token changes only its last use and, once, its revocation'
            USING ERRCODE = 'QLI01';
    END IF;
    RETURN NEW;
END
$function$;

-- function qinglong.guard_approval_event()
CREATE OR REPLACE FUNCTION qinglong.guard_approval_event()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    acting pg_catalog.text := qinglong.acting_role();
    now_ms pg_catalog.int8 := qinglong.db_now_ms();
BEGIN
    IF TG_OP = 'DELETE' AND NOT EXISTS (SELECT 1 FROM qinglong.approval_requests
            WHERE approval_request_id = OLD.approval_request_id) THEN
        RETURN OLD;  -- pruned with its request (the key's cascade)
    END IF;
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION 'an approval event never changes' USING ERRCODE = 'QLA03';
    END IF;
    IF acting IS NULL OR NOT pg_catalog.pg_has_role(acting, 'qinglong_runtime', 'MEMBER') THEN
        RAISE EXCEPTION 'approval events are the runtime''s' USING ERRCODE = 'QLA01';
    END IF;
    -- A reminder while the request waits, once its expiry less the reminder has passed. Its
    -- expiry is the sweep's to respect: its statement read this clock a moment earlier, and a
    -- request it found unexpired must not fail the whole pass here.
    IF NOT EXISTS (
            SELECT 1 FROM qinglong.approval_requests AS r
            JOIN qinglong.approval_request_policies AS p USING (approval_request_id)
            WHERE r.approval_request_id = NEW.approval_request_id AND r.status = 'pending'
              AND p.remind_before_ms IS NOT NULL
              AND now_ms >= COALESCE(r.db_expires_at_ms, r.expires_at_ms)
                  OPERATOR(pg_catalog.-) p.remind_before_ms) THEN
        RAISE EXCEPTION 'approval request % is not due a reminder (database clock)',
            NEW.approval_request_id USING ERRCODE = 'QLA03';
    END IF;
    NEW.at_ms := now_ms;
    RETURN NEW;
END
$function$;

-- function qinglong.guard_approval_policy()
CREATE OR REPLACE FUNCTION qinglong.guard_approval_policy()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

-- function qinglong.guard_approval_request()
CREATE OR REPLACE FUNCTION qinglong.guard_approval_request()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    acting   pg_catalog.text := qinglong.acting_role();
    login    pg_catalog.text := qinglong.acting_principal();
    now_ms   pg_catalog.int8 := qinglong.db_now_ms();
    lifetime pg_catalog.int8;
BEGIN
    IF acting IS NULL OR login IS NULL THEN
        RAISE EXCEPTION 'the API''s login acts only as a principal'
            USING ERRCODE = 'QLA01';
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF NEW.status IS DISTINCT FROM 'pending' OR NEW.version IS DISTINCT FROM 1
                OR NEW.decided_by IS NOT NULL OR NEW.decided_principal IS NOT NULL
                OR NEW.consumed_principal IS NOT NULL OR NEW.consumed_at_ms IS NOT NULL THEN
            RAISE EXCEPTION 'an approval request starts pending at version 1, undecided'
                USING ERRCODE = 'QLA03';
        END IF;
        IF NEW.requested_principal IS DISTINCT FROM login THEN
            RAISE EXCEPTION 'the requested principal must be the acting principal'
                USING ERRCODE = 'QLA01';
        END IF;
        lifetime := NEW.expires_at_ms - NEW.created_at_ms;
        IF lifetime IS NULL OR lifetime <= 0 OR lifetime > 2592000000 THEN
            RAISE EXCEPTION 'an approval lives more than 0 s and at most 30 days'
                USING ERRCODE = 'QLA05';
        END IF;
        NEW.db_expires_at_ms := now_ms + lifetime;
        RETURN NEW;
    END IF;

    IF OLD.status IN ('consumed', 'rejected', 'expired') THEN
        RAISE EXCEPTION 'approval request % is %: it never changes again',
            OLD.approval_request_id, OLD.status USING ERRCODE = 'QLA03';
    END IF;
    IF (NEW.approval_request_id, NEW.project_id, NEW.action_type, NEW.action_ref,
            NEW.action_digest, NEW.requested_by, NEW.requested_principal, NEW.expires_at_ms,
            NEW.created_at_ms, NEW.db_expires_at_ms)
            IS DISTINCT FROM
            (OLD.approval_request_id, OLD.project_id, OLD.action_type, OLD.action_ref,
            OLD.action_digest, OLD.requested_by, OLD.requested_principal, OLD.expires_at_ms,
            OLD.created_at_ms, OLD.db_expires_at_ms) THEN
        RAISE EXCEPTION 'the identity of an approval request never changes'
            USING ERRCODE = 'QLA03';
    END IF;
    IF NEW.status IN ('approved', 'consumed')
            AND now_ms >= COALESCE(OLD.db_expires_at_ms, OLD.expires_at_ms) THEN
        RAISE EXCEPTION 'approval request % expired (database clock)', OLD.approval_request_id
            USING ERRCODE = 'QLA04';
    END IF;
    -- Expiry is the database clock's outcome, never a decision: only a request whose lifetime
    -- ran out on this clock becomes `expired`, and only the runtime's sweep moves it.
    IF NEW.status = 'expired' AND OLD.status = 'pending' THEN
        IF now_ms < COALESCE(OLD.db_expires_at_ms, OLD.expires_at_ms) THEN
            RAISE EXCEPTION 'approval request % has not expired (database clock)',
                OLD.approval_request_id USING ERRCODE = 'QLA03';
        END IF;
        IF NOT pg_catalog.pg_has_role(acting, 'qinglong_runtime', 'MEMBER') THEN
            RAISE EXCEPTION 'expiring a request needs the runtime'
                USING ERRCODE = 'QLA01';
        END IF;
    END IF;

    IF OLD.status = 'pending' AND NEW.status IN ('approved', 'rejected', 'expired') THEN
        IF NEW.version IS DISTINCT FROM 2 OR NEW.decided_by IS NULL
                OR NEW.consumed_principal IS NOT NULL OR NEW.consumed_at_ms IS NOT NULL THEN
            RAISE EXCEPTION 'a decision moves pending@v1 to version 2 and names its decider'
                USING ERRCODE = 'QLA03';
        END IF;
        IF NEW.decided_principal IS DISTINCT FROM login THEN
            RAISE EXCEPTION 'the decided principal must be the acting principal'
                USING ERRCODE = 'QLA01';
        END IF;
        IF NEW.status = 'approved' THEN
            IF NOT pg_catalog.pg_has_role(acting, 'qinglong_approver', 'MEMBER') THEN
                RAISE EXCEPTION 'approving needs a qinglong_approver principal'
                    USING ERRCODE = 'QLA01';
            END IF;
            -- Separation of duties between principals (a login and a token of one name are
            -- one principal): self-approval only for a member of qinglong_self_approver.
            IF login = OLD.requested_principal
                    AND NOT pg_catalog.pg_has_role(acting, 'qinglong_self_approver', 'MEMBER')
                    THEN
                RAISE EXCEPTION 'the requester may not approve its own request'
                    USING ERRCODE = 'QLA02';
            END IF;
        ELSIF NEW.status = 'rejected' AND login IS DISTINCT FROM OLD.requested_principal
                AND NOT pg_catalog.pg_has_role(acting, 'qinglong_approver', 'MEMBER') THEN
            RAISE EXCEPTION 'rejecting another principal''s request needs a qinglong_approver'
                USING ERRCODE = 'QLA01';
        END IF;
        RETURN NEW;
    END IF;

    IF OLD.status = 'approved' AND NEW.status = 'consumed' THEN
        IF NEW.version IS DISTINCT FROM 3 OR NEW.consumed_at_ms IS NULL
                OR (NEW.decided_by, NEW.decided_principal)
                    IS DISTINCT FROM (OLD.decided_by, OLD.decided_principal) THEN
            RAISE EXCEPTION 'consuming moves approved@v2 to version 3 and keeps the decision'
                USING ERRCODE = 'QLA03';
        END IF;
        IF NEW.consumed_principal IS DISTINCT FROM login THEN
            RAISE EXCEPTION 'the consumed principal must be the acting principal'
                USING ERRCODE = 'QLA01';
        END IF;
        RETURN NEW;
    END IF;

    RAISE EXCEPTION 'approval request % may not go from % to %',
        OLD.approval_request_id, OLD.status, NEW.status USING ERRCODE = 'QLA03';
END
$function$;

-- function qinglong.guard_approval_traceparent()
CREATE OR REPLACE FUNCTION qinglong.guard_approval_traceparent()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RAISE EXCEPTION 'an approval request''s traceparent never changes'
        USING ERRCODE = 'QLI01';
END
$function$;
GRANT EXECUTE ON FUNCTION qinglong.guard_approval_traceparent() TO PUBLIC;

-- function qinglong.guard_approval_vote()
CREATE OR REPLACE FUNCTION qinglong.guard_approval_vote()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

-- function qinglong.guard_audit_event()
CREATE OR REPLACE FUNCTION qinglong.guard_audit_event()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    acting pg_catalog.text;
BEGIN
    IF CURRENT_USER::pg_catalog.text = 'qinglong_recorder' THEN
        -- The approval trigger's rows, and `read_plan`'s (migration 0014).
        IF (NEW.kind NOT LIKE 'approval.%' AND NEW.kind NOT LIKE 'plan.%')
                OR NEW.token_id IS NOT NULL THEN
            RAISE EXCEPTION 'the recorder writes approval and plan-read audit records only'
                USING ERRCODE = 'QLI01';
        END IF;
    ELSE
        acting := qinglong.acting_role();
        IF acting IS NULL
                OR NEW.principal IS DISTINCT FROM qinglong.acting_principal() THEN
            RAISE EXCEPTION 'an audit record names the acting principal'
                USING ERRCODE = 'QLI01';
        END IF;
        IF NEW.kind = 'api.auth_failed' THEN
            -- A refused token has no principal: the login that checked it records the refusal,
            -- as itself (no principal the API became), and only the runtime checks tokens.
            IF acting IS DISTINCT FROM SESSION_USER::pg_catalog.text
                    OR NOT pg_catalog.pg_has_role(acting, 'qinglong_runtime', 'MEMBER')
                    OR NEW.token_id IS NOT NULL THEN
                RAISE EXCEPTION 'a failed authentication is recorded by the runtime that refused it'
                    USING ERRCODE = 'QLI01';
            END IF;
            NEW.committed_at_ms := (pg_catalog.date_part('epoch',
                pg_catalog.transaction_timestamp()) OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8;
            RETURN NEW;
        END IF;
        IF NEW.kind LIKE 'approval.%' OR NEW.kind LIKE 'plan.%' THEN
            RAISE EXCEPTION 'approval and plan-read audit records are written by their definer only'
                USING ERRCODE = 'QLI01';
        END IF;
        IF (NEW.token_id IS NOT NULL OR NEW.kind LIKE 'api.%')
                AND (acting = SESSION_USER::pg_catalog.text OR NEW.token_id IS NULL
                     OR NEW.kind NOT LIKE 'api.%') THEN
            RAISE EXCEPTION 'a request''s audit record comes from a principal the API became'
                USING ERRCODE = 'QLI01';
        END IF;
        IF NEW.kind NOT LIKE 'api.%'
                AND NOT pg_catalog.pg_has_role(acting, 'qinglong_runtime', 'MEMBER')
                AND NOT pg_catalog.pg_has_role(acting, 'qinglong_operator', 'MEMBER') THEN
            RAISE EXCEPTION 'this principal writes only the audit record of its request'
                USING ERRCODE = 'QLI01';
        END IF;
    END IF;
    NEW.committed_at_ms := (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
        OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8;
    RETURN NEW;
END
$function$;

-- function qinglong.guard_audit_subject_delete()
CREATE OR REPLACE FUNCTION qinglong.guard_audit_subject_delete()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

-- function qinglong.guard_decision_comment()
CREATE OR REPLACE FUNCTION qinglong.guard_decision_comment()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM 'pending'
            OR NEW.status NOT IN ('approved', 'rejected') THEN
        RAISE EXCEPTION 'a decision''s comment is written with the decision, never after'
            USING ERRCODE = 'QLI01';
    END IF;
    RETURN NEW;
END
$function$;

-- function qinglong.guard_dispatch_insert()
CREATE OR REPLACE FUNCTION qinglong.guard_dispatch_insert()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    approval qinglong.approval_requests%ROWTYPE;
    login    pg_catalog.text := qinglong.acting_principal();
BEGIN
    SELECT * INTO approval FROM qinglong.approval_requests
    WHERE approval_request_id = NEW.approval_request_id;
    IF NOT FOUND OR login IS NULL OR approval.status IS DISTINCT FROM 'consumed'
            OR approval.consumed_principal IS DISTINCT FROM login
            OR (NEW.project_id, NEW.action_type, NEW.action_ref, NEW.action_digest,
                NEW.approved_by)
               IS DISTINCT FROM
               (approval.project_id, approval.action_type, approval.action_ref,
                approval.action_digest, approval.decided_by) THEN
        RAISE EXCEPTION 'a dispatch needs its approval consumed by this principal, for this action'
            USING ERRCODE = 'QLA03';
    END IF;
    RETURN NEW;
END
$function$;

-- function qinglong.guard_execution_accountable()
CREATE OR REPLACE FUNCTION qinglong.guard_execution_accountable()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    acting pg_catalog.text;
    wanted pg_catalog.text;
    detail pg_catalog.text;
    settled_by pg_catalog.text;
    proven pg_catalog.bool := false;
BEGIN
    IF NEW.status = 'leased' AND (NEW.lease_expires_at_ms IS NULL
            OR NEW.eligible_at_ms IS DISTINCT FROM NEW.lease_expires_at_ms) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: due (% → %)',
            OLD.status, NEW.status USING ERRCODE = 'QLT01';
    END IF;
    IF NEW.status IS NOT DISTINCT FROM OLD.status
            OR NEW.status NOT IN ('blocked', 'cancelled', 'succeeded', 'failed') THEN
        RETURN NEW;
    END IF;
    -- The holder's proof (the state machine checks it again and refuses a wrong one).
    IF OLD.status IN ('leased', 'executing') AND NEW.lease_proof IS NOT NULL
            AND OLD.lease_proof_digest IS NOT NULL THEN
        proven := pg_catalog.encode(pg_catalog.sha256(
            pg_catalog.convert_to(NEW.lease_proof, 'UTF8')), 'hex') = OLD.lease_proof_digest;
    END IF;
    IF proven THEN
        RETURN NEW;
    END IF;
    acting := qinglong.acting_role();
    IF NEW.status = 'blocked' AND OLD.status IN ('pending', 'retry_wait', 'leased') THEN
        -- An expired lease is blocked only past its takeover bound (a suspected poison pill,
        -- migration takeovers checks the bound and the expiry), a waiting row only once its
        -- attempt budget is spent.
        IF (OLD.status = 'leased'
                    AND NEW.result_code IS DISTINCT FROM 'takeovers_exhausted')
                OR (OLD.status <> 'leased' AND (OLD.attempt < OLD.max_attempts
                    OR NEW.result_code IS DISTINCT FROM 'attempts_exhausted'))
                OR acting IS NULL
                OR NOT pg_catalog.pg_has_role(acting, 'qinglong_runtime', 'MEMBER') THEN
            RAISE EXCEPTION 'qinglong:transition_refused: blocked (% → %)', OLD.status,
                NEW.status USING ERRCODE = 'QLT01';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.status = 'cancelled' THEN
        IF OLD.status NOT IN ('pending', 'retry_wait') OR acting IS NULL
                OR NOT pg_catalog.pg_has_role(acting, 'qinglong_operator', 'MEMBER') THEN
            RETURN NEW;  -- the state machine refuses it (QLT01: transition, or operator)
        END IF;
        wanted := 'dispatch.cancelled';
        detail := OLD.status;
    ELSIF OLD.status = 'executing' THEN
        SELECT r.source INTO settled_by FROM qinglong.recovery_resolutions AS r
        WHERE r.dispatch_id = OLD.dispatch_id AND r.execution_attempt = OLD.attempt
          AND r.lease_owner = OLD.lease_owner AND r.lease_token = OLD.lease_token
          AND r.started_at_ms = OLD.started_at_ms;
        IF NOT FOUND THEN
            RETURN NEW;  -- no resolution: the state machine refuses it (QLF01)
        END IF;
        IF settled_by = 'evidence' AND acting IS NOT NULL
                AND pg_catalog.pg_has_role(acting, 'qinglong_runtime', 'MEMBER') THEN
            RETURN NEW;  -- the runtime settling by evidence: the resolution names it
        END IF;
        wanted := 'recovery.manual_resolution';
        detail := NEW.status;
    ELSE
        RETURN NEW;  -- the state machine refuses the rest
    END IF;
    IF acting IS NULL OR NOT EXISTS (
            SELECT 1 FROM qinglong.security_audit_events AS a
            WHERE a.subject_id = OLD.dispatch_id AND a.kind = wanted
              AND a.principal = qinglong.acting_principal()
              AND a.detail_code = pg_catalog.left(
                  detail OPERATOR(pg_catalog.||) ':'
                      OPERATOR(pg_catalog.||) COALESCE(NEW.result_code, ''), 128)
              AND a.committed_at_ms = (pg_catalog.date_part('epoch',
                  pg_catalog.transaction_timestamp()) OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8
            ) THEN
        RAISE EXCEPTION 'qinglong:transition_refused: unaudited (% → %)',
            OLD.status, NEW.status USING ERRCODE = 'QLI02';
    END IF;
    RETURN NEW;
END
$function$;

-- function qinglong.guard_execution_receipt()
CREATE OR REPLACE FUNCTION qinglong.guard_execution_receipt()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.result_receipt_json IS NOT NULL OR NEW.result_receipt_digest IS NOT NULL THEN
            RAISE EXCEPTION 'qinglong:transition_refused: receipt (→ %)', NEW.status
                USING ERRCODE = 'QLT01';
        END IF;
        RETURN NEW;
    END IF;
    IF (NEW.result_receipt_json, NEW.result_receipt_digest)
            IS NOT DISTINCT FROM (OLD.result_receipt_json, OLD.result_receipt_digest) THEN
        RETURN NEW;
    END IF;
    IF NOT (OLD.status = 'executing' AND NEW.status IN ('succeeded', 'failed')
            AND OLD.result_receipt_json IS NULL AND OLD.result_receipt_digest IS NULL)
            OR NEW.result_receipt_json IS NULL OR NEW.result_receipt_digest IS NULL
            OR NEW.result_receipt_digest IS DISTINCT FROM pg_catalog.encode(pg_catalog.sha256(
                pg_catalog.convert_to('qinglong/action-receipt@v1', 'UTF8')
                OPERATOR(pg_catalog.||) '\x00'::pg_catalog.bytea
                OPERATOR(pg_catalog.||) pg_catalog.convert_to(NEW.result_receipt_json, 'UTF8')),
                'hex') THEN
        RAISE EXCEPTION 'qinglong:transition_refused: receipt (% → %)', OLD.status, NEW.status
            USING ERRCODE = 'QLT01';
    END IF;
    RETURN NEW;
END
$function$;

-- function qinglong.guard_execution_rule()
CREATE OR REPLACE FUNCTION qinglong.guard_execution_rule()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RAISE EXCEPTION 'an execution''s rule on an unknown outcome is its policy''s and never changes'
        USING ERRCODE = 'QLI01';
END
$function$;
GRANT EXECUTE ON FUNCTION qinglong.guard_execution_rule() TO PUBLIC;

-- function qinglong.guard_execution_target()
CREATE OR REPLACE FUNCTION qinglong.guard_execution_target()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RAISE EXCEPTION 'an execution''s target is its dispatch''s and never changes'
        USING ERRCODE = 'QLI01';
END
$function$;
GRANT EXECUTE ON FUNCTION qinglong.guard_execution_target() TO PUBLIC;

-- function qinglong.guard_execution_window_copy()
CREATE OR REPLACE FUNCTION qinglong.guard_execution_window_copy()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RAISE EXCEPTION 'an execution''s window is its dispatch''s and never changes'
        USING ERRCODE = 'QLI01';
END
$function$;
GRANT EXECUTE ON FUNCTION qinglong.guard_execution_window_copy() TO PUBLIC;

-- function qinglong.guard_freeze()
CREATE OR REPLACE FUNCTION qinglong.guard_freeze()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'a freeze is never deleted: end it' USING ERRCODE = 'QLI01';
    END IF;
    IF TG_OP = 'INSERT' THEN
        NEW.created_by := SESSION_USER::pg_catalog.text;
        NEW.created_at_ms := qinglong.db_now_ms();
        NEW.ended_by := NULL;
        NEW.ended_at_ms := NULL;
        RETURN NEW;
    END IF;
    IF OLD.ended_at_ms IS NOT NULL
            OR (NEW.freeze_id, NEW.action_type, NEW.project_id, NEW.target_prefix, NEW.from_ms,
                NEW.until_ms, NEW.reason, NEW.created_by, NEW.created_at_ms)
               IS DISTINCT FROM
               (OLD.freeze_id, OLD.action_type, OLD.project_id, OLD.target_prefix, OLD.from_ms,
                OLD.until_ms, OLD.reason, OLD.created_by, OLD.created_at_ms) THEN
        RAISE EXCEPTION 'a freeze only ends, once' USING ERRCODE = 'QLI01';
    END IF;
    NEW.ended_by := SESSION_USER::pg_catalog.text;
    NEW.ended_at_ms := qinglong.db_now_ms();
    RETURN NEW;
END
$function$;

-- function qinglong.guard_freeze_lift()
CREATE OR REPLACE FUNCTION qinglong.guard_freeze_lift()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    acting pg_catalog.text;
BEGIN
    IF TG_OP = 'DELETE' AND NOT EXISTS (SELECT 1 FROM qinglong.approved_action_dispatches
            WHERE dispatch_id = OLD.dispatch_id) THEN
        RETURN OLD;  -- pruned with its dispatch (the key's cascade)
    END IF;
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION 'a freeze lift never changes' USING ERRCODE = 'QLI01';
    END IF;
    acting := qinglong.acting_role();
    IF acting IS NULL OR NOT pg_catalog.pg_has_role(acting, 'qinglong_operator', 'MEMBER') THEN
        RAISE EXCEPTION 'an operator lifts a freeze' USING ERRCODE = 'QLZ02';
    END IF;
    NEW.lifted_by := qinglong.acting_principal();
    IF EXISTS (SELECT 1 FROM qinglong.approved_action_dispatches AS d
               JOIN qinglong.approval_requests AS r
                   ON r.approval_request_id = d.approval_request_id
               WHERE d.dispatch_id = NEW.dispatch_id
                 AND r.requested_principal = NEW.lifted_by) THEN
        RAISE EXCEPTION 'the requester of dispatch % may not lift a freeze for it',
            NEW.dispatch_id USING ERRCODE = 'QLZ02';
    END IF;
    NEW.lifted_at_ms := qinglong.db_now_ms();
    RETURN NEW;
END
$function$;

-- function qinglong.guard_inbox_note()
CREATE OR REPLACE FUNCTION qinglong.guard_inbox_note()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF qinglong.acting_role() IS NULL
            OR NEW.principal IS DISTINCT FROM qinglong.acting_principal() THEN
        RAISE EXCEPTION 'a note names the acting principal' USING ERRCODE = 'QLI01';
    END IF;
    NEW.written_at_ms := (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
        OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8;
    RETURN NEW;
END
$function$;
GRANT EXECUTE ON FUNCTION qinglong.guard_inbox_note() TO PUBLIC;

-- function qinglong.guard_notification_prune()
CREATE OR REPLACE FUNCTION qinglong.guard_notification_prune()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    matched_through pg_catalog.int8 :=
        (SELECT w.fanned_out_through FROM qinglong.notification_deliverer AS w);
    told pg_catalog.int8;
BEGIN
    IF TG_TABLE_NAME = 'notification_deliveries' THEN
        IF NOT EXISTS (SELECT 1 FROM qinglong.notification_subscriptions AS s
                       WHERE s.name = OLD.subscription) THEN
            RETURN OLD;  -- its subscription's removal (the key's cascade)
        END IF;
        IF OLD.status = 'pending' THEN
            RAISE EXCEPTION 'notification_deliveries: a pending delivery is never deleted'
                USING ERRCODE = 'restrict_violation';
        END IF;
    END IF;
    IF NOT pg_has_role(current_user, 'qinglong_pruner', 'MEMBER') THEN
        RAISE EXCEPTION '%: only a prune deletes', TG_TABLE_NAME
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF TG_TABLE_NAME = 'notification_events' THEN
        told := OLD.id;
    ELSE
        told := OLD.event_id;
    END IF;
    IF told > matched_through
            OR EXISTS (SELECT 1 FROM qinglong.notification_deliveries AS d
                       WHERE d.event_id = told AND d.status = 'pending') THEN
        RAISE EXCEPTION '%: an event goes only once matched and delivered or dead-lettered',
            TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN OLD;
END
$function$;

-- function qinglong.guard_plan_reseal()
CREATE OR REPLACE FUNCTION qinglong.guard_plan_reseal()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF (NEW.project_id, NEW.action_ref, NEW.action_type, NEW.plan_digest, NEW.created_at_ms)
            IS DISTINCT FROM
       (OLD.project_id, OLD.action_ref, OLD.action_type, OLD.plan_digest, OLD.created_at_ms)
            OR (OLD.plan_schema_version IS NOT NULL
                AND NEW.plan_schema_version IS DISTINCT FROM OLD.plan_schema_version)
            OR NEW.plan_sealed IS NULL OR NEW.plan_json <> '' THEN
        RAISE EXCEPTION '% is immutable', TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END
$function$;

-- function qinglong.guard_prune_delete()
CREATE OR REPLACE FUNCTION qinglong.guard_prune_delete()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    permitted boolean;
BEGIN
    IF NOT pg_has_role(current_user, 'qinglong_pruner', 'MEMBER') THEN
        permitted := false;
    ELSIF TG_TABLE_NAME = 'security_audit_events' THEN
        permitted := EXISTS (SELECT 1 FROM qinglong.audit_prune_permits AS p
                             WHERE OLD.committed_at_ms < p.cutoff_ms);
    ELSIF TG_TABLE_NAME = 'action_plans' THEN
        permitted := EXISTS (SELECT 1 FROM qinglong.prune_permits AS p
                             WHERE p.project_id = OLD.project_id
                               AND p.action_ref = OLD.action_ref);
    ELSIF TG_TABLE_NAME = 'approval_requests' THEN
        permitted := EXISTS (SELECT 1 FROM qinglong.prune_permits AS p
                             WHERE p.approval_request_id = OLD.approval_request_id);
    ELSIF TG_TABLE_NAME = 'approved_action_dispatch_executions' THEN
        permitted := OLD.status IN ('blocked', 'cancelled', 'failed', 'succeeded')
            AND EXISTS (SELECT 1 FROM qinglong.prune_permits AS p
                        WHERE p.dispatch_id = OLD.dispatch_id);
    ELSE
        permitted := EXISTS (SELECT 1 FROM qinglong.prune_permits AS p
                             WHERE p.dispatch_id = OLD.dispatch_id);
    END IF;
    IF NOT permitted THEN
        RAISE EXCEPTION '% is immutable: only a prune deletes', TG_TABLE_NAME
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN OLD;
END
$function$;

-- function qinglong.guard_prune_permit()
CREATE OR REPLACE FUNCTION qinglong.guard_prune_permit()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF TG_TABLE_NAME = 'audit_prune_permits' THEN
        IF NEW.cutoff_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint THEN
            RAISE EXCEPTION 'audit_prune_permits: the cutoff may not be in the future'
                USING ERRCODE = 'restrict_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.cutoff_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint
            OR NOT EXISTS (
                SELECT 1
                FROM qinglong.approved_action_dispatches AS d
                JOIN qinglong.approved_action_dispatch_executions AS e
                    ON e.dispatch_id = d.dispatch_id
                WHERE d.dispatch_id = NEW.dispatch_id
                  AND d.approval_request_id = NEW.approval_request_id
                  AND d.project_id = NEW.project_id AND d.action_ref = NEW.action_ref
                  AND e.status IN ('blocked', 'cancelled', 'failed', 'succeeded')
                  AND e.updated_at_ms < NEW.cutoff_ms) THEN
        RAISE EXCEPTION 'prune_permits: only a terminal dispatch tree older than a past cutoff'
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END
$function$;

-- function qinglong.guard_receipt()
CREATE OR REPLACE FUNCTION qinglong.guard_receipt()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    held pg_catalog.text;
BEGIN
    SELECT e.lease_proof_digest INTO held
    FROM qinglong.approved_action_dispatch_executions AS e
    JOIN qinglong.approved_action_dispatches AS d ON d.dispatch_id = e.dispatch_id
    JOIN qinglong.runs AS r ON r.run_id = NEW.resource_id
    WHERE e.dispatch_id = NEW.dispatch_id AND e.status IN ('executing', 'succeeded')
      AND e.attempt = NEW.execution_attempt AND e.started_at_ms = NEW.started_at_ms
      AND d.approval_request_id = NEW.approval_request_id
      AND d.project_id = NEW.project_id AND d.action_type = NEW.action_type
      AND d.action_digest = NEW.action_digest
      AND r.project_id = NEW.project_id AND r.idempotency_key = NEW.idempotency_key
      AND r.idempotency_key = NEW.dispatch_id
      AND r.request_id IS NOT DISTINCT FROM NEW.approval_request_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'a receipt binds its started execution and its dispatch''s Run'
            USING ERRCODE = 'QLI01';
    END IF;
    IF NEW.lease_proof IS NULL OR held IS DISTINCT FROM pg_catalog.encode(pg_catalog.sha256(
            pg_catalog.convert_to(NEW.lease_proof, 'UTF8')), 'hex') THEN
        RAISE EXCEPTION 'qinglong:fence_refused: a receipt presents its holder''s proof'
            USING ERRCODE = 'QLF01';
    END IF;
    NEW.lease_proof := NULL;
    RETURN NEW;
END
$function$;

-- function qinglong.guard_request_policy()
CREATE OR REPLACE FUNCTION qinglong.guard_request_policy()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF TG_OP = 'DELETE' AND NOT EXISTS (SELECT 1 FROM qinglong.approval_requests
            WHERE approval_request_id = OLD.approval_request_id) THEN
        RETURN OLD;  -- pruned with its request (the key's cascade)
    END IF;
    RAISE EXCEPTION 'the policy of an approval request never changes' USING ERRCODE = 'QLA03';
END
$function$;

-- function qinglong.guard_requested_window()
CREATE OR REPLACE FUNCTION qinglong.guard_requested_window()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RAISE EXCEPTION 'an approval request''s window never changes' USING ERRCODE = 'QLI01';
END
$function$;
GRANT EXECUTE ON FUNCTION qinglong.guard_requested_window() TO PUBLIC;

-- function qinglong.guard_resubmitted_from()
CREATE OR REPLACE FUNCTION qinglong.guard_resubmitted_from()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'what a request was made again from never changes'
            USING ERRCODE = 'QLI01';
    END IF;
    IF NOT EXISTS (
        SELECT 1
        FROM qinglong.approved_action_dispatches AS d
        JOIN qinglong.approved_action_dispatch_executions AS e ON e.dispatch_id = d.dispatch_id
        WHERE d.dispatch_id = NEW.resubmitted_from
          AND e.status IN ('failed', 'blocked', 'cancelled')
          AND d.project_id = NEW.project_id AND d.action_type = NEW.action_type
    ) AND NOT EXISTS (
        SELECT 1 FROM qinglong.approval_requests AS a
        WHERE a.approval_request_id = NEW.resubmitted_from AND a.status = 'expired'
          AND a.project_id = NEW.project_id AND a.action_type = NEW.action_type
    ) THEN
        RAISE EXCEPTION 'a request is made again only from a failed, blocked or cancelled '
            'dispatch or an expired request of its project and action type'
            USING ERRCODE = 'QLI01';
    END IF;
    RETURN NEW;
END
$function$;
ALTER FUNCTION qinglong.guard_resubmitted_from() OWNER TO qinglong_recorder;

-- function qinglong.guard_run_change()
CREATE OR REPLACE FUNCTION qinglong.guard_run_change()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF (NEW.run_id, NEW.project_id, NEW.task_id, NEW.task_revision, NEW.executor_type,
        NEW.priority, NEW.task_name, NEW.task_snapshot_ref, NEW.input_ref, NEW.trigger_type,
        NEW.execution_origin, NEW.execution_owner, NEW.request_id, NEW.idempotency_key,
        NEW.accepted_at_ms, NEW.created_at_ms)
            IS DISTINCT FROM
       (OLD.run_id, OLD.project_id, OLD.task_id, OLD.task_revision, OLD.executor_type,
        OLD.priority, OLD.task_name, OLD.task_snapshot_ref, OLD.input_ref, OLD.trigger_type,
        OLD.execution_origin, OLD.execution_owner, OLD.request_id, OLD.idempotency_key,
        OLD.accepted_at_ms, OLD.created_at_ms) THEN
        RAISE EXCEPTION 'the identity of a Run never changes' USING ERRCODE = 'QLI01';
    END IF;
    RETURN NEW;
END
$function$;

-- function qinglong.guard_run_holder()
CREATE OR REPLACE FUNCTION qinglong.guard_run_holder()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    held pg_catalog.text;
BEGIN
    IF NEW.trigger_type = 'approved_action' THEN
        SELECT e.lease_proof_digest INTO held
        FROM qinglong.approved_action_dispatches AS d
        LEFT JOIN qinglong.approved_action_dispatch_executions AS e
          ON e.dispatch_id = d.dispatch_id AND e.status IN ('leased', 'executing', 'succeeded')
        WHERE d.dispatch_id = NEW.idempotency_key;
        IF FOUND AND (NEW.lease_proof IS NULL OR held IS DISTINCT FROM pg_catalog.encode(
                pg_catalog.sha256(pg_catalog.convert_to(NEW.lease_proof, 'UTF8')), 'hex')) THEN
            RAISE EXCEPTION
                'qinglong:fence_refused: a Run of a dispatch presents its holder''s proof'
                USING ERRCODE = 'QLF01';
        END IF;
    END IF;
    NEW.lease_proof := NULL;
    RETURN NEW;
END
$function$;

-- function qinglong.guard_ui_session_change()
CREATE OR REPLACE FUNCTION qinglong.guard_ui_session_change()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF (NEW.session_sha256, NEW.token_id, NEW.principal, NEW.created_at_ms, NEW.idle_ms,
        NEW.expires_at_ms)
            IS DISTINCT FROM
       (OLD.session_sha256, OLD.token_id, OLD.principal, OLD.created_at_ms, OLD.idle_ms,
        OLD.expires_at_ms)
            OR NEW.last_seen_at_ms < OLD.last_seen_at_ms
            OR (OLD.revoked_at_ms IS NOT NULL
                AND NEW.revoked_at_ms IS DISTINCT FROM OLD.revoked_at_ms) THEN
        RAISE EXCEPTION 'a session changes only its last use and, once, its revocation'
            USING ERRCODE = 'QLI01';
    END IF;
    RETURN NEW;
END
$function$;

-- function qinglong.guard_uncertain_outcome()
CREATE OR REPLACE FUNCTION qinglong.guard_uncertain_outcome()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF NEW.lease_proof IS NULL OR NOT EXISTS (
            SELECT 1 FROM qinglong.approved_action_dispatch_executions AS e
            WHERE e.dispatch_id = NEW.dispatch_id AND e.status = 'executing'
              AND e.attempt = NEW.execution_attempt AND e.lease_owner = NEW.lease_owner
              AND e.lease_proof_digest = pg_catalog.encode(pg_catalog.sha256(
                  pg_catalog.convert_to(NEW.lease_proof, 'UTF8')), 'hex')) THEN
        RAISE EXCEPTION 'qinglong:fence_refused: an uncertain outcome presents its holder''s proof'
            USING ERRCODE = 'QLF01';
    END IF;
    NEW.lease_proof := NULL;
    NEW.recorded_at_ms := (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
        OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8;
    RETURN NEW;
END
$function$;

-- function qinglong.keep_event_while_someone_listens()
CREATE OR REPLACE FUNCTION qinglong.keep_event_while_someone_listens()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF NOT EXISTS (
            SELECT 1 FROM qinglong.notification_subscriptions AS s
            WHERE pg_catalog.strpos(s.kinds_json,
                                    '"' OPERATOR(pg_catalog.||) NEW.kind
                                    OPERATOR(pg_catalog.||) '"') > 0) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$function$;
ALTER FUNCTION qinglong.keep_event_while_someone_listens() OWNER TO qinglong_recorder;

-- function qinglong.mark_recovery_required()
CREATE OR REPLACE FUNCTION qinglong.mark_recovery_required()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    noticed pg_catalog.text := 'recovery_pass';
BEGIN
    -- A pass observed it, or settled it by evidence; otherwise an operator settled it first.
    IF TG_TABLE_NAME = 'recovery_resolutions' THEN
        IF NEW.source <> 'evidence' THEN
            noticed := 'resolution';
        END IF;
    END IF;
    INSERT INTO qinglong.recovery_required_marks (
        dispatch_id, execution_attempt, execution_version, lease_owner, lease_expires_at_ms,
        noticed_by, committed_at_ms
    )
    SELECT e.dispatch_id, e.attempt, e.version, e.lease_owner, e.lease_expires_at_ms,
           noticed,
           (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
               OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8
    FROM qinglong.approved_action_dispatch_executions AS e
    WHERE e.dispatch_id = NEW.dispatch_id AND e.status = 'executing'
    ON CONFLICT (dispatch_id) DO NOTHING;
    RETURN NULL;
END
$function$;
ALTER FUNCTION qinglong.mark_recovery_required() OWNER TO qinglong_recorder;

-- function qinglong.notify_dispatch_due()
CREATE OR REPLACE FUNCTION qinglong.notify_dispatch_due()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM pg_catalog.pg_notify('qinglong_dispatch_due', '');
    RETURN NULL;
END
$function$;
GRANT EXECUTE ON FUNCTION qinglong.notify_dispatch_due() TO PUBLIC;

-- function qinglong.policy_in_force(p_action_type text, p_project_id text, p_target text)
CREATE OR REPLACE FUNCTION qinglong.policy_in_force(p_action_type text, p_project_id text, p_target text)
 RETURNS SETOF qinglong.approval_policies
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT p.* FROM qinglong.approval_policies AS p
    WHERE p.action_type = p_action_type
      AND (p.project_id IS NULL OR p.project_id = p_project_id)
      AND (p.target_prefix IS NULL OR pg_catalog.starts_with(p_target, p.target_prefix))
      AND NOT p.retired
      AND p.version = (SELECT max(q.version) FROM qinglong.approval_policies AS q
                       WHERE q.name = p.name)
    ORDER BY (p.target_prefix IS NULL), pg_catalog.char_length(p.target_prefix) DESC,
             (p.project_id IS NULL), p.name COLLATE "C"
    LIMIT 1
$function$;
GRANT EXECUTE ON FUNCTION qinglong.policy_in_force(p_action_type text, p_project_id text, p_target text) TO qinglong_recorder;

-- function qinglong.read_plan(p_dispatch_id text)
CREATE OR REPLACE FUNCTION qinglong.read_plan(p_dispatch_id text)
 RETURNS TABLE(project_id text, action_ref text, action_type text, plan_json text, plan_digest text, plan_key_id text, plan_algorithm text, plan_sealed bytea, plan_schema_version integer)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    plan_row qinglong.action_plans%ROWTYPE;
BEGIN
    IF NOT pg_catalog.pg_has_role(SESSION_USER, 'qinglong_plan_reader', 'MEMBER') THEN
        RAISE EXCEPTION 'reading a whole plan needs a qinglong_plan_reader login'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT p.* INTO plan_row
    FROM qinglong.approved_action_dispatches AS d
    JOIN qinglong.action_plans AS p
      ON p.project_id = d.project_id AND p.action_ref = d.action_ref
    WHERE d.dispatch_id = p_dispatch_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO qinglong.security_audit_events (
        kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
    ) VALUES (
        'plan.read', SESSION_USER, SESSION_USER, plan_row.project_id, p_dispatch_id,
        plan_row.action_type,
        (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
            OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8
    );
    RETURN QUERY SELECT plan_row.project_id, plan_row.action_ref, plan_row.action_type,
        plan_row.plan_json, plan_row.plan_digest, plan_row.plan_key_id, plan_row.plan_algorithm,
        plan_row.plan_sealed, plan_row.plan_schema_version;
END
$function$;
ALTER FUNCTION qinglong.read_plan(p_dispatch_id text) OWNER TO qinglong_recorder;
GRANT EXECUTE ON FUNCTION qinglong.read_plan(p_dispatch_id text) TO qinglong_plan_reader;

-- function qinglong.record_execution_changes()
CREATE OR REPLACE FUNCTION qinglong.record_execution_changes()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO qinglong.execution_events (
            dispatch_id, version, from_status, to_status, attempt, lease_owner, lease_token,
            mutation_id, result_code, committed_at_ms
        )
        SELECT n.dispatch_id, n.version, NULL, n.status, n.attempt, NULL, NULL, NULL, NULL,
               (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
                   OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8
        FROM new_rows AS n;
        RETURN NULL;
    END IF;
    INSERT INTO qinglong.execution_events (
        dispatch_id, version, from_status, to_status, attempt, lease_owner, lease_token,
        mutation_id, result_code, committed_at_ms
    )
    SELECT n.dispatch_id, n.version, o.status, n.status, n.attempt, n.lease_owner,
           n.lease_token,
           CASE WHEN n.result_mutation_id IS DISTINCT FROM o.result_mutation_id
                THEN n.result_mutation_id END,
           CASE WHEN n.status NOT IN ('leased', 'executing') THEN n.result_code END,
           (pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp())
               OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8
    FROM new_rows AS n
    JOIN old_rows AS o ON o.dispatch_id = n.dispatch_id
    WHERE n.status IS DISTINCT FROM o.status OR n.attempt IS DISTINCT FROM o.attempt
       OR n.takeovers IS DISTINCT FROM o.takeovers;
    RETURN NULL;
END
$function$;
ALTER FUNCTION qinglong.record_execution_changes() OWNER TO qinglong_recorder;

-- function qinglong.refuse_mutation()
CREATE OR REPLACE FUNCTION qinglong.refuse_mutation()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RAISE EXCEPTION '% is immutable', TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END
$function$;

-- function qinglong.request_policy_in_force(p_action_type text, p_project_id text, p_action_ref text)
CREATE OR REPLACE FUNCTION qinglong.request_policy_in_force(p_action_type text, p_project_id text, p_action_ref text)
 RETURNS SETOF qinglong.approval_policies
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT f.* FROM qinglong.action_plans AS a
    CROSS JOIN LATERAL qinglong.policy_in_force(p_action_type, p_project_id, a.target) AS f
    WHERE a.project_id = p_project_id AND a.action_ref = p_action_ref
$function$;
ALTER FUNCTION qinglong.request_policy_in_force(p_action_type text, p_project_id text, p_action_ref text) OWNER TO qinglong_recorder;
GRANT EXECUTE ON FUNCTION qinglong.request_policy_in_force(p_action_type text, p_project_id text, p_action_ref text) TO qinglong_approver;
GRANT EXECUTE ON FUNCTION qinglong.request_policy_in_force(p_action_type text, p_project_id text, p_action_ref text) TO qinglong_operator;
GRANT EXECUTE ON FUNCTION qinglong.request_policy_in_force(p_action_type text, p_project_id text, p_action_ref text) TO qinglong_runtime;
GRANT EXECUTE ON FUNCTION qinglong.request_policy_in_force(p_action_type text, p_project_id text, p_action_ref text) TO qinglong_submitter;

-- function qinglong.set_policy_lifetime()
CREATE OR REPLACE FUNCTION qinglong.set_policy_lifetime()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    lifetime pg_catalog.int8;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM qinglong.approval_policies
                   WHERE action_type = NEW.action_type) THEN
        RETURN NEW;
    END IF;
    SELECT p.lifetime_ms INTO lifetime FROM qinglong.request_policy_in_force(
        NEW.action_type, NEW.project_id, NEW.action_ref) AS p;
    IF lifetime IS NOT NULL THEN
        NEW.expires_at_ms := NEW.created_at_ms OPERATOR(pg_catalog.+) lifetime;
        NEW.db_expires_at_ms := qinglong.db_now_ms() OPERATOR(pg_catalog.+) lifetime;
    END IF;
    RETURN NEW;
END
$function$;

-- function qinglong.submit_one(p_project_id text, p_action_ref text, p_action_type text, p_plan_json text, p_plan_digest text, p_plan_key_id text, p_plan_algorithm text, p_plan_sealed bytea, p_plan_schema_version integer, p_approval_request_id text, p_action_digest text, p_requested_by text, p_expires_at_ms bigint, p_decided_by text, p_dispatch_id text, p_max_attempts integer, p_now_ms bigint)
CREATE OR REPLACE FUNCTION qinglong.submit_one(p_project_id text, p_action_ref text, p_action_type text, p_plan_json text, p_plan_digest text, p_plan_key_id text, p_plan_algorithm text, p_plan_sealed bytea, p_plan_schema_version integer, p_approval_request_id text, p_action_digest text, p_requested_by text, p_expires_at_ms bigint, p_decided_by text, p_dispatch_id text, p_max_attempts integer, p_now_ms bigint)
 RETURNS text
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    approved_by pg_catalog.text;
BEGIN
    INSERT INTO qinglong.action_plans (
        project_id, action_ref, action_type, plan_json, plan_digest, created_at_ms,
        plan_key_id, plan_algorithm, plan_sealed, plan_schema_version
    ) VALUES (
        p_project_id, p_action_ref, p_action_type, p_plan_json, p_plan_digest, p_now_ms,
        p_plan_key_id, p_plan_algorithm, p_plan_sealed, p_plan_schema_version
    );
    INSERT INTO qinglong.approval_requests (
        approval_request_id, project_id, action_type, action_ref, action_digest, status,
        version, requested_by, decided_by, requested_principal, expires_at_ms, created_at_ms,
        updated_at_ms
    ) VALUES (
        p_approval_request_id, p_project_id, p_action_type, p_action_ref, p_action_digest,
        'pending', 1, p_requested_by, NULL, qinglong.acting_principal(), p_expires_at_ms,
        p_now_ms, p_now_ms
    );
    UPDATE qinglong.approval_requests
    SET status = 'approved', version = 2, decided_by = p_decided_by,
        decided_principal = qinglong.acting_principal(), updated_at_ms = p_now_ms
    WHERE approval_request_id = p_approval_request_id AND status = 'pending' AND version = 1
      AND expires_at_ms > p_now_ms;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the submitted request was not approved' USING ERRCODE = 'QLS01';
    END IF;
    UPDATE qinglong.approval_requests
    SET status = 'consumed', version = 3, consumed_at_ms = p_now_ms,
        consumed_principal = qinglong.acting_principal(), updated_at_ms = p_now_ms
    WHERE approval_request_id = p_approval_request_id AND status = 'approved' AND version = 2
      AND expires_at_ms > p_now_ms
    RETURNING decided_by INTO approved_by;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the submitted request was not consumed' USING ERRCODE = 'QLS01';
    END IF;
    INSERT INTO qinglong.approved_action_dispatches (
        dispatch_id, approval_request_id, project_id, action_type, action_ref, action_digest,
        approved_by, created_at_ms
    ) VALUES (
        p_dispatch_id, p_approval_request_id, p_project_id, p_action_type, p_action_ref,
        p_action_digest, approved_by, p_now_ms
    );
    INSERT INTO qinglong.approved_action_dispatch_executions (
        dispatch_id, project_id, status, version, attempt, max_attempts, eligible_at_ms,
        created_at_ms, updated_at_ms
    ) VALUES (
        p_dispatch_id, p_project_id, 'pending', 0, 0, p_max_attempts, p_now_ms, p_now_ms,
        p_now_ms
    );
    RETURN p_dispatch_id;
END
$function$;
GRANT EXECUTE ON FUNCTION qinglong.submit_one(p_project_id text, p_action_ref text, p_action_type text, p_plan_json text, p_plan_digest text, p_plan_key_id text, p_plan_algorithm text, p_plan_sealed bytea, p_plan_schema_version integer, p_approval_request_id text, p_action_digest text, p_requested_by text, p_expires_at_ms bigint, p_decided_by text, p_dispatch_id text, p_max_attempts integer, p_now_ms bigint) TO PUBLIC;

-- function qinglong.tell_approval_reminder()
CREATE OR REPLACE FUNCTION qinglong.tell_approval_reminder()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF NOT EXISTS (
            SELECT 1 FROM qinglong.notification_subscriptions AS s
            WHERE pg_catalog.strpos(s.kinds_json,
                                    '"' OPERATOR(pg_catalog.||) NEW.kind
                                    OPERATOR(pg_catalog.||) '"') > 0) THEN
        RETURN NULL;
    END IF;
    INSERT INTO qinglong.notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    )
    SELECT NEW.kind, r.approval_request_id, r.project_id, r.action_type, NEW.at_ms,
        pg_catalog.json_build_object(
            'approvalRequestId', r.approval_request_id,
            'actionRef', r.action_ref,
            'actionDigest', r.action_digest,
            'status', r.status,
            'expiresAtMs', COALESCE(r.db_expires_at_ms, r.expires_at_ms),
            'policy', p.policy_name,
            'policyVersion', p.policy_version
        )::pg_catalog.text
    FROM qinglong.approval_requests AS r
    LEFT JOIN qinglong.approval_request_policies AS p USING (approval_request_id)
    WHERE r.approval_request_id OPERATOR(pg_catalog.=) NEW.approval_request_id;
    RETURN NULL;
END
$function$;
ALTER FUNCTION qinglong.tell_approval_reminder() OWNER TO qinglong_recorder;

-- function qinglong.tell_approval_request()
CREATE OR REPLACE FUNCTION qinglong.tell_approval_request()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    kind   pg_catalog.text;
    policy pg_catalog.text;
    policy_version pg_catalog.int8;
BEGIN
    IF TG_OP = 'INSERT' THEN
        kind := 'approval.requested';
    ELSIF NEW.status IS DISTINCT FROM OLD.status
            AND NEW.status IN ('approved', 'rejected', 'expired') THEN
        kind := 'approval.' OPERATOR(pg_catalog.||) NEW.status;
    ELSE
        RETURN NULL;
    END IF;
    IF NOT EXISTS (
            SELECT 1 FROM qinglong.notification_subscriptions AS s
            WHERE pg_catalog.strpos(s.kinds_json,
                                    '"' OPERATOR(pg_catalog.||) kind
                                    OPERATOR(pg_catalog.||) '"') > 0) THEN
        RETURN NULL;
    END IF;
    SELECT p.policy_name, p.policy_version INTO policy, policy_version
        FROM qinglong.approval_request_policies AS p
        WHERE p.approval_request_id OPERATOR(pg_catalog.=) NEW.approval_request_id;
    INSERT INTO qinglong.notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    ) VALUES (
        kind, NEW.approval_request_id, NEW.project_id, NEW.action_type, qinglong.db_now_ms(),
        pg_catalog.json_build_object(
            'approvalRequestId', NEW.approval_request_id,
            'actionRef', NEW.action_ref,
            'actionDigest', NEW.action_digest,
            'status', NEW.status,
            'expiresAtMs', COALESCE(NEW.db_expires_at_ms, NEW.expires_at_ms),
            'policy', policy,
            'policyVersion', policy_version
        )::pg_catalog.text
    );
    RETURN NULL;
END
$function$;
ALTER FUNCTION qinglong.tell_approval_request() OWNER TO qinglong_recorder;

-- function qinglong.tell_execution_outcome()
CREATE OR REPLACE FUNCTION qinglong.tell_execution_outcome()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM qinglong.notification_subscriptions AS s
                   WHERE pg_catalog.strpos(s.kinds_json, '"dispatch.') > 0) THEN
        RETURN NULL;
    END IF;
    INSERT INTO qinglong.notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    )
    SELECT 'dispatch.' OPERATOR(pg_catalog.||) n.status, n.dispatch_id, d.project_id,
        d.action_type, qinglong.db_now_ms(),
        pg_catalog.json_build_object(
            'dispatchId', n.dispatch_id,
            'approvalRequestId', d.approval_request_id,
            'actionRef', d.action_ref,
            'actionDigest', d.action_digest,
            'status', n.status,
            'attempt', n.attempt,
            'resultCode', n.result_code
        )::pg_catalog.text
    FROM new_rows AS n
    JOIN old_rows AS o ON o.dispatch_id OPERATOR(pg_catalog.=) n.dispatch_id
    JOIN qinglong.approved_action_dispatches AS d
      ON d.dispatch_id OPERATOR(pg_catalog.=) n.dispatch_id
    WHERE n.status IS DISTINCT FROM o.status AND n.status IN ('failed', 'blocked', 'succeeded')
      AND EXISTS (SELECT 1 FROM qinglong.notification_subscriptions AS s
                  WHERE pg_catalog.strpos(s.kinds_json,
                                          '"dispatch.' OPERATOR(pg_catalog.||) n.status
                                          OPERATOR(pg_catalog.||) '"') > 0)
    ORDER BY n.dispatch_id;
    RETURN NULL;
END
$function$;
ALTER FUNCTION qinglong.tell_execution_outcome() OWNER TO qinglong_recorder;

-- function qinglong.tell_recovery_required()
CREATE OR REPLACE FUNCTION qinglong.tell_recovery_required()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF NOT EXISTS (
            SELECT 1 FROM qinglong.notification_subscriptions AS s
            WHERE pg_catalog.strpos(s.kinds_json, '"dispatch.recovery_required"') > 0
               OR pg_catalog.strpos(s.kinds_json, '"target.held"') > 0) THEN
        RETURN NULL;
    END IF;
    INSERT INTO qinglong.notification_events (
        kind, subject_id, project_id, action_type, at_ms, payload_json
    )
    SELECT k.kind, d.dispatch_id, d.project_id, d.action_type, qinglong.db_now_ms(),
        pg_catalog.json_build_object(
            'dispatchId', d.dispatch_id,
            'approvalRequestId', d.approval_request_id,
            'actionRef', d.action_ref,
            'actionDigest', d.action_digest,
            'status', 'recovery_required',
            'attempt', NEW.execution_attempt,
            'resultCode', u.result_code,
            'target', d.target,
            'noticedBy', NEW.noticed_by
        )::pg_catalog.text
    FROM qinglong.approved_action_dispatches AS d
    CROSS JOIN (VALUES (1, 'dispatch.recovery_required'), (2, 'target.held')) AS k (ord, kind)
    LEFT JOIN qinglong.uncertain_outcomes AS u
        ON u.dispatch_id = d.dispatch_id AND u.execution_attempt = NEW.execution_attempt
    WHERE d.dispatch_id = NEW.dispatch_id AND (k.ord = 1 OR d.target IS NOT NULL)
    ORDER BY k.ord;
    RETURN NULL;
END
$function$;
ALTER FUNCTION qinglong.tell_recovery_required() OWNER TO qinglong_recorder;

-- triggers (99)
CREATE TRIGGER action_plans_immutable BEFORE TRUNCATE ON qinglong.action_plans FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER action_plans_prune_only BEFORE DELETE ON qinglong.action_plans FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();
CREATE TRIGGER action_plans_reseal_only BEFORE UPDATE ON qinglong.action_plans FOR EACH ROW EXECUTE FUNCTION qinglong.guard_plan_reseal();
CREATE TRIGGER api_tokens_guard BEFORE UPDATE ON qinglong.api_tokens FOR EACH ROW EXECUTE FUNCTION qinglong.guard_api_token_change();
CREATE TRIGGER approval_events_guard BEFORE INSERT OR DELETE OR UPDATE ON qinglong.approval_events FOR EACH ROW EXECUTE FUNCTION qinglong.guard_approval_event();
CREATE TRIGGER approval_events_tell AFTER INSERT ON qinglong.approval_events FOR EACH ROW EXECUTE FUNCTION qinglong.tell_approval_reminder();
CREATE TRIGGER approval_policies_audit AFTER INSERT ON qinglong.approval_policies FOR EACH ROW EXECUTE FUNCTION qinglong.audit_approval_policy();
CREATE TRIGGER approval_policies_guard BEFORE INSERT OR DELETE OR UPDATE ON qinglong.approval_policies FOR EACH ROW EXECUTE FUNCTION qinglong.guard_approval_policy();
CREATE TRIGGER approval_request_policies_guard BEFORE DELETE OR UPDATE ON qinglong.approval_request_policies FOR EACH ROW EXECUTE FUNCTION qinglong.guard_request_policy();
CREATE TRIGGER approval_requests_audit AFTER INSERT OR UPDATE ON qinglong.approval_requests FOR EACH ROW EXECUTE FUNCTION qinglong.audit_approval_request();
CREATE TRIGGER approval_requests_decision_comment BEFORE UPDATE ON qinglong.approval_requests FOR EACH ROW WHEN ((old.decision_comment IS DISTINCT FROM new.decision_comment)) EXECUTE FUNCTION qinglong.guard_decision_comment();
CREATE TRIGGER approval_requests_decision_comment_new BEFORE INSERT ON qinglong.approval_requests FOR EACH ROW WHEN ((new.decision_comment IS NOT NULL)) EXECUTE FUNCTION qinglong.guard_decision_comment();
CREATE TRIGGER approval_requests_guard BEFORE INSERT OR UPDATE ON qinglong.approval_requests FOR EACH ROW EXECUTE FUNCTION qinglong.guard_approval_request();
CREATE TRIGGER approval_requests_lifetime BEFORE INSERT ON qinglong.approval_requests FOR EACH ROW EXECUTE FUNCTION qinglong.set_policy_lifetime();
CREATE TRIGGER approval_requests_policy AFTER INSERT ON qinglong.approval_requests FOR EACH ROW EXECUTE FUNCTION qinglong.copy_approval_policy();
CREATE TRIGGER approval_requests_prune_only BEFORE DELETE ON qinglong.approval_requests FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();
CREATE TRIGGER approval_requests_resubmitted_from BEFORE UPDATE ON qinglong.approval_requests FOR EACH ROW WHEN ((old.resubmitted_from IS DISTINCT FROM new.resubmitted_from)) EXECUTE FUNCTION qinglong.guard_resubmitted_from();
CREATE TRIGGER approval_requests_resubmitted_from_new BEFORE INSERT ON qinglong.approval_requests FOR EACH ROW WHEN ((new.resubmitted_from IS NOT NULL)) EXECUTE FUNCTION qinglong.guard_resubmitted_from();
CREATE TRIGGER approval_requests_tell AFTER INSERT OR UPDATE ON qinglong.approval_requests FOR EACH ROW EXECUTE FUNCTION qinglong.tell_approval_request();
CREATE TRIGGER approval_requests_traceparent_immutable BEFORE UPDATE OF traceparent ON qinglong.approval_requests FOR EACH ROW WHEN ((old.traceparent IS DISTINCT FROM new.traceparent)) EXECUTE FUNCTION qinglong.guard_approval_traceparent();
CREATE TRIGGER approval_requests_vote_recorded AFTER UPDATE ON qinglong.approval_requests FOR EACH ROW WHEN (((old.status = 'pending'::text) AND (new.status = 'approved'::text))) EXECUTE FUNCTION qinglong.check_direct_approval();
CREATE TRIGGER approval_requests_window_immutable BEFORE UPDATE OF not_before_ms, window_for_ms ON qinglong.approval_requests FOR EACH ROW WHEN (((old.not_before_ms IS DISTINCT FROM new.not_before_ms) OR (old.window_for_ms IS DISTINCT FROM new.window_for_ms))) EXECUTE FUNCTION qinglong.guard_requested_window();
CREATE TRIGGER approval_requests_window_possible AFTER INSERT ON qinglong.approval_requests FOR EACH ROW WHEN ((new.window_for_ms IS NOT NULL)) EXECUTE FUNCTION qinglong.check_requested_window();
CREATE TRIGGER approval_votes_count AFTER INSERT ON qinglong.approval_votes FOR EACH ROW EXECUTE FUNCTION qinglong.count_approval_votes();
CREATE TRIGGER approval_votes_guard BEFORE INSERT OR DELETE OR UPDATE ON qinglong.approval_votes FOR EACH ROW EXECUTE FUNCTION qinglong.guard_approval_vote();
CREATE TRIGGER approved_action_dispatch_executions_accountable BEFORE UPDATE ON qinglong.approved_action_dispatch_executions FOR EACH ROW WHEN (((new.status = 'leased'::text) OR ((new.status IS DISTINCT FROM old.status) AND ((new.status = 'cancelled'::text) OR ((new.status = 'blocked'::text) AND (old.status = ANY (ARRAY['pending'::text, 'retry_wait'::text, 'leased'::text]))) OR ((old.status = 'executing'::text) AND (new.status = ANY (ARRAY['blocked'::text, 'succeeded'::text, 'failed'::text]))))))) EXECUTE FUNCTION qinglong.guard_execution_accountable();
CREATE TRIGGER approved_action_dispatch_executions_due_insert AFTER INSERT ON qinglong.approved_action_dispatch_executions FOR EACH STATEMENT EXECUTE FUNCTION qinglong.notify_dispatch_due();
CREATE TRIGGER approved_action_dispatch_executions_due_yield AFTER UPDATE ON qinglong.approved_action_dispatch_executions FOR EACH ROW WHEN (((new.status = 'pending'::text) AND (old.status IS DISTINCT FROM 'pending'::text))) EXECUTE FUNCTION qinglong.notify_dispatch_due();
CREATE TRIGGER approved_action_dispatch_executions_freeze BEFORE UPDATE ON qinglong.approved_action_dispatch_executions FOR EACH ROW WHEN ((((new.status = 'leased'::text) AND ((old.status <> 'leased'::text) OR (new.lease_token IS DISTINCT FROM old.lease_token))) OR ((new.status = 'executing'::text) AND (old.status <> 'executing'::text)) OR ((new.status = 'succeeded'::text) AND (old.status = 'pending'::text)))) EXECUTE FUNCTION qinglong.check_execution_freeze();
CREATE TRIGGER approved_action_dispatch_executions_ledger_insert AFTER INSERT ON qinglong.approved_action_dispatch_executions REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION qinglong.record_execution_changes();
CREATE TRIGGER approved_action_dispatch_executions_ledger_update AFTER UPDATE ON qinglong.approved_action_dispatch_executions REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION qinglong.record_execution_changes();
CREATE CONSTRAINT TRIGGER approved_action_dispatch_executions_passage_receipt AFTER UPDATE ON qinglong.approved_action_dispatch_executions DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (((old.status = 'pending'::text) AND (new.status = 'succeeded'::text))) EXECUTE FUNCTION qinglong.check_passage_receipt();
CREATE TRIGGER approved_action_dispatch_executions_passages AFTER UPDATE ON qinglong.approved_action_dispatch_executions REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION qinglong.check_passages();
CREATE TRIGGER approved_action_dispatch_executions_prune_only BEFORE DELETE ON qinglong.approved_action_dispatch_executions FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();
CREATE TRIGGER approved_action_dispatch_executions_receipt BEFORE UPDATE ON qinglong.approved_action_dispatch_executions FOR EACH ROW WHEN (((new.result_receipt_json IS DISTINCT FROM old.result_receipt_json) OR (new.result_receipt_digest IS DISTINCT FROM old.result_receipt_digest))) EXECUTE FUNCTION qinglong.guard_execution_receipt();
CREATE TRIGGER approved_action_dispatch_executions_receipt_insert BEFORE INSERT ON qinglong.approved_action_dispatch_executions FOR EACH ROW WHEN (((new.result_receipt_json IS NOT NULL) OR (new.result_receipt_digest IS NOT NULL))) EXECUTE FUNCTION qinglong.guard_execution_receipt();
CREATE TRIGGER approved_action_dispatch_executions_rule_immutable BEFORE UPDATE OF proceed_on_unknown ON qinglong.approved_action_dispatch_executions FOR EACH ROW WHEN ((old.proceed_on_unknown IS DISTINCT FROM new.proceed_on_unknown)) EXECUTE FUNCTION qinglong.guard_execution_rule();
CREATE TRIGGER approved_action_dispatch_executions_rule_of_policy BEFORE INSERT ON qinglong.approved_action_dispatch_executions FOR EACH ROW EXECUTE FUNCTION qinglong.execution_rule_of_policy();
CREATE TRIGGER approved_action_dispatch_executions_state_machine BEFORE INSERT OR UPDATE ON qinglong.approved_action_dispatch_executions FOR EACH ROW EXECUTE FUNCTION qinglong.check_execution_change();
CREATE TRIGGER approved_action_dispatch_executions_target_holder BEFORE UPDATE ON qinglong.approved_action_dispatch_executions FOR EACH ROW WHEN (((new.target IS NOT NULL) AND (((new.status = 'leased'::text) AND ((old.status <> 'leased'::text) OR (new.lease_token IS DISTINCT FROM old.lease_token))) OR (new.proceed_on_unknown AND (new.status = 'executing'::text) AND ((old.status <> 'executing'::text) OR (new.lease_expires_at_ms IS DISTINCT FROM old.lease_expires_at_ms)))))) EXECUTE FUNCTION qinglong.check_target_holder();
CREATE TRIGGER approved_action_dispatch_executions_target_immutable BEFORE UPDATE OF target ON qinglong.approved_action_dispatch_executions FOR EACH ROW WHEN ((old.target IS DISTINCT FROM new.target)) EXECUTE FUNCTION qinglong.guard_execution_target();
CREATE TRIGGER approved_action_dispatch_executions_target_of_dispatch BEFORE INSERT ON qinglong.approved_action_dispatch_executions FOR EACH ROW EXECUTE FUNCTION qinglong.execution_target_of_dispatch();
CREATE TRIGGER approved_action_dispatch_executions_tell AFTER UPDATE ON qinglong.approved_action_dispatch_executions REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION qinglong.tell_execution_outcome();
CREATE TRIGGER approved_action_dispatch_executions_window BEFORE UPDATE ON qinglong.approved_action_dispatch_executions FOR EACH ROW WHEN ((((new.not_before_ms IS NOT NULL) OR (new.not_after_ms IS NOT NULL)) AND (((new.status = 'leased'::text) AND ((old.status <> 'leased'::text) OR (new.lease_token IS DISTINCT FROM old.lease_token))) OR ((new.status = 'executing'::text) AND (old.status <> 'executing'::text)) OR ((new.status = 'succeeded'::text) AND (old.status = 'pending'::text))))) EXECUTE FUNCTION qinglong.check_execution_window();
CREATE TRIGGER approved_action_dispatch_executions_window_immutable BEFORE UPDATE OF not_before_ms, not_after_ms ON qinglong.approved_action_dispatch_executions FOR EACH ROW WHEN (((old.not_before_ms IS DISTINCT FROM new.not_before_ms) OR (old.not_after_ms IS DISTINCT FROM new.not_after_ms))) EXECUTE FUNCTION qinglong.guard_execution_window_copy();
CREATE TRIGGER approved_action_dispatch_executions_window_of_dispatch BEFORE INSERT ON qinglong.approved_action_dispatch_executions FOR EACH ROW EXECUTE FUNCTION qinglong.execution_window_of_dispatch();
CREATE TRIGGER approved_action_dispatches_guard BEFORE INSERT ON qinglong.approved_action_dispatches FOR EACH ROW EXECUTE FUNCTION qinglong.guard_dispatch_insert();
CREATE TRIGGER approved_action_dispatches_immutable BEFORE UPDATE OR TRUNCATE ON qinglong.approved_action_dispatches FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER approved_action_dispatches_prune_only BEFORE DELETE ON qinglong.approved_action_dispatches FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();
CREATE TRIGGER approved_action_dispatches_target_of_plan BEFORE INSERT ON qinglong.approved_action_dispatches FOR EACH ROW EXECUTE FUNCTION qinglong.dispatch_target_of_plan();
CREATE TRIGGER approved_action_dispatches_traceparent_of_request BEFORE INSERT ON qinglong.approved_action_dispatches FOR EACH ROW EXECUTE FUNCTION qinglong.dispatch_traceparent_of_request();
CREATE TRIGGER approved_action_dispatches_window_of_policy BEFORE INSERT ON qinglong.approved_action_dispatches FOR EACH ROW EXECUTE FUNCTION qinglong.dispatch_window_of_policy();
CREATE TRIGGER approved_run_action_receipts_guard BEFORE INSERT ON qinglong.approved_run_action_receipts FOR EACH ROW EXECUTE FUNCTION qinglong.guard_receipt();
CREATE TRIGGER approved_run_action_receipts_immutable BEFORE UPDATE OR TRUNCATE ON qinglong.approved_run_action_receipts FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER approved_run_action_receipts_prune_only BEFORE DELETE ON qinglong.approved_run_action_receipts FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();
CREATE TRIGGER audit_prune_permits_guard BEFORE INSERT ON qinglong.audit_prune_permits FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_permit();
CREATE TRIGGER audit_prune_permits_immutable BEFORE UPDATE OR TRUNCATE ON qinglong.audit_prune_permits FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER audit_receipts_immutable BEFORE DELETE OR UPDATE OR TRUNCATE ON qinglong.audit_receipts FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER execution_events_immutable BEFORE UPDATE OR TRUNCATE ON qinglong.execution_events FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER execution_events_prune_only BEFORE DELETE ON qinglong.execution_events FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();
CREATE TRIGGER freeze_lifts_audit AFTER INSERT ON qinglong.freeze_lifts FOR EACH ROW EXECUTE FUNCTION qinglong.audit_freeze();
CREATE TRIGGER freeze_lifts_guard BEFORE INSERT OR DELETE OR UPDATE ON qinglong.freeze_lifts FOR EACH ROW EXECUTE FUNCTION qinglong.guard_freeze_lift();
CREATE TRIGGER freezes_audit AFTER INSERT OR UPDATE ON qinglong.freezes FOR EACH ROW EXECUTE FUNCTION qinglong.audit_freeze();
CREATE TRIGGER freezes_guard BEFORE INSERT OR DELETE OR UPDATE ON qinglong.freezes FOR EACH ROW EXECUTE FUNCTION qinglong.guard_freeze();
CREATE TRIGGER inbox_notes_guard BEFORE INSERT ON qinglong.inbox_notes FOR EACH ROW EXECUTE FUNCTION qinglong.guard_inbox_note();
CREATE TRIGGER inbox_notes_immutable BEFORE UPDATE OR TRUNCATE ON qinglong.inbox_notes FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER notification_attempts_prune_guard BEFORE DELETE ON qinglong.notification_attempts FOR EACH ROW EXECUTE FUNCTION qinglong.guard_notification_prune();
CREATE TRIGGER notification_deliveries_prune_guard BEFORE DELETE ON qinglong.notification_deliveries FOR EACH ROW EXECUTE FUNCTION qinglong.guard_notification_prune();
CREATE TRIGGER notification_events_immutable BEFORE UPDATE OR TRUNCATE ON qinglong.notification_events FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER notification_events_prune_guard BEFORE DELETE ON qinglong.notification_events FOR EACH ROW EXECUTE FUNCTION qinglong.guard_notification_prune();
CREATE TRIGGER notification_events_while_someone_listens BEFORE INSERT ON qinglong.notification_events FOR EACH ROW EXECUTE FUNCTION qinglong.keep_event_while_someone_listens();
CREATE TRIGGER notification_events_with_target BEFORE INSERT ON qinglong.notification_events FOR EACH ROW EXECUTE FUNCTION qinglong.event_target();
CREATE TRIGGER notification_fanouts_prune_guard BEFORE DELETE ON qinglong.notification_fanouts FOR EACH ROW EXECUTE FUNCTION qinglong.guard_notification_prune();
CREATE TRIGGER prune_permits_guard BEFORE INSERT ON qinglong.prune_permits FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_permit();
CREATE TRIGGER prune_permits_immutable BEFORE UPDATE OR TRUNCATE ON qinglong.prune_permits FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER recovery_observations_mark AFTER INSERT ON qinglong.recovery_observations FOR EACH ROW EXECUTE FUNCTION qinglong.mark_recovery_required();
CREATE TRIGGER recovery_observations_prune_only BEFORE DELETE ON qinglong.recovery_observations FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();
CREATE TRIGGER recovery_required_marks_immutable BEFORE UPDATE OR TRUNCATE ON qinglong.recovery_required_marks FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER recovery_required_marks_prune_only BEFORE DELETE ON qinglong.recovery_required_marks FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();
CREATE TRIGGER recovery_required_marks_tell AFTER INSERT ON qinglong.recovery_required_marks FOR EACH ROW EXECUTE FUNCTION qinglong.tell_recovery_required();
CREATE TRIGGER recovery_resolutions_immutable BEFORE UPDATE OR TRUNCATE ON qinglong.recovery_resolutions FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER recovery_resolutions_mark AFTER INSERT ON qinglong.recovery_resolutions FOR EACH ROW EXECUTE FUNCTION qinglong.mark_recovery_required();
CREATE TRIGGER recovery_resolutions_principal BEFORE INSERT ON qinglong.recovery_resolutions FOR EACH ROW EXECUTE FUNCTION qinglong.check_resolution_principal();
CREATE TRIGGER recovery_resolutions_prune_only BEFORE DELETE ON qinglong.recovery_resolutions FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();
CREATE TRIGGER run_events_immutable BEFORE DELETE OR UPDATE OR TRUNCATE ON qinglong.run_events FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER runs_holder_proof BEFORE INSERT ON qinglong.runs FOR EACH ROW EXECUTE FUNCTION qinglong.guard_run_holder();
CREATE TRIGGER runs_identity BEFORE UPDATE ON qinglong.runs FOR EACH ROW EXECUTE FUNCTION qinglong.guard_run_change();
CREATE TRIGGER security_audit_events_guard BEFORE INSERT ON qinglong.security_audit_events FOR EACH ROW EXECUTE FUNCTION qinglong.guard_audit_event();
CREATE TRIGGER security_audit_events_immutable BEFORE UPDATE OR TRUNCATE ON qinglong.security_audit_events FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER security_audit_events_prune_only BEFORE DELETE ON qinglong.security_audit_events FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();
CREATE TRIGGER security_audit_events_subject_finished BEFORE DELETE ON qinglong.security_audit_events FOR EACH ROW EXECUTE FUNCTION qinglong.guard_audit_subject_delete();
CREATE TRIGGER step_run_mutations_immutable BEFORE DELETE OR UPDATE OR TRUNCATE ON qinglong.step_run_mutations FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER step_runs_state_machine BEFORE INSERT OR UPDATE ON qinglong.step_runs FOR EACH ROW EXECUTE FUNCTION qinglong.check_step_run_change();
CREATE TRIGGER tool_execution_start_barriers_immutable BEFORE DELETE OR UPDATE OR TRUNCATE ON qinglong.tool_execution_start_barriers FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER trace_anchors_immutable BEFORE DELETE OR UPDATE OR TRUNCATE ON qinglong.trace_anchors FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER ui_sessions_guard BEFORE UPDATE ON qinglong.ui_sessions FOR EACH ROW EXECUTE FUNCTION qinglong.guard_ui_session_change();
CREATE TRIGGER uncertain_outcomes_holder_proof BEFORE INSERT ON qinglong.uncertain_outcomes FOR EACH ROW EXECUTE FUNCTION qinglong.guard_uncertain_outcome();
CREATE TRIGGER uncertain_outcomes_immutable BEFORE UPDATE OR TRUNCATE ON qinglong.uncertain_outcomes FOR EACH STATEMENT EXECUTE FUNCTION qinglong.refuse_mutation();
CREATE TRIGGER uncertain_outcomes_prune_only BEFORE DELETE ON qinglong.uncertain_outcomes FOR EACH ROW EXECUTE FUNCTION qinglong.guard_prune_delete();
