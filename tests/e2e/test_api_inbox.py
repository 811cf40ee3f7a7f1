"""`GET /api/v1/inbox` over a real listener, real tokens and both databases: each principal
gets what waits on it (an approver in the policy's group: another's request, never its own;
an approver outside it: only the request under no policy; an operator: the recovery_required
dispatch with its verdict, and what an approver gets; a viewer: nothing), oldest first unless
asked, filtered by action, project and text; a bad filter is a 400 naming it, no token a 401,
and reading writes nothing."""

from __future__ import annotations

from qinglong_dispatcher.domain import recovery
from tests.e2e.test_ui_browser import served
from tests.support.actions import submit_runs
from tests.support.api_writes import Served
from tests.support.api_writes import submit as api_submit
from tests.support.clock import ManualClock
from tests.support.policies import two_of_three
from tests.support.recovery import started_execution
from tests.support.targets import claim_and_start, submit_change

__all__ = ["served"]


async def _ids(it: Served, who: str, query: str = "") -> list[str]:
    status, headers, body = await it.call("GET", "/inbox" + query, who)
    assert status == 200, body
    assert headers["Cache-Control"] == "no-store"
    assert body["complete"] is True
    return [item["id"] for item in body["items"]]


async def test_the_inbox_of_each_principal(served: Served) -> None:
    it = served
    past = ManualClock(it.clock.now_ms() - 3_600_000)
    await submit_runs(it.harness.approver_store, past, 1)
    stuck, _ = await started_execution(it.harness, past)
    await it.harness.store.record_observation(
        stuck.dispatch_id,
        outcome=recovery.ObservationOutcome.MISSING,
        reason_code=recovery.MANUAL_ONLY,
        now_ms=it.clock.now_ms(),
    )
    # Before the policy: a request that carries none, so any approver but bob may decide it.
    free = (await api_submit(it, "bob", "api-free"))["approval_request_id"]
    it.clock.advance(s=5)
    async with two_of_three(it):
        first = (await api_submit(it, "sam", "api-a"))["approval_request_id"]
        it.clock.advance(s=5)  # the order is by age: the second waits 5 s less
        second = (await api_submit(it, "sam", "api-b"))["approval_request_id"]
        it.clock.advance(s=5)
        own = (await api_submit(it, "bob", "api-c"))["approval_request_id"]
        before = await it.everything()

        assert await _ids(it, "bob") == [first, second]  # not his own
        assert await _ids(it, "bob", "?sort=newest") == [second, first]
        assert await _ids(it, "bob", "?action=run.create&project=shop") == [first, second]
        assert await _ids(it, "bob", "?project=proj-1") == []
        assert await _ids(it, "bob", f"?q={second.upper()}") == [second]
        assert await _ids(it, "dan") == [free, first, second, own]  # in the group: bob's too
        assert await _ids(it, "alice") == [free]  # an approver outside the group
        assert await _ids(it, "vic") == []  # a viewer decides nothing

        # An operator is an approver too: the request under no policy, after the older wait.
        assert await _ids(it, "carol") == [stuck.dispatch_id, free]
        status, _, body = await it.call("GET", "/inbox?project=proj-1", "carol")
        assert status == 200, body
        (item,) = body["items"]
        assert (item["kind"], item["id"], item["action"], item["project"]) == (
            "recovery",
            stuck.dispatch_id,
            "run.create",
            "proj-1",
        )
        assert item["summary"].startswith("no automatic evidence for this action: check the target")
        assert item["age_ms"] >= 3_000_000

        (bobs,) = (await it.call("GET", f"/inbox?q={first}", "bob"))[2]["items"]
        assert bobs["kind"] == "approval"
        assert bobs["summary"] == f"requested by {it.names['sam']}; policy two"

        for query, field in (
            ("?sort=sideways", "sort"),
            ("?action=not%20an%20id", "action"),
            ("?q=" + "x" * 201, "q"),
            ("?status=pending", "status"),
            ("?sort=oldest&sort=newest", "sort"),
        ):
            status, _, body = await it.call("GET", "/inbox" + query, "bob")
            assert (status, body["field"]) == (400, field), (query, body)
        status, _, _ = await it.call("GET", "/inbox", None)
        assert status == 401
        assert await it.everything() == before


async def test_a_held_target_in_the_inbox(served: Served) -> None:
    """A `recovery_required` dispatch with a target names the target it holds."""
    it = served
    past = ManualClock(it.clock.now_ms() - 3_600_000)
    held = await submit_change(it.harness.approver_store, past, "held-1", "edge-router-7")
    await claim_and_start(it.harness.store, past, lease_ms=60_000)
    status, _, body = await it.call("GET", "/inbox?q=EDGE-ROUTER-7", "carol")
    assert status == 200, body
    (item,) = body["items"]
    assert (item["id"], item["target"]) == (held, "edge-router-7")
    assert item["summary"].startswith("holds target edge-router-7 until settled; ")
    assert "no recovery pass has looked yet" in item["summary"]
