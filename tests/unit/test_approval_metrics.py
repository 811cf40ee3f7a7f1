"""The approval series: the waiting requests by policy follow the store's count (a policy no
longer waited on goes to 0), and a decision is observed once, from request to decision; and
the held and busy targets, read on the same pass."""

from __future__ import annotations

from prometheus_client import parser

from qinglong_dispatcher.domain import approvals, targets
from qinglong_dispatcher.lifecycle import metrics


def _samples(the_metrics: metrics.Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = the_metrics.render().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in parser.text_string_to_metric_families(text)
        for s in family.samples
    }


def _approval(status: approvals.ApprovalStatus, seconds: int) -> approvals.Approval:
    return approvals.Approval(
        approval_request_id="apr_1",
        project_id="p",
        action_type="run.create",
        action_ref="a",
        action_digest="d",
        status=status,
        version=approvals.VERSION_OF[status],
        requested_by="sam",
        decided_by="bob",
        requested_principal="sam",
        decided_principal="bob",
        consumed_principal=None,
        expires_at_ms=10**12,
        created_at_ms=1_000_000,
        updated_at_ms=1_000_000 + seconds * 1000,
    )


def test_waiting_by_policy_follows_the_store_and_a_gone_policy_reads_zero() -> None:
    the_metrics = metrics.Metrics(profile="edge", cadence_s=1.0, process_metrics=False)
    waiting = "qinglong_dispatcher_approvals_waiting"
    assert _samples(the_metrics)[(waiting, frozenset({("policy", "none")}))] == 0
    the_metrics.approvals.set_waiting({"": 3, "two-for-http": 2})
    samples = _samples(the_metrics)
    assert samples[(waiting, frozenset({("policy", "none")}))] == 3
    assert samples[(waiting, frozenset({("policy", "two-for-http")}))] == 2
    the_metrics.approvals.set_waiting({"": 1})
    samples = _samples(the_metrics)
    assert samples[(waiting, frozenset({("policy", "two-for-http")}))] == 0
    assert samples[(waiting, frozenset({("policy", "none")}))] == 1


def test_a_decision_is_observed_by_outcome_and_a_pending_one_is_not() -> None:
    the_metrics = metrics.Metrics(profile="edge", cadence_s=1.0, process_metrics=False)
    the_metrics.approvals.observe_decision(_approval(approvals.ApprovalStatus.APPROVED, 90))
    the_metrics.approvals.observe_decision(_approval(approvals.ApprovalStatus.PENDING, 5))
    the_metrics.approvals.observe_decision(_approval(approvals.ApprovalStatus.REJECTED, 5))
    samples = _samples(the_metrics)
    name = "qinglong_dispatcher_approval_decision_seconds"

    def value(suffix: str, **labels: str) -> float:
        return samples[(name + suffix, frozenset(labels.items()))]

    assert value("_count", outcome="approved") == 1
    assert value("_sum", outcome="approved") == 90
    assert value("_bucket", outcome="approved", le="60.0") == 0
    assert value("_bucket", outcome="approved", le="300.0") == 1
    assert value("_count", outcome="rejected") == 1
    assert value("_sum", outcome="rejected") == 5


def test_the_target_gauges_follow_the_store() -> None:
    the_metrics = metrics.Metrics(profile="edge", cadence_s=1.0, process_metrics=False)
    held, busy = "qinglong_dispatcher_targets_held", "qinglong_dispatcher_targets_busy"
    assert (
        _samples(the_metrics)[(held, frozenset())],
        _samples(the_metrics)[(busy, frozenset())],
    ) == (0, 0)
    the_metrics.targets.set_holders(targets.HolderCounts(held=2, busy=5))
    samples = _samples(the_metrics)
    assert (samples[(held, frozenset())], samples[(busy, frozenset())]) == (2, 5)
