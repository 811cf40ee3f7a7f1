"""`contract.PlanReader` keeps what it resolved: a dispatch's `inspect` and `execute`, and the
items of a prefetched page, read each plan once. Plans are immutable rows, so nothing it keeps
can go stale; what does not resolve is never kept. Both dialects, real stores; the reads are
counted by a pass-through around the store."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from qinglong_dispatcher import api, ports
from qinglong_dispatcher.actions import builtin, contract
from qinglong_dispatcher.actions.http_request import handler as http_handler
from qinglong_dispatcher.actions.run_create import plan as run_create_plan
from qinglong_dispatcher.actions.tool_invoke import handler as tool_handler
from qinglong_dispatcher.actions.tool_invoke import plan as tool_invoke_plan
from qinglong_dispatcher.domain import errors, records
from tests.support import stores
from tests.support.actions import make_api
from tests.support.clock import ManualClock


class CountedPlans:
    """The real store's plan reads, counted (everything else passes through)."""

    def __init__(self, store: ports.Store) -> None:
        self._store = store
        self.plan_digests = store.plan_digests
        self.one = 0
        self.pages: list[int] = []

    async def get_plan(self, project_id: str, action_ref: str) -> ports.StoredPlan | None:
        self.one += 1
        return await self._store.get_plan(project_id, action_ref)

    async def get_plans(self, keys: Sequence[tuple[str, str]]) -> list[ports.StoredPlan]:
        self.pages.append(len(keys))
        return await self._store.get_plans(keys)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def _dispatches(
    harness: stores.Harness, clock: ManualClock, count: int, *, project: str = "p"
) -> list[records.Dispatch]:
    submitted = [
        api.run_create_plan({"projectId": project, "taskId": f"t-{n}", "taskRevision": 1})
        for n in range(count)
    ]
    consumed = await make_api(harness.approver_store, clock).submit(
        submitted, requested_by="tester", approved_by="approver"
    )
    found = [await harness.store.get_dispatch(c.dispatch_id) for c in consumed]
    assert all(d is not None for d in found)
    return [d for d in found if d is not None]


def _with(dispatch: records.Dispatch, **changes: Any) -> records.Dispatch:
    return dataclasses.replace(dispatch, **changes)


def _reader(harness: stores.Harness) -> tuple[contract.PlanReader, CountedPlans]:
    counted = CountedPlans(harness.store)
    return contract.PlanReader(counted, builtin.PLAN_MODELS), counted


async def test_inspect_and_execute_of_a_dispatch_read_its_plan_once(
    harness: stores.Harness, clock: ManualClock
) -> None:
    (dispatch,) = await _dispatches(harness, clock, 1)
    reader, counted = _reader(harness)
    plan, digest = await reader.resolve(dispatch, run_create_plan.RunCreatePlan)
    again = await reader.approved(dispatch, run_create_plan.RunCreatePlan)
    assert again == plan
    assert digest == dispatch.action_digest
    assert (counted.one, counted.pages) == (1, [])


async def test_a_prefetched_page_is_one_read_and_its_items_read_nothing_more(
    harness: stores.Harness, clock: ManualClock
) -> None:
    page = await _dispatches(harness, clock, 5)
    reader, counted = _reader(harness)
    await reader.prefetch(page)
    await reader.prefetch(page)  # all kept: no second read
    for dispatch in page:
        plan, digest = await reader.resolve(dispatch, run_create_plan.RunCreatePlan)
        assert (plan.project_id, plan.action_ref) == (dispatch.project_id, dispatch.action_ref)
        assert digest == dispatch.action_digest
    assert (counted.one, counted.pages) == (0, [5])


async def test_what_does_not_resolve_is_read_again_and_refused_again(
    harness: stores.Harness, clock: ManualClock
) -> None:
    (dispatch,) = await _dispatches(harness, clock, 1)
    reader, counted = _reader(harness)
    # Another action type than the plan's: refused at every look, and never kept.
    other_type = _with(dispatch, action_type=http_handler.ACTION_TYPE)
    await reader.prefetch([other_type])
    for _ in range(2):
        with pytest.raises(errors.PlanInvalid) as refused:
            await reader.resolve(other_type, run_create_plan.RunCreatePlan)
        assert refused.value.code == "plan_type_mismatch"
    assert (counted.one, counted.pages) == (2, [1])
    # Another approved digest than the one the plan was approved under: a different key.
    drifted = _with(dispatch, action_digest="0" * 64)
    with pytest.raises(errors.PlanInvalid) as drift:
        await reader.approved(drifted, run_create_plan.RunCreatePlan)
    assert drift.value.code == "digest_drift"
    assert counted.one == 3
    # The right model asked of a kept plan of another model: refused without a read.
    await reader.resolve(dispatch, run_create_plan.RunCreatePlan)
    with pytest.raises(errors.PlanInvalid) as model:
        await reader.resolve(dispatch, tool_invoke_plan.ToolInvocationPlan)
    assert model.value.code == "plan_type_mismatch"
    assert counted.one == 4


async def test_the_reader_keeps_only_the_latest_plans(
    harness: stores.Harness, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(contract, "PLAN_CACHE_SIZE", 3)
    page = await _dispatches(harness, clock, 4)
    reader, counted = _reader(harness)
    for dispatch in page:
        await reader.resolve(dispatch, run_create_plan.RunCreatePlan)
    await reader.resolve(page[-1], run_create_plan.RunCreatePlan)  # kept
    assert counted.one == 4
    await reader.resolve(page[0], run_create_plan.RunCreatePlan)  # the oldest, let go
    assert counted.one == 5


def test_the_per_item_built_ins_prefetch_their_pages() -> None:
    assert issubclass(http_handler.HttpRequestHandler, ports.PrefetchingHandler)
    assert issubclass(tool_handler.ToolInvokeHandler, ports.PrefetchingHandler)
