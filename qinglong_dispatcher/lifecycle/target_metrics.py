"""Prometheus series of the targets: how many are held and how many busy (on the daemon's
registry, `metrics.Metrics.targets`; read on each reconcile pass, like the waiting approvals)."""

from __future__ import annotations

from typing import Final

import prometheus_client

from qinglong_dispatcher.domain import targets

PREFIX: Final = "qinglong_dispatcher_"

SERIES_NAMES: Final = (
    "qinglong_dispatcher_targets_held",
    "qinglong_dispatcher_targets_busy",
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

    def set_holders(self, counts: targets.HolderCounts) -> None:
        """The store's count of held and busy targets."""
        self._held.set(counts.held)
        self._busy.set(counts.busy)
