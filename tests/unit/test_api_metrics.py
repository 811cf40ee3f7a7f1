"""The API's latency labels stay bounded: a status class, a method from a fixed set, a surface
derived from the route template (never from a client's path)."""

from __future__ import annotations

import prometheus_client
import pytest

from qinglong_dispatcher.lifecycle import api_metrics


@pytest.mark.parametrize(
    ("status", "shown"),
    [(200, "2xx"), (201, "2xx"), (303, "3xx"), (404, "4xx"), (429, "4xx"), (503, "5xx"),
     (101, "other"), (999, "other")],
)  # fmt: skip
def test_a_status_is_counted_in_its_class(status: int, shown: str) -> None:
    assert api_metrics.status_class(status) == shown


@pytest.mark.parametrize(
    ("route", "shown"),
    [("/api/v1/dispatches/{dispatch_id}", "api"), ("/ui", "ui"), ("/ui/{tail}", "ui"),
     ("/oidc/callback", "ui"), ("/", "other"), ("unmatched", "other"), ("/uix", "other")],
)  # fmt: skip
def test_the_surface_follows_the_route_template(route: str, shown: str) -> None:
    assert api_metrics.surface(route) == shown


def test_an_unknown_method_is_other_and_a_negative_time_is_zero() -> None:
    registry = prometheus_client.CollectorRegistry()
    series = api_metrics.ApiMetrics(registry)
    series.observe_request(method="BREW", route="unmatched", status=405, seconds=-1.0)
    labels = {"surface": "other", "method": "other", "route": "unmatched", "status": "4xx"}
    name = "qinglong_dispatcher_http_request_duration_seconds"
    assert registry.get_sample_value(name + "_count", labels) == 1
    assert registry.get_sample_value(name + "_sum", labels) == 0
