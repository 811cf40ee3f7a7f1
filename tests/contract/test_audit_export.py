"""The audit export on both dialects: every audit record and ledger line once, in id order,
resumable from any cursor it printed."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import audit_export
from qinglong_dispatcher.usecases import exporting
from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock

Key = tuple[str, int]


async def database_rows(h: stores.Harness) -> list[Key]:
    """Every exportable row as (source, id), each source in id order."""
    schema = "qinglong." if h.dialect == "postgres" else ""
    audits = await h.raw(f"SELECT event_id FROM {schema}security_audit_events ORDER BY event_id")
    ledger = await h.raw(f"SELECT event_id FROM {schema}execution_events ORDER BY event_id")
    return [("audit", r["event_id"]) for r in audits] + [("ledger", r["event_id"]) for r in ledger]


async def exported(
    store: ports.AuditExportStore, **options: object
) -> list[tuple[audit_export.Record, audit_export.Cursor]]:
    """Everything one export (not following) yields."""
    out: list[tuple[audit_export.Record, audit_export.Cursor]] = []
    export = exporting.Export(**{"settle_s": 5.0, **options})  # type: ignore[arg-type]
    async for page in exporting.pages(store, export):
        out += page.records
    return out


async def eventually(done: Callable[[], bool]) -> None:
    """Return once `done()` holds (the caller bounds the wait)."""
    while True:
        if done():
            return
        await anyio.sleep(0.02)


def keys(found: list[tuple[audit_export.Record, audit_export.Cursor]]) -> list[Key]:
    return [(record.source, record.event_id) for record, _ in found]


def in_id_order(found: list[Key]) -> bool:
    return all(
        [i for s, i in found if s == source] == sorted(i for s, i in found if s == source)
        for source in ("audit", "ledger")
    )


async def test_an_export_is_every_row_once_in_id_order(
    harness: stores.Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 7)
    everything = await exported(harness.store, page_size=4)
    found = keys(everything)
    assert sorted(found) == sorted(await database_rows(harness))
    assert len(set(found)) == len(found) == 7 * 4  # created, approved, consumed; pending
    assert in_id_order(found)
    # Each record's cursor is where the one after it resumes.
    for n in (0, 5, len(everything) - 1):
        rest = await exported(harness.store, after=everything[n][1], page_size=3)
        assert keys(rest) == found[n + 1 :]


async def test_a_record_names_its_principal_and_a_ledger_line_its_dispatch(
    harness: stores.Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    records = [record for record, _ in await exported(harness.store)]
    approved = next(r for r in records if r.kind == "approval.approved")
    assert approved.actor == "approver"
    assert approved.principal
    assert approved.subject_id == consumed.approval_request_id
    (line,) = [r for r in records if r.source == "ledger"]
    assert (line.dispatch_id, line.to_status, line.version) == (consumed.dispatch_id, "pending", 0)
    assert line.project_id == "proj-1"


async def test_since_leaves_out_what_committed_before_it(
    harness: stores.Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 2)
    assert keys(await exported(harness.store, since_ms=2**62)) == []
    every = await exported(harness.store, since_ms=0)
    cutoff = max(record.committed_at_ms for record, _ in every)
    later = await exported(harness.store, since_ms=cutoff)
    assert keys(later) == [(r.source, r.event_id) for r, _ in every if r.committed_at_ms >= cutoff]


async def test_following_exports_what_commits_later_and_stops_when_told(
    harness: stores.Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    stop = anyio.Event()
    seen: list[Key] = []
    export = exporting.Export(follow=True, poll_s=0.02)

    async def follow() -> None:
        async for page in exporting.pages(harness.store, export, stop):
            seen.extend((r.source, r.event_id) for r, _ in page.records)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            await submit_runs(harness.approver_store, clock, 3, project="later")
            wanted = await database_rows(harness)
            await eventually(lambda: sorted(seen) == sorted(wanted))
            stop.set()
    assert len(set(seen)) == len(seen)
    assert in_id_order(seen)
