"""Migrating a database that already holds observed `recovery_required` rows (migration
uncertain_outcomes): each is marked as noticed by the recovery pass when that pass first saw
it, so the ledger shows the line for rows that were waiting before the upgrade."""

from __future__ import annotations

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import recovery
from tests.support import faults, stores
from tests.support.actions import submit_runs
from tests.support.clock import START_MS, ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.recovery import started_execution

SLUG = "uncertain_outcomes"


async def _undo(h: stores.Harness) -> None:
    """The database as it was before the migration: its objects and its ledger line gone."""
    q = "qinglong." if h.dialect == "postgres" else ""
    on = {"postgres": " ON qinglong.recovery_observations", "sqlite": ""}[h.dialect]
    on_res = {"postgres": " ON qinglong.recovery_resolutions", "sqlite": ""}[h.dialect]
    await h.raw(f"DROP TRIGGER recovery_observations_mark{on}")
    await h.raw(f"DROP TRIGGER recovery_resolutions_mark{on_res}")
    await h.raw(f"DROP TABLE {q}uncertain_outcomes")
    await h.raw(f"DROP TABLE {q}recovery_required_marks")
    if h.dialect == "postgres":
        await h.raw("DROP FUNCTION qinglong.mark_recovery_required()")
        await h.raw("DROP FUNCTION qinglong.guard_uncertain_outcome()")
    await h.raw(f"DELETE FROM {faults.table(h, 'schema_migrations')} WHERE name = '{SLUG}'")


async def _admin_store(h: stores.Harness) -> tuple[ports.Store, bool]:
    """A store that may migrate (PostgreSQL: the administrator), and whether to close it."""
    if h.dialect == "sqlite":
        return h.store, False
    database = str(await h.scalar("SELECT current_database()"))
    store = await stores.open_postgres(
        stores.pg_url(database), max_size=1, installation=stores.INSTALLATION
    )
    return store, True


async def test_rows_observed_before_the_migration_are_marked_when_first_seen(
    harness: stores.Harness, clock: ManualClock
) -> None:
    (one,) = await submit_runs(harness.approver_store, clock, 1)
    await started_execution(harness, clock, owner="w1")
    clock.advance(ms=LEASE_MS)
    await _undo(harness)
    first_seen = clock.ms
    for _ in range(2):  # observed twice before the upgrade
        await harness.store.record_observation(
            one.dispatch_id,
            outcome=recovery.ObservationOutcome.MISSING,
            reason_code=recovery.MANUAL_ONLY,
            now_ms=clock.ms,
        )
        clock.advance(ms=1000)
    admin, close = await _admin_store(harness)
    try:
        assert len(await admin.migrate(now_ms=START_MS)) == 1
        assert (await admin.schema_state()).current
    finally:
        if close:
            await admin.close()
    (mark,) = await harness.raw(f"SELECT * FROM {faults.table(harness, 'recovery_required_marks')}")
    assert (mark["dispatch_id"], mark["noticed_by"], mark["committed_at_ms"]) == (
        one.dispatch_id,
        "recovery_pass",
        first_seen,
    )
    shown = await harness.store.show_dispatch(one.dispatch_id, now_ms=clock.now_ms())
    assert shown is not None
    assert shown.events[-1].to_status == "recovery_required"
