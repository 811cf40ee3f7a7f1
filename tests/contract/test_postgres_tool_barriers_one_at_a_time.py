"""PostgreSQL: the tool start barriers of one process run one at a time.

Concurrent SERIALIZABLE barriers touch the same pages, so PostgreSQL would fail one of two
that overlap and rerun it whole (`PostgresStore.barrier_transaction`). One store therefore
waits for its own barrier in flight; what each barrier commits is the contract suite's
(`test_tool_barrier.py`, both dialects), and two stores that race for one start are too.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.postgres import store as postgres_store
from tests.support import repositories, stores, tools
from tests.support.clock import ManualClock

pytestmark = pytest.mark.postgres

STARTS = 6


async def test_concurrent_starts_of_one_store_run_one_barrier_at_a_time_and_none_reruns(
    pg: stores.Harness, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = []
    for n in range(STARTS):
        run = await tools.live_run(pg, clock, project=f"proj-{n}")
        commands.append((await tools.started_tool(pg, clock, run)).command())
    before = await tools.fact_counts(pg)
    store = pg.store
    assert isinstance(store, postgres_store.PostgresStore)
    transaction = store.db.transaction
    bodies = {"in_flight": 0, "most": 0, "runs": 0}

    async def watched(work: Any, **kwargs: Any) -> Any:
        async def body(q: Any) -> Any:
            # Every attempt runs the body again: a rerun would count here.
            bodies["runs"] += 1
            bodies["in_flight"] += 1
            bodies["most"] = max(bodies["most"], bodies["in_flight"])
            try:
                await anyio.sleep(0.01)  # let any other barrier of this store begin meanwhile
                return await work(q)
            finally:
                bodies["in_flight"] -= 1

        return await transaction(body, **kwargs)

    monkeypatch.setattr(store.db, "transaction", watched)
    results: list[ports.StartBarrierResult] = []

    async def prepare(command: Any) -> None:
        results.append(await repositories.steps(store).prepare(command))

    async with anyio.create_task_group() as tg:
        for command in commands:
            tg.start_soon(prepare, command)
    assert [r.outcome for r in results] == [ports.StartOutcome.CREATED] * STARTS
    assert bodies == {"in_flight": 0, "most": 1, "runs": STARTS}
    after = await tools.fact_counts(pg)
    assert after["tool_execution_start_barriers"] - before["tool_execution_start_barriers"] == (
        STARTS
    )
    assert after["step_run_mutations"] - before["step_run_mutations"] == STARTS
