"""The notification outbox against plain logins (PostgreSQL).

Only the recorder's definers, run by the triggers of the change itself, write an event; no
login holding only its documented role inserts, changes or deletes one (not even the runtime,
which delivers them). Each attack asserts the database's SQLSTATE and that nothing changed.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from qinglong_dispatcher import bootstrap
from qinglong_dispatcher.domain import notifications
from tests.support import outbox, refusals, stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.recovery import started_execution
from tests.support.targets import submit_change

pytestmark = pytest.mark.postgres

_FORGE = (
    "INSERT INTO qinglong.notification_events (kind, subject_id, project_id, action_type, "
    "at_ms, payload_json) VALUES ('approval.approved', $1, 'proj-1', 'run.create', 0, '{}')"
)
_CHANGE = "UPDATE qinglong.notification_events SET payload_json = '{}' WHERE subject_id = $1"
_DROP = "DELETE FROM qinglong.notification_events WHERE subject_id = $1"
_WIPE = "TRUNCATE qinglong.notification_events"


@pytest.fixture(autouse=True)
async def _someone_listens(pg: stores.Harness) -> None:
    """The database keeps events only while a subscription exists (migration 0034)."""
    await outbox.someone_listens(pg)


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
    pruner = stores.pruner_url(database)
    for login in (
        stores.runtime_url(database),
        stores.operator_url(database),
        stores.approver_url(database),
        stores.strict_approver_url(database),
        pruner,
    ):
        for attack in (_FORGE, _CHANGE, _DROP):
            # The pruner deletes events, but only once done (matched, nothing pending): these
            # are not matched yet, and the database refuses it (23001).
            expected = "23001" if (login, attack) == (pruner, _DROP) else "42501"
            assert await refusals.sqlstate_as(login, attack, request) == expected, (login, attack)
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
        "TRUNCATE qinglong.notification_events CASCADE",
    ):
        with pytest.raises(asyncpg.PostgresError) as refused:
            await pg.raw(attack)
        assert refused.value.sqlstate == "23001", attack
    assert await _snapshot(pg) == before


async def _subscriptions(pg: stores.Harness) -> list[Any]:
    return [
        dict(r)
        for r in await pg.raw("SELECT * FROM qinglong.notification_subscriptions ORDER BY name")
    ]


async def test_only_the_owner_writes_a_subscription(pg: stores.Harness) -> None:
    """Subscriptions are the schema's owner's, as policies are: every role's login is refused
    a write (42501); a subscription holds a secret's reference, never its value."""
    owner = await pg.owner()
    await owner.add_subscription(
        notifications.Subscription(name="ops", url="http://127.0.0.1:9/h", secret_ref="env:X")
    )
    before = await _subscriptions(pg)
    database = str(await pg.scalar("SELECT current_database()"))
    attacks = (
        "INSERT INTO qinglong.notification_subscriptions (name, url, secret_ref, kinds_json, "
        "created_at_ms) VALUES ('evil', 'http://127.0.0.1:9/x', 'env:Y', '[]', 0)",
        "UPDATE qinglong.notification_subscriptions SET url = 'http://127.0.0.1:9/evil'",
        # Widening or narrowing who hears what by target is a write like any other.
        "UPDATE qinglong.notification_subscriptions SET target_prefix = 'edge-'",
        "DELETE FROM qinglong.notification_subscriptions",
    )
    for login in (
        stores.runtime_url(database),
        stores.operator_url(database),
        stores.approver_url(database),
        stores.pruner_url(database),
    ):
        for attack in attacks:
            assert await refusals.sqlstate_as(login, attack) == "42501", (login, attack)
        assert await _subscriptions(pg) == before
    # Through the product: the runtime's own store is refused, one typed error.
    with pytest.raises(notifications.NotifyRefused):
        await pg.store.remove_subscription("ops")
    assert await _subscriptions(pg) == before


async def test_only_the_runtime_records_deliveries_and_holds_the_lease(
    pg: stores.Harness, clock: ManualClock
) -> None:
    database = str(await pg.scalar("SELECT current_database()"))
    lease = "SELECT * FROM qinglong.notification_deliverer"
    before = await pg.raw(lease)
    for login in (
        stores.operator_url(database),
        stores.approver_url(database),
        stores.pruner_url(database),
    ):
        for attack in (
            "UPDATE qinglong.notification_deliverer SET owner = 'evil'",
            "UPDATE qinglong.notification_deliveries SET status = 'delivered'",
            "INSERT INTO qinglong.notification_attempts (event_id, subscription, attempt, "
            "outcome, latency_ms, at_ms) VALUES (1, 'ops', 1, 'delivered', 0, 0)",
            "INSERT INTO qinglong.notification_fanouts (event_id) VALUES (1)",
        ):
            assert await refusals.sqlstate_as(login, attack) == "42501", (login, attack)
        assert await pg.raw(lease) == before
    # The runtime's own attempt rows are never rewritten or deleted.
    for attack in (
        "UPDATE qinglong.notification_attempts SET outcome = 'delivered'",
        "DELETE FROM qinglong.notification_attempts",
        "DELETE FROM qinglong.notification_deliveries",
    ):
        assert await refusals.sqlstate_as(stores.runtime_url(database), attack) == "42501"


async def test_no_login_tells_a_recovery_or_a_held_target(
    pg: stores.Harness, clock: ManualClock
) -> None:
    """`dispatch.recovery_required` and `target.held` are the recorder's definer's, written
    with the mark: not the runtime that records the observation, nor any other login, may
    insert one (42501), of a dispatch marked or not."""
    marked = await submit_change(pg.approver_store, clock, "act-1", "router-1")
    await started_execution(pg, clock)
    clock.advance(ms=LEASE_MS + 1)
    assert (await bootstrap.build_reconciler(pg.store, clock).reconcile_pass()).observed == 1
    waiting = await submit_change(pg.approver_store, clock, "act-2", "router-2")
    before = await _snapshot(pg)
    assert [e["kind"] for e in before if e["subject_id"] == marked] == [
        "dispatch.recovery_required",
        "target.held",
    ]
    database = str(await pg.scalar("SELECT current_database()"))
    forge = (
        "INSERT INTO qinglong.notification_events (kind, subject_id, project_id, action_type, "
        "at_ms, payload_json) VALUES ($1, $2, 'p1', 'test.target', 0, '{}')"
    )
    for login in (
        stores.runtime_url(database),
        stores.operator_url(database),
        stores.approver_url(database),
        stores.strict_approver_url(database),
        stores.pruner_url(database),
    ):
        for kind in ("dispatch.recovery_required", "target.held"):
            for subject in (marked, waiting):
                state = await refusals.sqlstate_as(login, forge, kind, subject)
                assert state == "42501", (login, kind, subject)
        assert await _snapshot(pg) == before
