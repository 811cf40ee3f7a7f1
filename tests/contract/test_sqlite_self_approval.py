"""SQLite separation of duties (`QINGLONG_SELF_APPROVAL`): the store compares OS principals."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from qinglong_dispatcher.adapters.sqlite import store as sqlite_store
from qinglong_dispatcher.adapters.sqlite_file import os_user
from qinglong_dispatcher.domain import approvals, errors
from tests.contract.test_approvals import plan_bytes
from tests.support import stores
from tests.support.actions import make_api, submit_runs
from tests.support.clock import START_MS, ManualClock


@pytest.fixture
async def path(tmp_path: Path) -> Path:
    database = tmp_path / "store.db"
    store = await stores.open_sqlite(database)
    try:
        await store.migrate(now_ms=START_MS)
    finally:
        await store.close()
    return database


async def _open(path: Path, principal: str, *, self_approval: bool) -> sqlite_store.SqliteStore:
    return await stores.open_sqlite(path, principal=principal, self_approval=self_approval)


def _counts(path: Path) -> tuple[int, ...]:
    conn = sqlite3.connect(path)
    try:
        return tuple(
            conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in (
                "action_plans",
                "approval_requests",
                "approved_action_dispatches",
                "security_audit_events",
            )
        )
    finally:
        conn.close()


async def test_the_store_defaults_to_the_os_user_and_allows_self_approval(
    path: Path, clock: ManualClock
) -> None:
    store = await stores.open_sqlite(path)
    try:
        (consumed,) = await submit_runs(store, clock, 1)
        approval = await store.get_approval(consumed.approval_request_id)
    finally:
        await store.close()
    assert approval is not None
    assert approval.requested_principal == os_user.os_principal()
    assert approval.decided_principal == approval.consumed_principal == os_user.os_principal()


async def test_self_approval_off_refuses_the_requester_and_allows_another_user(
    path: Path, clock: ManualClock
) -> None:
    alice = await _open(path, "alice", self_approval=False)
    bob = await _open(path, "bob", self_approval=False)
    try:
        created = await make_api(alice, clock).create_approval(
            "run.create", plan_bytes(), requested_by="alice-label"
        )
        before = _counts(path)
        with pytest.raises(errors.SelfApprovalRefused):
            await make_api(alice, clock).approve(created.approval_request_id, decided_by="a")
        assert _counts(path) == before  # the update and its audit row rolled back
        still = await alice.get_approval(created.approval_request_id)
        assert still is not None
        assert still.status is approvals.ApprovalStatus.PENDING
        approved = await make_api(bob, clock).approve(
            created.approval_request_id, decided_by="bob-label"
        )
        assert (approved.requested_principal, approved.decided_principal) == ("alice", "bob")
        consumed = await make_api(alice, clock).consume(created.approval_request_id)
        final = await alice.get_approval(consumed.approval_request_id)
        assert final is not None
        assert final.consumed_principal == "alice"
        # `submit` is a self-approval: refused whole, nothing written.
        before = _counts(path)
        with pytest.raises(errors.SelfApprovalRefused):
            await submit_runs(bob, clock, 3)
        assert _counts(path) == before
    finally:
        await alice.close()
        await bob.close()


async def test_self_approval_on_lets_the_requester_approve(path: Path, clock: ManualClock) -> None:
    alice = await _open(path, "alice", self_approval=True)
    try:
        (consumed,) = await submit_runs(alice, clock, 1)
        trail = await alice.audit_events(consumed.approval_request_id)
    finally:
        await alice.close()
    assert [(e.kind, e.principal, e.detail_code) for e in trail] == [
        ("approval.created", "alice", "run.create"),
        ("approval.approved", "alice", "by_requester"),
        ("approval.consumed", "alice", "run.create"),
    ]
