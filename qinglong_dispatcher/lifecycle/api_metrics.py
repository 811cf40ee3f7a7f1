"""Prometheus series of the control-plane API and the operator UI: refused authentications, rate
limits, shed connections, and each route's request latency (on the daemon's registry,
`metrics.Metrics.api`).

The latency histogram is labelled by the route's template (`/api/v1/dispatches/{dispatch_id}`),
never by the raw path, and by a status class, a method from a fixed set and the surface: its
label values are bounded by the routes the application has, whatever a client sends.
"""

from __future__ import annotations

from typing import Final

import prometheus_client

PREFIX: Final = "qinglong_dispatcher_"

SERIES_NAMES: Final = (
    "qinglong_dispatcher_api_auth_failures_total",
    "qinglong_dispatcher_api_auth_failures_unaudited_total",
    "qinglong_dispatcher_api_rate_limited_total",
    "qinglong_dispatcher_api_connections_shed_total",
    "qinglong_dispatcher_http_request_duration_seconds",
)

RATE_LIMIT_REASONS: Final = ("auth_failures", "writes")
"""Why the API answered 429: too many failed authentications from one client address, or too
many writes from one principal."""

LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Request latency buckets, 5 ms to 30 s: a read is milliseconds, a write waits for its commit,
a 503 of a saturated store for its pool."""

METHODS: Final = frozenset({"GET", "POST", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""Methods kept as they are in the label; any other is `other`."""

UNMATCHED: Final = "unmatched"
"""The route label of a request that matched no route (a 404 or 405 of the router)."""


def status_class(status: int) -> str:
    """`2xx`, `3xx`, `4xx` or `5xx` (`1xx` and anything odd: `other`)."""
    return f"{status // 100}xx" if 200 <= status < 600 else "other"


def surface(route: str) -> str:
    """Which face of the listener a route template belongs to: `api`, `ui` (the operator UI and
    its OIDC sign-in) or `other` (`/`, an unmatched path)."""
    if route.startswith("/api/"):
        return "api"
    if route == "/ui" or route.startswith(("/ui/", "/oidc/")):
        return "ui"
    return "other"


class ApiMetrics:
    """The API's and the UI's series, registered on `registry`."""

    def __init__(self, registry: prometheus_client.CollectorRegistry) -> None:
        self.auth_failures = prometheus_client.Counter(
            PREFIX + "api_auth_failures",
            "API requests refused 401: no, a malformed or an unknown bearer token.",
            registry=registry,
        )
        self.auth_unaudited = prometheus_client.Counter(
            PREFIX + "api_auth_failures_unaudited",
            "Refused authentications not written to the audit table (over its shared budget).",
            registry=registry,
        )
        self.rate_limited = prometheus_client.Counter(
            PREFIX + "api_rate_limited",
            "API requests refused 429, per reason.",
            ["reason"],
            registry=registry,
        )
        for reason in RATE_LIMIT_REASONS:
            self.rate_limited.labels(reason=reason)
        self.shed = prometheus_client.Counter(
            PREFIX + "api_connections_shed",
            "API connections closed at the connection limit (an idle one evicted, or the new one "
            "refused 503) or for sending no complete request within the read timeout.",
            registry=registry,
        )
        self.latency = prometheus_client.Histogram(
            PREFIX + "http_request_duration_seconds",
            "Time from a request's arrival to its response's headers, per route template (an "
            "event stream: to its first byte), method, status class and surface (api, ui).",
            ["surface", "method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )

    def observe_request(self, *, method: str, route: str, status: int, seconds: float) -> None:
        """One answered request: `route` is its template (or `UNMATCHED`), never a raw path."""
        self.latency.labels(
            surface=surface(route),
            method=method if method in METHODS else "other",
            route=route,
            status=status_class(status),
        ).observe(max(seconds, 0.0))
