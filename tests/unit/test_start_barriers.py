"""How `StartBarriers` groups the start barriers of concurrent items (the store answers are
scripted here; `tests/contract/test_start_barriers_together.py` runs real stores)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import anyio
import anyio.lowlevel

from qinglong_dispatcher import ports
from qinglong_dispatcher.dispatching import start_barriers
from qinglong_dispatcher.domain import errors, records
from qinglong_dispatcher.domain.records import Outcome
from tests.support.clock import ManualClock

LEASE_MS = 30_000


class Starts:
    """Answers `start` as a store would for leases it holds; records each call's dispatch ids."""

    def __init__(self, *, fail_first: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail_first = fail_first

    async def start(
        self, requests: Sequence[records.StartRequest], *, now_ms: int, lease_ms: int
    ) -> list[records.StartResult]:
        self.calls.append([r.lease.dispatch_id for r in requests])
        await anyio.lowlevel.checkpoint()
        if self.fail_first and len(self.calls) == 1:
            raise errors.StoreError("the answer was lost", code="connection_lost")
        outcome = Outcome.STARTED if len(self.calls) == 1 or not self.fail_first else None
        return [
            records.StartResult(
                outcome=outcome or Outcome.REPLAYED,
                dispatch_id=r.lease.dispatch_id,
                identity=records.ExecutionIdentity(
                    dispatch_id=r.lease.dispatch_id,
                    attempt=r.lease.attempt,
                    owner=r.lease.owner,
                    token=r.lease.token,
                    started_at_ms=now_ms,
                    version=r.lease.version + 1,
                    lease_expires_at_ms=now_ms + lease_ms,
                ),
            )
            for r in requests
        ]


def _item(n: int, clock: ManualClock) -> tuple[records.Lease, records.Dispatch]:
    dispatch_id = f"d-{n}"
    lease = records.Lease(
        dispatch_id=dispatch_id,
        attempt=1,
        owner="w1",
        token=f"t-{n}",
        version=1,
        expires_at_ms=clock.now_ms() + LEASE_MS,
    )
    dispatch = records.Dispatch(
        dispatch_id=dispatch_id,
        approval_request_id=f"a-{n}",
        project_id="proj-1",
        action_type="test.effect",
        action_ref=f"ref-{n}",
        action_digest="0" * 64,
        approved_by="bob",
        created_at_ms=clock.now_ms(),
    )
    return lease, dispatch


def _barriers(store: Starts, clock: ManualClock, **kw: Any) -> start_barriers.StartBarriers:
    return start_barriers.StartBarriers(
        cast(ports.ExecutionStore, store), clock, lease_ms=LEASE_MS, **kw
    )


async def _carry(
    barriers: start_barriers.StartBarriers,
    item: tuple[records.Lease, records.Dispatch],
    got: dict[str, object],
    *,
    ready: bool = True,
) -> None:
    barriers.arrive()
    await anyio.sleep(0.001)  # inspecting
    if not ready:
        barriers.leave()
        return
    got[item[0].dispatch_id] = await barriers.begin(*item)


async def test_items_that_reach_their_barriers_together_commit_in_one_call() -> None:
    clock, store = ManualClock(), Starts()
    barriers = _barriers(store, clock, max_wait_s=5.0)
    got: dict[str, object] = {}
    with anyio.fail_after(2):  # no one waits for the 5 s bound: every item came in
        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(_carry, barriers, _item(n, clock), got)
            tg.start_soon(lambda: _carry(barriers, _item(9, clock), got, ready=False))
    assert [sorted(call) for call in store.calls] == [["d-0", "d-1", "d-2"]]
    assert all(isinstance(v, records.ExecutionIdentity) for v in got.values())
    assert sorted(got) == ["d-0", "d-1", "d-2"]


async def test_a_lone_item_does_not_wait() -> None:
    clock, store = ManualClock(), Starts()
    barriers = _barriers(store, clock, max_wait_s=5.0)
    got: dict[str, object] = {}
    with anyio.fail_after(1):
        await _carry(barriers, _item(1, clock), got)
    assert store.calls == [["d-1"]]


async def test_a_slow_neighbour_delays_a_barrier_by_at_most_the_bound() -> None:
    clock, store = ManualClock(), Starts()
    barriers = _barriers(store, clock, max_wait_s=0.05)
    barriers.arrive()  # an item that inspects for ever
    got: dict[str, object] = {}
    with anyio.fail_after(2):
        await _carry(barriers, _item(1, clock), got)
    assert store.calls == [["d-1"]]


async def test_a_lost_answer_makes_each_item_replay_its_own_start() -> None:
    clock, store = ManualClock(), Starts(fail_first=True)
    barriers = _barriers(store, clock, max_wait_s=5.0)
    got: dict[str, object] = {}
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for n in range(2):
                tg.start_soon(_carry, barriers, _item(n, clock), got)
    assert sorted(store.calls[0]) == ["d-0", "d-1"]
    assert sorted(map(tuple, store.calls[1:])) == [("d-0",), ("d-1",)]
    assert all(isinstance(v, records.ExecutionIdentity) for v in got.values())


async def test_an_item_cancelled_while_its_group_waits_is_not_started() -> None:
    clock, store = ManualClock(), Starts()
    barriers = _barriers(store, clock, max_wait_s=0.2)
    got: dict[str, object] = {}
    barriers.arrive()  # keeps the group open until the bound
    async with anyio.create_task_group() as tg:
        tg.start_soon(_carry, barriers, _item(1, clock), got)
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as inner:
                inner.start_soon(_carry, barriers, _item(2, clock), got)
                await anyio.sleep(0.05)
                scope.cancel()
    assert store.calls == [["d-1"]]
    assert "d-2" not in got
