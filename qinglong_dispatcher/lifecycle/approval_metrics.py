"""Prometheus series of the approvals: the waiting requests by policy, the time a request took
to be decided, the expired ones and the reminders written before expiry (on the daemon's
registry, `metrics.Metrics.approvals`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import prometheus_client

from qinglong_dispatcher.domain import approvals

PREFIX: Final = "qinglong_dispatcher_"

NO_POLICY: Final = "none"
"""The `policy` label of the requests that carry no policy (a policy named `none` shares it)."""

DECISIONS: Final = (approvals.ApprovalStatus.APPROVED, approvals.ApprovalStatus.REJECTED)
"""The outcomes of the decision histogram (expiry is the counter's)."""

DECISION_BUCKETS: Final = (1.0, 10.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0, 86400.0)
"""From a second (a self-approved submit) to a day (the default lifetime)."""

SERIES_NAMES: Final = (
    "qinglong_dispatcher_approvals_expired_total",
    "qinglong_dispatcher_approval_reminders_total",
    "qinglong_dispatcher_approvals_waiting",
    "qinglong_dispatcher_approval_decision_seconds",
)


class ApprovalMetrics:
    """The approval series, registered on `registry`."""

    def __init__(self, registry: prometheus_client.CollectorRegistry) -> None:
        reg = registry
        self.expired = prometheus_client.Counter(
            PREFIX + "approvals_expired",
            "Approval requests expired (database clock).",
            registry=reg,
        )
        self.reminders = prometheus_client.Counter(
            PREFIX + "approval_reminders",
            "approval.expiring events written before a request's expiry (database clock).",
            registry=reg,
        )
        self._waiting = prometheus_client.Gauge(
            PREFIX + "approvals_waiting",
            "Pending approval requests not yet expired, by the policy they carry (none: none).",
            ["policy"],
            registry=reg,
        )
        self._waiting.labels(policy=NO_POLICY).set(0)
        self._shown: set[str] = {NO_POLICY}
        self._decision = prometheus_client.Histogram(
            PREFIX + "approval_decision_seconds",
            "From request to decision (approved or rejected), of the decisions made through "
            "this process's API and operator UI.",
            ["outcome"],
            buckets=DECISION_BUCKETS,
            registry=reg,
        )
        for outcome in DECISIONS:
            self._decision.labels(outcome=outcome.value)

    def set_waiting(self, by_policy: Mapping[str, int]) -> None:
        """The store's count of waiting requests by policy name (`""`: none); a policy no
        longer waited on goes back to 0 rather than vanishing mid-graph."""
        counts = {(name or NO_POLICY): n for name, n in by_policy.items()}
        for name in self._shown - counts.keys():
            self._waiting.labels(policy=name).set(0)
        for name, n in counts.items():
            self._waiting.labels(policy=name).set(n)
        self._shown |= counts.keys()

    def observe_decision(self, approval: approvals.Approval) -> None:
        """One request this process saw decided (a no-op for one still pending, or consumed)."""
        if approval.status in DECISIONS:
            seconds = max(0, approval.updated_at_ms - approval.created_at_ms) / 1000
            self._decision.labels(outcome=approval.status.value).observe(seconds)
