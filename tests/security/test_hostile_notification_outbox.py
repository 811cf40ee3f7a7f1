"""The notification outbox against plain logins (PostgreSQL).

Only the recorder's definers, run by the triggers of the change itself, write an event; no
login holding only its documented role inserts, changes or deletes one (not even the runtime,
which delivers them). Each attack asserts the database's SQLSTATE and that nothing changed.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from tests.support import outbox, refusals, stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock

pytestmark = pytest.mark.postgres

_FORGE = (
    "INSERT INTO qinglong.notification_events (kind, subject_id, project_id, action_type, "
    "at_ms, payload_json) VALUES ('approval.approved', $1, 'proj-1', 'run.create', 0, '{}')"
)
_CHANGE = "UPDATE qinglong.notification_events SET payload_json = '{}' WHERE subject_id = $1"
_DROP = "DELETE FROM qinglong.notification_events WHERE subject_id = $1"
_WIPE = "TRUNCATE qinglong.notification_events"


async def _snapshot(pg: stores.Harness) -> list[Any]:
    return await outbox.events(pg)


async def test_no_login_writes_changes_or_deletes_an_event(
    pg: stores.Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(pg.approver_store, clock, 1)
    request = consumed.approval_request_id
    before = await _snapshot(pg)
    assert [e["kind"] for e in before] == ["approval.requested", "approval.approved"]
    database = str(await pg.scalar("SELECT current_database()"))
    for login in (
        stores.runtime_url(database),
        stores.operator_url(database),
        stores.approver_url(database),
        stores.strict_approver_url(database),
        stores.pruner_url(database),
    ):
        for attack in (_FORGE, _CHANGE, _DROP):
            assert await refusals.sqlstate_as(login, attack, request) == "42501", (login, attack)
        assert await refusals.sqlstate_as(login, _WIPE) == "42501", login
        assert await _snapshot(pg) == before


async def test_the_schema_owner_cannot_change_or_delete_an_event_either(
    pg: stores.Harness, clock: ManualClock
) -> None:
    """The administrator's own connection (the test's raw SQL) meets the immutability
    trigger (23001)."""
    await submit_runs(pg.approver_store, clock, 1)
    before = await _snapshot(pg)
    for attack in (
        "UPDATE qinglong.notification_events SET at_ms = 0",
        "DELETE FROM qinglong.notification_events",
        "TRUNCATE qinglong.notification_events",
    ):
        with pytest.raises(asyncpg.PostgresError) as refused:
            await pg.raw(attack)
        assert refused.value.sqlstate == "23001", attack
    assert await _snapshot(pg) == before
