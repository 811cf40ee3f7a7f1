"""The API's writes and approvals queue on both dialects, over a real listener on 127.0.0.1 with
real tokens from the store: each write acts as the token's principal in the database, which
decides (roles, separation of duties, the state machine) and records principal, token, client
address and request id in the audit row of the change."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from qinglong_dispatcher.web import idempotency, limits
from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.api_writes import KINDS, Served, assert_problem, plan_body, serving
from tests.support.api_writes import submit as _submit
from tests.support.clock import ManualClock
from tests.support.recovery import started_execution


@pytest.fixture(params=stores.DIALECTS)
async def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> AsyncIterator[Served]:
    async with serving(request.param, tmp_path_factory, tmp_path) as it:
        yield it


async def test_alice_submits_bob_approves_and_the_audit_names_each_with_their_request(
    served: Served,
) -> None:
    it = served
    status, headers, body = await it.call("POST", "/dispatches", "alice", plan_body())
    assert status == 201, body
    approval_id = body["approval"]["approval_request_id"]
    assert body["approval"]["status"] == "pending"
    assert body["approval"]["requested_principal"] == it.names["alice"]
    alice_request = headers["X-Request-Id"]
    status, headers, body = await it.call("POST", f"/approvals/{approval_id}/approve", "bob")
    assert status == 200, body
    bob_request = headers["X-Request-Id"]
    assert body["approval"]["decided_principal"] == it.names["bob"]
    assert body["approval"]["requested_principal"] == it.names["alice"]
    dispatch_id = body["dispatch_id"]
    status, _, shown = await it.call("GET", f"/dispatches/{dispatch_id}", "vic")
    assert status == 200
    assert approval_id in json.dumps(shown)
    rows = await it.audit(approval_id)
    alice, bob = it.names["alice"], it.names["bob"]
    assert [(r["kind"], r["principal"]) for r in rows] == [
        ("approval.created", alice),
        ("api.create", alice),
        ("approval.approved", bob),
        ("api.approve", bob),
        ("approval.consumed", bob),
    ]
    assert (rows[1]["token_id"], rows[1]["client_address"], rows[1]["request_id"]) == (
        it.token_ids["alice"],
        "127.0.0.1",
        alice_request,
    )
    assert (rows[3]["token_id"], rows[3]["client_address"], rows[3]["request_id"]) == (
        it.token_ids["bob"],
        "127.0.0.1",
        bob_request,
    )
    consumed = await it.audit(dispatch_id)
    assert [(r["kind"], r["principal"], r["token_id"], r["request_id"]) for r in consumed] == [
        ("api.consume", bob, it.token_ids["bob"], bob_request)
    ]
    # The queue no longer holds it; approving again is a conflict, not a second dispatch.
    assert_problem(
        await it.call("POST", f"/approvals/{approval_id}/approve", "bob"),
        409,
        "approval_state_conflict",
    )


async def test_a_dispatched_plan_posted_again_is_a_conflict_and_writes_nothing(
    served: Served,
) -> None:
    it = served
    body = plan_body()
    status, _, created = await it.call("POST", "/dispatches", "alice", body)
    assert status == 201, created
    approval_id = created["approval"]["approval_request_id"]
    status, _, approved = await it.call("POST", f"/approvals/{approval_id}/approve", "bob")
    assert status == 200, approved
    tables = ("approval_requests", "approved_action_dispatches", "security_audit_events")
    counts = "SELECT " + ", ".join(f"(SELECT count(*) FROM {it.table(t)}) AS {t}" for t in tables)
    before = await it.harness.raw(counts)

    assert_problem(
        await it.call("POST", "/dispatches", "alice", body), 409, "approval_state_conflict"
    )

    assert await it.harness.raw(counts) == before


async def test_the_audit_log_pages_newest_first_and_filters_by_principal_and_kind(
    served: Served,
) -> None:
    it = served
    status, headers, body = await it.call("POST", "/dispatches", "alice", plan_body())
    assert status == 201, body
    approval_id = body["approval"]["approval_request_id"]
    status, headers, body = await it.call("POST", f"/approvals/{approval_id}/approve", "bob")
    assert status == 200, body
    bob_request = headers["X-Request-Id"]
    bob = it.names["bob"]
    status, _, page = await it.call("GET", f"/audit?principal={bob}", "vic")
    assert status == 200, page
    assert [(r["kind"], r["subject_id"]) for r in page["audit"]] == [
        ("api.consume", body["dispatch_id"]),
        ("approval.consumed", approval_id),
        ("api.approve", approval_id),
        ("approval.approved", approval_id),
    ]
    assert page["next"] is None
    api_approve = page["audit"][2]
    assert (api_approve["token_id"], api_approve["request_id"]) == (
        it.token_ids["bob"],
        bob_request,
    )
    # One record per page, newest first, each page after the last one's cursor.
    seen: list[int] = []
    after = ""
    while True:
        status, _, one = await it.call("GET", f"/audit?kind=api.approve&limit=1{after}", "vic")
        assert status == 200, one
        seen += [r["event_id"] for r in one["audit"]]
        if one["next"] is None:
            break
        after = f"&after={one['next']}"
    assert seen == sorted(seen, reverse=True)
    assert api_approve["event_id"] in seen
    for query, field in (
        ("kind=<script>", "kind"),
        ("limit=0", "limit"),
        ("after=abc", "after"),
        ("principal=a%20b", "principal"),
        ("who=bob", "who"),
    ):
        status, headers, problem = await it.call("GET", f"/audit?{query}", "vic")
        assert_problem((status, headers, problem), 400, "invalid_input")
        assert problem["field"] == field


async def test_alice_approving_her_own_request_is_refused_by_the_database(
    served: Served,
) -> None:
    it = served
    approval = await _submit(it, "alice")
    before = await it.everything()
    answer = await it.call("POST", f"/approvals/{approval['approval_request_id']}/approve", "alice")
    assert_problem(answer, 403, "self_approval_refused")
    assert await it.everything() == before


async def test_a_body_naming_a_principal_is_refused_and_writes_nothing(served: Served) -> None:
    it = served
    before = await it.everything()
    for forged in ("requested_by", "principal", "requested_principal"):
        answer = await it.call(
            "POST", "/dispatches", "sam", {**plan_body(), forged: it.names["bob"]}
        )
        assert_problem(answer, 400, "invalid_input")
        assert answer[2]["field"] == forged
    approval = await _submit(it, "sam")
    before = await it.everything()
    answer = await it.call(
        "POST",
        f"/approvals/{approval['approval_request_id']}/approve",
        "alice",
        {"decided_by": it.names["bob"]},
    )
    assert_problem(answer, 400, "invalid_input")
    assert await it.everything() == before


async def _pending_dispatch(it: Served) -> str:
    (consumed,) = await submit_runs(it.harness.approver_store, it.clock, 1, project="shop")
    return consumed.dispatch_id


async def _subject(it: Served, endpoint: str) -> str:
    if endpoint in ("approve", "reject"):
        return str((await _submit(it, "sam", f"t{time.monotonic_ns()}"))["approval_request_id"])
    return await _pending_dispatch(it)


def _request(endpoint: str, subject: str) -> tuple[str, dict[str, object] | None]:
    requests: dict[str, tuple[str, dict[str, object] | None]] = {
        "submit": ("/dispatches", plan_body(f"s{time.monotonic_ns()}")),
        "approve": (f"/approvals/{subject}/approve", None),
        "reject": (f"/approvals/{subject}/reject", {"reason": "duplicate"}),
        "cancel": (f"/dispatches/{subject}/cancel", {"reason": "duplicate"}),
        "resolve": (f"/recovery/{subject}/resolve", {"as": "failed", "reason": "checked"}),
    }
    return requests[endpoint]


ALLOWED = {
    "submit": {"sam": 201, "alice": 201, "bob": 201},
    "approve": {"alice": 200, "bob": 200},
    "reject": {"alice": 200, "bob": 200},
    "cancel": {"carol": 200},
    "resolve": {"carol": 409},  # allowed to try: a pending dispatch is not recovery_required
}
DATABASE_REFUSES = {("submit", "carol"), ("approve", "carol"), ("reject", "carol")}
"""The token's role passes the server's check (an operator ranks above an approver), but the
principal's kind in the database has no such grant: the database refuses."""


async def test_every_role_against_every_write(served: Served) -> None:
    it = served
    for endpoint, allowed in ALLOWED.items():
        for who in KINDS:
            subject = await _subject(it, endpoint)
            path, body = _request(endpoint, subject)
            before = await it.everything()
            answer = await it.call("POST", path, who, body)
            expected = allowed.get(who)
            if expected is None:
                assert answer[0] == 403, (endpoint, who, answer)
                code = "forbidden" if (endpoint, who) not in DATABASE_REFUSES else answer[2]["code"]
                assert code in (
                    "forbidden",
                    "approval_not_permitted",
                    "permission_denied",
                ), (endpoint, who, answer)
                if (endpoint, who) in DATABASE_REFUSES:
                    assert code != "forbidden", (endpoint, who)
                assert_problem(answer, 403, code)
                assert await it.everything() == before, (endpoint, who)
            else:
                assert answer[0] == expected, (endpoint, who, answer)


async def test_reject_records_its_reason_and_cancel_names_the_operator(served: Served) -> None:
    it = served
    approval = await _submit(it, "sam")
    approval_id = approval["approval_request_id"]
    assert_problem(
        await it.call("POST", f"/approvals/{approval_id}/reject", "alice", {}), 400, "invalid_input"
    )
    status, _, body = await it.call(
        "POST", f"/approvals/{approval_id}/reject", "alice", {"reason": "not_now"}
    )
    assert (status, body["approval"]["status"]) == (200, "rejected"), body
    rows = await it.harness.raw(
        f"SELECT kind, detail_code FROM {it.table('security_audit_events')} "
        f"WHERE subject_id = '{approval_id}' AND kind = 'api.reject'"
    )
    assert [r["detail_code"] for r in rows] == ["not_now"]
    assert_problem(
        await it.call("POST", f"/approvals/{approval_id}/approve", "bob"),
        409,
        "approval_state_conflict",
    )
    dispatch_id = await _pending_dispatch(it)
    status, headers, body = await it.call(
        "POST", f"/dispatches/{dispatch_id}/cancel", "carol", {"reason": "duplicate"}
    )
    assert (status, body["status"]) == (200, "cancelled"), body
    rows = await it.audit(dispatch_id)
    assert [(r["kind"], r["principal"]) for r in rows] == [
        ("dispatch.cancelled", it.names["carol"]),
        ("api.cancel", it.names["carol"]),
    ]
    assert rows[1]["request_id"] == headers["X-Request-Id"]
    assert_problem(
        await it.call("POST", f"/dispatches/{dispatch_id}/cancel", "carol", {"reason": "again"}),
        409,
        "cancel_refused",
    )
    assert_problem(
        await it.call("POST", "/dispatches/no-such/cancel", "carol", {"reason": "x"}),
        404,
        "dispatch_not_found",
    )


async def test_resolve_is_refused_while_the_lease_is_live_and_settles_once_it_is_not(
    served: Served,
) -> None:
    it = served
    past = ManualClock(it.clock.now_ms() - 3_600_000)
    await submit_runs(it.harness.approver_store, past, 1)
    dispatch, _ = await started_execution(it.harness, past)
    await submit_runs(it.harness.approver_store, it.clock, 1)
    live, _ = await started_execution(it.harness, it.clock)
    before = await it.everything()
    answer = await it.call(
        "POST", f"/recovery/{live.dispatch_id}/resolve", "carol", {"as": "failed", "reason": "x"}
    )
    assert_problem(answer, 409, "recovery_refused")
    assert_problem(
        await it.call(
            "POST", f"/recovery/{dispatch.dispatch_id}/resolve", "carol", {"as": "maybe"}
        ),
        400,
        "invalid_input",
    )
    assert await it.everything() == before
    status, _, body = await it.call(
        "POST",
        f"/recovery/{dispatch.dispatch_id}/resolve",
        "carol",
        {"as": "failed", "reason": "checked_by_hand"},
    )
    assert (status, body["status"]) == (200, "failed"), body
    rows = await it.audit(dispatch.dispatch_id)
    assert [(r["kind"], r["principal"], r["token_id"]) for r in rows] == [
        ("recovery.manual_resolution", it.names["carol"], None),
        ("api.resolve", it.names["carol"], it.token_ids["carol"]),
    ]


async def test_the_queue_lists_the_waiting_requests_with_requester_and_preview(
    served: Served,
) -> None:
    it = served
    first = await _submit(it, "sam", "t1")
    it.clock.advance(ms=5)
    second = await _submit(it, "alice", "t2")
    status, _, page = await it.call("GET", "/approvals?limit=1", "vic")
    assert status == 200
    (row,) = page["approvals"]
    assert row["approval_request_id"] == second["approval_request_id"]
    assert row["requested_principal"] == it.names["alice"]
    assert row["plan"]["taskId"] == "t2"
    status, _, page = await it.call("GET", f"/approvals?limit=1&after={page['next']}", "vic")
    assert [r["approval_request_id"] for r in page["approvals"]] == [first["approval_request_id"]]
    assert_problem(await it.call("GET", "/approvals?limit=0", "vic"), 400, "invalid_input")
    assert_problem(await it.call("GET", "/approvals?who=me", "vic"), 400, "invalid_input")


async def test_an_idempotent_submit_replays_refuses_another_body_and_a_key_in_flight(
    served: Served,
) -> None:
    it = served
    body = plan_body("idem")
    key = {"Idempotency-Key": '"k-1"'}
    first = await it.call("POST", "/dispatches", "sam", body, key)
    assert first[0] == 201
    assert "Idempotent-Replayed" not in first[1]
    before = await it.everything()
    again = await it.call("POST", "/dispatches", "sam", body, key)
    assert (again[0], again[2]) == (201, first[2])
    assert again[1]["Idempotent-Replayed"] == "true"
    assert_problem(
        await it.call("POST", "/dispatches", "sam", plan_body("other"), key),
        422,
        "idempotency_key_reused",
    )
    assert await it.everything() == before
    # Another principal's key of the same name is its own.
    assert (await it.call("POST", "/dispatches", "alice", body, key))[0] in (201, 409)
    # A key whose first request is still being answered (claimed here as a request would).
    in_flight = plan_body("slow")
    keys = it.ctx.idempotency
    claimed = keys.begin(it.names["sam"], "k-2", idempotency.fingerprint(in_flight))
    assert claimed.outcome is idempotency.Outcome.STARTED
    assert_problem(
        await it.call("POST", "/dispatches", "sam", in_flight, {"Idempotency-Key": "k-2"}),
        409,
        "idempotency_key_in_flight",
    )
    assert await it.everything() == before
    # A refused request releases its key: the corrected retry runs.
    bad = {"action": "run.create", "plan": {"schemaVersion": 1}}
    assert_problem(
        await it.call("POST", "/dispatches", "sam", bad, {"Idempotency-Key": "k-3"}),
        400,
        "plan_invalid",
    )
    good = await it.call("POST", "/dispatches", "sam", plan_body("k3"), {"Idempotency-Key": "k-3"})
    assert good[0] == 201
    assert_problem(
        await it.call("POST", "/dispatches", "sam", body, {"Idempotency-Key": "has space"}),
        400,
        "invalid_input",
    )


async def test_a_revoked_token_is_refused_at_once(served: Served) -> None:
    it = served
    approval = await _submit(it, "sam")
    assert (await it.call("GET", "/approvals", "alice"))[0] == 200
    await it.admin.revoke_token(it.token_ids["alice"])
    before = await it.everything()
    answer = await it.call("POST", f"/approvals/{approval['approval_request_id']}/approve", "alice")
    assert_problem(answer, 401, "unauthenticated")
    assert "WWW-Authenticate" in answer[1]
    assert await it.everything() == before
    refusals = await it.harness.raw(
        f"SELECT detail_code, request_id FROM {it.table('security_audit_events')} "
        "WHERE kind = 'api.auth_failed'"
    )
    assert [(r["detail_code"], r["request_id"]) for r in refusals] == [
        ("invalid", answer[1]["X-Request-Id"])
    ]


async def test_a_failed_authentication_is_audited_and_a_flood_only_counted(
    served: Served,
) -> None:
    it = served
    # Two rows for all clients together, then failures are only logged and counted.
    it.ctx.auth_audits = limits.Limiter(rate=0.001, burst=2)
    sent = [
        {"Authorization": "Bearer qlt_" + "x" * 43},  # well formed, unknown
        {"Authorization": "Basic YWxpY2U6c2VjcmV0"},  # not a bearer token
        {},  # nothing at all
    ]
    request_ids = []
    for headers in sent:
        status, answer_headers, problem = await it.call("GET", "/status", None, headers=headers)
        assert_problem((status, answer_headers, problem), 401, "unauthenticated")
        request_ids.append(answer_headers["X-Request-Id"])
    rows = await it.harness.raw(
        "SELECT kind, actor, detail_code, token_id, client_address, request_id FROM "
        f"{it.table('security_audit_events')} WHERE kind = 'api.auth_failed' ORDER BY event_id"
    )
    assert [
        (r["detail_code"], r["token_id"], r["client_address"], r["request_id"]) for r in rows
    ] == [
        ("invalid", None, "127.0.0.1", request_ids[0]),
        ("malformed", None, "127.0.0.1", request_ids[1]),
    ]
    status, _, page = await it.call("GET", "/audit?kind=api.auth_failed", "vic")
    assert status == 200
    assert [r["request_id"] for r in page["audit"]] == [request_ids[1], request_ids[0]]
    unaudited = it.ctx.metrics.registry.get_sample_value(
        "qinglong_dispatcher_api_auth_failures_unaudited_total"
    )
    assert unaudited == 1.0
