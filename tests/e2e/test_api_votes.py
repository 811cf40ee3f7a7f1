"""Votes through the API, both dialects: a quorum of 2 from a group of 3 approvers. A request
by one principal waits after the first approval (1 of 2, the others named as who may still
vote), a second vote by the same approver is refused (409 `already_voted`), the second
approver's vote approves it and its dispatch is made; a denial with its reason rejects
another, and a vote on it is refused (409). The database refuses an approver outside the
group (403 `approval_not_permitted`) and a body naming another principal is refused before
anything is written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import stores
from tests.support.api_writes import Served, assert_problem, serving
from tests.support.api_writes import submit as _submit
from tests.support.policies import two_of_three


@pytest.fixture(params=stores.DIALECTS)
async def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> AsyncIterator[Served]:
    async with serving(request.param, tmp_path_factory, tmp_path) as it:
        yield it


async def _votes(it: Served, approval_id: str) -> list[dict[str, Any]]:
    return await it.harness.raw(
        f"SELECT principal, vote, reason FROM {it.table('approval_votes')} "
        f"WHERE approval_request_id = '{approval_id}' ORDER BY voted_at_ms, principal"
    )


async def test_two_of_three_approve_through_the_api(served: Served) -> None:
    it = served
    async with two_of_three(it) as group:
        status, _, body = await it.call("GET", "/policies", "vic")
        assert status == 200
        assert [
            (p["name"], p["approvals_required"], p["approver_groups"], p["target_prefix"])
            for p in body["policies"]
        ] == [("two", 2, [group], None)]
        approval_id = (await _submit(it, "sam", "q1"))["approval_request_id"]

        status, _, body = await it.call("GET", f"/approvals/{approval_id}", "vic")
        assert status == 200
        shown = body["approval"]
        assert (shown["policy"]["name"], shown["policy"]["target_prefix"]) == ("two", None)
        assert (shown["approvals"], shown["votes"], shown["status"]) == (0, [], "pending")
        assert shown["may_vote"] == sorted(it.names[w] for w in ("bob", "dan", "erin"))
        assert 86_000_000 < shown["expires_in_ms"] < 86_460_000  # a day, by the database's clock

        vote = {"vote": "approve", "reason": "read the plan"}
        path = f"/approvals/{approval_id}/votes"
        status, _, body = await it.call("POST", path, "bob", vote)
        assert status == 200, body
        shown = body["approval"]
        assert (shown["status"], shown["approvals"]) == ("pending", 1)
        assert "dispatch_id" not in body
        assert [(v["principal"], v["vote"], v["reason"]) for v in shown["votes"]] == [
            (it.names["bob"], "approve", "read the plan")
        ]
        assert shown["may_vote"] == sorted(it.names[w] for w in ("dan", "erin"))

        before = await it.everything()
        again = await it.call("POST", path, "bob", {"vote": "deny", "reason": "changed my mind"})
        assert_problem(again, 409, "already_voted")
        assert await it.everything() == before
        assert len(await _votes(it, approval_id)) == 1

        status, _, body = await it.call("POST", path, "dan", {"vote": "approve"})
        assert status == 200, body
        assert body["approval"]["status"] in ("approved", "consumed")
        assert body["approval"]["may_vote"] == []
        status, _, shown = await it.call("GET", f"/dispatches/{body['dispatch_id']}", "vic")
        assert status == 200, shown
        assert [v["principal"] for v in await _votes(it, approval_id)] == [
            it.names["bob"],
            it.names["dan"],
        ]
        # Each vote commits its audit row naming the principal, its token and its request.
        audited = [r for r in await it.audit(approval_id) if r["kind"] == "api.vote"]
        assert [(r["principal"], r["token_id"]) for r in audited] == [
            (it.names["bob"], it.token_ids["bob"]),
            (it.names["dan"], it.token_ids["dan"]),
        ]
        assert all(r["request_id"].startswith("req_") for r in audited)


async def test_a_denial_with_its_reason_rejects_and_shows(served: Served) -> None:
    it = served
    async with two_of_three(it):
        approval_id = (await _submit(it, "sam", "q2"))["approval_request_id"]
        path = f"/approvals/{approval_id}/votes"
        status, _, body = await it.call(
            "POST", path, "erin", {"vote": "deny", "reason": "the window is closed"}
        )
        assert status == 200, body
        shown = body["approval"]
        assert (shown["status"], shown["denials"], shown["decided_principal"]) == (
            "rejected",
            1,
            it.names["erin"],
        )
        assert shown["votes"][0]["reason"] == "the window is closed"
        refused = await it.call("POST", path, "dan", {"vote": "approve"})
        assert_problem(refused, 409, "approval_state_conflict")


async def test_the_database_refuses_a_vote_from_outside_the_group_and_nothing_is_written(
    served: Served,
) -> None:
    it = served
    async with two_of_three(it):
        approval_id = (await _submit(it, "sam", "q3"))["approval_request_id"]
        path = f"/approvals/{approval_id}/votes"
        before = await it.everything()
        refused = await it.call("POST", path, "alice", {"vote": "approve", "reason": "mine"})
        assert_problem(refused, 403, "approval_not_permitted")
        # A body naming another principal is never taken for the token's.
        named = await it.call("POST", path, "alice", {"vote": "approve", "principal": "dan"})
        assert_problem(named, 400, "invalid_input")
        assert named[2]["field"] == "principal"
        for body in ({"vote": "maybe"}, {"vote": "approve", "reason": "two\nlines"}):
            assert_problem(await it.call("POST", path, "bob", body), 400, "invalid_input")
        # A viewer or the submitter may not vote at all (the role table, before the store).
        assert_problem(await it.call("POST", path, "vic", {"vote": "deny"}), 403, "forbidden")
        assert await it.everything() == before
        assert await _votes(it, approval_id) == []
        missing = await it.call("GET", "/approvals/apr_nope", "vic")
        assert_problem(missing, 404, "approval_not_found")


async def test_a_vote_is_idempotent_under_its_key(served: Served) -> None:
    it = served
    async with two_of_three(it):
        approval_id = (await _submit(it, "sam", "q4"))["approval_request_id"]
        path = f"/approvals/{approval_id}/votes"
        key = {"Idempotency-Key": "vote-1"}
        first = await it.call("POST", path, "bob", {"vote": "approve"}, headers=key)
        again = await it.call("POST", path, "bob", {"vote": "approve"}, headers=key)
        assert (first[0], again[0]) == (200, 200)
        assert again[1]["Idempotent-Replayed"] == "true"
        assert again[2] == first[2]
        other = await it.call("POST", path, "bob", {"vote": "deny"}, headers=key)
        assert_problem(other, 422, "idempotency_key_reused")
        assert len(await _votes(it, approval_id)) == 1


async def test_approve_under_a_policy_is_one_approve_vote(served: Served) -> None:
    it = served
    async with two_of_three(it):
        approval_id = (await _submit(it, "sam", "q5"))["approval_request_id"]
        approve = f"/approvals/{approval_id}/approve"
        before = await it.everything()
        short = await it.call("POST", approve, "bob")
        assert_problem(short, 409, "approval_transition_refused")
        assert await it.everything() == before
        assert await _votes(it, approval_id) == []
        status, _, body = await it.call(
            "POST", f"/approvals/{approval_id}/votes", "dan", {"vote": "approve"}
        )
        assert status == 200, body
        status, _, body = await it.call("POST", approve, "bob")
        assert status == 200, body
        assert body["dispatch_id"]
        assert [v["principal"] for v in await _votes(it, approval_id)] == [
            it.names["dan"],
            it.names["bob"],
        ]
