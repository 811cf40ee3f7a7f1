"""`not_before` and `window_for` on the API's submit, over a real listener on 127.0.0.1 and a
real SQLite store: the narrowing is stored with the request, and its answer and the
approvers' list carry it; a malformed one is an
`invalid_input` problem naming the field, one that ended already a `window_empty` problem, and
neither writes anything."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import principals
from tests.support import api_server
from tests.support.api_server import TOKENS, VIEWER, bearer
from tests.support.clock import ManualClock

PROBLEM = "application/problem+json"
SUBMITTER = "submitter-token-0123456789"
HOUR_MS = 3_600_000


class Served:
    def __init__(self, db: Path, port: int, session: aiohttp.ClientSession) -> None:
        self.db = db
        self.url = f"http://127.0.0.1:{port}/api/v1/dispatches"
        self.session = session

    def windows(self) -> list[tuple[Any, Any]]:
        conn = sqlite3.connect(self.db)
        try:
            return list(conn.execute("SELECT not_before_ms, window_for_ms FROM approval_requests"))
        finally:
            conn.close()

    async def approvals(self) -> list[dict[str, Any]]:
        url = self.url.replace("/dispatches", "/approvals")
        async with self.session.get(url, headers=bearer(VIEWER)) as response:
            assert response.status == 200
            answer: dict[str, Any] = await response.json()
            return list(answer["approvals"])

    async def submit(self, **narrowing: object) -> tuple[int, str, Any]:
        plan = api.run_create_plan({"projectId": "p", "taskId": "t", "taskRevision": 1})
        body = json.dumps({"action": "run.create", "plan": plan.to_canonical_dict(), **narrowing})
        headers = {**bearer(SUBMITTER), "Content-Type": "application/json"}
        async with self.session.post(self.url, data=body, headers=headers) as response:
            return response.status, response.content_type, await response.json(content_type=None)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    db = tmp_path / "api.db"
    store = await api_server.open_store(db)
    tokens = {
        **TOKENS,
        SUBMITTER: principals.Authenticated(
            principal="sam", role=principals.TokenRole.SUBMITTER, token_id="tok_0123456789abcdef"
        ),
    }
    try:
        async with (
            api_server.serving(
                api_server.api_settings(db),
                store,
                ManualClock(int(time.time() * 1000)),
                authenticator=api_server.DictAuthenticator(tokens),
            ) as server,
            aiohttp.ClientSession() as session,
        ):
            assert server.port is not None
            yield Served(db, server.port, session)
    finally:
        await store.close()


async def test_a_submit_stores_the_requesters_narrowing(served: Served) -> None:
    status, _, created = await served.submit(not_before="2099-01-01T00:00:00Z", window_for="2h")
    assert status == 201, (created.get("detail"), created.get("field"))
    assert served.windows() == [(4070908800000, 2 * HOUR_MS)]
    # The answer and the approvers' list carry the narrowing they approve with the request.
    approval = created["approval"]
    assert (approval["not_before_ms"], approval["window_for_ms"]) == (4070908800000, 2 * HOUR_MS)
    listed = await served.approvals()
    assert [(a["not_before_ms"], a["window_for_ms"]) for a in listed] == [
        (4070908800000, 2 * HOUR_MS)
    ]


@pytest.mark.parametrize(
    ("narrowing", "field"),
    [
        ({"not_before": "tomorrow"}, "not_before"),
        ({"not_before": 1700000000000}, "not_before"),
        ({"window_for": "0s"}, "window_for"),
        ({"window_for": "2h", "not_before": "2026-01-01T00:00"}, "not_before"),
    ],
)
async def test_a_bad_narrowing_is_a_problem_and_writes_nothing(
    served: Served, narrowing: dict[str, object], field: str
) -> None:
    status, content_type, problem = await served.submit(**narrowing)
    assert (status, content_type) == (400, PROBLEM), problem
    assert (problem["code"], problem["field"]) == ("invalid_input", field)
    assert served.windows() == []


async def test_a_narrowing_that_ended_is_window_empty(served: Served) -> None:
    status, content_type, problem = await served.submit(
        not_before="2001-01-01T00:00:00Z", window_for="1h"
    )
    assert (status, content_type) == (422, PROBLEM), problem
    assert problem["code"] == "window_empty"
    assert problem["type"].endswith("window_empty")
    assert served.windows() == []
