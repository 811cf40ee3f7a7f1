"""The edge file's outbox rebuilt to admit new kinds (SQLite cannot alter a CHECK): migrating
a file that holds events, fan-outs and deliveries keeps every row, its id and every reference
to it, and leaves the table, its key and its triggers exactly as a new file has them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.clock import START_MS, ManualClock

_VERSION = 33
_LATER = (38, 42)
"""The migrations after it that change the table's triggers (the outbox pruned) and the ones
that write it (built only when heard)."""


@pytest.fixture
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    async with stores.open_harness("sqlite", tmp_path_factory) as harness:
        yield harness


async def _rows(h: stores.Harness) -> dict[str, list[Any]]:
    return {
        table: await h.raw(f"SELECT * FROM {table} ORDER BY {key}")
        for table, key in (
            ("notification_events", "id"),
            ("notification_fanouts", "event_id"),
            ("notification_deliveries", "event_id"),
        )
    }


async def _schema(h: stores.Harness) -> list[Any]:
    return await h.raw(
        "SELECT type, name, sql FROM sqlite_master "
        "WHERE tbl_name = 'notification_events' OR sql LIKE '%notification_events%' ORDER BY name"
    )


async def test_the_rebuild_keeps_every_event_and_what_names_it(
    edge: stores.Harness, clock: ManualClock
) -> None:
    # Someone listens first: the file keeps an event only while a subscription hears its kind.
    await edge.raw(
        "INSERT INTO notification_subscriptions (name, url, secret_ref, kinds_json, "
        "created_at_ms) VALUES ('ops', 'https://h/x', 'env:S', "
        """'["approval.requested", "approval.approved"]', 0)"""
    )
    await submit_runs(edge.approver_store, clock, 2)
    await edge.raw("INSERT INTO notification_fanouts (event_id) SELECT id FROM notification_events")
    await edge.raw(
        "INSERT INTO notification_deliveries (event_id, subscription, subject_id, "
        "next_attempt_at_ms) SELECT id, 'ops', subject_id, 0 FROM notification_events"
    )
    rows, schema = await _rows(edge), await _schema(edge)
    assert len(rows["notification_deliveries"]) == len(rows["notification_events"]) == 4
    # The file as it was before the migration: its trigger and its ledger line gone.
    # And without the migration after it (0034), which the rebuild's drop would take away.
    await edge.raw("DROP TRIGGER recovery_required_marks_tell")
    await edge.raw("DROP TRIGGER notification_events_while_someone_listens")
    # And without 0038, which replaces the rebuilt table's delete trigger; the placeholders
    # between stay applied.
    await edge.raw("DROP TRIGGER notification_events_no_delete")
    for trigger in ("deliveries", "attempts", "fanouts"):
        await edge.raw(f"DROP TRIGGER notification_{trigger}_prune_guard")
    await edge.raw("DROP INDEX notification_events_at")
    await edge.raw("DROP INDEX notification_attempts_event")
    await edge.raw("DROP INDEX notification_deliveries_dead")
    await edge.raw("ALTER TABLE notification_subscriptions DROP COLUMN target_prefix")
    await edge.raw(
        "DELETE FROM schema_migrations WHERE version IN "
        f"({_VERSION}, {_VERSION + 1}, {', '.join(map(str, _LATER))})"
    )

    assert await edge.store.migrate(now_ms=START_MS) == [_VERSION, _VERSION + 1, *_LATER]

    assert await _rows(edge) == rows
    assert await _schema(edge) == schema
    assert await edge.raw("PRAGMA foreign_key_check") == []
    # The row set aside for the rebuild is gone with it; the next event takes the next id.
    assert await edge.raw("SELECT name FROM sqlite_master WHERE name LIKE '%kept%'") == []
    await submit_runs(edge.approver_store, clock, 1)  # its triggers still write it
    told = await edge.raw("SELECT id FROM notification_events ORDER BY id")
    assert [r["id"] for r in told][4:] == [5, 6]
