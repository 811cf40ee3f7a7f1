"""Notifications: the subscriptions the `notify` command writes, and what the deliverer reads
and records of the outbox (docs/notifications.md)."""

from __future__ import annotations

import dataclasses
from typing import Protocol

from qinglong_dispatcher.domain import notifications


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Due:
    """One delivery to attempt: the event, where it goes and how many attempts it has had."""

    event: notifications.Event
    subscription: notifications.Subscription
    attempts: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """One attempt's outcome; `status` is what the delivery becomes (`pending`: retried after
    `delay_ms`). Never a body, never a secret."""

    due: Due
    status: str
    outcome: str
    code: int | None
    error_code: str | None
    latency_ms: int
    delay_ms: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryStats:
    """What the metrics read: pending deliveries, dead letters, the oldest pending event's age
    on the database's clock."""

    pending: int
    dead: int
    oldest_pending_age_ms: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    """A delivery given up after the bound: which event, to which subscription (by name; its
    URL may carry a token), after how many attempts and with which last answer."""

    event_id: int
    kind: str
    subject_id: str
    project_id: str
    action_type: str
    subscription: str
    attempts: int
    last_code: int | None
    dead_at_ms: int


class NotificationStore(Protocol):
    """Subscriptions (written by the schema's owner) and the deliverer's transactions."""

    async def add_subscription(
        self, subscription: notifications.Subscription
    ) -> notifications.Subscription:
        """Write a new subscription; refused for a name in use or a writer not the owner."""
        ...

    async def remove_subscription(self, name: str) -> bool:
        """Delete one (its pending deliveries with it); False: no such name."""
        ...

    async def list_subscriptions(self) -> list[notifications.Subscription]:
        """Every subscription, by name."""
        ...

    async def get_subscription(self, name: str) -> notifications.Subscription | None:
        """One subscription by name."""
        ...

    async def claim_deliverer(self, owner: str, lease_ms: int) -> bool:
        """Take or renew the cluster's one deliverer lease (database clock); False: another
        holds it."""
        ...

    async def release_deliverer(self, owner: str) -> None:
        """Give the lease up (a graceful stop)."""
        ...

    async def fan_out(self, owner: str, *, limit: int, settle_ms: int) -> list[str]:
        """Match up to `limit` new events against the subscriptions and queue a delivery for
        each match, as the lease's holder; the kinds of the events matched."""
        ...

    async def due_deliveries(self, owner: str, *, limit: int) -> list[Due]:
        """Deliveries due now, the earliest pending one per subject and subscription."""
        ...

    async def record_attempt(self, owner: str, attempt: Attempt) -> bool:
        """Record one attempt and the delivery's new state; False: the lease was lost or the
        delivery moved on (nothing written)."""
        ...

    async def delivery_stats(self) -> DeliveryStats:
        """Pending, dead letters and the oldest pending event's age."""
        ...

    async def dead_letters(self, *, limit: int) -> list[DeadLetter]:
        """The newest `limit` dead letters, newest first (until the prune takes them)."""
        ...


class DeliveryObserver(Protocol):
    """What watches the deliverer (the metrics)."""

    def written(self, kind: str) -> None:
        """One event read from the outbox and matched."""
        ...

    def attempted(self, attempt: Attempt) -> None:
        """One attempt recorded."""
        ...

    def stats(self, stats: DeliveryStats) -> None:
        """The store's reading after a pass."""
        ...


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Tested:
    """What one signed sample posted to a subscription's destination came back with (`code`
    None: no answer, `error_code` says why). Recorded nowhere; never the secret or the URL."""

    webhook_id: str
    code: int | None
    error_code: str | None
    latency_ms: int

    @property
    def delivered(self) -> bool:
        """Whether the destination acknowledged it (2xx)."""
        return self.code is not None and 200 <= self.code < 300


class SampleSender(Protocol):
    """Posts `notify test`'s signed sample to a subscription's destination, writing nothing."""

    async def send_sample(self, subscription: notifications.Subscription) -> Tested:
        """One signed sample to `subscription`; an unreadable secret or a destination that does
        not answer is a `Tested` saying so, never an exception."""
        ...
