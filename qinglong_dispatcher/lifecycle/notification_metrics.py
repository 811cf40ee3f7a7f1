"""Prometheus series of the notification deliverer: events read from the outbox and delivered
by kind, attempts by outcome, delivery latency, and the pending deliveries, dead letters and
oldest undelivered event's age the store reports (on the daemon's registry,
`metrics.Metrics.notifications`). Only the process holding the delivery lease moves them."""

from __future__ import annotations

from typing import Final

import prometheus_client

from qinglong_dispatcher.domain import notifications
from qinglong_dispatcher.ports import notifications as ports

PREFIX: Final = "qinglong_dispatcher_"

OUTCOMES: Final = ("delivered", "failed", "dead")

LATENCY_BUCKETS: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""From a receiver on the same host to the deliverer's timeout."""

SERIES_NAMES: Final = (
    "qinglong_dispatcher_notifications_written_total",
    "qinglong_dispatcher_notifications_delivered_total",
    "qinglong_dispatcher_notification_attempts_total",
    "qinglong_dispatcher_notification_delivery_seconds",
    "qinglong_dispatcher_notifications_pending",
    "qinglong_dispatcher_notification_dead_letters",
    "qinglong_dispatcher_notification_oldest_pending_age_seconds",
)


class NotificationMetrics:
    """The notification series, registered on `registry`; a `ports.DeliveryObserver`."""

    def __init__(self, registry: prometheus_client.CollectorRegistry) -> None:
        reg = registry
        self._written = prometheus_client.Counter(
            PREFIX + "notifications_written",
            "Outbox events matched against the subscriptions, by kind (each once).",
            ["kind"],
            registry=reg,
        )
        self._delivered = prometheus_client.Counter(
            PREFIX + "notifications_delivered",
            "Deliveries a subscriber acknowledged (2xx), by kind.",
            ["kind"],
            registry=reg,
        )
        for kind in notifications.KINDS:
            self._written.labels(kind=kind)
            self._delivered.labels(kind=kind)
        self._attempts = prometheus_client.Counter(
            PREFIX + "notification_attempts",
            "Delivery attempts, by outcome (dead: the last one allowed failed).",
            ["outcome"],
            registry=reg,
        )
        for outcome in OUTCOMES:
            self._attempts.labels(outcome=outcome)
        self._latency = prometheus_client.Histogram(
            PREFIX + "notification_delivery_seconds",
            "From sending a delivery to its answer (or its failure).",
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self._pending = prometheus_client.Gauge(
            PREFIX + "notifications_pending", "Deliveries waiting to be sent.", registry=reg
        )
        self._dead = prometheus_client.Gauge(
            PREFIX + "notification_dead_letters",
            "Deliveries given up after the attempt bound.",
            registry=reg,
        )
        self._oldest = prometheus_client.Gauge(
            PREFIX + "notification_oldest_pending_age_seconds",
            "Age of the oldest event with a delivery still pending (database clock; 0: none).",
            registry=reg,
        )

    def written(self, kind: str) -> None:
        """One event read from the outbox."""
        self._written.labels(kind=kind).inc()

    def attempted(self, attempt: ports.Attempt) -> None:
        """One attempt recorded."""
        self._attempts.labels(outcome=attempt.outcome).inc()
        self._latency.observe(attempt.latency_ms / 1000)
        if attempt.outcome == "delivered":
            self._delivered.labels(kind=attempt.due.event.kind).inc()

    def stats(self, stats: ports.DeliveryStats) -> None:
        """The store's reading of the pending deliveries."""
        self._pending.set(stats.pending)
        self._dead.set(stats.dead)
        self._oldest.set(stats.oldest_pending_age_ms / 1000)
