"""Hostile requests to the control-plane API over a real listener on 127.0.0.1 and a real SQLite
store: a body nested past the parser's stack, a header line over its cap and too many headers.
Each is a typed problem+json (never `500 internal`) and writes nothing."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import principals
from qinglong_dispatcher.web import bodies
from tests.support import api_server
from tests.support.api_server import TOKENS, bearer
from tests.support.clock import ManualClock

PROBLEM = "application/problem+json"
SUBMITTER = "submitter-token-0123456789"
_TABLES = ("action_plans", "approval_requests", "approved_action_dispatches")


class Served:
    def __init__(self, db: Path, port: int, session: aiohttp.ClientSession) -> None:
        self.db = db
        self.port = port
        self.session = session
        self.base = f"http://127.0.0.1:{port}/api/v1"

    def rows(self) -> dict[str, int]:
        conn = sqlite3.connect(self.db)
        try:
            return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in _TABLES}
        finally:
            conn.close()

    async def post(self, path: str, data: bytes) -> tuple[int, str, Any]:
        headers = {**bearer(SUBMITTER), "Content-Type": "application/json"}
        async with self.session.post(self.base + path, data=data, headers=headers) as response:
            return response.status, response.content_type, await response.json(content_type=None)

    async def raw(self, request: bytes) -> tuple[bytes, dict[str, Any]]:
        """One request written on a socket; the status line and the problem of the answer."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(request)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        head, _, payload = answer.partition(b"\r\n\r\n")
        assert PROBLEM.encode() in head
        return head.split(b"\r\n")[0], json.loads(payload)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    db = tmp_path / "api.db"
    store = await api_server.open_store(db)
    tokens = {
        **TOKENS,
        SUBMITTER: principals.Authenticated(
            principal="sam", role=principals.TokenRole.SUBMITTER, token_id="tok-submitter"
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


def _assert_bad_body(answer: tuple[int, str, Any], field: str) -> None:
    status, content_type, problem = answer
    assert (status, content_type) == (400, PROBLEM), problem
    assert problem["code"] == "invalid_input"
    assert problem["field"] == field
    assert "nested deeper than" in problem["detail"]


async def test_a_body_nested_100000_levels_is_400_not_500_and_writes_nothing(
    served: Served,
) -> None:
    before = served.rows()
    deep = b"[" * 100_000 + b"]" * 100_000  # 200 KB: under the body cap
    _assert_bad_body(await served.post("/dispatches", deep), "body")
    deep_object = b'{"a":' * 40_000 + b"1" + b"}" * 40_000  # 240 KB
    _assert_bad_body(await served.post("/dispatches", deep_object), "body")
    assert served.rows() == before


async def test_one_level_past_the_cap_is_refused_for_its_depth_and_at_the_cap_it_is_not(
    served: Served,
) -> None:
    plan = api.run_create_plan({"projectId": "p", "taskId": "t", "taskRevision": 1})
    body = {"action": "run.create", "plan": plan.to_canonical_dict()}
    before = served.rows()

    def nested(levels: int) -> bytes:
        # The body is level 1; a member holding `levels` arrays reaches 1 + levels.
        return json.dumps({**body, "x": "@"}).replace('"@"', "[" * levels + "]" * levels).encode()

    _assert_bad_body(await served.post("/dispatches", nested(bodies.MAX_DEPTH)), "body")
    status, _, problem = await served.post("/dispatches", nested(bodies.MAX_DEPTH - 1))
    assert status == 400, problem  # the unknown member `x`, not the depth
    assert "nested" not in problem.get("detail", "")
    # A string full of brackets is no nesting at all.
    status, _, problem = await served.post(
        "/dispatches", json.dumps({**body, "x": "[" * 100_000}).encode()
    )
    assert status == 400, problem
    assert "nested" not in problem.get("detail", "")
    assert served.rows() == before


async def test_a_header_line_over_the_cap_is_431(served: Served) -> None:
    before = served.rows()
    line, problem = await served.raw(
        b"GET /api/v1/status HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9 * 1024 + b"\r\n\r\n"
    )
    assert b" 431 " in line, line
    assert problem["code"] == "headers_too_large"
    assert served.rows() == before


async def test_two_hundred_headers_are_431(served: Served) -> None:
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(200))
    line, problem = await served.raw(b"GET /api/v1/status HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
    assert b" 431 " in line, line
    assert problem["code"] == "headers_too_large"


async def test_a_request_line_over_its_cap_stays_a_malformed_request(served: Served) -> None:
    # Not a header: the request line's own cap, which RFC 6585's 431 does not name.
    line, problem = await served.raw(b"GET /" + b"a" * 9 * 1024 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b" 400 " in line, line
    assert problem["code"] == "malformed_request"
