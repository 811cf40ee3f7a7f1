"""The API listener's stop closes every connection it made, a request still running past the
shutdown grace included: the grace bounds the stop, and nothing of the listener outlives it
(real sockets on 127.0.0.1, a real SQLite store held busy by another connection)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path

import anyio
import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import principals
from qinglong_dispatcher.web import server as web_server
from tests.support import api_server
from tests.support.clock import ManualClock

SUBMITTER = "submitter-token-0123456789"
TOKENS = {
    SUBMITTER: principals.Authenticated(
        principal="sam", role=principals.TokenRole.SUBMITTER, token_id="tok_0123456789abcdef"
    )
}

GRACE_S = 1.5
"""Long enough that aiohttp's own shutdown (a wait of the grace for the request, then another
for its cancelled handler) outlasts the listener's bound of the grace and one second."""


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    with anyio.move_on_after(seconds):
        while await reader.read(4096):
            pass
        return True
    return False


async def test_a_request_still_running_past_the_grace_has_its_connection_closed_at_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web_server, "SHUTDOWN_GRACE_S", GRACE_S)
    db = tmp_path / "busy.db"
    store = await api_server.open_store(db)
    settings = api_server.api_settings(db)
    # Another connection holds the write lock: the request's transaction waits in the store's
    # worker thread for the busy timeout (5 s), where no cancellation reaches it.
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        async with api_server.serving(
            settings,
            store,
            ManualClock(),
            authenticator=api_server.DictAuthenticator(TOKENS),
        ) as served:
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            plan = api.run_create_plan({"projectId": "p", "taskId": "t", "taskRevision": 1})
            body = json.dumps({"action": "run.create", "plan": plan.to_canonical_dict()}).encode()
            writer.write(
                b"POST /api/v1/dispatches HTTP/1.1\r\nHost: x\r\n"
                b"Authorization: Bearer " + SUBMITTER.encode() + b"\r\n"
                b"Content-Type: application/json\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            await writer.drain()
            await anyio.sleep(0.5)
            assert served.open_connections == 1
            began = time.monotonic()
            # serving's exit stops the listener and waits for `aclose`
        stopped_after = time.monotonic() - began
        assert served.open_connections == 0
        assert await _closed_within(reader, 0.5), "the connection outlived the listener's stop"
        assert stopped_after < GRACE_S + 1.5, stopped_after
        writer.close()
    finally:
        holder.rollback()
        holder.close()
        await store.close()
