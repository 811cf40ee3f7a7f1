"""`GET /api/v1/audit/export` over a real listener and a real client, on both dialects: the same
records and cursors as the export the CLI runs, streamed in pages; bad input is problem+json."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import digests, principals
from tests.contract.test_audit_export import exported
from tests.support import api_server, stores
from tests.support.actions import DEFAULT_TTL_MS, submit_runs
from tests.support.api_server import VIEWER, bearer
from tests.support.clock import ManualClock

EPOCH = "1970-01-01T00:00:00Z"
CONTEXT = principals.RequestContext(
    token_id="tok_" + "c" * 16, client_address="192.0.2.44", request_id="req-export-1"
)


class Client:
    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def get(self, query: str, token: str | None = VIEWER) -> tuple[int, str, str]:
        headers = {} if token is None else bearer(token)
        url = f"{self.base}/audit/export?{query}"
        async with self.session.get(url, headers=headers) as response:
            return response.status, response.content_type, await response.text()


@contextlib.asynccontextmanager
async def serving(
    h: stores.Harness, tmp_path: Path
) -> AsyncIterator[tuple[stores.Harness, Client]]:
    settings = api_server.api_settings(tmp_path / "unused.db")
    async with (
        api_server.serving(settings, h.store, ManualClock()) as server,
        aiohttp.ClientSession() as session,
    ):
        yield h, Client(session, f"http://127.0.0.1:{server.port}/api/v1")


@pytest.fixture
async def served(
    harness: stores.Harness, tmp_path: Path
) -> AsyncIterator[tuple[stores.Harness, Client]]:
    async with serving(harness, tmp_path) as both:
        yield both


@pytest.fixture
async def edge_served(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[stores.Harness, Client]]:
    """SQLite only: a store acting as an API principal needs no login there (on PostgreSQL the
    API's login becomes the principal's role; tests/security covers that path)."""
    async with stores.open_harness("sqlite", tmp_path_factory) as h, serving(h, tmp_path) as both:
        yield both


async def test_pages_of_the_stream_are_the_export_with_its_cursors(
    served: tuple[stores.Harness, Client],
) -> None:
    h, client = served
    await submit_runs(h.approver_store, ManualClock(), 5)
    expected = [record.as_dict(cursor) for record, cursor in await exported(h.store)]
    got: list[dict[str, Any]] = []
    query = f"since={EPOCH}&limit=6"
    pages = 0
    while True:
        status, media, text = await client.get(query)
        assert (status, media) == (200, "application/x-ndjson"), text
        page = [json.loads(line) for line in text.splitlines()]
        got += page
        pages += 1
        if len(page) < 6:
            break
        query = f"after={page[-1]['cursor']}&limit=6"
    assert got == expected
    assert pages == len(expected) // 6 + 1

    status, media, text = await client.get(f"since={EPOCH}&format=cef&limit=1000")
    assert (status, media) == (200, "text/plain")
    lines = text.splitlines()
    assert len(lines) == len(expected)
    assert all(line.startswith("CEF:0|qinglong|qinglong-dispatcher|") for line in lines)
    assert f"cs4={expected[-1]['cursor']}" in lines[-1]


async def test_a_record_written_through_the_api_names_its_token_client_and_request(
    edge_served: tuple[stores.Harness, Client],
) -> None:
    h, client = edge_served
    who = principals.Authenticated(
        token_id=CONTEXT.token_id, principal="alice", role=principals.TokenRole.APPROVER
    )
    acting = await h.store.acting_as(who)
    plan = api.run_create_plan({"projectId": "p", "taskId": "t", "taskRevision": 1})
    new = api.new_approval(
        plan,
        requested_by="alice",
        now_ms=1_000,
        approval_ttl_ms=DEFAULT_TTL_MS,
        plan_digests=digests.PLAIN,
    )
    await acting.create_approval(new, now_ms=1_000, context=CONTEXT)
    status, _media, text = await client.get(f"since={EPOCH}")
    assert status == 200
    records = [json.loads(line) for line in text.splitlines()]
    (record,) = [r for r in records if r["kind"] == "api.create"]
    assert (record["token_id"], record["client_address"], record["request_id"]) == (
        CONTEXT.token_id,
        CONTEXT.client_address,
        CONTEXT.request_id,
    )
    assert record["principal"] == "alice"
    assert record["trace_id"] is None


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("since=yesterday", "since"),
        ("after=1", "after"),
        (f"since={EPOCH}&format=xml", "format"),
        (f"since={EPOCH}&limit=0", "limit"),
        (f"since={EPOCH}&limit=10001", "limit"),
        ("", "since"),
        (f"since={EPOCH}&secret=1", "secret"),
    ],
)
async def test_bad_input_is_a_problem_naming_the_field(
    served: tuple[stores.Harness, Client], query: str, field: str
) -> None:
    _h, client = served
    status, media, text = await client.get(query)
    assert (status, media) == (400, "application/problem+json"), text
    body = json.loads(text)
    assert body["field"] == field
    assert body["detail"].startswith(field)


async def test_no_token_no_export(served: tuple[stores.Harness, Client]) -> None:
    _h, client = served
    status, media, _text = await client.get(f"since={EPOCH}", token=None)
    assert (status, media) == (401, "application/problem+json")
