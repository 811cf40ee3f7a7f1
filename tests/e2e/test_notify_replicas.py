"""Two daemons on one PostgreSQL database, the delivery lease's holder killed (SIGKILL) while a
delivery hangs at a real receiver that verifies every signature with the `standardwebhooks`
package: the other replica takes the lease when it runs out on the database's clock and
delivers every event; nothing is lost, and a duplicate only ever repeats a `webhook-id` with
the same body (a receiver deduplicates by it). Slow: the lease is 15 s."""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from tests.e2e.test_cli_policies import PLAN, Setup
from tests.support import daemon, stores, webhook_receiver

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

EVENTS = 4


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    async with stores.fresh_database() as database:

        async def rows(sql: str) -> list[dict[str, object]]:
            return await stores.raw(database, sql.replace("{s}", "qinglong."))

        def cluster(url: str) -> tuple[str, ...]:
            return ("--profile", "cluster", "--database", url)

        yield Setup(
            cwd=tmp_path,
            owner=cluster(stores.pg_url(database)),
            requester=cluster(stores.approver_url(database)),
            runtime=cluster(stores.runtime_url(database)),
            daemon_env={
                "QINGLONG_PROFILE": "cluster",
                "QINGLONG_DATABASE_URL": stores.runtime_url(database),
            },
            rows=rows,
        )


@pytest.fixture
async def receiver() -> AsyncIterator[webhook_receiver.Receiver]:
    async with webhook_receiver.serving() as r:
        yield r


async def test_a_replica_killed_mid_delivery_loses_nothing(
    setup: Setup, receiver: webhook_receiver.Receiver
) -> None:
    added = await setup.cli(
        setup.owner, "notify", "add", "ops", "--url", receiver.url,
        "--secret-ref", "env:QL_TEST_WHSEC", "--kind", "approval.requested",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    receiver.hang_first = True
    for i in range(EVENTS):
        plan = {**PLAN, "actionRef": f"act-replica-{i}", "taskId": f"t{i}"}
        (setup.cwd / f"plan{i}.json").write_text(json.dumps(plan))
        made = await setup.cli(
            setup.requester, "approval", "create", "--action", "run.create",
            "--plan", f"plan{i}.json", "--requested-by", "alice",
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
    env = {
        **setup.daemon_env,
        "QINGLONG_CADENCE_SECONDS": "0.1",
        "QINGLONG_METRICS_PORT": "0",
        "QL_TEST_WHSEC": receiver.secret,
    }
    with (
        daemon.running(setup.cwd, {**env, "QINGLONG_OWNER_ID": "node-a"}, name="a") as a,
        daemon.running(setup.cwd, {**env, "QINGLONG_OWNER_ID": "node-b"}, name="b") as b,
    ):
        with anyio.fail_after(30):
            await receiver.hung.wait()
        [lease] = await setup.rows("SELECT owner FROM {s}notification_deliverer")
        holder, other = (a, b) if lease["owner"] == "node-a" else (b, a)
        assert a.poll() is None, a.stderr
        assert b.poll() is None, b.stderr
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        assert receiver.accepted == []  # the hung one was never answered

        def all_told() -> bool:
            return len(webhook_receiver.unique(receiver)) == EVENTS

        await anyio.to_thread.run_sync(lambda: daemon.wait_until(all_told, timeout=60))
        [lease] = await setup.rows("SELECT owner FROM {s}notification_deliverer")
        assert lease["owner"] != ("node-a" if holder is a else "node-b")
        other.send_signal(signal.SIGTERM)
        assert other.wait(timeout=30) == 0
    told = await setup.rows("SELECT id FROM {s}notification_events ORDER BY id")
    assert len(told) == EVENTS
    assert set(webhook_receiver.unique(receiver)) == {f"qle_{e['id']}" for e in told}
    assert receiver.refused == []
    # A duplicate repeats a webhook-id with its body, never a new id for an old event.
    first: dict[str, object] = {}
    for delivery in receiver.accepted:
        assert first.setdefault(delivery["webhook-id"], delivery["body"]) == delivery["body"]
    left = await setup.rows(
        "SELECT count(*) AS n FROM {s}notification_deliveries WHERE status <> 'delivered'"
    )
    assert left[0]["n"] == 0
