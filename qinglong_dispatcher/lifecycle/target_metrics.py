"""Prometheus series of the waits before a start: how many targets are held and how many busy
and how many dispatches a freeze holds (read on each reconcile pass, like the waiting
approvals), and the dispatches that ended past their execution window (counted by the pass
that ended them). On the daemon's registry, `metrics.Metrics.targets`."""

from __future__ import annotations

from typing import Final

import prometheus_client

from qinglong_dispatcher.domain import targets

PREFIX: Final = "qinglong_dispatcher_"

SERIES_NAMES: Final = (
    "qinglong_dispatcher_targets_held",
    "qinglong_dispatcher_targets_busy",
    "qinglong_dispatcher_dispatches_expired_past_window_total",
    "qinglong_dispatcher_dispatches_frozen",
)


class TargetMetrics:
    """The target gauges, registered on `registry`."""

    def __init__(self, registry: prometheus_client.CollectorRegistry) -> None:
        self._held = prometheus_client.Gauge(
            PREFIX + "targets_held",
            "Targets held: their dispatch past the claim is recovery_required, so nothing "
            "else starts on them until it is settled.",
            registry=registry,
        )
        self._busy = prometheus_client.Gauge(
            PREFIX + "targets_busy",
            "Targets busy: a dispatch on them is leased or executing with a live lease.",
            registry=registry,
        )
        self._frozen = prometheus_client.Gauge(
            PREFIX + "dispatches_frozen",
            "Waiting dispatches a freeze holds now, not lifted for them (database clock).",
            registry=registry,
        )
        self.expired_past_window = prometheus_client.Counter(
            PREFIX + "dispatches_expired_past_window",
            "Dispatches that ended cancelled (window_expired): their execution window closed "
            "while they waited (database clock).",
            registry=registry,
        )

    def set_holders(self, counts: targets.HolderCounts) -> None:
        """The store's count of held and busy targets."""
        self._held.set(counts.held)
        self._busy.set(counts.busy)

    def set_frozen(self, count: int) -> None:
        """The store's count of waiting dispatches a freeze holds."""
        self._frozen.set(count)
