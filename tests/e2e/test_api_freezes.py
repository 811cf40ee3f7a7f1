"""`GET /api/v1/freezes` and the dispatch resource's `wait`, over a real listener, a real
aiohttp client and a real SQLite store: a freeze the owner wrote is listed (the ended one only
with `?all=true`), the frozen dispatch names it, and a bad query parameter is a problem."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from qinglong_dispatcher.domain import freezes
from tests.support import api_server
from tests.support.api_server import VIEWER, bearer
from tests.support.clock import ManualClock
from tests.support.targets import submit_change


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Any, str, aiohttp.ClientSession]]:
    db = tmp_path / "api.db"
    store = await api_server.open_store(db)
    clock = ManualClock(int(time.time() * 1000))
    try:
        async with (
            api_server.serving(api_server.api_settings(db), store, clock) as server,
            aiohttp.ClientSession() as session,
        ):
            yield server, f"http://127.0.0.1:{server.port}/api/v1", session
    finally:
        await store.close()


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with session.get(url, headers=bearer(VIEWER)) as response:
        return response.status, json.loads(await response.text())


async def test_the_freezes_and_the_wait_they_cause(
    served: tuple[Any, str, aiohttp.ClientSession],
) -> None:
    server, base, session = served
    store, clock = server._ctx.store, server._ctx.clock
    dispatch_id = await submit_change(store, clock, "act-1", "router-1")
    freeze = await store.add_freeze(
        freezes.NewFreeze(from_ms=clock.ms - 1000, until_ms=clock.ms + 3_600_000, reason="rel")
    )

    status, body = await _get(session, base + "/freezes")
    assert status == 200
    assert [f["freeze_id"] for f in body["freezes"]] == [freeze.freeze_id]
    status, shown = await _get(session, base + f"/dispatches/{dispatch_id}")
    assert status == 200
    assert shown["execution"]["wait"] == {
        "reason": "frozen_by",
        "freeze_id": freeze.freeze_id,
        "not_before_ms": None,
    }
    assert shown["execution"]["window"] is None

    await store.end_freeze(freeze.freeze_id)
    assert (await _get(session, base + "/freezes"))[1] == {"freezes": []}
    every = (await _get(session, base + "/freezes?all=true"))[1]["freezes"]
    assert [f["freeze_id"] for f in every] == [freeze.freeze_id]
    status, problem = await _get(session, base + "/freezes?all=maybe")
    assert status == 400
    assert problem["code"] == "invalid_input"
