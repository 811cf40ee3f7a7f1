"""Each request's latency in `qinglong_dispatcher_http_request_duration_seconds`, over a real
listener: labelled by the route's template and a status class, never by the raw path (an id, a
path that matches nothing, a long or odd path add no series), for the API and the UI alike; an
event stream is timed to its first byte."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import parser

from tests.support.api_writes import Served, serving

FAMILY = "qinglong_dispatcher_http_request_duration_seconds"


@pytest.fixture
async def served(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> AsyncIterator[Served]:
    async with serving("sqlite", tmp_path_factory, tmp_path) as it:
        yield it


def _counts(it: Served) -> dict[tuple[str, str, str, str], float]:
    """`_count` samples by (surface, method, route, status)."""
    text = it.ctx.metrics.render().decode()
    found: dict[tuple[str, str, str, str], float] = {}
    for family in parser.text_string_to_metric_families(text):
        if family.name != FAMILY:
            continue
        for sample in family.samples:
            if sample.name == FAMILY + "_count":
                labels = sample.labels
                key = (labels["surface"], labels["method"], labels["route"], labels["status"])
                found[key] = sample.value
    return found


async def test_latency_is_labelled_by_route_template_never_by_path(served: Served) -> None:
    it = served
    assert _counts(it) == {}  # the family is exported before any request; no series yet
    status, _, _ = await it.call("POST", "/dispatches", "sam", {"action": "x", "plan": {}})
    assert status == 400
    for dispatch_id in ("d-0000aaaa", "d-0000bbbb", "d-0000cccc"):
        status, _, _ = await it.call("GET", f"/dispatches/{dispatch_id}", "vic")
        assert status == 404
    status, _, _ = await it.call("GET", "/status", None)  # no token: 401
    assert status == 401
    status, _, _ = await it.call("GET", "/no/such/path/secret-looking-d-0000dddd", "vic")
    assert status == 404
    origin = it.base.removesuffix("/api/v1")
    async with it.session.get(origin + "/ui/signin") as page:
        assert page.status == 200
    async with it.session.get(origin + "/ui/whatever-d-0000eeee", allow_redirects=False) as page:
        assert page.status == 303  # to sign in
    # An event stream is observed once its headers go out, while it is still open.
    stream = await it.session.get(
        it.base + "/events", headers={"Authorization": f"Bearer {it.secrets['vic']}"}
    )
    try:
        assert stream.status == 200
        for _ in range(50):
            if ("api", "GET", "/api/v1/events", "2xx") in _counts(it):
                break
            await asyncio.sleep(0.05)
    finally:
        stream.close()

    counts = _counts(it)
    assert counts[("api", "POST", "/api/v1/dispatches", "4xx")] == 1
    assert counts[("api", "GET", "/api/v1/dispatches/{dispatch_id}", "4xx")] == 3
    assert counts[("api", "GET", "/api/v1/status", "4xx")] == 1
    assert counts[("other", "GET", "unmatched", "4xx")] == 1
    assert counts[("ui", "GET", "/ui/signin", "2xx")] == 1
    assert counts[("ui", "GET", "/ui/{tail}", "3xx")] == 1
    assert counts[("api", "GET", "/api/v1/events", "2xx")] == 1
    text = it.ctx.metrics.render().decode()
    for raw in ("d-0000aaaa", "d-0000dddd", "d-0000eeee", "secret-looking"):
        assert raw not in text
