"""The daemon's Prometheus series: all exported from the start, moved by what the loop records."""

from __future__ import annotations

import prometheus_client
import pytest
from prometheus_client import parser

from qinglong_dispatcher.lifecycle import metrics

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _scrape(the_metrics: metrics.Metrics) -> tuple[set[str], Samples]:
    """Family names as exposed (counters with `_total`) and every sample by (name, labels)."""
    families: set[str] = set()
    samples: Samples = {}
    for family in parser.text_string_to_metric_families(the_metrics.render().decode()):
        families.add(family.name + "_total" if family.type == "counter" else family.name)
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return families, samples


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def test_every_series_is_exported_before_anything_happens() -> None:
    families, samples = _scrape(metrics.Metrics(profile="edge", cadence_s=5.0))
    ours = {name for name in families if name.startswith(metrics.PREFIX)}
    assert ours == set(metrics.SERIES_NAMES)
    assert _value(samples, "qinglong_dispatcher_ticks_total") == 0
    assert _value(samples, "qinglong_dispatcher_last_successful_tick_timestamp_seconds") == 0
    assert _value(samples, "qinglong_dispatcher_clock_skew_seconds") == 0
    assert _value(samples, "qinglong_dispatcher_completion_write_failures_total") == 0
    assert _value(samples, "qinglong_dispatcher_batch_duration_seconds_count") == 0
    for result in metrics.CLAIM_RESULTS:
        assert _value(samples, "qinglong_dispatcher_claims_total", result=result) == 0
    for outcome in metrics.OUTCOMES:
        value = _value(
            samples, "qinglong_dispatcher_outcomes_total", action_type="run.create", outcome=outcome
        )
        assert value == 0
    for result in metrics.RENEWAL_RESULTS:
        assert _value(samples, "qinglong_dispatcher_lease_renewals_total", result=result) == 0
    for source in metrics.RESOLUTION_SOURCES:
        assert _value(samples, "qinglong_dispatcher_recovery_resolutions_total", source=source) == 0
    for gauge in ("due", "oldest_due_age_seconds", "executing", "recovery_required"):
        assert _value(samples, metrics.PREFIX + gauge) == 0


def test_build_info_and_cadence() -> None:
    _, samples = _scrape(metrics.Metrics(profile="cluster", cadence_s=1.0, version="9.9.9"))
    info = _value(samples, "qinglong_dispatcher_build_info", version="9.9.9", profile="cluster")
    assert info == 1
    assert _value(samples, "qinglong_dispatcher_cadence_seconds") == 1.0


def test_no_created_series_and_no_global_registry() -> None:
    text = metrics.Metrics(profile="edge", cadence_s=5.0).render().decode()
    assert "_created" not in text
    # Two instances in one process: each has its own registry, nothing lands in the global one.
    metrics.Metrics(profile="edge", cadence_s=5.0)
    global_text = prometheus_client.generate_latest(prometheus_client.REGISTRY).decode()
    assert metrics.PREFIX not in global_text


def test_a_recorded_tick_and_batch_move_the_counters() -> None:
    the_metrics = metrics.Metrics(profile="edge", cadence_s=5.0)
    report = {
        "claimed": 3,
        "live_lease": 1,
        "not_claimable": 1,
        "succeeded": 2,
        "completion_write_failed": 1,
    }
    claims, outcomes = metrics.split_counts(report)
    assert claims == {"claimed": 3, "live_lease": 1, "not_claimable": 1}
    assert outcomes == {"succeeded": 2, "completion_write_failed": 1}
    the_metrics.observe_batch(0.004, claims=claims, outcomes={"run.create": outcomes})
    the_metrics.observe_batch(0.2, claims={}, outcomes={"tool.invoke": {"failed": 1}})
    the_metrics.record_tick(ok=True, at_s=1_700_000_000.5)
    the_metrics.record_tick(ok=False)

    families, samples = _scrape(the_metrics)
    assert _value(samples, "qinglong_dispatcher_ticks_total") == 2
    assert _value(samples, "qinglong_dispatcher_tick_failures_total") == 1
    last = _value(samples, "qinglong_dispatcher_last_successful_tick_timestamp_seconds")
    assert last == 1_700_000_000.5
    assert _value(samples, "qinglong_dispatcher_claims_total", result="claimed") == 3
    assert _value(samples, "qinglong_dispatcher_claims_total", result="live_lease") == 1
    assert _value(samples, "qinglong_dispatcher_claims_total", result="not_due") == 0
    run_create = {"action_type": "run.create"}
    assert (
        _value(samples, "qinglong_dispatcher_outcomes_total", **run_create, outcome="succeeded")
        == 2
    )
    assert (
        _value(
            samples,
            "qinglong_dispatcher_outcomes_total",
            **run_create,
            outcome="completion_write_failed",
        )
        == 1
    )
    assert (
        _value(
            samples,
            "qinglong_dispatcher_outcomes_total",
            action_type="tool.invoke",
            outcome="failed",
        )
        == 1
    )
    assert _value(samples, "qinglong_dispatcher_completion_write_failures_total") == 1
    assert _value(samples, "qinglong_dispatcher_batch_duration_seconds_count") == 2
    assert _value(samples, "qinglong_dispatcher_batch_duration_seconds_sum") == pytest.approx(0.204)
    bucket = "qinglong_dispatcher_batch_duration_seconds_bucket"
    assert _value(samples, bucket, le="0.005") == 1
    assert _value(samples, bucket, le="0.25") == 2
    # A new label value does not add a family.
    assert {n for n in families if n.startswith(metrics.PREFIX)} == set(metrics.SERIES_NAMES)


def test_backlog_renewals_skew_and_recovery() -> None:
    the_metrics = metrics.Metrics(profile="cluster", cadence_s=1.0)
    the_metrics.set_backlog(due=7, oldest_due_age_s=12.5, executing=2, recovery_required=1)
    the_metrics.record_renewal("renewed")
    the_metrics.record_renewal("renewed")
    the_metrics.record_renewal("error")
    the_metrics.record_completion_write_failure()
    the_metrics.set_clock_skew(-0.75)
    the_metrics.record_clock_skew_refusal()
    the_metrics.record_reconcile_pass(resolved_by_evidence=2)
    the_metrics.record_reconcile_pass()
    the_metrics.record_recovery_resolution("manual")

    _, samples = _scrape(the_metrics)
    assert _value(samples, "qinglong_dispatcher_due") == 7
    assert _value(samples, "qinglong_dispatcher_oldest_due_age_seconds") == 12.5
    assert _value(samples, "qinglong_dispatcher_executing") == 2
    assert _value(samples, "qinglong_dispatcher_recovery_required") == 1
    assert _value(samples, "qinglong_dispatcher_lease_renewals_total", result="renewed") == 2
    assert _value(samples, "qinglong_dispatcher_lease_renewals_total", result="error") == 1
    assert _value(samples, "qinglong_dispatcher_lease_renewals_total", result="expired") == 0
    assert _value(samples, "qinglong_dispatcher_completion_write_failures_total") == 1
    assert _value(samples, "qinglong_dispatcher_clock_skew_seconds") == -0.75
    assert _value(samples, "qinglong_dispatcher_clock_skew_refusals_total") == 1
    assert _value(samples, "qinglong_dispatcher_reconcile_passes_total") == 2
    resolutions = "qinglong_dispatcher_recovery_resolutions_total"
    assert _value(samples, resolutions, source="evidence") == 2
    assert _value(samples, resolutions, source="manual") == 1

    # The gauges follow the latest count, down as well as up.
    the_metrics.set_backlog(due=0, oldest_due_age_s=0.0, executing=0, recovery_required=0)
    _, samples = _scrape(the_metrics)
    assert _value(samples, "qinglong_dispatcher_due") == 0
    assert _value(samples, "qinglong_dispatcher_recovery_required") == 0


def test_process_metrics_are_optional() -> None:
    families, _ = _scrape(metrics.Metrics(profile="edge", cadence_s=5.0, process_metrics=False))
    assert families == set(metrics.SERIES_NAMES)
