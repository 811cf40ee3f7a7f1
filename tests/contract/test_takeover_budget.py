"""A daemon's crash is not the dispatch's failure: takeovers refund the attempt and count apart,
up to their own bound (a poison pill stops there); handler waits are woken at a daemon's start."""

from __future__ import annotations

from pathlib import Path

import structlog

from qinglong_dispatcher import bootstrap
from qinglong_dispatcher.config.settings import load_settings
from qinglong_dispatcher.domain import fencing, states
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.lifecycle import daemon
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.stores import Harness

LEASE_MS = 1_000


async def _claim_by(harness: Harness, clock: ManualClock, owner: str) -> Outcome:
    """One page claim by `owner` of the one row the test made, after the last lease expired."""
    batch = await harness.store.claim_due(
        now_ms=clock.now_ms(), owner=owner, limit=16, lease_ms=LEASE_MS
    )
    (claim,) = batch.claims
    clock.advance(ms=LEASE_MS + 1)
    return claim.outcome


async def test_takeovers_never_spend_the_attempt_budget(
    harness: Harness, clock: ManualClock
) -> None:
    # max_attempts 1: before, the first takeover exhausted the row (`attempts_exhausted`).
    (consumed,) = await submit_runs(harness.approver_store, clock, 1, max_attempts=1)
    dispatch_id = consumed.dispatch_id
    bound = states.max_takeovers(1)
    for n in range(bound + 1):
        assert await _claim_by(harness, clock, f"crashed-{n}") is Outcome.CLAIMED
    execution = await harness.store.get_execution(dispatch_id)
    assert execution is not None
    assert (execution.status, execution.attempt, execution.takeovers) == ("leased", 1, bound)
    # Every claim is in the ledger, each takeover under its claimant's token at attempt 1.
    events = await harness.store.execution_events(dispatch_id)
    claims = [e for e in events if e.to_status == "leased"]
    assert [(e.from_status, e.attempt, e.lease_owner) for e in claims] == [
        ("pending", 1, "crashed-0"),
        *[("leased", 1, f"crashed-{n}") for n in range(1, bound + 1)],
    ]
    assert len({e.lease_token for e in claims}) == bound + 1


async def test_a_dispatch_that_kills_every_claimant_stops_with_its_own_code(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1, max_attempts=2)
    dispatch_id = consumed.dispatch_id
    for n in range(states.max_takeovers(2) + 1):
        assert await _claim_by(harness, clock, f"crashed-{n}") is Outcome.CLAIMED
    batch = await harness.store.claim_due(
        now_ms=clock.now_ms(), owner="next", limit=16, lease_ms=LEASE_MS
    )
    (claim,) = batch.claims
    assert (claim.outcome, claim.reason) == (Outcome.EXHAUSTED, "takeovers_exhausted")
    execution = await harness.store.get_execution(dispatch_id)
    assert execution is not None
    assert (execution.status, execution.result_code) == ("blocked", "takeovers_exhausted")
    assert execution.attempt == 1  # its own budget was never spent
    last = (await harness.store.execution_events(dispatch_id))[-1]
    assert (last.from_status, last.to_status, last.result_code) == (
        "leased",
        "blocked",
        "takeovers_exhausted",
    )


async def test_own_failures_still_spend_the_budget_between_takeovers(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1, max_attempts=2)
    dispatch_id = consumed.dispatch_id
    for attempt in (1, 2):
        assert await _claim_by(harness, clock, f"crashed-{attempt}") is Outcome.CLAIMED
        batch = await harness.store.claim_due(
            now_ms=clock.now_ms(), owner=f"failing-{attempt}", limit=16, lease_ms=LEASE_MS
        )
        (claim,) = batch.claims
        assert claim.lease is not None
        assert (claim.lease.attempt, claim.taken_over is not None) == (attempt, True)
        released = await harness.store.release_preflight(
            claim.lease,
            mutation_id=fencing.release_mutation_id(claim.lease),
            kind=states.ReleaseKind.RETRY,
            result_code="inspect_unavailable",
            retry_at_ms=clock.now_ms(),
            now_ms=clock.now_ms(),
        )
        assert released.status == ("retry_wait" if attempt == 1 else "blocked")
    execution = await harness.store.get_execution(dispatch_id)
    assert execution is not None
    assert (execution.status, execution.result_code, execution.attempt, execution.takeovers) == (
        "blocked",
        "inspect_unavailable",
        2,
        2,
    )


async def test_a_takeover_exhaustion_is_logged_and_counted_by_the_daemon(
    harness: Harness, clock: ManualClock, tmp_path: Path
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1, max_attempts=1)
    for n in range(states.max_takeovers(1) + 1):
        await _claim_by(harness, clock, f"crashed-{n}")
    settings = load_settings(
        environ={"QINGLONG_DATABASE_URL": f"sqlite:///{tmp_path / 'unused.db'}"},
        overrides={"owner_id": "w-next"},
    )
    parts = bootstrap.build_daemon_parts(settings, harness.store, clock)
    with structlog.testing.capture_logs() as logs:
        assert await daemon.Daemon(parts).tick()
    (event,) = [e for e in logs if e["event"] == "dispatch.poison_suspected"]
    assert (event["log_level"], event["dispatch_id"]) == ("error", consumed.dispatch_id)
    text = parts.metrics.render().decode()
    assert "qinglong_dispatcher_takeovers_exhausted_total 1.0" in text.splitlines()


async def test_a_start_wakes_the_handler_waits_of_its_action_types_only(
    harness: Harness, clock: ManualClock
) -> None:
    waiting, yielded, fresh = await submit_runs(harness.approver_store, clock, 3)
    batch = await harness.store.claim_due(
        now_ms=clock.now_ms(), owner="w-without", limit=16, lease_ms=LEASE_MS
    )
    later = clock.now_ms() + 60_000
    for claim, kind, code in (
        (batch.claims[0], states.ReleaseKind.WAIT, "handler_missing"),
        (batch.claims[1], states.ReleaseKind.WAIT, "shutdown"),
        (batch.claims[2], states.ReleaseKind.YIELD, "shutdown"),
    ):
        assert claim.lease is not None
        await harness.store.release_preflight(
            claim.lease,
            mutation_id=fencing.release_mutation_id(claim.lease),
            kind=kind,
            result_code=code,
            retry_at_ms=later,
            now_ms=clock.now_ms(),
        )
    ids = {c.dispatch_id for c in batch.claims}
    assert ids == {waiting.dispatch_id, yielded.dispatch_id, fresh.dispatch_id}
    handler_wait = batch.claims[0].dispatch_id
    before = {i: await harness.store.execution_events(i) for i in ids}
    clock.advance(ms=5_000)
    now = clock.now_ms()
    assert await harness.store.wake_handler_waits({"other.action"}, now_ms=now) == ()
    assert await harness.store.wake_handler_waits(set(), now_ms=now) == ()
    assert await harness.store.wake_handler_waits({"run.create"}, now_ms=now) == (handler_wait,)
    # Woken once: a second start finds it already due.
    assert await harness.store.wake_handler_waits({"run.create"}, now_ms=now) == ()
    woken = await harness.store.get_execution(handler_wait)
    assert woken is not None
    assert (woken.status, woken.eligible_at_ms, woken.attempt, woken.result_code) == (
        "pending",
        now,
        0,
        "handler_missing",
    )
    other = await harness.store.get_execution(batch.claims[1].dispatch_id)
    assert other is not None
    assert other.eligible_at_ms == later  # a wait for another reason keeps its time
    assert {i: await harness.store.execution_events(i) for i in ids} == before  # no ledger line
    due = await harness.store.claim_due(now_ms=now, owner="w-with", limit=16, lease_ms=LEASE_MS)
    assert {c.dispatch_id for c in due.claimed} == {handler_wait, batch.claims[2].dispatch_id}


async def test_a_lease_taken_over_before_is_claimed_in_a_page_of_its_own(
    harness: Harness, clock: ManualClock
) -> None:
    # One crash's page is taken over whole. A row whose claimants died twice may be why: if
    # it kills its next claimant too, no page mate dies with it and pays a takeover for it.
    first, second = sorted(
        c.dispatch_id for c in await submit_runs(harness.approver_store, clock, 2)
    )
    for owner in ("dead", "dead-too"):
        batch = await harness.store.claim_due(
            now_ms=clock.now_ms(), owner=owner, limit=16, lease_ms=LEASE_MS
        )
        assert sorted(c.dispatch_id for c in batch.claimed) == [first, second]
        clock.advance(ms=LEASE_MS + 1)
    fresh = sorted(c.dispatch_id for c in await submit_runs(harness.approver_store, clock, 2))
    pages = []
    for _ in range(3):
        batch = await harness.store.claim_due(
            now_ms=clock.now_ms(), owner="next", limit=16, lease_ms=60_000
        )
        pages.append(([c.dispatch_id for c in batch.claimed], batch.observed))
    assert pages == [
        ([first], 4),  # the whole observation counted: the dispatcher goes on to a next page
        ([second], 3),
        (fresh, 2),
    ]
