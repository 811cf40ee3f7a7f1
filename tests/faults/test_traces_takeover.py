"""A dispatch's trace across a SIGKILL and a takeover, exported by real daemons (edge, and cluster
daemons on PostgreSQL) to a real OTLP/HTTP receiver: the killed daemon's claims were children
of the trace each dispatch was submitted under; the survivor's takeover of a claim the dead one
held starts a new trace, linked to that one, never a child of the attempt that died; its fresh
claims join the submitted trace as children; one it had started is settled by evidence under a
new trace linked likewise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from qinglong_dispatcher import clock, ports
from tests.support import crash_actions, otlp_receiver, stores
from tests.support import daemon as daemons
from tests.support.actions import make_api

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
GIVEN = f"00-{TRACE}-{CALLER_SPAN}-01"
COUNT = 40


@dataclasses.dataclass
class Target:
    """One dialect's database of COUNT submitted dispatches: the daemons' settings and the
    test's reads."""

    env: dict[str, str]
    ids: list[str]
    read: Callable[[str], Awaitable[list[dict[str, Any]]]]
    schema: str
    settle: Callable[[], Awaitable[None]]
    """Wait until the dead daemon's database sessions are gone (PostgreSQL)."""

    async def rows(self) -> dict[str, dict[str, Any]]:
        found = await self.read(crash_actions.rows_sql(self.schema))
        return {r["dispatch_id"]: r for r in found}

    async def leased_by(self, owner: str) -> int:
        found = await self.read(
            f"SELECT count(*) AS n FROM {self.schema}approved_action_dispatch_executions "
            f"WHERE status = 'leased' AND lease_owner = '{owner}'"
        )
        return int(found[0]["n"])

    async def settled(self) -> bool:
        terminal = ("succeeded", "failed", "blocked", "cancelled")
        return all(r["status"] in terminal for r in (await self.rows()).values())


async def _submit(store: ports.Store) -> list[str]:
    system = clock.SystemClock()
    the_api = make_api(store, system, max_attempts=3)
    ids = []
    for i in range(COUNT):
        (consumed,) = await the_api.submit(
            [crash_actions.plan(crash_actions.SLOW_TYPE, f"act-{i}")],
            requested_by="tester",
            approved_by="approver",
            traceparent=GIVEN,
        )
        ids.append(consumed.dispatch_id)
        await anyio.sleep(0.003)
    return ids


@contextlib.asynccontextmanager
async def _target(dialect: str, tmp_path: Path) -> AsyncIterator[Target]:
    if dialect == "sqlite":
        path = tmp_path / "qinglong.db"
        store = await stores.open_sqlite(path)
        try:
            await store.migrate(now_ms=clock.SystemClock().now_ms())
            ids = await _submit(store)
        finally:
            await store.close()

        async def read(sql: str) -> list[dict[str, Any]]:
            def body() -> list[dict[str, Any]]:
                conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
                conn.row_factory = sqlite3.Row
                try:
                    return [dict(r) for r in conn.execute(sql).fetchall()]
                finally:
                    conn.close()

            return await anyio.to_thread.run_sync(body)

        async def nothing() -> None:
            return None

        env = {"QINGLONG_PROFILE": "edge", "QINGLONG_DATABASE_URL": f"sqlite:///{path}"}
        yield Target(env, ids, read, "", nothing)
        return
    async with stores.fresh_database() as name:
        # `submit` approves its own requests: an approver login, never the runtime's.
        approver = await stores.open_postgres(stores.approver_url(name), max_size=1)
        try:
            ids = await _submit(approver)
        finally:
            await approver.close()

        async def pg_read(sql: str) -> list[dict[str, Any]]:
            return await stores.raw(name, sql)

        async def gone() -> None:
            # The dead daemon's row locks would hide its rows from SKIP LOCKED until the
            # server sees its sockets closed.
            sql = (
                "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                f"AND usename = '{stores.RUNTIME_LOGIN}'"
            )
            deadline = time.monotonic() + 10
            while (await stores.raw(name, sql))[0]["n"] > 0:
                assert time.monotonic() < deadline, "the dead daemon's sessions never ended"
                await anyio.sleep(0.02)

        env = {"QINGLONG_PROFILE": "cluster", "QINGLONG_DATABASE_URL": stores.runtime_url(name)}
        yield Target(env, ids, pg_read, "qinglong.", gone)


@pytest.mark.parametrize("dialect", stores.DIALECTS)
async def test_a_takeover_starts_a_new_trace_linked_to_the_one_submitted(
    tmp_path: Path, dialect: str
) -> None:
    site = crash_actions.install(tmp_path / "site")
    async with _target(dialect, tmp_path) as target, otlp_receiver.serving() as receiver:
        traced = otlp_receiver.exporting_env(receiver)

        def env_of(port: int, owner: str) -> dict[str, str]:
            daemon = crash_actions.daemon_env(tmp_path / "unused.db", site, port)
            return daemon | target.env | traced | {"QINGLONG_OWNER_ID": owner}

        port = daemons.free_port()
        with daemons.running(tmp_path, env_of(port, "victim"), name="victim") as victim:
            await crash_actions.until_ready(victim, port)
            deadline = time.monotonic() + 30
            while await target.leased_by("victim") == 0:
                assert time.monotonic() < deadline, "the victim never held a claim"
                await anyio.sleep(0.05)
            await anyio.sleep(0.3)  # a few of its items done and exported, more held
            victim.send_signal(signal.SIGKILL)
            assert victim.wait(timeout=10) == -signal.SIGKILL
        await target.settle()
        at_death = await target.rows()
        held = {d for d, r in at_death.items() if r["status"] == "leased"}
        assert held, "the victim died holding nothing"
        done = {d for d, r in at_death.items() if r["status"] == "succeeded"}
        started = {d for d, r in at_death.items() if r["status"] == "executing"}

        port = daemons.free_port()
        with daemons.running(tmp_path, env_of(port, "heir"), name="heir") as heir:
            await crash_actions.until_ready(heir, port)
            deadline = time.monotonic() + 60
            while not await target.settled():
                assert time.monotonic() < deadline, heir.stderr
                await anyio.sleep(0.2)
            heir.send_signal(signal.SIGTERM)
            assert heir.wait(timeout=30) == 0  # its spans are exported as it exits
        await receiver.wait_for(
            lambda: (
                {
                    s.attributes["qinglong.dispatch_id"]
                    for s in receiver.named("dispatch.claim")
                    if s.attributes["qinglong.owner"] == "heir"
                }
                >= held
            )
        )
        rows = await target.rows()
        ids = target.ids

    assert {r["status"] for r in rows.values()} == {"succeeded"}
    assert {r["starts"] for r in rows.values()} == {1}
    claims = receiver.named("dispatch.claim")
    by_owner: dict[str, list[otlp_receiver.Received]] = {}
    for span in claims:
        by_owner.setdefault(span.attributes["qinglong.owner"], []).append(span)
    taken = [s for s in by_owner["heir"] if s.attributes["qinglong.takeover"]]
    fresh = [s for s in by_owner["heir"] if not s.attributes["qinglong.takeover"]]
    # Every lease the dead daemon held was taken over under a new trace linked to the
    # submitted one: a root span, never a child of the dead attempt.
    assert {s.attributes["qinglong.dispatch_id"] for s in taken} == held
    for span in taken:
        assert span.parent_span_id == ""
        assert span.trace_id != TRACE
        assert span.links == ((TRACE, CALLER_SPAN),)
        assert span.attributes["qinglong.outcome"] == "succeeded"
        steps = {s.name for s in receiver.spans if s.parent_span_id == span.span_id}
        assert steps == {"dispatch.start_barrier", "dispatch.execute", "dispatch.completion"}
    # The rest joined the submitted trace as its children, in either daemon.
    for span in fresh + by_owner.get("victim", []):
        assert (span.trace_id, span.parent_span_id, span.links) == (TRACE, CALLER_SPAN, ())
    # What the dead daemon finished was exported as it went (a span still open, or not yet
    # exported, dies with it); the heir's spans cover every other dispatch.
    assert {s.attributes["qinglong.dispatch_id"] for s in by_owner.get("victim", [])} <= done
    heirs = {s.attributes["qinglong.dispatch_id"] for s in by_owner["heir"]}
    assert heirs == set(ids) - done - started
    # One the dead daemon had started is settled by evidence: a new trace linked likewise.
    settled = [s for s in receiver.named("recovery.settle") if s.attributes["qinglong.outcome"]]
    assert {s.attributes["qinglong.dispatch_id"] for s in settled} == started
    for span in settled:
        assert (span.parent_span_id, span.links) == ("", ((TRACE, CALLER_SPAN),))
        assert span.attributes["qinglong.outcome"] == "resolved_succeeded"
    assert receiver.refused == 0
