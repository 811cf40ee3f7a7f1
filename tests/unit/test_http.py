"""The metrics and health listener over real HTTP: /metrics, /healthz, /readyz, 404 elsewhere."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import parser

from qinglong_dispatcher.lifecycle import http, metrics


class FakeTime:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def now() -> FakeTime:
    return FakeTime()


@pytest.fixture
def health(now: FakeTime) -> http.Health:
    return http.Health(cadence_s=5.0, clock=now)


@pytest.fixture
def the_metrics() -> metrics.Metrics:
    return metrics.Metrics(profile="edge", cadence_s=5.0)


@pytest.fixture
def base_url(the_metrics: metrics.Metrics, health: http.Health) -> Iterator[str]:
    listener = http.Listener("127.0.0.1", 0, the_metrics=the_metrics, health=health)
    port = listener.start()
    assert port > 0
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        listener.stop()


def get(url: str) -> tuple[int, str, bytes]:
    """(status, content type, body) of a GET, error statuses included."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers["Content-Type"], exc.read()


def check(url: str) -> tuple[int, dict[str, object]]:
    status, content_type, body = get(url)
    assert content_type == "application/json"
    return status, json.loads(body)


def test_metrics_serves_the_registry(base_url: str, the_metrics: metrics.Metrics) -> None:
    the_metrics.record_tick(ok=True, at_s=1234.0)
    status, content_type, body = get(base_url + "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain; version=0.0.4")
    names = {f.name for f in parser.text_string_to_metric_families(body.decode())}
    assert "qinglong_dispatcher_ticks" in names
    assert b"qinglong_dispatcher_ticks_total 1.0" in body
    assert b"qinglong_dispatcher_last_successful_tick_timestamp_seconds 1234.0" in body
    # A query string does not change the route.
    assert get(base_url + "/metrics?name[]=x")[0] == 200


def test_healthz_follows_the_last_beat(base_url: str, health: http.Health, now: FakeTime) -> None:
    assert check(base_url + "/healthz") == (200, {"ok": True, "reason": "alive"})
    now.now += 15.0  # exactly 3 × cadence: still alive
    assert check(base_url + "/healthz")[0] == 200
    now.now += 0.5
    status, body = check(base_url + "/healthz")
    assert status == 503
    assert body["ok"] is False
    assert "no tick for 15.5s" in str(body["reason"])
    health.beat()
    assert check(base_url + "/healthz")[0] == 200


def test_readyz_follows_the_store_and_draining_flags(base_url: str, health: http.Health) -> None:
    assert check(base_url + "/readyz") == (503, {"ok": False, "reason": "store unreachable"})
    health.set_store(reachable=True, migrated=False)
    assert check(base_url + "/readyz") == (503, {"ok": False, "reason": "store not migrated"})
    health.set_store(reachable=True, migrated=True)
    assert check(base_url + "/readyz") == (200, {"ok": True, "reason": "ready"})
    health.set_store(reachable=False)  # migrated is kept
    assert check(base_url + "/readyz")[0] == 503
    health.set_store(reachable=True)
    assert check(base_url + "/readyz")[0] == 200
    health.set_draining()
    assert check(base_url + "/readyz") == (503, {"ok": False, "reason": "draining"})
    # Draining is readiness only: the loop still counts as alive.
    assert check(base_url + "/healthz")[0] == 200


@pytest.mark.parametrize("path", ["/", "/metric", "/healthz/x", "/favicon.ico"])
def test_other_paths_are_404(base_url: str, path: str) -> None:
    assert check(base_url + path) == (404, {"ok": False, "reason": "not found"})


def test_stale_after_can_be_set(now: FakeTime) -> None:
    health = http.Health(cadence_s=1.0, stale_after_s=20.0, clock=now)
    now.now += 19.0
    assert health.alive()[0] is True
    now.now += 2.0
    assert health.alive()[0] is False


def test_stop_closes_the_port_and_ends_the_thread(
    the_metrics: metrics.Metrics, health: http.Health
) -> None:
    listener = http.Listener("127.0.0.1", 0, the_metrics=the_metrics, health=health)
    port = listener.start()
    assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200
    listener.stop()
    listener.stop()  # twice is harmless
    assert not any(t.name == "qinglong-metrics" for t in threading.enumerate())
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)


def test_a_taken_port_raises_oserror(the_metrics: metrics.Metrics, health: http.Health) -> None:
    first = http.Listener("127.0.0.1", 0, the_metrics=the_metrics, health=health)
    port = first.start()
    try:
        second = http.Listener("127.0.0.1", port, the_metrics=the_metrics, health=health)
        with pytest.raises(OSError):
            second.start()
    finally:
        first.stop()
