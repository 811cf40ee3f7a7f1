"""`traceparent` on the API's submit, over a real listener on 127.0.0.1 and a real SQLite
store: a W3C context is stored with the request (and so with its dispatch); a malformed one,
or two of them, is a `traceparent_invalid` problem+json and writes nothing."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import principals
from tests.support import api_server
from tests.support.api_server import TOKENS, bearer
from tests.support.clock import ManualClock

PROBLEM = "application/problem+json"
SUBMITTER = "submitter-token-0123456789"
GIVEN = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class Served:
    def __init__(self, db: Path, port: int, session: aiohttp.ClientSession) -> None:
        self.db = db
        self.url = f"http://127.0.0.1:{port}/api/v1/dispatches"
        self.session = session

    def traceparents(self) -> list[Any]:
        conn = sqlite3.connect(self.db)
        try:
            return [r[0] for r in conn.execute("SELECT traceparent FROM approval_requests")]
        finally:
            conn.close()

    async def submit(self, *traceparents: str) -> tuple[int, str, Any]:
        plan = api.run_create_plan({"projectId": "p", "taskId": "t", "taskRevision": 1})
        body = json.dumps({"action": "run.create", "plan": plan.to_canonical_dict()})
        headers = CIMultiDict(bearer(SUBMITTER))
        headers["Content-Type"] = "application/json"
        for value in traceparents:
            headers.add("traceparent", value)
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
                ManualClock(),
                authenticator=api_server.DictAuthenticator(tokens),
            ) as server,
            aiohttp.ClientSession() as session,
        ):
            assert server.port is not None
            yield Served(db, server.port, session)
    finally:
        await store.close()


async def test_a_submit_stores_the_callers_traceparent(served: Served) -> None:
    status, _, created = await served.submit(GIVEN)
    assert status == 201, (created.get("detail"), created.get("field"))
    status, _, plain = await served.submit()
    assert status == 201, plain
    assert sorted(served.traceparents(), key=str) == sorted([GIVEN, None], key=str)


@pytest.mark.parametrize(
    "given",
    [
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",),
        ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",),
        (GIVEN, GIVEN),
    ],
)
async def test_a_bad_traceparent_is_a_problem_and_writes_nothing(
    served: Served, given: tuple[str, ...]
) -> None:
    status, content_type, problem = await served.submit(*given)
    assert (status, content_type) == (400, PROBLEM), problem
    assert problem["code"] == "traceparent_invalid"
    assert problem["type"].endswith("traceparent_invalid")
    assert served.traceparents() == []
