"""PostgreSQL: the tool start barrier decides on row locks taken in one order, not on
SERIALIZABLE (docs/decisions/0054).

The barrier locks the Run, then the StepRun, before it reads anything else, so a rival
barrier of the same StepRun waits for the first to commit and then sees everything it
committed: its exact replay is `existing`, any other start a conflict, and neither runs its
transaction twice. Barriers of different StepRuns share no row, so they overlap. What each
barrier commits is the contract suite's (`test_tool_barrier.py`, both dialects).
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
LOCK_WAIT_S = 10.0


def _counted(store: ports.Store, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count each run of a transaction body of `store` (a rerun would count twice)."""
    assert isinstance(store, postgres_store.PostgresStore)
    transaction = store.db.transaction
    bodies = {"in_flight": 0, "most": 0, "runs": 0}

    async def watched(work: Any, **kwargs: Any) -> Any:
        async def body(q: Any) -> Any:
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
    return bodies


async def _until_a_lock_waiter(pg: stores.Harness) -> None:
    """Return once a session of the test database waits on a lock (fail after a while)."""
    waiting = (
        "SELECT count(*) AS n FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    with anyio.fail_after(LOCK_WAIT_S):
        while True:
            if int(await pg.scalar(waiting)) > 0:
                return
            await anyio.sleep(0.02)


@pytest.mark.parametrize("same_command", [True, False], ids=["same_command", "other_start_id"])
async def test_a_rival_barrier_waits_for_the_run_lock_then_sees_the_first_commit(
    pg: stores.Harness, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, same_command: bool
) -> None:
    run = await tools.live_run(pg, clock)
    started = await tools.started_tool(pg, clock, run)
    first_store, rival_store = pg.store, await pg.open_another()
    assert isinstance(first_store, postgres_store.PostgresStore)
    holding, release = anyio.Event(), anyio.Event()
    transaction = first_store.db.transaction

    async def held(work: Any, **kwargs: Any) -> Any:
        async def body(q: Any) -> Any:
            result = await work(q)  # every fact written, the locks held, not committed
            holding.set()
            await release.wait()
            return result

        return await transaction(body, **kwargs)

    monkeypatch.setattr(first_store.db, "transaction", held)
    rival_bodies = _counted(rival_store, monkeypatch)
    results: dict[str, ports.StartBarrierResult] = {}

    async def prepare(name: str, store: ports.Store, key: str | None) -> None:
        results[name] = await repositories.steps(store).prepare(started.command(key=key))

    async with anyio.create_task_group() as tg:
        tg.start_soon(prepare, "first", first_store, None)
        await holding.wait()
        tg.start_soon(prepare, "rival", rival_store, None if same_command else "rival")
        await _until_a_lock_waiter(pg)  # the rival waits on the Run's row lock
        assert "rival" not in results
        release.set()
    assert results["first"].outcome is ports.StartOutcome.CREATED
    if same_command:
        assert results["rival"].outcome is ports.StartOutcome.EXISTING
        assert results["rival"].barrier == results["first"].barrier
    else:
        assert results["rival"].outcome is ports.StartOutcome.CONFLICT
        assert results["rival"].reason == "identity_in_use"
    assert rival_bodies["runs"] == 1  # decided once, after the wait: nothing reran
    counts = await tools.fact_counts(pg)
    assert counts["tool_execution_start_barriers"] == 1
    assert counts["step_run_mutations"] == 1


async def test_barriers_of_different_step_runs_overlap_and_none_reruns(
    pg: stores.Harness, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = []
    for n in range(STARTS):
        run = await tools.live_run(pg, clock, project=f"proj-{n}")
        commands.append((await tools.started_tool(pg, clock, run)).command())
    before = await tools.fact_counts(pg)
    bodies = _counted(pg.store, monkeypatch)
    results: list[ports.StartBarrierResult] = []

    async def prepare(command: Any) -> None:
        results.append(await repositories.steps(pg.store).prepare(command))

    async with anyio.create_task_group() as tg:
        for command in commands:
            tg.start_soon(prepare, command)
    assert [r.outcome for r in results] == [ports.StartOutcome.CREATED] * STARTS
    assert bodies["runs"] == STARTS
    assert bodies["most"] > 1
    after = await tools.fact_counts(pg)
    assert after["tool_execution_start_barriers"] - before["tool_execution_start_barriers"] == (
        STARTS
    )
    assert after["step_run_mutations"] - before["step_run_mutations"] == STARTS
