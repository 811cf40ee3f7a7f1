"""Claims as an operator sees them: takeovers logged and counted, expired leases, page events."""

from __future__ import annotations

from pathlib import Path

import structlog

from qinglong_dispatcher import bootstrap
from qinglong_dispatcher.actions.run_create import handler as run_create
from qinglong_dispatcher.config.settings import load_settings
from qinglong_dispatcher.lifecycle import daemon
from tests.support import page_crash, repositories
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher
from tests.support.stores import Harness

SHORT_LEASE_MS = 1_000


def _parts(harness: Harness, clock: ManualClock, tmp_path: Path) -> daemon.Parts:
    """A daemon's parts, owner `w2`, over the harness's store (edge settings: no skew guard)."""
    settings = load_settings(
        environ={"QINGLONG_DATABASE_URL": f"sqlite:///{tmp_path / 'unused.db'}"},
        overrides={"owner_id": "w2"},
    )
    return bootstrap.build_daemon_parts(settings, harness.store, clock)


def _takeovers(parts: daemon.Parts) -> str:
    text = parts.metrics.render().decode()
    (line,) = [s for s in text.splitlines() if s.startswith("qinglong_dispatcher_takeovers_total")]
    return line


async def test_a_takeover_of_an_expired_lease_is_logged_and_counted(
    harness: Harness, clock: ManualClock, tmp_path: Path
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    first = await harness.store.claim_due(
        now_ms=clock.now_ms(), owner="w1", limit=16, lease_ms=SHORT_LEASE_MS
    )
    assert [c.taken_over for c in first.claims] == [None]
    clock.advance(ms=SHORT_LEASE_MS + 250)
    parts = _parts(harness, clock, tmp_path)
    assert _takeovers(parts) == "qinglong_dispatcher_takeovers_total 0.0"
    with structlog.testing.capture_logs() as logs:
        assert await daemon.Daemon(parts).tick()
    (event,) = [e for e in logs if e["event"] == "lease.taken_over"]
    assert event["log_level"] == "warning"
    assert event["dispatch_id"] == consumed.dispatch_id
    assert event["previous_owner"] == "w1"
    assert event["attempt"] == 1  # the dead holder's attempt is refunded: a crash is no failure
    assert event["expired_for_ms"] == 250
    assert _takeovers(parts) == "qinglong_dispatcher_takeovers_total 1.0"
    execution = await harness.store.get_execution(consumed.dispatch_id)
    assert execution is not None
    assert execution.status == "succeeded"


async def test_a_first_claim_is_no_takeover(
    harness: Harness, clock: ManualClock, tmp_path: Path
) -> None:
    await submit_runs(harness.approver_store, clock, 2)
    parts = _parts(harness, clock, tmp_path)
    with structlog.testing.capture_logs() as logs:
        assert await daemon.Daemon(parts).tick()
    assert [e for e in logs if e["event"] == "lease.taken_over"] == []
    # run.create passes: its claim is the passage's (one event for it).
    passed = [e for e in logs if e["event"] == "dispatch.page_committed"]
    assert [(e["path"], e["count"]) for e in passed] == [("passage", 2)]
    assert _takeovers(parts) == "qinglong_dispatcher_takeovers_total 0.0"


async def test_a_single_claim_names_the_lease_it_replaced(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    first = await harness.store.claim(
        consumed.dispatch_id,
        now_ms=clock.now_ms(),
        owner="w1",
        token="t-one",
        lease_ms=SHORT_LEASE_MS,
    )
    assert first.lease is not None
    assert first.taken_over is None
    clock.advance(ms=SHORT_LEASE_MS)
    second = await harness.store.claim(
        consumed.dispatch_id, now_ms=clock.now_ms(), owner="w2", token="t-two", lease_ms=5_000
    )
    assert second.taken_over is not None
    assert (second.taken_over.owner, second.taken_over.expires_at_ms) == (
        "w1",
        first.lease.expires_at_ms,
    )


async def test_status_counts_expired_leases_by_owner_the_few_largest(
    harness: Harness, clock: ManualClock
) -> None:
    consumed = await submit_runs(harness.approver_store, clock, 8)
    owners = ["w1", "w1", "o2", "o3", "o4", "o5", "o6"]
    for owner, row in zip(owners, consumed, strict=False):
        claimed = await harness.store.claim(
            row.dispatch_id,
            now_ms=clock.now_ms(),
            owner=owner,
            token=f"t-{row.dispatch_id}",
            lease_ms=SHORT_LEASE_MS,
        )
        assert claimed.lease is not None
    live = await harness.store.counts(now_ms=clock.now_ms())
    assert (live.expired_leases, dict(live.expired_lease_owners)) == (0, {})
    clock.advance(ms=SHORT_LEASE_MS)
    counts = await harness.store.counts(now_ms=clock.now_ms())
    assert counts.expired_leases == 7
    assert dict(counts.expired_lease_owners) == {"w1": 2, "o2": 1, "o3": 1, "o4": 1, "o5": 1}
    assert list(counts.expired_lease_owners) == ["w1", "o2", "o3", "o4", "o5"]


async def test_a_page_claim_logs_its_count_and_only_the_first_ids(
    harness: Harness, clock: ManualClock
) -> None:
    consumed = await submit_runs(harness.approver_store, clock, 12)
    # Claimed, not passed: run.create as it was before passages (the page transaction).
    handler = page_crash.PageOnly(
        run_create.RunCreateHandler(harness.store, repositories.runs(harness.store), clock)
    )
    the_dispatcher = make_dispatcher(harness.store, clock, handlers={"run.create": handler})
    with structlog.testing.capture_logs() as logs:
        report = await the_dispatcher.dispatch_batch()
    assert report.outcomes["succeeded"] == 12
    (claimed,) = [e for e in logs if e["event"] == "dispatch.claimed"]
    assert claimed["count"] == 12
    assert "dispatch_ids" not in claimed
    assert len(claimed["first_ids"]) == 5
    assert set(claimed["first_ids"]) <= {c.dispatch_id for c in consumed}


async def test_dispatch_show_counts_takeovers_against_their_bound(
    harness: Harness, clock: ManualClock
) -> None:
    taken, fresh = await submit_runs(harness.approver_store, clock, 2, max_attempts=3)
    first = await harness.store.claim(
        taken.dispatch_id, now_ms=clock.now_ms(), owner="w1", token="t-one", lease_ms=SHORT_LEASE_MS
    )
    assert first.lease is not None
    clock.advance(ms=SHORT_LEASE_MS)
    second = await harness.store.claim(
        taken.dispatch_id, now_ms=clock.now_ms(), owner="w2", token="t-two", lease_ms=5_000
    )
    assert second.taken_over is not None
    shown: dict[str, tuple[object, object]] = {}
    for row in (taken, fresh):
        detail = await harness.operator_store.show_dispatch(row.dispatch_id, now_ms=clock.now_ms())
        assert detail is not None
        execution = detail.as_dict()["execution"]
        assert isinstance(execution, dict)
        shown[row.dispatch_id] = (execution["takeovers"], execution["max_takeovers"])
    assert shown == {taken.dispatch_id: (1, 12), fresh.dispatch_id: (0, 12)}
