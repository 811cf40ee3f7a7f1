"""The audit export on PostgreSQL, where an id drawn early can commit late: held back, never
skipped."""

from __future__ import annotations

import anyio
import asyncpg
import pytest

from qinglong_dispatcher.usecases import exporting
from tests.contract.test_audit_export import (
    Key,
    database_rows,
    eventually,
    exported,
    in_id_order,
    keys,
)
from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock

pytestmark = pytest.mark.postgres

LATE_AUDIT = """
INSERT INTO qinglong.security_audit_events (
    kind, actor, principal, project_id, subject_id, detail_code, committed_at_ms
) VALUES (
    'test.late', 'late', qinglong.acting_principal(), 'p', 'late', 'late',
    (extract(epoch FROM transaction_timestamp()) * 1000)::bigint
)
RETURNING event_id
"""


async def test_a_row_that_commits_after_later_ids_is_exported_not_skipped(
    pg: stores.Harness, clock: ManualClock
) -> None:
    await submit_runs(pg.approver_store, clock, 1)
    database = str(await pg.scalar("SELECT current_database()"))
    stop = anyio.Event()
    seen: list[Key] = []
    export = exporting.Export(follow=True, poll_s=0.02)

    async def follow() -> None:
        async for page in exporting.pages(pg.store, export, stop):
            seen.extend((r.source, r.event_id) for r, _ in page.records)

    async def until(count: int) -> None:
        await eventually(lambda: len(seen) >= count)

    writer = await asyncpg.connect(stores.runtime_url(database))
    try:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                await until(len(await database_rows(pg)))
                late = writer.transaction()
                await late.start()
                late_id = await writer.fetchval(LATE_AUDIT)
                # Later ids commit while the late one is still in progress.
                await submit_runs(pg.approver_store, clock, 2, project="after")
                newest = await pg.scalar("SELECT max(event_id) FROM qinglong.security_audit_events")
                assert newest > late_id
                # The ledger has no writer in progress: its stream is not held back.
                ledger = [k for k in await database_rows(pg) if k[0] == "ledger"]
                await eventually(lambda: [k for k in seen if k[0] == "ledger"] == ledger)
                await anyio.sleep(0.3)  # many more looks: the audit stream stays held back
                assert max(i for s, i in seen if s == "audit") < late_id
                await late.commit()
                await until(len(await database_rows(pg)))
                stop.set()
    finally:
        await writer.close()
    assert ("audit", late_id) in seen
    assert len(set(seen)) == len(seen)
    assert sorted(seen) == sorted(await database_rows(pg))
    assert in_id_order(seen)


async def test_an_export_started_during_a_rolled_back_write_waits_it_out_and_moves_on(
    pg: stores.Harness, clock: ManualClock
) -> None:
    database = str(await pg.scalar("SELECT current_database()"))
    writer = await asyncpg.connect(stores.runtime_url(database))
    try:
        doomed = writer.transaction()
        await doomed.start()
        await writer.fetchval(LATE_AUDIT)
        await submit_runs(pg.approver_store, clock, 1)
        # Begun before this export's first look: it may hold any id, so no audit id is final.
        assert [s for s, _ in keys(await exported(pg.store, settle_s=0.2))] == ["ledger"]
        await doomed.rollback()
    finally:
        await writer.close()
    assert keys(await exported(pg.store)) == await database_rows(pg)


async def test_an_operator_login_exports_what_the_runtime_exports(
    pg: stores.Harness, clock: ManualClock
) -> None:
    await submit_runs(pg.approver_store, clock, 2)
    as_runtime = await exported(pg.store)
    as_operator = await exported(pg.operator_store)
    assert as_operator == as_runtime
    assert keys(as_operator) == await database_rows(pg)
