"""PostgreSQL: a lease of a row and a proceeding row's renewal on the same target never pass
unseen by each other (decision 0051, `qinglong.check_target_holder` of migration 0040).

Under a proceed policy the partial unique index leaves an `executing` row out, so only the
trigger keeps two live changes of one target apart, and under read committed its probe alone
would not: a lease whose probe reads the proceeding row's committed, expired lease and a
renewal whose probe reads no holder can both commit, two live rows on one target that
neither saw. The trigger therefore takes the target's transaction lock (the claim's key,
`pg_advisory_xact_lock(1903326210, hashtext(target))`) before its probe; the second writer
waits for the first to commit, and its probe, a new statement of a volatile function, reads
with a fresh snapshot what the first committed.

The moment it matters: row A of a proceed policy is `executing` and its lease has run out
on the database's clock (`recovery_required`), so row B on its target is due and may be
leased; A's holder, whose clock lags (or whose renewal left just before the end), still
renews. Each order is tested with two runtime logins' transactions through the store:

1. A's renewal first, held uncommitted: the page claim skips B without waiting (its
   try-lock on the same key), and a claim of B by id (`lease_page`, no try-lock) waits on
   the target's lock, then is refused QLH01 and writes nothing.
2. B's page claim first, held uncommitted: A's renewal waits on the lock, then is refused
   QLH01 and writes nothing: a holder whose target another took never comes back to life.

Either way exactly one row holds the target live. Without the lock both commit.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import asyncpg
import pytest

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.postgres import store as postgres_store
from qinglong_dispatcher.domain import approval_policies, errors, ids, records
from tests.support import stores
from tests.support.clock import ManualClock
from tests.support.targets import TARGET_TYPE, claim_and_start
from tests.support.windows import submit_windowed

pytestmark = pytest.mark.postgres

TARGET = "router-1"
LOCK_KEY = 1903326210
"""The first half of the target's lock key (the claim's, migration 0030)."""
SHORT_LEASE_MS = 300
LONG_LEASE_MS = 3_600_000
WAIT_S = 10.0

_WAITERS = f"""
SELECT count(*) FROM pg_catalog.pg_locks AS l
JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND NOT l.granted AND l.objsubid = 2
  AND l.classid = {LOCK_KEY} AND l.objid = pg_catalog.hashtext('{TARGET}')::oid
  AND a.datname = current_database() AND a.usename = '{stores.RUNTIME_LOGIN}'
  AND a.wait_event_type = 'Lock' AND a.wait_event = 'advisory'
"""
"""Runtime sessions waiting on the lock of TARGET (pg_locks and pg_stat_activity agree)."""

_LIVE_HOLDERS = f"""
SELECT dispatch_id FROM qinglong.approved_action_dispatch_executions
WHERE target = '{TARGET}'
  AND (status = 'leased' OR (status = 'executing' AND (NOT proceed_on_unknown
                             OR lease_expires_at_ms > qinglong.db_now_ms())))
ORDER BY dispatch_id
"""
"""The rows holding TARGET on the database's clock (decision 0051's reading)."""


async def _live_holders(pg: stores.Harness) -> list[str]:
    """The dispatch ids of `_LIVE_HOLDERS`."""
    return [r["dispatch_id"] for r in await pg.raw(_LIVE_HOLDERS)]


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the database's clock must see these leases as the test means them."""
    return ManualClock(int(time.time() * 1000))


async def _snapshot(pg: stores.Harness, dispatch_id: str) -> tuple[Any, ...]:
    """The execution row and its count of ledger lines: what a refused write must not move."""
    (row,) = await pg.raw(
        "SELECT * FROM qinglong.approved_action_dispatch_executions "
        f"WHERE dispatch_id = '{dispatch_id}'"
    )
    events = await pg.scalar(
        f"SELECT count(*) FROM qinglong.execution_events WHERE dispatch_id = '{dispatch_id}'"
    )
    return row, events


async def _recovery_required_and_due(
    pg: stores.Harness, now: ManualClock
) -> tuple[records.ExecutionIdentity, int, str]:
    """A (proceed) started on TARGET whose lease ran out on the database's clock, and B due on
    TARGET: A's identity, the lagging clock its holder renews with, and B's dispatch id."""
    owner = await pg.owner()
    await owner.set_policy(
        approval_policies.NewPolicy(
            name="on-unknown", action_type=TARGET_TYPE, proceed_on_unknown=True
        )
    )
    first = await submit_windowed(pg, now, "act-1", TARGET)
    now.ms = started_ms = int(time.time() * 1000)  # the short lease starts live
    dispatch, identity = await claim_and_start(pg.store, now, lease_ms=SHORT_LEASE_MS)
    assert dispatch.dispatch_id == first
    await anyio.sleep(SHORT_LEASE_MS / 1000 + 0.2)
    now.ms = int(time.time() * 1000)
    assert now.ms > identity.lease_expires_at_ms > started_ms
    second = await submit_windowed(pg, now, "act-2", TARGET)
    assert await _live_holders(pg) == []  # A holds nothing now: B may be leased
    return identity, started_ms, second


def _held(store: ports.Store, monkeypatch: pytest.MonkeyPatch) -> tuple[anyio.Event, anyio.Event]:
    """Hold `store`'s next write transaction open once its work is done (every write made,
    every lock taken, nothing committed) until `release` is set; later ones pass through."""
    assert isinstance(store, postgres_store.PostgresStore)
    holding, release = anyio.Event(), anyio.Event()
    transaction = store.db.transaction

    async def held(work: Any, **kwargs: Any) -> Any:
        if release.is_set():
            return await transaction(work, **kwargs)

        async def body(q: Any) -> Any:
            result = await work(q)
            holding.set()
            await release.wait()
            return result

        return await transaction(body, **kwargs)

    monkeypatch.setattr(store.db, "transaction", held)
    return holding, release


async def _waits_on_the_target_lock(pg: stores.Harness, rival_done: anyio.Event) -> bool:
    """True once a runtime session waits on TARGET's lock; False if the rival finished
    without ever waiting (bounded: a test never hangs here)."""
    with anyio.fail_after(WAIT_S):
        while not rival_done.is_set():
            if int(await pg.scalar(_WAITERS)) > 0:
                return True
            await anyio.sleep(0.02)
    return False


async def _race(
    pg: stores.Harness,
    first: Callable[[], Awaitable[Any]],
    rival: Callable[[], Awaitable[Any]],
    holding: anyio.Event,
    release: anyio.Event,
    *,
    meanwhile: Callable[[], Awaitable[None]] | None = None,
) -> tuple[Any, Any, bool]:
    """Run `first` (its transaction held by `_held`), then `rival` while it is held; release
    the first once the rival waits on the target's lock (or has finished). The first's result,
    the rival's result or error, and whether the rival waited on the lock."""
    results: dict[str, Any] = {}
    rival_done = anyio.Event()

    async def run_first() -> None:
        results["first"] = await first()

    async def run_rival() -> None:
        try:
            results["rival"] = await rival()
        except errors.StoreError as exc:
            results["rival"] = exc
        finally:
            rival_done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_first)
        try:  # the held body is shielded: only `release` ends it, whatever fails here
            with anyio.fail_after(WAIT_S):
                await holding.wait()
            if meanwhile is not None:
                await meanwhile()
            tg.start_soon(run_rival)
            waited = await _waits_on_the_target_lock(pg, rival_done)
            assert "first" not in results  # still held: the rival decided nothing yet
        finally:
            release.set()
    return results["first"], results["rival"], waited


def _renewal(
    holder: ports.Store, identity: records.ExecutionIdentity, lagging_ms: int
) -> Callable[[], Awaitable[records.Renewal]]:
    """A's holder renewing on its lagging clock: the proceeding row's update that the trigger
    checks against every other holder of TARGET."""

    async def renew() -> records.Renewal:
        return await holder.renew(identity.as_lease(), now_ms=lagging_ms, lease_ms=LONG_LEASE_MS)

    return renew


def _sqlstate(outcome: Any) -> str | None:
    """The SQLSTATE a refused store call met (the store types it; the driver's is its cause)."""
    if not isinstance(outcome, errors.TransitionRefused):
        return None
    cause = outcome.__cause__
    return str(cause.sqlstate) if isinstance(cause, asyncpg.PostgresError) else None


async def test_a_lease_waits_for_a_proceeding_renewal_then_is_refused(
    pg: stores.Harness, now: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    identity, lagging_ms, second = await _recovery_required_and_due(pg, now)
    first_id = identity.dispatch_id
    holder, claimer = pg.store, await pg.open_another()
    before = await _snapshot(pg, second)
    holding, release = _held(holder, monkeypatch)

    page: list[records.ClaimBatch] = []

    async def page_claim() -> None:
        # The daemon's page claim tries the same lock, and skips B rather than wait.
        with anyio.fail_after(3):  # below the store's 5 s lock_timeout
            page.append(
                await claimer.claim_due(now_ms=now.ms, owner="w2", limit=8, lease_ms=30_000)
            )

    async def claim_by_id() -> records.Claim:
        return await claimer.claim(
            second, now_ms=now.ms, owner="w2", token=ids.new_lease_token(), lease_ms=30_000
        )

    renewal, claimed, waited = await _race(
        pg,
        _renewal(holder, identity, lagging_ms),
        claim_by_id,
        holding,
        release,
        meanwhile=page_claim,
    )

    assert renewal.outcome is records.Outcome.RENEWED
    assert await _live_holders(pg) == [first_id], "not exactly one row holds the target"
    assert _sqlstate(claimed) == "QLH01", f"the claim of B was not refused: {claimed!r}"
    assert await _snapshot(pg, second) == before
    assert waited, "the claim of B never waited on the target's lock"
    assert [batch.claimed for batch in page] == [()]


async def test_a_proceeding_renewal_waits_for_a_lease_then_is_refused(
    pg: stores.Harness, now: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    identity, lagging_ms, second = await _recovery_required_and_due(pg, now)
    first_id = identity.dispatch_id
    claimer, holder = pg.store, await pg.open_another()
    before = await _snapshot(pg, first_id)
    holding, release = _held(claimer, monkeypatch)

    async def page_claim() -> records.ClaimBatch:
        return await claimer.claim_due(now_ms=now.ms, owner="w2", limit=8, lease_ms=30_000)

    batch, renewal, waited = await _race(
        pg, page_claim, _renewal(holder, identity, lagging_ms), holding, release
    )

    assert [c.dispatch_id for c in batch.claimed] == [second]
    assert await _live_holders(pg) == [second], "not exactly one row holds the target"
    assert _sqlstate(renewal) == "QLH01", f"A's renewal was not refused: {renewal!r}"
    assert await _snapshot(pg, first_id) == before
    assert waited, "A's renewal never waited on the target's lock"
