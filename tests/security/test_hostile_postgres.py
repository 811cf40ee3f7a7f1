"""Attacks on the database from plain logins holding only the role the docs give each.

Every attack asserts the database's own refusal (its SQLSTATE, not a message of ours) and
that nothing changed. The store's leases here run on the real clock, so that the database's
clock sees them live, as in production.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import asyncpg
import pytest

from qinglong_dispatcher.domain import digests, ids, records
from tests.support import refusals, repositories, stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.recovery import request_for, started_execution

pytestmark = pytest.mark.postgres

EXECUTIONS = "qinglong.approved_action_dispatch_executions"


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the database's clock must see these leases as live."""
    return ManualClock(int(time.time() * 1000))


async def _database(pg: stores.Harness) -> str:
    return str(await pg.scalar("SELECT current_database()"))


async def _snapshot(pg: stores.Harness, dispatch_id: str) -> tuple[Any, ...]:
    """Everything an attack on one dispatch could change."""
    row = await pg.raw(f"SELECT * FROM {EXECUTIONS} WHERE dispatch_id = '{dispatch_id}'")
    counts = await pg.raw(
        "SELECT (SELECT count(*) FROM qinglong.execution_events) AS events, "
        "(SELECT count(*) FROM qinglong.security_audit_events) AS audit, "
        "(SELECT count(*) FROM qinglong.recovery_resolutions) AS resolutions, "
        "(SELECT count(*) FROM qinglong.approved_run_action_receipts) AS receipts, "
        "(SELECT count(*) FROM qinglong.runs) AS runs"
    )
    return row[0], counts[0]


async def _executing(
    pg: stores.Harness, clock: ManualClock
) -> tuple[records.Dispatch, records.ExecutionIdentity]:
    await submit_runs(pg.approver_store, clock, 1)
    return await started_execution(pg, clock)


# -- 1. a temporary object never runs as anyone but its creator ------------------------------


async def _approved_request(pg: stores.Harness, now: ManualClock, *, lifetime_ms: int) -> str:
    """A request the approver wrote and the strict approver approved, in SQL: its id."""
    database = await _database(pg)
    approver = stores.approver_url(database)
    await stores.as_login(
        approver,
        "INSERT INTO qinglong.action_plans (project_id, action_ref, action_type, plan_json, "
        f"plan_digest, created_at_ms) VALUES ('p', 'act-x', 'run.create', '{{}}', "
        f"'{'a' * 64}', 1)",
    )
    await stores.as_login(
        approver,
        "INSERT INTO qinglong.approval_requests (approval_request_id, project_id, action_type, "
        "action_ref, action_digest, status, version, requested_by, requested_principal, "
        "expires_at_ms, created_at_ms, updated_at_ms) VALUES ('a-x', 'p', 'run.create', "
        f"'act-x', '{'b' * 64}', 'pending', 1, 'me', session_user, "
        f"{now.ms + lifetime_ms}, {now.ms}, {now.ms})",
    )
    await stores.as_login(
        stores.strict_approver_url(database),
        "UPDATE qinglong.approval_requests SET status = 'approved', version = 2, "
        "decided_by = 'carol', decided_principal = session_user "
        "WHERE approval_request_id = 'a-x'",
    )
    return "a-x"


_CONSUME = (
    "UPDATE qinglong.approval_requests SET status = 'consumed', version = 3, "
    "consumed_at_ms = 1, consumed_principal = session_user WHERE approval_request_id = $1"
)


async def test_a_temporary_domain_named_text_never_runs_as_the_function_owner(
    pg: stores.Harness, now: ManualClock
) -> None:
    # The runtime login consumes an approved request in SQL, which runs the audit trigger (a
    # definer function), while its temporary `text` domain, whose check calls the login's own
    # function, sits first in pg_temp. Run as the owner, that function could disable triggers.
    approval_request_id = await _approved_request(pg, now, lifetime_ms=60_000)
    triggers = (
        "SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = "
        f"'{EXECUTIONS}'::regclass AND NOT tgisinternal ORDER BY 1"
    )
    triggers_before = await pg.raw(triggers)
    conn = await asyncpg.connect(stores.runtime_url(await _database(pg)), timeout=5)
    try:
        await conn.execute(
            "CREATE FUNCTION pg_temp.evil(v pg_catalog.text) RETURNS boolean "
            "LANGUAGE plpgsql AS $$ BEGIN "
            "IF current_user <> session_user THEN "
            "PERFORM pg_catalog.set_config('qinglong_attack.ran_as', current_user, false); "
            f"EXECUTE 'ALTER TABLE {EXECUTIONS} DISABLE TRIGGER USER'; END IF; RETURN true; "
            "END $$"
        )
        for name in ("text", "int8", "bool", "int4"):
            await conn.execute(
                f"CREATE DOMAIN pg_temp.{name} AS pg_catalog.{name} CHECK (pg_temp.evil('x'))"
            )
        await conn.execute(_CONSUME, approval_request_id)
        ran_as = await conn.fetchval("SELECT current_setting('qinglong_attack.ran_as', true)")
    finally:
        await conn.close()
    assert ran_as in (None, ""), f"the login's function ran as {ran_as}"
    assert await pg.raw(triggers) == triggers_before


async def test_every_function_pins_pg_temp_last_and_definers_are_the_recorders(
    pg: stores.Harness,
) -> None:
    rows = await pg.raw(
        "SELECT p.proname, p.proconfig, p.prosecdef, pg_get_userbyid(p.proowner) AS owner "
        "FROM pg_proc AS p WHERE p.pronamespace = 'qinglong'::regnamespace"
    )
    assert rows
    for row in rows:
        assert row["proconfig"] == ["search_path=pg_catalog, pg_temp"], row
        if row["prosecdef"]:
            assert row["owner"] == "qinglong_recorder", row


# -- 2. approvals expire on the database's clock ---------------------------------------------


async def test_an_expired_approval_cannot_be_consumed_in_sql(
    pg: stores.Harness, now: ManualClock
) -> None:
    approval_request_id = await _approved_request(pg, now, lifetime_ms=1000)
    await anyio.sleep(1.2)  # the one-second lifetime runs out on the database's clock
    before = await pg.raw("SELECT * FROM qinglong.approval_requests")
    state = await refusals.sqlstate_as(
        stores.approver_url(await _database(pg)), _CONSUME, approval_request_id
    )
    assert state == "QLA04"
    assert await pg.raw("SELECT * FROM qinglong.approval_requests") == before


_APPROVE_BATCH = (
    "UPDATE qinglong.approval_requests SET status = 'approved', version = 2, "
    "decided_by = 'me', decided_principal = session_user, updated_at_ms = $2 "
    "WHERE approval_request_id = ANY (ARRAY(SELECT jsonb_array_elements_text($1::jsonb))) "
    "AND status = 'pending' AND version = 1"
)
"""A submit's batch approval (`approve_approvals`): one statement over many requests."""


async def _pending_request(url: str, now: ManualClock, n: int) -> str:
    """A plan and its pending request, written as the login `url` names: the request's id."""
    await stores.as_login(
        url,
        "INSERT INTO qinglong.action_plans (project_id, action_ref, action_type, plan_json, "
        f"plan_digest, created_at_ms) VALUES ('p', 'act-{n}', 'run.create', '{{}}', "
        f"'{'a' * 64}', 1)",
    )
    await stores.as_login(
        url,
        "INSERT INTO qinglong.approval_requests (approval_request_id, project_id, action_type, "
        "action_ref, action_digest, status, version, requested_by, requested_principal, "
        f"expires_at_ms, created_at_ms, updated_at_ms) VALUES ('a-{n}', 'p', 'run.create', "
        f"'act-{n}', '{'b' * 64}', 'pending', 1, 'me', session_user, "
        f"{now.ms + 60_000}, {now.ms}, {now.ms})",
    )
    return f"a-{n}"


async def test_a_batch_approval_with_one_own_request_in_it_is_refused_whole(
    pg: stores.Harness, now: ManualClock
) -> None:
    database = await _database(pg)
    strict = stores.strict_approver_url(database)
    theirs = await _pending_request(stores.approver_url(database), now, 1)
    own = await _pending_request(strict, now, 2)
    before = await pg.raw("SELECT * FROM qinglong.approval_requests ORDER BY 1")
    audit = await pg.raw("SELECT count(*) AS n FROM qinglong.security_audit_events")
    ids_json = f'["{theirs}", "{own}"]'
    state = await refusals.sqlstate_as(strict, _APPROVE_BATCH, ids_json, now.ms)
    assert state == "QLA02"  # the requester may not approve its own request
    assert await pg.raw("SELECT * FROM qinglong.approval_requests ORDER BY 1") == before
    assert await pg.raw("SELECT count(*) AS n FROM qinglong.security_audit_events") == audit


@pytest.mark.parametrize("lifetime_ms", [0, -1, 2_592_000_001, 9_000_000_000_000_000])
async def test_a_request_cannot_be_written_with_a_lifetime_out_of_range(
    pg: stores.Harness, now: ManualClock, lifetime_ms: int
) -> None:
    database = await _database(pg)
    approver = stores.approver_url(database)
    await stores.as_login(
        approver,
        "INSERT INTO qinglong.action_plans (project_id, action_ref, action_type, plan_json, "
        f"plan_digest, created_at_ms) VALUES ('p', 'act-y', 'run.create', '{{}}', "
        f"'{'a' * 64}', 1)",
    )
    state = await refusals.sqlstate_as(
        approver,
        "INSERT INTO qinglong.approval_requests (approval_request_id, project_id, action_type, "
        "action_ref, action_digest, status, version, requested_by, requested_principal, "
        "expires_at_ms, created_at_ms, updated_at_ms) VALUES ('a-y', 'p', 'run.create', "
        f"'act-y', '{'b' * 64}', 'pending', 1, 'me', session_user, $1, {now.ms}, {now.ms})",
        now.ms + lifetime_ms,
    )
    assert state == "QLA05"
    assert await pg.scalar("SELECT count(*) FROM qinglong.approval_requests") == 0


# -- 3. the fence is the database's --------------------------------------------------------


@pytest.mark.parametrize("proof", [None, "'guessed'", "lease_token", "lease_proof_digest"])
async def test_the_runtime_login_cannot_complete_another_holders_executing_row(
    pg: stores.Harness, now: ManualClock, proof: str | None
) -> None:
    dispatch, _ = await _executing(pg, now)
    before = await _snapshot(pg, dispatch.dispatch_id)
    presented = "" if proof is None else f", lease_proof = {proof}"
    state = await refusals.sqlstate_as(
        stores.runtime_url(await _database(pg)),
        f"UPDATE {EXECUTIONS} SET status = 'succeeded', version = version + 1, "
        "result_mutation_id = 'forged', result_code = 'forged', completed_at_ms = 1, "
        f"updated_at_ms = 1{presented} WHERE dispatch_id = $1",
        dispatch.dispatch_id,
    )
    assert state == "QLF01"
    assert await _snapshot(pg, dispatch.dispatch_id) == before


async def test_a_live_lease_cannot_be_taken_over(pg: stores.Harness, now: ManualClock) -> None:
    await submit_runs(pg.approver_store, now, 1)
    batch = await pg.store.claim_due(now_ms=now.ms, owner="w1", limit=1, lease_ms=3_600_000)
    (claim,) = batch.claimed
    assert claim.lease is not None
    before = await _snapshot(pg, claim.dispatch_id)
    state = await refusals.sqlstate_as(
        stores.runtime_url(await _database(pg)),
        f"UPDATE {EXECUTIONS} SET version = version + 1, takeovers = takeovers + 1, "
        "lease_owner = 'thief', lease_token = 'mine', lease_proof = 'mine' "
        "WHERE dispatch_id = $1",
        claim.dispatch_id,
    )
    assert state == "QLF02"
    assert await _snapshot(pg, claim.dispatch_id) == before


async def test_an_operator_cannot_settle_a_live_lease_by_update_or_by_resolution(
    pg: stores.Harness, now: ManualClock
) -> None:
    dispatch, identity = await _executing(pg, now)
    operator = stores.operator_url(await _database(pg))
    before = await _snapshot(pg, dispatch.dispatch_id)
    state = await refusals.sqlstate_as(
        operator,
        f"UPDATE {EXECUTIONS} SET status = 'failed', version = version + 1, "
        "result_mutation_id = 'op', result_code = 'op', completed_at_ms = 1, "
        "updated_at_ms = 1 WHERE dispatch_id = $1",
        dispatch.dispatch_id,
    )
    assert state == "QLF01"
    state = await refusals.sqlstate_as(
        operator,
        "INSERT INTO qinglong.recovery_resolutions (dispatch_id, source, resolution, "
        "resolved_by, principal, reason_code, execution_attempt, execution_version, "
        "lease_owner, lease_token, started_at_ms, committed_at_ms) VALUES "
        "($1, 'manual', 'failed', 'op', session_user, 'op', $2, $3, $4, $5, $6, 0)",
        dispatch.dispatch_id,
        identity.attempt,
        identity.version,
        identity.owner,
        identity.token,
        identity.started_at_ms,
    )
    assert state == "QLR01"
    assert await _snapshot(pg, dispatch.dispatch_id) == before


async def test_no_evidence_resolution_for_a_row_that_never_started(
    pg: stores.Harness, now: ManualClock
) -> None:
    (consumed,) = await submit_runs(pg.approver_store, now, 1)
    before = await _snapshot(pg, consumed.dispatch_id)
    state = await refusals.sqlstate_as(
        stores.runtime_url(await _database(pg)),
        "INSERT INTO qinglong.recovery_resolutions (dispatch_id, source, resolution, "
        "evidence_digest, resolved_by, principal, reason_code, execution_attempt, "
        "execution_version, lease_owner, lease_token, started_at_ms, committed_at_ms) VALUES "
        f"($1, 'evidence', 'succeeded', '{'e' * 64}', 'rt', session_user, 'x', 0, 0, 'w', "
        "'t', 1, 0)",
        consumed.dispatch_id,
    )
    assert state == "QLR01"
    assert await _snapshot(pg, consumed.dispatch_id) == before


# -- 4. records for their own principal, row and identity ------------------------------------


async def test_nobody_writes_a_ledger_line(pg: stores.Harness, now: ManualClock) -> None:
    (consumed,) = await submit_runs(pg.approver_store, now, 1)
    database = await _database(pg)
    before = await _snapshot(pg, consumed.dispatch_id)
    for url in (
        stores.runtime_url(database),
        stores.operator_url(database),
        stores.approver_url(database),
    ):
        state = await refusals.sqlstate_as(
            url,
            "INSERT INTO qinglong.execution_events (dispatch_id, version, from_status, "
            "to_status, attempt, committed_at_ms) VALUES ($1, 7, 'executing', 'succeeded', 1, 1)",
            consumed.dispatch_id,
        )
        assert state == "42501"
    assert await _snapshot(pg, consumed.dispatch_id) == before


@pytest.mark.parametrize(
    ("principal", "kind"),
    [("'alice'", "recovery.manual_resolution"), ("session_user", "approval.approved")],
)
async def test_an_audit_row_names_its_own_login_and_no_approval(
    pg: stores.Harness, now: ManualClock, principal: str, kind: str
) -> None:
    (consumed,) = await submit_runs(pg.approver_store, now, 1)
    database = await _database(pg)
    before = await _snapshot(pg, consumed.dispatch_id)
    for url in (stores.runtime_url(database), stores.operator_url(database)):
        state = await refusals.sqlstate_as(
            url,
            "INSERT INTO qinglong.security_audit_events (kind, actor, principal, project_id, "
            f"subject_id, detail_code, committed_at_ms) VALUES ($1, 'x', {principal}, 'p', $2, "
            "'x', 0)",
            kind,
            consumed.dispatch_id,
        )
        assert state == "QLI01"
    assert await _snapshot(pg, consumed.dispatch_id) == before


async def test_a_receipt_is_refused_for_a_row_that_never_started(
    pg: stores.Harness, now: ManualClock
) -> None:
    (consumed,) = await submit_runs(pg.approver_store, now, 1)
    runtime = stores.runtime_url(await _database(pg))
    before = await _snapshot(pg, consumed.dispatch_id)
    # The Run first: the dispatcher's Run of a dispatch nobody holds (no proof to present).
    state = await refusals.sqlstate_as(
        runtime,
        "INSERT INTO qinglong.runs (run_id, project_id, task_id, task_revision, executor_type, "
        "priority, status, trigger_type, execution_origin, execution_owner, request_id, "
        "idempotency_key, accepted_at_ms, version, event_seq, created_at_ms, updated_at_ms) "
        f"VALUES ('r-forged', 'proj-1', 't', 1, 'shell', 0, 'queued', 'approved_action', "
        f"'system', 'runtime', '{consumed.approval_request_id}', '{consumed.dispatch_id}', 1, "
        "1, 1, 1, 1)",
    )
    assert state == "QLF01"
    state = await refusals.sqlstate_as(
        runtime,
        "INSERT INTO qinglong.approved_run_action_receipts (dispatch_id, schema_version, "
        "approval_request_id, project_id, action_type, action_digest, execution_attempt, "
        "execution_version, started_at_ms, idempotency_key, outcome, result_code, "
        "resource_type, resource_id, created_at_ms, evidence_digest) SELECT d.dispatch_id, 1, "
        "d.approval_request_id, d.project_id, d.action_type, d.action_digest, 0, 0, 1, "
        "d.dispatch_id, 'succeeded', 'run_created', 'run', 'r-forged', 1, "
        f"'{'e' * 64}' FROM qinglong.approved_action_dispatches AS d WHERE d.dispatch_id = $1",
        consumed.dispatch_id,
    )
    assert state == "QLI01"
    assert await _snapshot(pg, consumed.dispatch_id) == before


async def test_a_receipted_runs_identity_never_changes(
    pg: stores.Harness, now: ManualClock
) -> None:
    dispatch, identity = await _executing(pg, now)
    await repositories.runs(pg.store).create_run(
        await request_for(pg, now, dispatch, identity, run_id="r-1")
    )
    assert await repositories.runs(pg.store).get_receipt(dispatch.dispatch_id) is not None
    (run,) = await pg.raw("SELECT run_id, idempotency_key FROM qinglong.runs")
    before = await pg.raw("SELECT * FROM qinglong.runs")
    for column, value in (("idempotency_key", "'k-other'"), ("project_id", "'p-other'")):
        state = await refusals.sqlstate_as(
            stores.runtime_url(await _database(pg)),
            f"UPDATE qinglong.runs SET {column} = {value}, version = version + 1 WHERE run_id = $1",
            run["run_id"],
        )
        assert state == "QLI01"
    assert await pg.raw("SELECT * FROM qinglong.runs") == before


# -- an action receipt is the completion's, exactly as its digest says ----------------------


async def test_the_holder_cannot_write_a_receipt_its_digest_does_not_name_nor_one_on_a_renew(
    pg: stores.Harness, now: ManualClock
) -> None:
    dispatch, identity = await _executing(pg, now)
    runtime = stores.runtime_url(await _database(pg))
    proof = ids.lease_proof(identity.token)
    receipt_json, receipt_digest = digests.action_receipt({"status": 201})
    before = await _snapshot(pg, dispatch.dispatch_id)
    forged = await refusals.sqlstate_as(
        runtime,
        f"UPDATE {EXECUTIONS} SET status = 'succeeded', version = version + 1, "
        "result_mutation_id = 'm', result_code = 'http_201', completed_at_ms = 1, "
        "updated_at_ms = 1, lease_proof = $2, result_receipt_json = $3, "
        "result_receipt_digest = $4 WHERE dispatch_id = $1",
        dispatch.dispatch_id,
        proof,
        '{"status":200}',
        receipt_digest,
    )
    assert forged == "QLT01"
    on_renew = await refusals.sqlstate_as(
        runtime,
        f"UPDATE {EXECUTIONS} SET version = version + 1, lease_proof = $2, "
        "result_receipt_json = $3, result_receipt_digest = $4 WHERE dispatch_id = $1",
        dispatch.dispatch_id,
        proof,
        receipt_json,
        receipt_digest,
    )
    assert on_renew == "QLT01"
    assert await _snapshot(pg, dispatch.dispatch_id) == before


async def test_an_operator_cannot_write_a_receipt(pg: stores.Harness, now: ManualClock) -> None:
    dispatch, _ = await _executing(pg, now)
    receipt_json, receipt_digest = digests.action_receipt({"status": 201})
    before = await _snapshot(pg, dispatch.dispatch_id)
    state = await refusals.sqlstate_as(
        stores.operator_url(await _database(pg)),
        f"UPDATE {EXECUTIONS} SET result_receipt_json = $2, result_receipt_digest = $3 "
        "WHERE dispatch_id = $1",
        dispatch.dispatch_id,
        receipt_json,
        receipt_digest,
    )
    assert state == "42501"
    assert await _snapshot(pg, dispatch.dispatch_id) == before


@pytest.mark.parametrize("login", ["runtime", "approver"])
async def test_no_login_inserts_an_execution_that_carries_a_receipt(
    pg: stores.Harness, now: ManualClock, login: str
) -> None:
    """Both logins that insert execution rows: a row is born without a receipt (`QLT01`, the
    insert's own guard, before its key would refuse the copy)."""
    (consumed,) = await submit_runs(pg.approver_store, now, 1)
    database = await _database(pg)
    url = stores.runtime_url(database) if login == "runtime" else stores.approver_url(database)
    receipt_json, receipt_digest = digests.action_receipt({"status": 201})
    before = await _snapshot(pg, consumed.dispatch_id)
    state = await refusals.sqlstate_as(
        url,
        f"INSERT INTO {EXECUTIONS} (dispatch_id, project_id, status, version, attempt, "
        "max_attempts, eligible_at_ms, created_at_ms, updated_at_ms, result_receipt_json, "
        "result_receipt_digest) SELECT dispatch_id, project_id, status, version, attempt, "
        f"max_attempts, eligible_at_ms, created_at_ms, updated_at_ms, $2, $3 FROM {EXECUTIONS} "
        "WHERE dispatch_id = $1",
        consumed.dispatch_id,
        receipt_json,
        receipt_digest,
    )
    assert state == "QLT01"
    assert await _snapshot(pg, consumed.dispatch_id) == before


# -- a stored plan changes only by being sealed again, by the owner ------------------------------


@pytest.mark.parametrize(
    "change",
    [
        "plan_json = '{\"forged\":true}'",
        "plan_json = '', plan_sealed = NULL",
        "plan_digest = repeat('0', 64)",
        # A whole new seal: once the runtime's to write, now the owner's (`keys rotate`).
        "plan_json = '', plan_key_id = 'k', plan_algorithm = 'AES-256-GCM', "
        "plan_sealed = '\\x00'::bytea, plan_schema_version = 1",
        "plan_json = '', plan_key_id = 'k', plan_algorithm = 'AES-256-GCM', "
        "plan_sealed = '\\x00'::bytea, plan_schema_version = 1, action_type = 'tool.invoke'",
    ],
)
async def test_the_runtime_login_cannot_rewrite_or_reseal_a_plan(
    pg: stores.Harness, now: ManualClock, change: str
) -> None:
    (consumed,) = await submit_runs(pg.approver_store, now, 1)
    plans = "SELECT * FROM qinglong.action_plans ORDER BY action_ref"
    before = await pg.raw(plans)
    state = await refusals.sqlstate_as(
        stores.runtime_url(await _database(pg)),
        f"UPDATE qinglong.action_plans SET {change} WHERE action_ref = $1",
        consumed.action_ref,
    )
    assert state == "42501"
    assert await pg.raw(plans) == before


@pytest.mark.parametrize(
    ("change", "sqlstate"),
    [
        # The owner may seal a plan again, as a whole new seal and nothing else.
        ("plan_json = '{\"forged\":true}'", "23001"),
        ("plan_json = '', plan_sealed = NULL", "23001"),
        ("plan_digest = repeat('0', 64)", "23001"),
    ],
)
async def test_even_the_owner_changes_a_plan_only_by_sealing_it_again(
    pg: stores.Harness, now: ManualClock, change: str, sqlstate: str
) -> None:
    (consumed,) = await submit_runs(pg.approver_store, now, 1)
    plans = "SELECT * FROM qinglong.action_plans ORDER BY action_ref"
    before = await pg.raw(plans)
    with pytest.raises(asyncpg.PostgresError) as caught:
        await pg.raw(
            f"UPDATE qinglong.action_plans SET {change} WHERE action_ref = '{consumed.action_ref}'"
        )
    assert caught.value.sqlstate == sqlstate
    assert await pg.raw(plans) == before


async def test_an_operator_or_approver_cannot_touch_a_plan(
    pg: stores.Harness, now: ManualClock
) -> None:
    (consumed,) = await submit_runs(pg.approver_store, now, 1)
    plans = "SELECT * FROM qinglong.action_plans ORDER BY action_ref"
    before = await pg.raw(plans)
    for url in (stores.operator_url, stores.approver_url):
        state = await refusals.sqlstate_as(
            url(await _database(pg)),
            "UPDATE qinglong.action_plans SET plan_json = '', plan_key_id = 'k', "
            "plan_algorithm = 'AES-256-GCM', plan_sealed = '\\x00'::bytea, "
            "plan_schema_version = 1 WHERE action_ref = $1",
            consumed.action_ref,
        )
        assert state == "42501"
    assert await pg.raw(plans) == before
