"""Held targets and frozen dispatches in `GET /api/v1/inbox`, and the inbox's target and age
filters, over a real listener, real tokens and both databases: an operator's inbox names a
held target (its holder, how many wait) and a frozen dispatch (`frozen_by`, the freeze's
reason and end); an approver's and a viewer's do not; `target=` keeps the rows whose target
begins with it, `older_than=` those that waited at least that long, a bad value is a 400
naming it. `POST /dispatches/{id}/lift-freeze` is an operator's: a submitter and a viewer are
refused (403) and write nothing, an operator lifts the freeze for that dispatch alone, with
its reason audited under the principal, and the row leaves the inbox."""

from __future__ import annotations

from typing import Any

import pytest

from qinglong_dispatcher.adapters.sqlite import store as sqlite_store
from qinglong_dispatcher.domain import freezes, plans
from tests.e2e.test_ui_browser import served
from tests.support import stores, targets
from tests.support.actions import make_api
from tests.support.api_writes import Served
from tests.support.clock import ManualClock
from tests.support.targets import claim_and_start, submit_change

__all__ = ["served"]

HOUR_MS = 3_600_000


async def held_and_frozen(it: Served) -> tuple[str, str, str, int]:
    """router-1 held by a change started an hour ago (its lease long expired) with one more
    waiting behind it, and a change of switch-9 a freeze of `switch-` holds. The holder's,
    the waiting one's and the frozen one's dispatch ids, and the freeze's id."""
    past = ManualClock(it.clock.now_ms() - HOUR_MS)
    holder = await submit_change(it.harness.approver_store, past, "held-1", "router-1")
    await claim_and_start(it.harness.store, past, lease_ms=60_000)
    waiting = await submit_change(it.harness.approver_store, it.clock, "held-2", "router-1")
    frozen = await submit_change(it.harness.approver_store, it.clock, "frozen-1", "switch-9")
    freeze = await it.admin.add_freeze(
        freezes.NewFreeze(
            target_prefix="switch-",
            from_ms=it.clock.now_ms() - 60_000,
            until_ms=it.clock.now_ms() + HOUR_MS,
            reason="network change window closed",
        )
    )
    return holder, waiting, frozen, freeze.freeze_id


async def _items(it: Served, who: str, query: str = "") -> list[dict[str, Any]]:
    status, _, body = await it.call("GET", "/inbox" + query, who)
    assert status == 200, body
    assert body["complete"] is True
    items: list[dict[str, Any]] = body["items"]
    return items


async def _lifts(it: Served) -> list[dict[str, Any]]:
    return await it.harness.raw(f"SELECT dispatch_id, freeze_id FROM {it.table('freeze_lifts')}")


async def test_held_targets_and_frozen_dispatches_wait_in_the_operators_inbox(
    served: Served,
) -> None:
    it = served
    holder, _waiting, frozen, freeze_id = await held_and_frozen(it)

    shown = {(i["kind"], i["id"]): i for i in await _items(it, "carol")}
    held = shown[("held_target", holder)]
    assert (held["target"], held["waiting"], held["freeze"]) == ("router-1", 1, None)
    assert held["summary"].startswith(f"target router-1 held by {holder} (recovery_required)")
    assert held["age_ms"] >= HOUR_MS - 120_000
    assert ("recovery", holder) in shown  # the holder's own row, to settle it
    row = shown[("frozen_dispatch", frozen)]
    assert row["target"] == "switch-9"
    assert row["waiting"] is None
    assert row["freeze"]["id"] == freeze_id
    assert row["freeze"]["reason"] == "network change window closed"
    assert row["freeze"]["until_ms"] > it.clock.now_ms()
    assert row["summary"].startswith(f"frozen_by {freeze_id}: network change window closed")
    assert len(shown) == 3

    for who in ("bob", "vic", "sam"):  # nothing here is theirs to settle or lift
        assert await _items(it, who) == []

    # The filters: a target prefix, a least age, both; a row without a target never passes.
    routers = await _items(it, "carol", "?target=router-")
    assert {(i["kind"], i["id"]) for i in routers} == {
        ("recovery", holder),
        ("held_target", holder),
    }
    assert [i["id"] for i in await _items(it, "carol", "?target=switch-9")] == [frozen]
    assert await _items(it, "carol", "?target=switch-9x") == []
    old = await _items(it, "carol", "?older_than=30m")
    assert {i["kind"] for i in old} == {"recovery", "held_target"}  # the freeze began 1 min ago
    assert await _items(it, "carol", "?older_than=2h") == []
    assert len(await _items(it, "carol", "?older_than=30m&target=switch")) == 0
    for query, field in (
        ("?target=a%20b", "target"),
        ("?target=router-*", "target"),
        ("?target=" + "r" * 129, "target"),
        ("?older_than=5", "older_than"),
        ("?older_than=0s", "older_than"),
        ("?older_than=366d", "older_than"),
        ("?older_than=1h&older_than=2h", "older_than"),
    ):
        status, headers, body = await it.call("GET", "/inbox" + query, "carol")
        assert (status, body["field"]) == (400, field), (query, body)
        assert headers["Content-Type"] == "application/problem+json"


async def test_an_operator_lifts_a_freeze_for_one_dispatch_through_the_api(
    served: Served,
) -> None:
    it = served
    _holder, _waiting, frozen, freeze_id = await held_and_frozen(it)
    other = await submit_change(it.harness.approver_store, it.clock, "frozen-2", "switch-10")
    path = f"/dispatches/{frozen}/lift-freeze"
    before = (await it.everything(), await _lifts(it))
    for who in ("sam", "vic", "bob"):
        status, _, body = await it.call("POST", path, who, {"reason": "change approved"})
        assert (status, body["code"]) == (403, "forbidden"), (who, body)
    for sent, field in (({}, "reason"), ({"reason": ""}, "reason"), ({"why": "x"}, "why")):
        status, _, body = await it.call("POST", path, "carol", sent)
        assert (status, body["field"]) == (400, field), (sent, body)
    assert (await it.everything(), await _lifts(it)) == before

    status, _, body = await it.call("POST", path, "carol", {"reason": "fix for the outage"})
    assert status == 200, body
    assert body == {"dispatch_id": frozen, "lifted": [freeze_id]}
    assert await _lifts(it) == [{"dispatch_id": frozen, "freeze_id": freeze_id}]
    audit = [(r["kind"], r["principal"]) for r in await it.audit(frozen)]
    assert ("approval.freeze_lifted", it.names["carol"]) in audit
    # That dispatch alone: the other one the freeze holds still waits in the inbox.
    rows = await _items(it, "carol", "?target=switch")
    assert [(i["kind"], i["id"]) for i in rows] == [("frozen_dispatch", other)]
    status, _, body = await it.call("POST", path, "carol", {"reason": "again"})
    assert (status, body["lifted"]) == (200, [])  # nothing covers it now


@pytest.mark.parametrize("served", ["sqlite"], indirect=True)
async def test_the_requester_may_not_lift_a_freeze_for_its_own_dispatch(served: Served) -> None:
    """The file refuses the lift in the requester's name (on PostgreSQL an API principal of
    one role never requests and lifts both: tests/security/test_hostile_freezes.py)."""
    it = served
    await held_and_frozen(it)
    plan = plans.parse_plan(
        targets.TARGET_TYPE,
        {"schemaVersion": 1, "actionRef": "own-1", "projectId": "p1", "router": "switch-3"},
        models=targets.MODELS,
    )
    assert isinstance(it.harness.store, sqlite_store.SqliteStore)
    # The file's writer in carol's name: the request is hers, as her own login's would be.
    as_carol = sqlite_store.SqliteStore(
        it.harness.store.db, tables=stores.TABLES, principal=it.names["carol"]
    )
    (own,) = await make_api(as_carol, it.clock).submit(
        [plan], requested_by=it.names["carol"], approved_by="approver"
    )
    (row,) = await _items(it, "carol", "?target=switch-3")
    assert row["kind"] == "frozen_dispatch"
    before = (await it.everything(), await _lifts(it))
    status, _, body = await it.call(
        "POST", f"/dispatches/{own.dispatch_id}/lift-freeze", "carol", {"reason": "mine"}
    )
    assert (status, body.get("code")) == (409, "freeze_refused"), (status, body)
    assert (await it.everything(), await _lifts(it)) == before
