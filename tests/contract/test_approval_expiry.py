"""Approval expiry: the reconcile pass's sweep of pending requests past their lifetime, on the
database's clock, against every dialect's real store."""

from __future__ import annotations

import time

import anyio
import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import approvals, errors
from qinglong_dispatcher.recovery import reconciler
from tests.support.actions import make_api
from tests.support.clock import ManualClock
from tests.support.stores import Harness

Status = approvals.ApprovalStatus
SHORT_TTL_MS = 20
"""A lifetime the database's clock sees run out after a short sleep."""


@pytest.fixture
def now() -> ManualClock:
    """The real clock, so the caller's and the database's clocks roughly agree."""
    return ManualClock(int(time.time() * 1000))


def _plan(ref: str) -> dict[str, object]:
    return api.run_create_plan(
        {"projectId": "proj-1", "taskId": "task-1", "taskRevision": 4, "actionRef": ref}
    ).to_canonical_dict()


async def _short_lived(harness: Harness, now: ManualClock, *refs: str) -> list[str]:
    """Pending requests whose lifetime has run out on the database's clock."""
    short = api.Api(
        harness.approver_store, now, api.Policy(approval_ttl_ms=SHORT_TTL_MS, max_attempts=5)
    )
    created = [
        await short.create_approval("run.create", _plan(ref), requested_by="alice") for ref in refs
    ]
    await anyio.sleep(SHORT_TTL_MS * 5 / 1000)
    return [c.approval_request_id for c in created]


async def _status(harness: Harness, approval_request_id: str) -> tuple[Status, int]:
    found = await harness.store.get_approval(approval_request_id)
    assert found is not None
    return found.status, found.version


async def test_the_reconcile_pass_expires_a_timed_out_request_with_its_audit_row(
    harness: Harness, now: ManualClock
) -> None:
    (timed_out,) = await _short_lived(harness, now, "act-short")
    live = await make_api(harness.approver_store, now).create_approval(
        "run.create", _plan("act-live"), requested_by="alice"
    )
    sweep = reconciler.Reconciler(harness.store, {}, now)
    report = await sweep.reconcile_pass()
    assert report.approvals_expired == 1
    assert report.as_dict()["approvals_expired"] == 1
    expired = await harness.store.get_approval(timed_out)
    assert expired is not None
    assert (expired.status, expired.version) == (Status.EXPIRED, 2)
    assert expired.decided_by == approvals.EXPIRED_BY
    assert expired.decided_principal  # the runtime (the OS user on SQLite) that swept it
    assert await _status(harness, live.approval_request_id) == (Status.PENDING, 1)
    trail = await harness.store.audit_events(timed_out)
    assert [(e.kind, e.detail_code) for e in trail] == [
        ("approval.created", "run.create"),
        ("approval.expired", "db_clock"),
    ]
    assert (await sweep.reconcile_pass()).approvals_expired == 0


async def test_an_expired_request_refuses_every_decision_typed_and_stays(
    harness: Harness, now: ManualClock
) -> None:
    (timed_out,) = await _short_lived(harness, now, "act-short")
    await reconciler.Reconciler(harness.store, {}, now).reconcile_pass()
    the_api = make_api(harness.approver_store, now)
    with pytest.raises(errors.ApprovalExpired, match="has expired"):
        await the_api.approve(timed_out, decided_by="bob")
    with pytest.raises(errors.ApprovalExpired, match="has expired"):
        await the_api.consume(timed_out)
    with pytest.raises(errors.ApprovalExpired, match="has expired"):
        await the_api.reject(timed_out, decided_by="bob")
    assert await _status(harness, timed_out) == (Status.EXPIRED, 2)


async def test_the_sweep_is_bounded_to_a_page_a_pass(harness: Harness, now: ManualClock) -> None:
    ids = await _short_lived(harness, now, "act-1", "act-2", "act-3")
    sweep = reconciler.Reconciler(harness.store, {}, now, page_size=2)
    assert (await sweep.reconcile_pass()).approvals_expired == 2
    assert (await sweep.reconcile_pass()).approvals_expired == 1
    assert [(await _status(harness, i))[0] for i in ids] == [Status.EXPIRED] * 3


async def test_a_request_the_caller_thinks_expired_is_not_expired_before_the_database_clock(
    harness: Harness, clock: ManualClock
) -> None:
    """The caller's clock (here far in the past, then moved past the lifetime) never
    decides: the database's clock has a whole lifetime to go."""
    created = await make_api(harness.approver_store, clock).create_approval(
        "run.create", _plan("act-live"), requested_by="alice"
    )
    clock.advance(ms=86_400_000 * 2)
    report = await reconciler.Reconciler(harness.store, {}, clock).reconcile_pass()
    assert report.approvals_expired == 0
    assert await _status(harness, created.approval_request_id) == (Status.PENDING, 1)
