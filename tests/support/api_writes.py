"""The API served over a harness of either dialect with real tokens of five principals (from
the store's `create_token`), writes acting through a store that becomes each principal."""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict

from qinglong_dispatcher import api, ports
from qinglong_dispatcher.adapters.sqlite import store as sqlite_store
from qinglong_dispatcher.bootstrap import listeners
from qinglong_dispatcher.domain import principals
from qinglong_dispatcher.lifecycle import http, metrics
from qinglong_dispatcher.web import context
from qinglong_dispatcher.web import server as web_server
from tests.support import api_server, stores
from tests.support.clock import ManualClock

Role = principals.TokenRole
PROBLEM = "application/problem+json"
API_LOGIN = stores.session_login("api_writes")
_NUMBERS = itertools.count()
KINDS = {
    "vic": Role.VIEWER,
    "sam": Role.SUBMITTER,
    "alice": Role.APPROVER,
    "bob": Role.APPROVER,
    "carol": Role.OPERATOR,
}


class Served:
    """One API server over a harness, the tokens of five principals, and a client."""

    def __init__(self, harness: stores.Harness, admin: ports.Store, base: str) -> None:
        self.harness = harness
        self.admin = admin
        self.base = base
        self.names: dict[str, str] = {}
        self.secrets: dict[str, str] = {}
        self.token_ids: dict[str, str] = {}
        self.session: aiohttp.ClientSession
        self.ctx: context.Context
        self.clock = ManualClock(int(time.time() * 1000))

    def table(self, name: str) -> str:
        return f"qinglong.{name}" if self.harness.dialect == "postgres" else name

    async def call(
        self,
        method: str,
        path: str,
        who: str | None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, CIMultiDict[str], Any]:
        sent = {**({} if who is None else api_server.bearer(self.secrets[who])), **(headers or {})}
        async with self.session.request(
            method, self.base + path, json=body, headers=sent
        ) as response:
            text = await response.text()
            parsed = json.loads(text) if text and "json" in response.content_type else text
            out = CIMultiDict(response.headers)
            out["Content-Type"] = response.content_type
            return response.status, out, parsed

    async def everything(self) -> list[dict[str, Any]]:
        """What a refused write must leave as it was (a refused token's own `api.auth_failed`
        record aside: that refusal is audited)."""
        return await self.harness.raw(
            f"SELECT (SELECT count(*) FROM {self.table('approval_requests')}) AS requests, "
            f"(SELECT count(*) FROM {self.table('action_plans')}) AS plans, "
            f"(SELECT count(*) FROM {self.table('security_audit_events')} "
            "WHERE kind <> 'api.auth_failed') AS audit, "
            f"(SELECT count(*) FROM {self.table('approved_action_dispatches')}) AS dispatches, "
            f"(SELECT count(*) FROM {self.table('recovery_resolutions')}) AS resolutions, "
            f"(SELECT count(*) FROM {self.table('approval_requests')} "
            "WHERE status = 'pending') AS pending, "
            f"(SELECT count(*) FROM {self.table('approved_action_dispatch_executions')} "
            "WHERE status = 'cancelled') AS cancelled"
        )

    async def audit(self, subject: str) -> list[dict[str, Any]]:
        return await self.harness.raw(
            "SELECT kind, principal, token_id, client_address, request_id FROM "
            f"{self.table('security_audit_events')} WHERE subject_id = '{subject}' "
            "ORDER BY event_id"
        )


def plan_body(task: str = "t") -> dict[str, object]:
    plan = api.run_create_plan({"projectId": "shop", "taskId": task, "taskRevision": 1})
    return {"action": "run.create", "plan": plan.to_canonical_dict()}


@contextlib.asynccontextmanager
async def _stores(
    harness: stores.Harness,
) -> AsyncIterator[tuple[ports.Store, ports.Store, ports.PrincipalStores]]:
    """(admin, the daemon's store, the acting store): on SQLite the file as the daemon opens
    it by default (a token's principal does not approve its own requests); on PostgreSQL the
    administrator, the runtime login, and the API's NOINHERIT login."""
    if harness.dialect == "sqlite":
        assert isinstance(harness.store, sqlite_store.SqliteStore)
        yield harness.store, harness.store, harness.store
        return

    database = str(await harness.scalar("SELECT current_database()"))
    await stores.create_login(API_LOGIN, "qinglong_api")
    await harness.raw(f"ALTER ROLE {API_LOGIN} NOINHERIT")
    admin = await stores.open_postgres(stores.pg_url(database), max_size=1)
    acting = await stores.open_postgres(stores.pg_url(database, login=API_LOGIN), max_size=2)
    try:
        yield admin, harness.store, acting
    finally:
        made = [f"{stores.INSTALLATION}_p_{t.principal}" for t in await admin.list_tokens()]
        await acting.close()
        await admin.close()
        await stores.drop_roles(*made)


@contextlib.asynccontextmanager
async def serving(
    dialect: str, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> AsyncIterator[Served]:
    """The server, its principals' tokens and a client session; everything closed after."""
    async with (
        stores.open_harness(dialect, tmp_path_factory) as harness,
        _stores(harness) as (admin, store, acting),
    ):
        clock = ManualClock(int(time.time() * 1000))
        server = listeners.api_server(
            api_server.api_settings(tmp_path / "unused.db"),
            store,
            clock,
            metrics.Metrics(profile="edge", cadence_s=1.0, process_metrics=False),
            http.Health(cadence_s=1.0),
            authenticator=store,
            acting=acting,
        )
        assert isinstance(server, web_server.ApiServer)
        await server.start()
        try:
            it = Served(harness, admin, f"http://127.0.0.1:{server.port}/api/v1")
            it.ctx = server._ctx
            it.clock = clock
            number = next(_NUMBERS)
            for who, role in KINDS.items():
                name = stores.session_principal(f"{who}w{number}")
                new, secret = principals.NewToken.issue(
                    principal=name, role=role, ttl_ms=3_600_000, created_by="test"
                )
                await admin.create_token(new)
                it.names[who], it.secrets[who], it.token_ids[who] = name, secret, new.token_id
            async with aiohttp.ClientSession() as it.session:
                yield it
        finally:
            await server.aclose()


def assert_problem(answer: tuple[int, CIMultiDict[str], Any], status: int, code: str) -> None:
    got, headers, body = answer
    assert got == status, body
    assert headers["Content-Type"] == PROBLEM
    assert body["type"] == f"/problems/{code}", body
    assert (body["code"], body["status"]) == (code, status)
    assert isinstance(body["title"], str)


async def submit(it: Served, who: str, task: str = "t", **narrowing: str) -> dict[str, Any]:
    """A request of `who` through the API (`narrowing`: `not_before`, `window_for`)."""
    status, _, body = await it.call("POST", "/dispatches", who, {**plan_body(task), **narrowing})
    assert status == 201, body
    approval: dict[str, Any] = body["approval"]
    return approval
