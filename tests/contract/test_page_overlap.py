"""Pages overlap (`dispatching.page_flow`): a slow item holds its worker, not the next claim.

A real `command.run` (a shell script that waits for a release file the test creates) is
claimed in the first page; the `run.create` items behind it are claimed in later pages and
succeed while the command is still running, on both dialects, with the real system clock and
short leases, renewed while a claim waits in the queue and while an item executes. On
shutdown the flow claims nothing more, gives back what is queued at once, and returns once
what executes has finished; a claim that fails claims no more, and its error is raised once
the items already taken are done.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from qinglong_dispatcher import bootstrap, ports
from qinglong_dispatcher.actions import builtin, contract
from qinglong_dispatcher.actions.command_run import commands, handler, plan
from qinglong_dispatcher.clock import SystemClock
from qinglong_dispatcher.dispatching import dispatcher
from qinglong_dispatcher.domain import approvals, errors, plans, records
from qinglong_dispatcher.domain.states import ExecutionStatus
from tests.support import faults
from tests.support.actions import make_api, submit_runs
from tests.support.stores import Harness

LEASE_MS = 6_000
"""Renewed every 2 s."""
EXECUTE_TIMEOUT_MS = 5_900
SLOW_S = 4.0
"""How long a slow command waits at most for its release file (well inside the execute
timeout: each of its polls starts a `sleep`)."""
WAIT_S = 20.0


@pytest.fixture
def release(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "release"
    yield path
    path.touch()  # never leave a command waiting


def _commands(tmp_path: Path, release: Path, names: list[str]) -> commands.CommandSet:
    # Each waits for the release file (or SLOW_S), after saying it started. One command a
    # slow item: a command is its runs' target, one run at a time.
    script = tmp_path / "slow.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'touch "{tmp_path}/started-$1"\n'
        f"i=0; while [ ! -e {release} ] && [ $i -lt {int(SLOW_S * 20)} ]; do "
        "sleep 0.05; i=$((i+1)); done\n"
    )
    script.chmod(0o755)
    table: dict[str, Any] = {
        name: {
            "executable": str(script),
            "args": [{"pattern": "[a-z0-9-]+"}],
            "timeout_seconds": EXECUTE_TIMEOUT_MS / 1000 - 0.1,
        }
        for name in names
    }
    return commands.parse({"commands": table}, source="test")


def _handlers(
    harness: Harness, clock: SystemClock, config: commands.CommandSet
) -> dict[str, ports.ApprovedActionHandler]:
    built = bootstrap.handlers(harness.store, clock)
    reader = contract.PlanReader(harness.store, {plan.ACTION_TYPE: plan.CommandRunPlan})
    built[plan.ACTION_TYPE] = handler.CommandRunHandler(
        reader, config, clock, environ={"PATH": "/usr/bin:/bin"}
    )
    return built


async def _submit_command(harness: Harness, clock: SystemClock, name: str) -> approvals.Consumed:
    command_plan = plans.parse_plan(
        plan.ACTION_TYPE,
        {
            "schemaVersion": 1,
            "actionRef": f"slow-{name}",
            "projectId": "p1",
            "command": name,
            "args": [name],
        },
        models=builtin.PLAN_MODELS,
    )
    (consumed,) = await make_api(harness.approver_store, clock).submit(
        [command_plan], requested_by="tester", approved_by="approver"
    )
    await anyio.sleep(0.005)  # claimed in submission order (eligible time, then id)
    return consumed


def _dispatcher(
    harness: Harness,
    clock: SystemClock,
    config: commands.CommandSet,
    *,
    page_size: int,
    concurrency: int,
    fault_hook: dispatcher.FaultHook | None = None,
) -> dispatcher.Dispatcher:
    return dispatcher.Dispatcher(
        harness.store,
        _handlers(harness, clock, config),
        clock,
        dispatcher.DispatchConfig(
            owner="w1",
            page_size=page_size,
            lease_ms=LEASE_MS,
            concurrency=concurrency,
            retry_backoff_ms=1000,
            execute_timeout_ms=EXECUTE_TIMEOUT_MS,
        ),
        fault_hook=fault_hook,
    )


async def _status(harness: Harness, dispatch_id: str) -> ExecutionStatus:
    row = await harness.store.get_execution(dispatch_id)
    assert row is not None
    return row.status


async def _until(harness: Harness, ids: list[str], status: ExecutionStatus) -> None:
    deadline = time.monotonic() + WAIT_S
    while [await _status(harness, i) for i in ids] != [status] * len(ids):
        assert time.monotonic() < deadline, f"not all {status.value} after {WAIT_S:g} s"
        await anyio.sleep(0.02)


async def _renewed(harness: Harness, dispatch_id: str, status: ExecutionStatus) -> bool:
    """Whether the lease moved between the line to `status` and the last one."""
    events = await harness.store.execution_events(dispatch_id)
    held = next(e.version for e in events if e.to_status is status)
    return events[-1].version > held + 1


async def test_a_slow_item_does_not_hold_the_next_pages_claim(
    harness: Harness, tmp_path: Path, release: Path
) -> None:
    clock = SystemClock()
    config = _commands(tmp_path, release, ["slow-a"])
    slow = await _submit_command(harness, clock, "slow-a")
    runs = await submit_runs(harness.approver_store, clock, 5)
    # Pages of two: [slow, run 0], [run 1, run 2], [run 3, run 4], then an empty one.
    the_dispatcher = _dispatcher(harness, clock, config, page_size=2, concurrency=2)
    heard: list[tuple[int, float]] = []
    reports: list[dispatcher.BatchReport] = []

    async def dispatch() -> None:
        reports.extend(
            await the_dispatcher.dispatch_pages(
                max_pages=4, on_batch=lambda r, s: heard.append((r.observed, s))
            )
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(dispatch)
        # Every run.create succeeds while the command is still running.
        await _until(harness, [r.dispatch_id for r in runs], ExecutionStatus.SUCCEEDED)
        assert await anyio.Path(tmp_path / "started-slow-a").exists()
        assert not await anyio.Path(release).exists()
        assert await _status(harness, slow.dispatch_id) is ExecutionStatus.EXECUTING
        await anyio.Path(release).touch()

    assert await _status(harness, slow.dispatch_id) is ExecutionStatus.SUCCEEDED
    assert [r.observed for r in reports] == [2, 2, 2, 0]
    assert sum(r.outcomes["succeeded"] for r in reports) == 6
    # The first page was the last to end: the ones after it ended while it waited.
    assert heard[-1][0] == 2
    assert [observed for observed, _ in heard].count(2) == 3
    assert heard[-1][1] == max(seconds for _, seconds in heard)


async def test_shutdown_gives_back_the_queued_claims_and_waits_for_the_executing_items(
    harness: Harness, tmp_path: Path, release: Path
) -> None:
    clock = SystemClock()
    config = _commands(tmp_path, release, ["slow-a", "slow-b", "slow-c"])
    # Page one: [a, run 0] (a takes a worker); page two: [b, c] (b takes the other, c waits
    # in the queue for a worker); page three is never claimed.
    a = await _submit_command(harness, clock, "slow-a")
    (first_run,) = await submit_runs(harness.approver_store, clock, 1, project="p-first")
    b = await _submit_command(harness, clock, "slow-b")
    c = await _submit_command(harness, clock, "slow-c")
    later = await submit_runs(harness.approver_store, clock, 2, project="p-later")
    the_dispatcher = _dispatcher(harness, clock, config, page_size=2, concurrency=2)
    reports: list[dispatcher.BatchReport] = []

    async def dispatch() -> None:
        reports.extend(await the_dispatcher.dispatch_pages(max_pages=8))

    async with anyio.create_task_group() as tg:
        tg.start_soon(dispatch)
        await _until(harness, [a.dispatch_id, b.dispatch_id], ExecutionStatus.EXECUTING)
        # c waits for a worker, its lease renewed (every third of a lease).
        await anyio.sleep(LEASE_MS / 1000 * 0.6)
        assert await _status(harness, c.dispatch_id) is ExecutionStatus.LEASED
        the_dispatcher.drain()
        # Given back at once (pending, eligible now), while a and b still run.
        await _until(harness, [c.dispatch_id], ExecutionStatus.PENDING)
        assert not await anyio.Path(release).exists()
        assert await _status(harness, a.dispatch_id) is ExecutionStatus.EXECUTING
        await anyio.Path(release).touch()

    assert [await _status(harness, x.dispatch_id) for x in (a, first_run, b)] == [
        ExecutionStatus.SUCCEEDED
    ] * 3
    assert not (tmp_path / "started-slow-c").exists()  # never ran
    # Nothing more was claimed after the drain.
    assert [await _status(harness, r.dispatch_id) for r in later] == [ExecutionStatus.PENDING] * 2
    assert len(reports) == 2
    assert reports[1].outcomes["pending"] == 1, reports[1].outcomes
    # The queued claim's lease was renewed while it waited, and the slow items' while they ran.
    assert await _renewed(harness, c.dispatch_id, ExecutionStatus.LEASED)
    assert await _renewed(harness, a.dispatch_id, ExecutionStatus.EXECUTING)
    assert await _renewed(harness, b.dispatch_id, ExecutionStatus.EXECUTING)


async def test_a_failed_claim_claims_no_more_and_raises_once_the_taken_items_are_done(
    harness: Harness, tmp_path: Path, release: Path
) -> None:
    clock = SystemClock()
    config = _commands(tmp_path, release, ["slow-a"])
    slow = await _submit_command(harness, clock, "slow-a")
    runs = await submit_runs(harness.approver_store, clock, 3)
    installed: list[bool] = []

    async def break_claims(point: str, _: records.Dispatch) -> None:
        # While the first page is inspected, before the next claim: every claim from now on
        # fails in the database (a real trigger), the first page's own writes do not.
        if point == "after_claim" and not installed:
            installed.append(True)
            await faults.fail_execution_status(harness, "leased")

    the_dispatcher = _dispatcher(
        harness, clock, config, page_size=2, concurrency=2, fault_hook=break_claims
    )
    failed: list[BaseException] = []

    async def dispatch() -> None:
        try:
            await the_dispatcher.dispatch_pages(max_pages=4)
        except errors.StoreError as exc:
            failed.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(dispatch)
        await _until(harness, [slow.dispatch_id], ExecutionStatus.EXECUTING)
        await anyio.sleep(0.5)  # the second page's claim has failed by now
        assert failed == []  # not raised while the command runs
        await anyio.Path(release).touch()

    assert len(failed) == 1
    # The taken item was carried to its end; the first page's run.create committed with it;
    # nothing of the failed claim was written.
    assert await _status(harness, slow.dispatch_id) is ExecutionStatus.SUCCEEDED
    statuses = [await _status(harness, r.dispatch_id) for r in runs]
    # (Which of the three shared the first page is the claim's order, not the submit's: rows due
    # in the same millisecond are ordered by id.)
    assert sorted(statuses) == sorted([ExecutionStatus.SUCCEEDED] + [ExecutionStatus.PENDING] * 2)
