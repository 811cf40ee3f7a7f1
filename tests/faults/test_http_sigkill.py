"""SIGKILL between send and completion: each key executed once, settled by the receiver's record;
and under kills no two effects on one target (a receiver) overlap: the next starts only once the
last is settled."""

from __future__ import annotations

import base64
import contextlib
import functools
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from qinglong_dispatcher.domain.states import ExecutionStatus
from tests.support import effect_crash, receiver_client, stores, targets
from tests.support.daemon import free_port, ready, wait_until
from tests.support.receiver_client import Receiver, receivers

pytestmark = pytest.mark.slow

ACTION = "http.request"
KILLS = 20
STALL_S = 3.0
"""The receiver's pause after it executed and stored, before it answers: past the client's
total timeout, so the only way the dispatcher completes such a send is not to."""
FRESH_S = 0.7
"""An effect younger than this is still awaited by its sender (its total timeout is 1.2 s)."""
REPLICAS = 3
REPLICA_DISPATCHES = 40
TARGETS = 8
"""The receivers (targets) the replicas' dispatches are spread over: one change at a time each."""
ENV = {
    # Short leases, so that killed executions are recovery_required soon.
    "QINGLONG_LEASE_SECONDS": "2",
    "QINGLONG_EXECUTE_TIMEOUT_SECONDS": "1.5",
    # One dispatch per claim: each victim holds exactly the dispatch the test just seeded.
    "QINGLONG_PAGE_SIZE": "1",
}


def _plan(ref: str, receiver: str) -> dict[str, object]:
    body = f'{{"order":"{ref}"}}'.encode()
    return {
        "schemaVersion": 1,
        "actionRef": ref,
        "projectId": "p1",
        "receiver": receiver,
        "method": "POST",
        "path": "/effects/orders",
        "query": [],
        "headers": [],
        "body": base64.b64encode(body).decode("ascii"),
        "contentType": "application/json",
    }


def _executed(receiver: Receiver, key: str) -> bool:
    return receiver.executed(key) == 1


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    with receivers(tmp_path) as make:
        yield make()


@contextlib.asynccontextmanager
async def _target(
    dialect: str, tmp_path: Path, receiver: Receiver, names: list[str], **extra: str
) -> AsyncIterator[effect_crash.Target]:
    receivers_file = receiver_client.deduping_receivers_file(
        tmp_path, receiver, connect_s=0.5, read_s=1.2, names=names
    )
    env = {**ENV, **extra, "QINGLONG_RECEIVERS_FILE": str(receivers_file)}
    async with effect_crash.target(dialect, tmp_path, env) as t:
        yield t


@pytest.mark.parametrize("dialect", stores.DIALECTS)
async def test_a_sigkill_between_send_and_completion_is_settled_once_by_the_receivers_record(
    tmp_path: Path, receiver: Receiver, dialect: str
) -> None:
    # A receiver per kill: each killed send holds its target until recovery settles it.
    names = [f"orders-{i}" for i in range(KILLS)]
    async with _target(dialect, tmp_path, receiver, names) as t:
        ids = []
        for i in range(KILLS):
            dispatch_id = await t.seed(ACTION, _plan(f"kill-{i}", names[i]))
            ids.append(dispatch_id)
            if i % 2 == 0:
                # The real CLI, killed while the receiver holds back the answer of an effect
                # it already executed and stored.
                receiver.set_fault("stall", seconds=STALL_S)
                victim = t.start(effect_crash.tick_argv())
                await effect_crash.kill_when(
                    victim,
                    functools.partial(_executed, receiver, dispatch_id),
                    why="the receiver executed",
                )
            else:
                # The handler's execute returned (the 201 in hand), then the process died.
                victim = t.start(effect_crash.crash_argv(ACTION, "after_execute"))
                assert await effect_crash.reap(victim) == -signal.SIGKILL, t.log()
                assert receiver.executed(dispatch_id) == 1
            row = await t.store.get_execution(dispatch_id)
            assert row is not None
            assert row.status is ExecutionStatus.EXECUTING  # the kill landed in the window

        outcomes = await effect_crash.settle(t, ids)
        settled = effect_crash.Outcome(ExecutionStatus.SUCCEEDED, "evidence", None, 1)
        assert outcomes == dict.fromkeys(ids, settled)
        assert [receiver.executed(d) for d in ids] == [1] * KILLS
        assert sorted(e["key"] for e in receiver.effects()) == sorted(ids)


async def _kill_replicas(t: effect_crash.Target, receiver: Receiver) -> list[str]:
    """Run replicas until KILLS of them died waiting for an executed send; the dispatch ids of
    those kills. Every replica started here is reaped before this returns."""
    assert t.database is not None
    sql = (
        "SELECT dispatch_id, lease_owner FROM qinglong.approved_action_dispatch_executions "
        "WHERE status = 'executing'"
    )
    live: dict[str, subprocess.Popen[bytes]] = {}
    listeners: dict[str, int] = {}
    started = 0

    def start(slot: int) -> None:
        nonlocal started
        started += 1
        owner = f"replica-{slot}-{started}"
        listeners[owner] = free_port()
        live[owner] = t.start(
            effect_crash.cli_argv("run"),
            QINGLONG_OWNER_ID=owner,
            QINGLONG_CADENCE_SECONDS="0.05",
            QINGLONG_METRICS_PORT=str(listeners[owner]),
        )

    landed: list[str] = []
    try:
        for slot in range(REPLICAS):
            start(slot)
        deadline = time.monotonic() + 45
        while len(landed) < KILLS:
            assert time.monotonic() < deadline, f"only {len(landed)} kills landed"
            for owner, process in live.items():
                assert process.poll() is None, f"{owner} died by itself"
            executed = {e["key"]: e["executed_at"] for e in receiver.effects()}
            for row in await stores.raw(t.database, sql):
                if len(landed) == KILLS:  # one pass may find several replicas to kill
                    break
                owner, key = row["lease_owner"], row["dispatch_id"]
                if owner in live and time.time() - executed.get(key, 0.0) < FRESH_S:
                    process = live.pop(owner)
                    process.kill()
                    assert await effect_crash.reap(process) == -signal.SIGKILL
                    landed.append(key)
                    start(int(owner.split("-")[1]))
            await anyio.sleep(0.01)
    finally:
        for owner, process in live.items():
            # A replica just started has no signal handler yet: stop it once it is ready.
            port = listeners[owner]
            with contextlib.suppress(AssertionError):
                await anyio.to_thread.run_sync(wait_until, functools.partial(ready, port), 15)
            process.send_signal(signal.SIGTERM)
        codes = [await effect_crash.reap(p) for p in live.values()]
    assert codes == [0] * REPLICAS
    return landed


@pytest.mark.postgres
async def test_replicas_killed_while_their_sends_stall_leave_each_key_executed_once_and_settled(
    tmp_path: Path, receiver: Receiver
) -> None:
    names = [f"orders-{i}" for i in range(TARGETS)]
    # The reconciler settles a killed send by the receiver's record soon, freeing its target.
    async with _target(
        "postgres", tmp_path, receiver, names, QINGLONG_RECONCILE_SECONDS="0.5"
    ) as t:
        ids = [
            await t.seed(ACTION, _plan(f"replica-{i}", names[i % TARGETS]))
            for i in range(REPLICA_DISPATCHES)
        ]
        # Every send stalls past its total timeout: a replica not killed in time ends it
        # uncertain, which recovery settles the same way.
        receiver.set_fault("stall", count=10_000, seconds=STALL_S)
        landed = await _kill_replicas(t, receiver)
        receiver.set_fault("none")

        outcomes = await effect_crash.settle(t, ids)
        assert len(set(landed)) == KILLS
        for dispatch_id, outcome in outcomes.items():
            assert (outcome.status, outcome.starts) == (ExecutionStatus.SUCCEEDED, 1)
            assert receiver.executed(dispatch_id) == 1
            if dispatch_id in landed:
                assert outcome.resolution == "evidence"
        assert sorted(e["key"] for e in receiver.effects()) == sorted(ids)
        # One change at a time per receiver, kills or not: each dispatch's window from its
        # start barrier to its settlement (the ledger) is clear of the others' on its target,
        # and the receiver saw the effects in that order.
        executed = {e["key"]: e["executed_at"] for e in receiver.effects()}
        for n, name in enumerate(names):
            on_target = ids[n::TARGETS]
            windows = await targets.effect_windows(t.store, on_target)
            assert len(windows) == len(on_target)
            assert targets.overlaps(windows) == [], name
            by_window = sorted(on_target, key=lambda d: windows[d][0])
            assert sorted(on_target, key=lambda d: executed[d]) == by_window, name
