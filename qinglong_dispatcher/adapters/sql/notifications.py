"""Notification subscriptions and delivery (both dialects): what the `notify` command writes
and what the deliverer reads and records (docs/notifications.md).

The outbox itself is the database's (migration 0031): triggers write each event with its
change. Subscriptions are the schema's owner's (on PostgreSQL any other login is refused
`42501`, surfaced as `NotifyRefused`). Every write of the deliverer names its lease, which the
statement checks on the database's clock: a deliverer that lost it writes nothing.
"""

from __future__ import annotations

import json
from typing import TypeVar

from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.domain import notifications as n
from qinglong_dispatcher.ports import notifications as ports

T = TypeVar("T")

OWNER_ONLY = (
    "only the schema's owner writes notification subscriptions: on PostgreSQL run this with "
    "the administrator URL that runs migrate (the database refused this login)"
)


def _subscription(row: query.Row) -> n.Subscription:
    return n.Subscription(
        name=row["name"],
        url=row["url"],
        secret_ref=row["secret_ref"],
        kinds=tuple(json.loads(row["kinds_json"])),
        action_type=row["action_type"],
        project_id=row["project_id"],
        target_prefix=row["target_prefix"],
        format=row["format"],
    )


def _event(row: query.Row, *, with_target: bool = False) -> n.Event:
    return n.Event(
        target=row["target"] if with_target else None,
        id=int(row["id"]),
        kind=row["kind"],
        subject_id=row["subject_id"],
        project_id=row["project_id"],
        action_type=row["action_type"],
        at_ms=int(row["at_ms"]),
        payload=json.loads(row["payload_json"]),
    )


async def add_subscription(q: query.Query, subscription: n.Subscription) -> n.Subscription:
    """See `ports.NotificationStore.add_subscription`."""
    subscription.check()
    if await q.one("get_subscription", {"name": subscription.name}) is not None:
        raise n.SubscriptionInvalid(f"a subscription named {subscription.name} exists")
    row = await q.one(
        "insert_subscription",
        {
            "name": subscription.name,
            "url": subscription.url,
            "secret_ref": subscription.secret_ref,
            "kinds_json": json.dumps(list(subscription.kinds)),
            "action_type": subscription.action_type,
            "project_id": subscription.project_id,
            "target_prefix": subscription.target_prefix,
            "format": subscription.format,
        },
    )
    assert row is not None
    return _subscription(row)


async def remove_subscription(q: query.Query, name: str) -> bool:
    """See `ports.NotificationStore.remove_subscription`."""
    return await q.one("delete_subscription", {"name": name}) is not None


async def list_subscriptions(q: query.Query) -> list[n.Subscription]:
    """See `ports.NotificationStore.list_subscriptions`."""
    return [_subscription(row) for row in await q.all("list_subscriptions")]


async def get_subscription(q: query.Query, name: str) -> n.Subscription | None:
    """See `ports.NotificationStore.get_subscription`."""
    row = await q.one("get_subscription", {"name": name})
    return None if row is None else _subscription(row)


async def claim_deliverer(q: query.Query, owner: str, lease_ms: int) -> bool:
    """See `ports.NotificationStore.claim_deliverer`. A holder with more than half its lease
    left writes nothing: an idle edge daemon commits once per half lease, not once a poll."""
    held = await q.one("holds_deliverer", {"owner": owner})
    if held is not None and int(held["remaining_ms"]) > lease_ms // 2:
        return True
    return await q.one("claim_deliverer", {"owner": owner, "lease_ms": lease_ms}) is not None


async def release_deliverer(q: query.Query, owner: str) -> None:
    """See `ports.NotificationStore.release_deliverer`."""
    await q.run("release_deliverer", {"owner": owner})


async def fan_out(q: query.Query, owner: str, *, limit: int, settle_ms: int) -> list[str]:
    """See `ports.NotificationStore.fan_out`."""
    if await q.one("holds_deliverer", {"owner": owner}) is None:
        return []
    rows = await q.all("unfanned_events", {"limit": limit})
    events = [_event(row, with_target=True) for row in rows]
    if events:
        subscriptions = await list_subscriptions(q)
        deliveries = [
            {"event_id": e.id, "subscription": s.name, "subject_id": e.subject_id}
            for e in events
            for s in subscriptions
            if s.matches(e)
        ]
        if deliveries:
            await q.run_many("insert_delivery", deliveries)
        await q.run_many("insert_fanout", [{"event_id": e.id} for e in events])
    # With nothing new matched too: the events matched before they had settled are covered
    # once they have (else only the next event to arrive would move the watermark past them).
    through = events[-1].id if events else None
    await q.run("advance_watermark", {"through": through, "settle_ms": settle_ms, "owner": owner})
    return [e.kind for e in events]


async def due_deliveries(q: query.Query, owner: str, *, limit: int) -> list[ports.Due]:
    """See `ports.NotificationStore.due_deliveries`."""
    if await q.one("holds_deliverer", {"owner": owner}) is None:
        return []
    return [
        ports.Due(
            event=_event(row),
            subscription=n.Subscription(
                name=row["subscription"],
                url=row["url"],
                secret_ref=row["secret_ref"],
                format=row["format"],
            ),
            attempts=int(row["attempts"]),
        )
        for row in await q.all("due_deliveries", {"limit": limit})
    ]


async def record_attempt(q: query.Query, owner: str, attempt: ports.Attempt) -> bool:
    """See `ports.NotificationStore.record_attempt`."""
    due = attempt.due
    row = await q.one(
        "record_delivery",
        {
            "status": attempt.status,
            "delay_ms": attempt.delay_ms,
            "code": attempt.code,
            "event_id": due.event.id,
            "subscription": due.subscription.name,
            "attempts_before": due.attempts,
            "owner": owner,
        },
    )
    if row is None:
        return False
    await q.run(
        "insert_attempt",
        {
            "event_id": due.event.id,
            "subscription": due.subscription.name,
            "attempt": int(row["attempts"]),
            "outcome": attempt.outcome,
            "code": attempt.code,
            "error_code": attempt.error_code,
            "latency_ms": attempt.latency_ms,
        },
    )
    return True


async def delivery_stats(q: query.Query) -> ports.DeliveryStats:
    """See `ports.NotificationStore.delivery_stats`."""
    row = await q.one("notification_stats")
    assert row is not None
    return ports.DeliveryStats(
        pending=int(row["pending"]),
        dead=int(row["dead"]),
        oldest_pending_age_ms=max(0, int(row["oldest_pending_age_ms"])),
    )


async def dead_letters(q: query.Query, *, limit: int) -> list[ports.DeadLetter]:
    """See `ports.NotificationStore.dead_letters`."""
    return [
        ports.DeadLetter(
            event_id=int(row["event_id"]),
            kind=row["kind"],
            subject_id=row["subject_id"],
            project_id=row["project_id"],
            action_type=row["action_type"],
            subscription=row["subscription"],
            attempts=int(row["attempts"]),
            last_code=None if row["last_code"] is None else int(row["last_code"]),
            dead_at_ms=int(row["done_at_ms"]),
        )
        for row in await q.all("dead_letters", {"limit": limit})
    ]


class NotificationMethods:
    """The notification operations of `SqlStore`."""

    runner: query.Runner

    async def add_subscription(self, subscription: n.Subscription) -> n.Subscription:
        """See `ports.NotificationStore.add_subscription`."""
        return await self._owner_write(lambda q: add_subscription(q, subscription))

    async def remove_subscription(self, name: str) -> bool:
        """See `ports.NotificationStore.remove_subscription`."""
        return await self._owner_write(lambda q: remove_subscription(q, name))

    async def _owner_write(self, work: query.Work[T]) -> T:
        try:
            return await self.runner.transaction(work)
        except errors.StoreError as refused:
            if refused.code == "permission_denied":
                raise n.NotifyRefused(OWNER_ONLY) from refused
            raise

    list_subscriptions = query.operation(list_subscriptions, write=False)
    get_subscription = query.operation(get_subscription, write=False)
    claim_deliverer = query.operation(claim_deliverer)
    release_deliverer = query.operation(release_deliverer)
    fan_out = query.operation(fan_out)
    due_deliveries = query.operation(due_deliveries, write=False)
    record_attempt = query.operation(record_attempt)
    delivery_stats = query.operation(delivery_stats, write=False)
    dead_letters = query.operation(dead_letters, write=False)
