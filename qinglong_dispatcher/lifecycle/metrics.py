"""Prometheus series of the daemon, on a registry of its own, every one exported from the start."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

import prometheus_client
from prometheus_client import metrics_core

import qinglong_dispatcher
from qinglong_dispatcher.domain import retention
from qinglong_dispatcher.lifecycle import (
    api_metrics,
    approval_metrics,
    notification_metrics,
    target_metrics,
)

PREFIX = "qinglong_dispatcher_"

CLAIM_RESULTS = ("claimed", "replayed", "live_lease", "not_due", "exhausted", "conflict")
"""Claim results of a batch (the `claims_total{result}` label values known in advance)."""

_CLAIM_KEYS = frozenset({*CLAIM_RESULTS, "not_found", "not_claimable"})
# Rarer claim outcomes of the store: still claims, not item outcomes, when a report is split.

OUTCOMES = (
    "succeeded",
    "failed",
    "blocked",
    "retry_wait",
    "pending",
    "completion_write_failed",
    "start_refused",
    "completion_conflict",
    "release_conflict",
    "release_failed",
    "lease_lost",
    "uncertain",
)
"""What became of a claimed item (the report keys of `claimed_item.ItemRunner` and, for a
queued claim whose renewal was refused, of `Dispatcher`)."""

ACTION_TYPES = ("run.create",)
"""Action types whose outcome series exist before their first dispatch."""

RENEWAL_RESULTS = ("renewed", "expired", "conflict", "error")
"""Lease renewal results: the store's outcome, or `error` when the store raised."""

RESOLUTION_SOURCES = ("evidence", "manual")
"""Who settled a `recovery_required` execution."""

RATE_LIMIT_REASONS = api_metrics.RATE_LIMIT_REASONS

BATCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Batch duration buckets, 1 ms to 10 s: an idle edge batch is a millisecond, a busy one seconds."""

SERIES_NAMES = (
    "qinglong_dispatcher_build_info",
    "qinglong_dispatcher_cadence_seconds",
    "qinglong_dispatcher_ticks_total",
    "qinglong_dispatcher_tick_failures_total",
    "qinglong_dispatcher_last_successful_tick_timestamp_seconds",
    "qinglong_dispatcher_claims_total",
    "qinglong_dispatcher_takeovers_total",
    "qinglong_dispatcher_takeovers_exhausted_total",
    "qinglong_dispatcher_outcomes_total",
    "qinglong_dispatcher_batch_duration_seconds",
    "qinglong_dispatcher_due",
    "qinglong_dispatcher_oldest_due_age_seconds",
    "qinglong_dispatcher_executing",
    "qinglong_dispatcher_recovery_required",
    "qinglong_dispatcher_completion_write_failures_total",
    "qinglong_dispatcher_lease_renewals_total",
    "qinglong_dispatcher_clock_skew_seconds",
    "qinglong_dispatcher_clock_skew_refusals_total",
    "qinglong_dispatcher_reconcile_passes_total",
    "qinglong_dispatcher_recovery_resolutions_total",
    *approval_metrics.SERIES_NAMES,
    *notification_metrics.SERIES_NAMES,
    *target_metrics.SERIES_NAMES,
    "qinglong_dispatcher_pruned_dispatches_total",
    "qinglong_dispatcher_pruned_audit_events_total",
    "qinglong_dispatcher_pruned_notification_events_total",
    "qinglong_dispatcher_pruned_notification_deliveries_total",
    "qinglong_dispatcher_wakeups_total",
    "qinglong_dispatcher_wakeup_listener_up",
    "qinglong_dispatcher_wakeup_listener_reconnects_total",
    *api_metrics.SERIES_NAMES,
)
"""Every metric family the dispatcher exports, as named in the exposition (counters end `_total`);
the registry also carries prometheus-client's standard `process_*` families (RSS, CPU, fds)."""

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Content-Type of `Metrics.render()`: the classic text format, which every Prometheus reads."""


class _WithoutCreated:
    """The registry minus the `*_created` samples (one more series per counter, unused here)."""

    def __init__(self, registry: prometheus_client.CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[metrics_core.Metric]:
        for family in self._registry.collect():
            # collect() builds fresh families on every call, so trimming them in place is safe.
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family


def split_counts(counts: Mapping[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """Split a batch report's mixed counter into (claim results, item outcomes)."""
    claims = {key: n for key, n in counts.items() if key in _CLAIM_KEYS}
    outcomes = {key: n for key, n in counts.items() if key not in _CLAIM_KEYS}
    return claims, outcomes


class Metrics:
    """The daemon's series; thread-safe (the listener thread renders while the loop records)."""

    def __init__(
        self,
        *,
        profile: str,
        cadence_s: float,
        version: str = qinglong_dispatcher.__version__,
        process_metrics: bool = True,
    ) -> None:
        self.registry = reg = prometheus_client.CollectorRegistry()
        self._exposed = _WithoutCreated(self.registry)
        if process_metrics:
            # Standard process_* families: what an operator checks on a 96 MiB router.
            prometheus_client.ProcessCollector(registry=self.registry)
        p = PREFIX

        self._build_info = prometheus_client.Gauge(
            p + "build_info",
            "Always 1; the labels say which version and profile run.",
            ["version", "profile"],
            registry=reg,
        )
        self._build_info.labels(version=version, profile=profile).set(1)
        self._cadence = prometheus_client.Gauge(
            p + "cadence_seconds", "Configured dispatch tick interval.", registry=reg
        )
        self._cadence.set(cadence_s)
        self._ticks = prometheus_client.Counter(
            p + "ticks", "Dispatch ticks run, successful or not.", registry=reg
        )
        self._tick_failures = prometheus_client.Counter(
            p + "tick_failures",
            "Dispatch ticks that ended in an expected store fault.",
            registry=reg,
        )
        self._last_tick = prometheus_client.Gauge(
            p + "last_successful_tick_timestamp_seconds",
            "Unix time of the last dispatch tick that completed without a store fault (0: none).",
            registry=reg,
        )
        self._claims = prometheus_client.Counter(
            p + "claims", "Claim results of due executions, per result.", ["result"], registry=reg
        )
        for result in CLAIM_RESULTS:
            self._claims.labels(result=result)
        self._takeovers = prometheus_client.Counter(
            p + "takeovers",
            "Claims that took over another owner's expired lease (that owner stalled or died).",
            registry=reg,
        )
        self._takeovers_exhausted = prometheus_client.Counter(
            p + "takeovers_exhausted",
            "Dispatches blocked takeovers_exhausted: each claim died before the barrier.",
            registry=reg,
        )
        self._outcomes = prometheus_client.Counter(
            p + "outcomes",
            "What became of claimed executions, per action type and outcome.",
            ["action_type", "outcome"],
            registry=reg,
        )
        for action_type in ACTION_TYPES:
            for outcome in OUTCOMES:
                self._outcomes.labels(action_type=action_type, outcome=outcome)
        self._batch_duration = prometheus_client.Histogram(
            p + "batch_duration_seconds",
            "Wall time of one dispatch batch, claim to last recorded result.",
            buckets=BATCH_BUCKETS,
            registry=reg,
        )
        self._due = prometheus_client.Gauge(
            p + "due", "Executions due now (pending, expired leases, retry_wait).", registry=reg
        )
        self._oldest_due_age = prometheus_client.Gauge(
            p + "oldest_due_age_seconds",
            "How long the oldest due execution has been due.",
            registry=reg,
        )
        self._executing = prometheus_client.Gauge(
            p + "executing", "Executions started under a live lease.", registry=reg
        )
        self._recovery_required = prometheus_client.Gauge(
            p + "recovery_required",
            "Executions started whose lease expired: need evidence or an operator.",
            registry=reg,
        )
        self._completion_write_failures = prometheus_client.Counter(
            p + "completion_write_failures",
            "Completions the store did not acknowledge (the row surfaces as recovery_required).",
            registry=reg,
        )
        self._renewals = prometheus_client.Counter(
            p + "lease_renewals",
            "Lease renewals of running executes, per result.",
            ["result"],
            registry=reg,
        )
        for result in RENEWAL_RESULTS:
            self._renewals.labels(result=result)
        self._clock_skew = prometheus_client.Gauge(
            p + "clock_skew_seconds",
            "System clock minus database clock, signed (0 on edge: one clock).",
            registry=reg,
        )
        self._skew_refusals = prometheus_client.Counter(
            p + "clock_skew_refusals",
            "Ticks that claimed nothing because the clock skew exceeded the bound.",
            registry=reg,
        )
        self._reconcile_passes = prometheus_client.Counter(
            p + "reconcile_passes", "Recovery reconcile passes run.", registry=reg
        )
        self._resolutions = prometheus_client.Counter(
            p + "recovery_resolutions",
            "recovery_required executions settled, per source.",
            ["source"],
            registry=reg,
        )
        for source in RESOLUTION_SOURCES:
            self._resolutions.labels(source=source)
        self.approvals = approval_metrics.ApprovalMetrics(reg)
        self.notifications = notification_metrics.NotificationMetrics(reg)
        self.targets = target_metrics.TargetMetrics(reg)
        self._pruned_dispatches = prometheus_client.Counter(
            p + "pruned_dispatches",
            "Finished dispatch trees deleted by retention (edge: the daemon's own prune).",
            registry=reg,
        )
        self._pruned_audit_events = prometheus_client.Counter(
            p + "pruned_audit_events",
            "Security audit records deleted by their (longer) retention.",
            registry=reg,
        )
        self._pruned_events = prometheus_client.Counter(
            p + "pruned_notification_events",
            "Outbox events deleted by retention once delivered or dead-lettered.",
            registry=reg,
        )
        self._pruned_deliveries = prometheus_client.Counter(
            p + "pruned_notification_deliveries",
            "Deliveries (one per event and subscription) deleted with their events.",
            registry=reg,
        )
        self._wakeups = prometheus_client.Counter(
            p + "wakeups",
            "Wake-up notifications received (cluster: a dispatch became due); 0 on edge.",
            registry=reg,
        )
        self._wakeup_up = prometheus_client.Gauge(
            p + "wakeup_listener_up",
            "1 while the wake-up listener is subscribed; 0 on edge, when off, or while lost "
            "(the cadence alone dispatches then).",
            registry=reg,
        )
        self._wakeup_reconnects = prometheus_client.Counter(
            p + "wakeup_listener_reconnects",
            "Times the wake-up listener subscribed again after losing its connection.",
            registry=reg,
        )
        self.api = api_metrics.ApiMetrics(reg)
        """The API's and the UI's series (web/request_metrics.py observes the latency)."""

    def record_tick(self, *, ok: bool, at_s: float | None = None) -> None:
        """Count one tick; a successful one also stamps the last-success time (default now)."""
        self._ticks.inc()
        if ok:
            self._last_tick.set(time.time() if at_s is None else at_s)
        else:
            self._tick_failures.inc()

    def observe_batch(
        self,
        duration_s: float,
        *,
        claims: Mapping[str, int],
        outcomes: Mapping[str, Mapping[str, int]],
        takeovers: int = 0,
        takeovers_exhausted: int = 0,
    ) -> None:
        """Record one batch: duration, claim results, takeovers (and blocks for them), outcomes.

        `outcomes` maps action type → outcome → count; `completion_write_failed` ones also count
        into `completion_write_failures_total` (no `record_completion_write_failure` for them)."""
        self._batch_duration.observe(max(duration_s, 0.0))
        if takeovers > 0:
            self._takeovers.inc(takeovers)
        if takeovers_exhausted > 0:
            self._takeovers_exhausted.inc(takeovers_exhausted)
        for result, n in claims.items():
            if n > 0:
                self._claims.labels(result=result).inc(n)
        for action_type, counts in outcomes.items():
            for outcome, n in counts.items():
                if n > 0:
                    self._outcomes.labels(action_type=action_type, outcome=outcome).inc(n)
            failed_writes = counts.get("completion_write_failed", 0)
            if failed_writes > 0:
                self._completion_write_failures.inc(failed_writes)

    def set_backlog(
        self, *, due: int, oldest_due_age_s: float, executing: int, recovery_required: int
    ) -> None:
        """Set the backlog gauges from one bounded count (executing excludes recovery_required)."""
        self._due.set(due)
        self._oldest_due_age.set(max(oldest_due_age_s, 0.0))
        self._executing.set(executing)
        self._recovery_required.set(recovery_required)

    def record_renewal(self, result: str) -> None:
        """Count one renewal: `renewed`, `expired`, `conflict`, or `error` (the store raised)."""
        self._renewals.labels(result=result).inc()

    def record_completion_write_failure(self, count: int = 1) -> None:
        """Count completion writes lost outside a batch report (batches count their own)."""
        self._completion_write_failures.inc(count)

    def set_clock_skew(self, seconds: float) -> None:
        """Set the measured skew, system clock minus database clock (signed)."""
        self._clock_skew.set(seconds)

    def record_clock_skew_refusal(self) -> None:
        """Count one tick that did not claim because of clock skew."""
        self._skew_refusals.inc()

    def record_reconcile_pass(
        self, *, resolved_by_evidence: int = 0, approvals_expired: int = 0, reminders: int = 0
    ) -> None:
        """Count one reconcile pass: its evidence settlements, expired approvals, reminders."""
        self._reconcile_passes.inc()
        self._resolutions.labels(source="evidence").inc(resolved_by_evidence)
        self.approvals.expired.inc(approvals_expired)
        self.approvals.reminders.inc(reminders)

    def record_recovery_resolution(self, source: str, count: int = 1) -> None:
        """Count resolutions settled in this process outside a reconcile pass (`manual`)."""
        self._resolutions.labels(source=source).inc(count)

    def record_wakeup(self) -> None:
        """Count one wake-up notification."""
        self._wakeups.inc()

    def set_wakeup_listener(self, *, up: bool, reconnected: bool = False) -> None:
        """Set the listener gauge; count a reconnect when it came back after a loss."""
        self._wakeup_up.set(1 if up else 0)
        if reconnected:
            self._wakeup_reconnects.inc()

    def record_pruned(self, counts: retention.PruneCounts) -> None:
        """Count what one prune batch deleted."""
        self._pruned_dispatches.inc(counts.dispatches)
        self._pruned_audit_events.inc(counts.audit_events)
        self._pruned_events.inc(counts.notification_events)
        self._pruned_deliveries.inc(counts.notification_deliveries)

    def record_api_auth_failure(self) -> None:
        """Count one API request refused for its credentials."""
        self.api.auth_failures.inc()

    def record_api_auth_unaudited(self) -> None:
        """Count one refused authentication left out of the audit table (over budget)."""
        self.api.auth_unaudited.inc()

    def record_api_rate_limited(self, reason: str) -> None:
        """Count one API request refused 429 (`RATE_LIMIT_REASONS`)."""
        self.api.rate_limited.labels(reason=reason).inc()

    def record_api_connection_shed(self) -> None:
        """Count one API connection closed by the limit or the read timeout."""
        self.api.shed.inc()

    def render(self) -> bytes:
        """The text exposition of every series (Content-Type `CONTENT_TYPE`)."""
        return prometheus_client.generate_latest(self._exposed)
