"""The control-plane API's reads, its authentication and its problems, over a real listener on
127.0.0.1, a real aiohttp client and a real SQLite store."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from qinglong_dispatcher import api, bootstrap
from qinglong_dispatcher.lifecycle import metrics
from qinglong_dispatcher.web import app
from tests.support import api_server
from tests.support.api_server import VIEWER, bearer
from tests.support.clock import ManualClock

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = "application/problem+json"


class Client:
    """A real HTTP client of one running server."""

    def __init__(self, session: aiohttp.ClientSession, base: str, server: Any) -> None:
        self.session = session
        self.base = base
        self.server = server
        self.metrics: metrics.Metrics = server._ctx.metrics

    async def get(
        self, path: str, token: str | None = VIEWER, **kwargs: Any
    ) -> tuple[int, dict[str, str], Any]:
        headers = {} if token is None else bearer(token)
        async with self.session.get(self.base + path, headers=headers, **kwargs) as response:
            text = await response.text()
            body = json.loads(text) if text and "json" in response.content_type else text
            return response.status, dict(response.headers), body


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[Client]:
    db = tmp_path / "api.db"
    store = await api_server.open_store(db)
    clock = ManualClock()
    settings = api_server.api_settings(db)
    try:
        async with (
            api_server.serving(settings, store, clock) as server,
            aiohttp.ClientSession() as session,
        ):
            yield Client(session, f"http://127.0.0.1:{server.port}/api/v1", server)
    finally:
        await store.close()


async def _seed(client: Client, n: int, project: str = "shop") -> list[str]:
    ctx = client.server._ctx
    the_api = bootstrap.build_api(api_server.api_settings(Path("unused.db")), ctx.store, ctx.clock)
    consumed = []
    for i in range(n):  # one submit each: each dispatch gets its own created_at_ms
        ctx.clock.advance(ms=1)
        plan = api.run_create_plan({"projectId": project, "taskId": f"t-{i}", "taskRevision": i})
        consumed += await the_api.submit([plan], requested_by="cli", approved_by="cli")
    return [c.dispatch_id for c in consumed]


def _assert_problem(status: int, headers: dict[str, str], body: Any, code: int, kind: str) -> None:
    assert status == code, body
    assert headers["Content-Type"].startswith(PROBLEM)
    assert body["type"] == f"/problems/{kind}"
    assert body["code"] == kind
    assert body["status"] == code
    assert "Traceback" not in json.dumps(body)


async def test_a_request_without_a_valid_token_is_401_with_a_bearer_challenge(
    client: Client,
) -> None:
    for token, error in ((None, False), ("not-a-token", True), ("bad token!", True)):
        status, headers, body = await client.get("/status", token=token)
        _assert_problem(status, headers, body, 401, "unauthenticated")
        assert headers["WWW-Authenticate"].startswith("Bearer ")
        assert ('error="invalid_token"' in headers["WWW-Authenticate"]) is error
    async with client.session.get(
        client.base + "/status", headers={"Authorization": "Basic dmVyYTpwdw=="}
    ) as response:
        assert response.status == 401
    # Unknown paths and methods are refused alike before they are told apart: no probing.
    assert (await client.get("/nothing-here", token=None))[0] == 401
    assert (await client.get("/dispatches/x/y", token="nope"))[0] == 401


async def test_the_openapi_document_and_liveness_need_no_token(client: Client) -> None:
    status, _, served = await client.get("/openapi.json", token=None)
    assert status == 200
    checked_in = json.loads((ROOT / "docs" / "api" / "openapi.json").read_text(encoding="utf-8"))
    assert served == checked_in, "run: python -m qinglong_dispatcher.web.openapi"
    assert (ROOT / "docs" / "api" / "openapi.json").read_bytes() == app.document_bytes()
    documented = {
        (method.upper(), path) for path, item in served["paths"].items() for method in item
    }
    assert documented == app.routed()
    status, _, body = await client.get("/healthz", token=None)
    assert (status, body["ok"]) == (200, True)


async def test_status_is_what_status_json_prints(client: Client) -> None:
    await _seed(client, 3)
    status, headers, body = await client.get("/status")
    assert status == 200
    assert headers["Cache-Control"] == "no-store"
    assert body["profile"] == "edge"
    assert body["executions"]["pending"] == 3
    assert set(body) == {
        "profile",
        "executions",
        "due",
        "oldest_due_age_seconds",
        "runs",
        "step_runs",
    }


async def test_dispatches_come_in_keyset_pages_newest_first_with_filters(client: Client) -> None:
    ids = await _seed(client, 5)
    other = await _seed(client, 1, project="other")
    seen: list[str] = []
    cursor = None
    while True:
        query = "?project=shop&limit=2" + ("" if cursor is None else f"&after={cursor}")
        status, _, page = await client.get("/dispatches" + query)
        assert status == 200
        seen += [row["dispatch_id"] for row in page["dispatches"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))
    _, _, page = await client.get("/dispatches?status=pending&action=run.create")
    assert [r["dispatch_id"] for r in page["dispatches"]] == [*other, *reversed(ids)]
    _, _, page = await client.get("/dispatches?status=succeeded")
    assert page == {"dispatches": [], "next": None}
    assert "lease_token" not in json.dumps(page)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("status=bogus", "status"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=ten", "limit"),
        ("after=nonsense", "after"),
        ("project=has%20space", "project"),
        ("action=%00", "action"),
        ("colour=blue", "colour"),
        ("limit=1&limit=2", "limit"),
    ],
)
async def test_a_bad_query_is_400_naming_the_field(client: Client, query: str, field: str) -> None:
    status, headers, body = await client.get(f"/dispatches?{query}")
    _assert_problem(status, headers, body, 400, "invalid_input")
    assert body["field"] == field
    assert body["detail"].startswith(field)


async def test_one_dispatch_is_the_show_view_without_a_lease_token(client: Client) -> None:
    (dispatch_id,) = await _seed(client, 1)
    status, _, body = await client.get(f"/dispatches/{dispatch_id}")
    assert status == 200
    assert body["dispatch_id"] == dispatch_id
    assert body["plan"]["taskId"] == "t-0"
    assert body["execution"]["status"] == "pending"
    assert "lease_token" not in json.dumps(body)
    for missing in ("d-00000000-none", "not%20an%20id"):
        status, headers, body = await client.get(f"/dispatches/{missing}")
        _assert_problem(status, headers, body, 404, "dispatch_not_found")
    assert "not an id" not in json.dumps(body)


async def test_one_dispatch_shows_its_takeovers_against_their_bound(client: Client) -> None:
    taken, fresh = await _seed(client, 2)
    store, clock = client.server._ctx.store, client.server._ctx.clock
    for owner in ("w1", "w2"):  # w1 dies before the barrier; w2 takes its lease over
        claimed = await store.claim(
            taken, now_ms=clock.now_ms(), owner=owner, token=f"t-{owner}", lease_ms=1_000
        )
        assert claimed.lease is not None
        clock.advance(ms=1_000)
    _, _, document = await client.get("/openapi.json", token=None)
    schema = document["components"]["schemas"]["Execution"]
    shown: dict[str, tuple[int, int]] = {}
    for dispatch_id in (taken, fresh):
        status, _, body = await client.get(f"/dispatches/{dispatch_id}")
        assert status == 200
        execution = body["execution"]
        assert set(execution) == set(schema["required"]) == set(schema["properties"])
        shown[dispatch_id] = (execution["takeovers"], execution["max_takeovers"])
    # `_seed` submits with the default budget of 5 attempts, so 20 takeovers.
    assert shown == {taken: (1, 20), fresh: (0, 20)}


async def test_recovery_and_audit_reads(client: Client) -> None:
    (dispatch_id,) = await _seed(client, 1)
    status, _, body = await client.get("/recovery?limit=10")
    assert (status, body) == (200, {"recovery_required": [], "next": None})
    status, headers, body = await client.get("/recovery?after=1:x:y:%20")
    _assert_problem(status, headers, body, 400, "invalid_input")
    status, _, body = await client.get(f"/audit?subject={dispatch_id}")
    assert (status, body) == (200, {"audit": [], "next": None})


async def test_unknown_paths_methods_and_big_bodies_are_problems(client: Client) -> None:
    status, headers, body = await client.get("/nothing-here")
    _assert_problem(status, headers, body, 404, "not_found")
    async with client.session.post(client.base + "/status", headers=bearer(VIEWER)) as response:
        assert response.status == 405
        assert response.headers["Allow"] == "GET"
        assert (await response.json(content_type=PROBLEM))["code"] == "method_not_allowed"
    big = b"x" * (256 * 1024 + 1)
    async with client.session.post(
        client.base + "/status", headers=bearer(VIEWER), data=big
    ) as response:
        assert response.status == 413
        assert (await response.json(content_type=PROBLEM))["code"] == "body_too_large"


async def test_a_request_aiohttp_cannot_parse_is_a_problem_too(client: Client) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    writer.write(b"NOT HTTP AT ALL\r\n\r\n")
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.")
    assert b" 400 " in head.split(b"\r\n")[0]
    assert b"aiohttp" not in head  # no version banner
    assert PROBLEM.encode() in head
    assert json.loads(payload)["code"] == "malformed_request"


async def test_repeated_authentication_failures_are_rate_limited_per_address(
    client: Client,
) -> None:
    for _ in range(10):
        assert (await client.get("/status", token="wrong"))[0] == 401
    status, headers, body = await client.get("/status", token="wrong")
    _assert_problem(status, headers, body, 429, "rate_limited")
    assert 1 <= int(headers["Retry-After"]) <= 10
    # While limited, even a good token waits: the address is refused before any lookup.
    assert (await client.get("/status"))[0] == 429
    text = client.metrics.render().decode()
    assert "qinglong_dispatcher_api_auth_failures_total 10.0" in text
    assert 'qinglong_dispatcher_api_rate_limited_total{reason="auth_failures"} 2.0' in text
