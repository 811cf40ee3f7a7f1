"""A careless hand with the sqlite3 shell on an edge device's file: the history keeps its shape.

The file's owner can always rewrite the file; these rules keep any plain connection from
recording a history that did not happen. Each asserts SQLite's own refusal (the trigger's
message, SQLite having no SQLSTATE) and that nothing changed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from qinglong_dispatcher.domain import states
from tests.support import refusals, stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.recovery import started_execution


@pytest.fixture
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    async with stores.open_harness("sqlite", tmp_path_factory) as harness:
        yield harness


async def _snapshot(h: stores.Harness) -> tuple[Any, ...]:
    return (
        await h.raw("SELECT * FROM approved_action_dispatch_executions ORDER BY dispatch_id"),
        await h.raw("SELECT * FROM execution_events ORDER BY event_id"),
        await h.raw("SELECT * FROM recovery_resolutions"),
        await h.raw("SELECT * FROM approved_run_action_receipts"),
        await h.raw("SELECT * FROM runs"),
        await h.raw("SELECT * FROM approval_requests ORDER BY approval_request_id"),
    )


async def test_a_ledger_line_for_a_transition_that_never_happened_is_refused(
    edge: stores.Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(edge.approver_store, clock, 1)
    before = await _snapshot(edge)
    message = await refusals.sqlite_abort(
        edge,
        "INSERT INTO execution_events (dispatch_id, version, from_status, to_status, attempt, "
        f"committed_at_ms) VALUES ('{consumed.dispatch_id}', 7, 'executing', 'succeeded', 1, 1)",
    )
    assert message.startswith("execution_events: a ledger line records the row's own change")
    assert await _snapshot(edge) == before


async def test_a_bare_update_never_settles_a_started_row(
    edge: stores.Harness, clock: ManualClock
) -> None:
    await submit_runs(edge.approver_store, clock, 1)
    dispatch, _ = await started_execution(edge, clock)
    before = await _snapshot(edge)
    message = await refusals.sqlite_abort(
        edge,
        "UPDATE approved_action_dispatch_executions SET status = 'succeeded', "
        "version = version + 1, completed_at_ms = 1, result_code = 'by_hand' "
        f"WHERE dispatch_id = '{dispatch.dispatch_id}'",
    )
    assert message == "qinglong:transition_refused: settle"
    assert await _snapshot(edge) == before


async def test_no_resolution_for_a_row_that_never_started(
    edge: stores.Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(edge.approver_store, clock, 1)
    before = await _snapshot(edge)
    message = await refusals.sqlite_abort(
        edge,
        "INSERT INTO recovery_resolutions (dispatch_id, source, resolution, evidence_digest, "
        "resolved_by, principal, reason_code, execution_attempt, execution_version, "
        "lease_owner, lease_token, started_at_ms, committed_at_ms) VALUES "
        f"('{consumed.dispatch_id}', 'evidence', 'succeeded', '{'e' * 64}', 'x', 'x', 'x', 0, "
        "0, 'w', 't', 1, 1)",
    )
    assert message.startswith("recovery_resolutions: names its expired started execution")
    assert await _snapshot(edge) == before


async def test_no_receipt_for_a_row_that_never_started(
    edge: stores.Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(edge.approver_store, clock, 1)
    before = await _snapshot(edge)
    message = await refusals.sqlite_abort(
        edge,
        "INSERT INTO approved_run_action_receipts (dispatch_id, schema_version, "
        "approval_request_id, project_id, action_type, action_digest, execution_attempt, "
        "execution_version, started_at_ms, idempotency_key, outcome, result_code, "
        "resource_type, resource_id, created_at_ms, evidence_digest) SELECT d.dispatch_id, 1, "
        "d.approval_request_id, d.project_id, d.action_type, d.action_digest, 0, 0, 1, "
        "d.dispatch_id, 'succeeded', 'run_created', 'run', 'r-none', 1, "
        f"'{'e' * 64}' FROM approved_action_dispatches AS d "
        f"WHERE d.dispatch_id = '{consumed.dispatch_id}'",
    )
    assert message.startswith("approved_run_action_receipts: binds its started execution")
    assert await _snapshot(edge) == before


async def test_an_approval_is_never_approved_past_its_lifetime_on_the_database_clock(
    edge: stores.Harness,
) -> None:
    await edge.raw(
        "INSERT INTO action_plans (project_id, action_ref, action_type, plan_json, plan_digest, "
        f"created_at_ms) VALUES ('p', 'act-x', 'run.create', '{{}}', '{'a' * 64}', 1)"
    )
    # A request whose lifetime (1 ms) ran out on the database clock, however late the
    # requester's own clock says it expires.
    await edge.raw(
        "INSERT INTO approval_requests (approval_request_id, project_id, action_type, "
        "action_ref, action_digest, status, version, requested_by, requested_principal, "
        "expires_at_ms, created_at_ms, updated_at_ms, db_expires_at_ms) VALUES ('a-x', 'p', "
        f"'run.create', 'act-x', '{'b' * 64}', 'pending', 1, 'me', 'me', 4102444800001, "
        "4102444800000, 4102444800000, 1)"
    )
    before = await _snapshot(edge)
    message = await refusals.sqlite_abort(
        edge,
        "UPDATE approval_requests SET status = 'approved', version = 2, decided_by = 'you', "
        "decided_principal = 'you' WHERE approval_request_id = 'a-x'",
    )
    assert message.startswith("qinglong:approval_expired")
    assert await _snapshot(edge) == before


NOT_PERMITTED = "approval_requests: not a permitted change of the request"


async def test_an_approval_expires_only_on_the_database_clock_and_never_comes_back(
    edge: stores.Harness,
) -> None:
    for ref in ("act-x", "act-y"):
        await edge.raw(
            "INSERT INTO action_plans (project_id, action_ref, action_type, plan_json, "
            f"plan_digest, created_at_ms) VALUES ('p', '{ref}', 'run.create', '{{}}', "
            f"'{'a' * 64}', 1)"
        )
    # 'a-x': the requester's clock says it expired long ago, the database's gives it a day
    # more. 'a-y': its lifetime ran out on the database's clock.
    for request, ref, db_expires in (
        ("a-x", "act-x", "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + 86400000"),
        ("a-y", "act-y", "1"),
    ):
        await edge.raw(
            "INSERT INTO approval_requests (approval_request_id, project_id, action_type, "
            "action_ref, action_digest, status, version, requested_by, requested_principal, "
            "expires_at_ms, created_at_ms, updated_at_ms, db_expires_at_ms) VALUES "
            f"('{request}', 'p', 'run.create', '{ref}', '{'b' * 64}', 'pending', 1, 'me', 'me', "
            f"86400001, 1, 1, {db_expires})"
        )
    expire = (
        "UPDATE approval_requests SET status = 'expired', version = 2, decided_by = 'expiry', "
        "decided_principal = 'me' WHERE approval_request_id = "
    )
    before = await _snapshot(edge)
    message = await refusals.sqlite_abort(edge, expire + "'a-x'")
    assert message.startswith("approval_requests: a request expires only once the database")
    assert await _snapshot(edge) == before
    await edge.raw(expire + "'a-y'")
    before = await _snapshot(edge)
    # Terminal: back to pending the update guard refuses; approving or consuming it the
    # clock guard refuses first (its lifetime ran out), and the update guard after it.
    back_to_pending = "status = 'pending', version = 1, decided_by = NULL, decided_principal = NULL"
    consumed = "status = 'consumed', version = 3, consumed_at_ms = 1, consumed_principal = 'me'"
    for back, refused in (
        (back_to_pending, NOT_PERMITTED),
        ("status = 'approved'", "qinglong:approval_expired"),
        (consumed, "qinglong:approval_expired"),
    ):
        message = await refusals.sqlite_abort(
            edge, f"UPDATE approval_requests SET {back} WHERE approval_request_id = 'a-y'"
        )
        assert message.startswith(refused), (back, message)
        assert await _snapshot(edge) == before


@pytest.mark.parametrize("lifetime_ms", [0, 2_592_000_001, 9_000_000_000_000_000])
async def test_a_request_lifetime_out_of_range_is_refused(
    edge: stores.Harness, lifetime_ms: int
) -> None:
    await edge.raw(
        "INSERT INTO action_plans (project_id, action_ref, action_type, plan_json, plan_digest, "
        f"created_at_ms) VALUES ('p', 'act-y', 'run.create', '{{}}', '{'a' * 64}', 1)"
    )
    before = await _snapshot(edge)
    message = await refusals.sqlite_abort(
        edge,
        "INSERT INTO approval_requests (approval_request_id, project_id, action_type, "
        "action_ref, action_digest, status, version, requested_by, requested_principal, "
        "expires_at_ms, created_at_ms, updated_at_ms, db_expires_at_ms) VALUES ('a-y', 'p', "
        f"'run.create', 'act-y', '{'b' * 64}', 'pending', 1, 'me', 'me', {1000 + lifetime_ms}, "
        "1000, 1000, 1000)",
    )
    assert message.startswith("approval_requests: a lifetime")
    assert await _snapshot(edge) == before


async def test_a_runs_identity_never_changes(edge: stores.Harness, clock: ManualClock) -> None:
    (consumed,) = await submit_runs(edge.approver_store, clock, 1)
    await started_execution(edge, clock)  # the dispatcher's Run is written while it is held
    await edge.raw(
        "INSERT INTO runs (run_id, project_id, task_id, task_revision, executor_type, priority, "
        "status, trigger_type, execution_origin, execution_owner, request_id, idempotency_key, "
        "accepted_at_ms, version, event_seq, created_at_ms, updated_at_ms) VALUES ('r-1', "
        "'proj-1', 't', 1, 'shell', 0, 'queued', 'approved_action', 'system', 'runtime', "
        f"'{consumed.approval_request_id}', '{consumed.dispatch_id}', 1, 1, 1, 1, 1)"
    )
    before = await _snapshot(edge)
    message = await refusals.sqlite_abort(
        edge, "UPDATE runs SET idempotency_key = 'k-other', version = 2 WHERE run_id = 'r-1'"
    )
    assert message == "runs: the identity of a Run never changes"
    assert await _snapshot(edge) == before


async def test_a_receipt_is_written_only_by_the_completion_and_never_rewritten(
    edge: stores.Harness, clock: ManualClock
) -> None:
    await submit_runs(edge.approver_store, clock, 2)
    dispatch, _ = await started_execution(edge, clock)
    before = await _snapshot(edge)
    message = await refusals.sqlite_abort(
        edge,
        "UPDATE approved_action_dispatch_executions SET version = version + 1, "
        f"result_receipt_json = '{{}}', result_receipt_digest = '{'e' * 64}' "
        f"WHERE dispatch_id = '{dispatch.dispatch_id}'",
    )
    assert message == "qinglong:transition_refused: receipt"
    assert await _snapshot(edge) == before
    settled, identity = await started_execution(edge, clock)
    await edge.store.complete(
        identity,
        mutation_id="m-settled",
        completion=states.Completion.SUCCEEDED,
        result_code="done",
        now_ms=clock.now_ms(),
    )
    before = await _snapshot(edge)
    message = await refusals.sqlite_abort(
        edge,
        f"UPDATE approved_action_dispatch_executions SET result_receipt_json = '{{}}', "
        f"result_receipt_digest = '{'e' * 64}' WHERE dispatch_id = '{settled.dispatch_id}'",
    )
    assert message.startswith("qinglong:transition_refused")
    assert await _snapshot(edge) == before


async def test_a_plan_is_never_rewritten_in_clear_only_sealed_again(
    edge: stores.Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(edge.approver_store, clock, 1)
    before = await _snapshot(edge)
    plans_before = await edge.raw("SELECT * FROM action_plans")
    message = await refusals.sqlite_abort(
        edge,
        "UPDATE action_plans SET plan_json = '{\"forged\":true}' "
        f"WHERE action_ref = '{consumed.action_ref}'",
    )
    assert message == "action_plans is immutable"
    assert await _snapshot(edge) == before
    assert await edge.raw("SELECT * FROM action_plans") == plans_before
