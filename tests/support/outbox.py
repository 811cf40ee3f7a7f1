"""Reading the notification outbox (docs/notifications.md) as the tests check it."""

from __future__ import annotations

import json
from typing import Any

from qinglong_dispatcher.domain import notifications
from tests.support.stores import Harness

OUTBOX_KINDS = (
    "approval.requested",
    "approval.expiring",
    "approval.approved",
    "approval.rejected",
    "approval.expired",
    "dispatch.failed",
    "dispatch.blocked",
    "dispatch.succeeded",
    "dispatch.recovery_required",
    "target.held",
)


def table(h: Harness, name: str) -> str:
    """`name` as the dialect spells it."""
    return name if h.dialect == "sqlite" else f"qinglong.{name}"


async def events(h: Harness, subject_id: str | None = None) -> list[dict[str, Any]]:
    """The outbox in order of creation (of one subject), each payload parsed."""
    where = f" WHERE subject_id = '{subject_id}'" if subject_id else ""
    rows = await h.raw(f"SELECT * FROM {table(h, 'notification_events')}{where} ORDER BY id")
    return [{**r, "payload": json.loads(r["payload_json"])} for r in rows]


async def kinds(h: Harness, subject_id: str) -> list[str]:
    """The kinds told of one subject, in order."""
    return [e["kind"] for e in await events(h, subject_id)]


async def someone_listens(h: Harness) -> None:
    """A subscription to every kind, written by the owner: the database keeps an event only
    while a subscription hears its kind."""
    owner = await h.owner()
    await owner.add_subscription(
        notifications.Subscription(
            name="listener",
            url="https://listener.invalid/hook",
            secret_ref="env:QL_LISTENER",
            kinds=notifications.KINDS,
        )
    )
