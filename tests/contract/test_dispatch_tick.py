"""The dispatch tick the daemon and the `tick` command share (`usecases.ticking`): the clocks
first, then pages while a page comes back full, up to its cap."""

from __future__ import annotations

from qinglong_dispatcher.dispatching import dispatcher
from qinglong_dispatcher.lifecycle import skew
from qinglong_dispatcher.usecases import ticking
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher
from tests.support.stores import Harness


async def test_a_tick_claims_nothing_while_the_clocks_disagree(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 3)
    # The system clock reads 1970: the database's is decades ahead of it.
    guard = skew.SkewGuard(1.0, wall_clock=lambda: 0.0)
    done = await ticking.tick(
        make_dispatcher(harness.store, clock), harness.store, guard=guard, max_pages=5
    )
    assert done.refused
    assert done.skew is not None
    assert not done.skew.allowed
    assert done.skew.skew_seconds > 1
    assert (done.batches, done.observed) == (0, 0)
    assert (await harness.store.counts(now_ms=clock.now_ms())).due == 3


async def test_a_refused_standby_check_claims_nothing_after_the_clocks_agree(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 1)

    async def no_standby() -> bool:
        return False

    done = await ticking.tick(
        make_dispatcher(harness.store, clock),
        harness.store,
        guard=skew.SkewGuard(60.0),
        max_pages=5,
        durable=no_standby,
    )
    assert done.refused
    assert done.skew is not None
    assert done.skew.allowed
    assert done.batches == 0
    assert (await harness.store.counts(now_ms=clock.now_ms())).due == 1


async def test_a_tick_follows_full_pages_up_to_its_cap_and_stops_at_a_short_one(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 5)
    pages = make_dispatcher(harness.store, clock, page_size=2)
    seen: list[int] = []

    def on_batch(report: dispatcher.BatchReport, seconds: float) -> None:
        assert seconds >= 0
        seen.append(report.observed)

    capped = await ticking.tick(pages, harness.store, guard=None, max_pages=2, on_batch=on_batch)
    assert not capped.refused
    assert capped.skew is None
    assert (capped.batches, capped.observed, seen) == (2, 4, [2, 2])
    assert capped.outcomes == {"succeeded": 4}
    rest = await ticking.tick(pages, harness.store, guard=None, max_pages=10, on_batch=on_batch)
    assert (rest.batches, rest.observed, seen) == (1, 1, [2, 2, 1])
    capped.merge(rest)
    assert (capped.batches, capped.observed, capped.outcomes) == (3, 5, {"succeeded": 5})


async def test_a_passage_page_of_its_own_is_one_commit_and_the_tick_follows_it(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 7)
    pages = make_dispatcher(harness.store, clock, page_size=2, passage_page_size=3)
    seen: list[tuple[int, int]] = []
    commits = harness.store.commits

    def on_batch(report: dispatcher.BatchReport, seconds: float) -> None:
        nonlocal commits
        seen.append((report.outcomes["succeeded"], harness.store.commits - commits))
        commits = harness.store.commits

    done = await ticking.tick(pages, harness.store, guard=None, max_pages=10, on_batch=on_batch)
    assert done.outcomes == {"succeeded": 7}
    # Passages of three rows, more than the claim's page, each one commit; a full one puts off
    # the claim; the short last one lets it look (and find nothing), which ends the tick.
    assert seen[:2] == [(3, 1), (3, 1)]
    assert seen[2][0] == 1
    assert len(seen) == 3


async def test_a_stopping_daemon_ends_its_tick_after_the_page_in_hand(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 4)
    done = await ticking.tick(
        make_dispatcher(harness.store, clock, page_size=2),
        harness.store,
        guard=None,
        max_pages=10,
        stopping=lambda: True,
    )
    assert (done.batches, done.observed) == (1, 2)


def test_only_a_claim_that_moved_a_row_is_work() -> None:
    def report(outcome: str) -> dispatcher.BatchReport:
        batch = dispatcher.BatchReport(page_size=1)
        batch.claims[outcome] += 1
        return batch

    # A due row under a live lease the database's clock still sees must not refund every tick.
    assert not ticking.moved(report("live_lease"))
    assert not ticking.moved(report("not_claimable"))
    assert all(ticking.moved(report(outcome)) for outcome in ("claimed", "replayed", "exhausted"))
