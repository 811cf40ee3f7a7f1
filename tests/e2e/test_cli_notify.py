"""`notify add|list|test|remove` through the real console script on both profiles, and the
daemon's deliverer against a real receiver that verifies every signature with the
`standardwebhooks` package: killed (SIGKILL) mid-delivery, the next daemon delivers again
what was not recorded, and nothing is lost (a receiver deduplicates by `webhook-id`)."""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from tests.e2e.test_cli_policies import PLAN, Setup, _one_line, _sqlite_rows
from tests.support import daemon, stores, webhook_receiver
from tests.support.cli import json_out, run_cli


@pytest.fixture(params=["edge", pytest.param("cluster", marks=pytest.mark.postgres)])
async def setup(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Setup]:
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    if request.param == "edge":
        assert run_cli("migrate", cwd=tmp_path).returncode == 0
        yield Setup(tmp_path, (), (), (), {}, _sqlite_rows(tmp_path / "var" / "qinglong.db"))
        return
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
async def receiver(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[webhook_receiver.Receiver]:
    async with webhook_receiver.serving() as r:
        monkeypatch.setenv("QL_TEST_WHSEC", r.secret)
        yield r


@pytest.mark.slow
async def test_add_list_test_remove_round_trip(
    setup: Setup, receiver: webhook_receiver.Receiver
) -> None:
    added = json_out(
        await setup.cli(
            setup.owner, "notify", "add", "ops", "--url", receiver.url,
            "--secret-ref", "env:QL_TEST_WHSEC", "--kind", "approval.requested",
            "--kind", "dispatch.failed", "--kind", "target.held", "--project", "p1",
            "--target-prefix", "edge-", "--json",
        )
    )  # fmt: skip
    assert added["kinds"] == ["approval.requested", "dispatch.failed", "target.held"]
    assert (added["project_id"], added["format"]) == ("p1", "raw")
    assert added["target_prefix"] == "edge-"
    listed = await setup.cli(setup.owner, "notify", "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith(f"ops  {receiver.url}  secret=env:QL_TEST_WHSEC")
    sent = json_out(await setup.cli(setup.owner, "notify", "test", "ops", "--json"))
    assert (sent["status"], sent["delivered"]) == (204, True)
    assert receiver.ids == [sent["webhook_id"]]
    assert receiver.accepted[0]["body"]["data"]["sample"] is True
    # Nothing of the test is recorded: the outbox holds only what the database wrote.
    assert await setup.count("{s}notification_attempts") == 0
    removed = await setup.cli(setup.owner, "notify", "remove", "ops")
    assert (removed.returncode, removed.stdout) == (0, "removed ops\n")
    assert json_out(await setup.cli(setup.owner, "notify", "list", "--json")) == []
    assert "no subscription ops" in _one_line(
        await setup.cli(setup.owner, "notify", "remove", "ops"), 1
    )


BAD_INPUT = [
    (("--url", "ftp://x", "--secret-ref", "env:X"), "http:// or https://"),
    (("--url", "http://127.0.0.1:9/h", "--secret-ref", "whsec_abc"), "secret reference"),
    (("--url", "http://127.0.0.1:9/h", "--secret-ref", "env:X", "--kind", "x.y"), "unknown kind"),
    (
        ("--url", "http://127.0.0.1:9/h", "--secret-ref", "env:X", "--target-prefix", "edge-*"),
        "target prefix",
    ),
]


@pytest.mark.slow
async def test_bad_input_or_a_login_not_the_owner_is_one_line_and_writes_nothing(
    setup: Setup,
) -> None:
    for args, message in BAD_INPUT:
        line = _one_line(await setup.cli(setup.owner, "notify", "add", "ops", *args), 2)
        assert message in line, (args, line)
    assert "argument" in _one_line(
        await setup.cli(
            setup.owner, "notify", "add", "Bad!", "--url", "http://h/", "--secret-ref", "env:X"
        ),
        2,
    )
    if setup.runtime:
        refused = _one_line(
            await setup.cli(
                setup.runtime, "notify", "add", "ops", "--url", "http://127.0.0.1:9/h",
                "--secret-ref", "env:X",
            ),
            1,
        )  # fmt: skip
        assert "only the schema's owner writes notification subscriptions" in refused
    assert await setup.count("{s}notification_subscriptions") == 0


@pytest.mark.slow
async def test_a_daemon_killed_mid_delivery_loses_nothing(
    setup: Setup, receiver: webhook_receiver.Receiver
) -> None:
    added = await setup.cli(
        setup.owner, "notify", "add", "ops", "--url", receiver.url,
        "--secret-ref", "env:QL_TEST_WHSEC",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    # The first delivery hangs at the receiver until the daemon is killed.
    receiver.hang_first = True
    for i in range(3):
        plan = {**PLAN, "actionRef": f"act-kill-{i}", "taskId": f"t{i}"}
        (setup.cwd / f"plan{i}.json").write_text(json.dumps(plan))
        made = await setup.cli(
            setup.requester, "approval", "create", "--action", "run.create",
            "--plan", f"plan{i}.json", "--requested-by", "alice",
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
    env = {**setup.daemon_env, "QINGLONG_OWNER_ID": "node-a", "QINGLONG_CADENCE_SECONDS": "0.1"}
    env["QL_TEST_WHSEC"] = receiver.secret
    with daemon.running(setup.cwd, env, name="first") as first:
        with anyio.fail_after(30):
            await receiver.hung.wait()
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    assert receiver.accepted == []
    with daemon.running(setup.cwd, env, name="second") as second:

        def all_three() -> bool:
            return len(webhook_receiver.unique(receiver)) == 3

        await anyio.to_thread.run_sync(lambda: daemon.wait_until(all_three, timeout=30))
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=30) == 0, second.stderr
    told = await setup.rows("SELECT id FROM {s}notification_events ORDER BY id")
    assert set(webhook_receiver.unique(receiver)) == {f"qle_{e['id']}" for e in told}
    assert receiver.refused == []
    pending = await setup.rows(
        "SELECT count(*) AS n FROM {s}notification_deliveries WHERE status <> 'delivered'"
    )
    assert pending[0]["n"] == 0
