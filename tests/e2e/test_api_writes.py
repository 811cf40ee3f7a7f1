"""The API's writes and approvals queue on both dialects, over a real listener on 127.0.0.1 with
real tokens from the store: each write acts as the token's principal in the database, which
decides (roles, separation of duties, the state machine) and records principal, token, client
address and request id in the audit row of the change."""

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

from qinglong_dispatcher import api, bootstrap, ports
from qinglong_dispatcher.adapters.sqlite import store as sqlite_store
from qinglong_dispatcher.domain import principals
from qinglong_dispatcher.lifecycle import http, metrics
from qinglong_dispatcher.web import context, idempotency
from qinglong_dispatcher.web import server as web_server
from tests.support import api_server, stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.recovery import started_execution

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
        """What a refused write must leave as it was."""
        return await self.harness.raw(
            f"SELECT (SELECT count(*) FROM {self.table('approval_requests')}) AS requests, "
            f"(SELECT count(*) FROM {self.table('action_plans')}) AS plans, "
            f"(SELECT count(*) FROM {self.table('security_audit_events')}) AS audit, "
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
    """(admin, the daemon's store, the acting store): on SQLite the file with self-approval
    off; on PostgreSQL the administrator, the runtime login, and the API's NOINHERIT login."""
    if harness.dialect == "sqlite":
        assert isinstance(harness.store, sqlite_store.SqliteStore)
        strict = sqlite_store.SqliteStore(harness.store.db, self_approval=False)
        yield harness.store, strict, strict
        return
    from qinglong_dispatcher.adapters.postgres import store as postgres_store

    database = str(await harness.scalar("SELECT current_database()"))
    await stores.create_login(API_LOGIN, "qinglong_api")
    await harness.raw(f"ALTER ROLE {API_LOGIN} NOINHERIT")
    admin = await postgres_store.PostgresStore.open(stores.pg_url(database), max_size=1)
    acting = await postgres_store.PostgresStore.open(
        stores.pg_url(database, login=API_LOGIN), max_size=2
    )
    try:
        yield admin, harness.store, acting
    finally:
        made = [f"{stores.INSTALLATION}_p_{t.principal}" for t in await admin.list_tokens()]
        await acting.close()
        await admin.close()
        await stores.drop_roles(*made)


@pytest.fixture(params=stores.DIALECTS)
async def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> AsyncIterator[Served]:
    async with (
        stores.open_harness(request.param, tmp_path_factory) as harness,
        _stores(harness) as (admin, store, acting),
    ):
        clock = ManualClock(int(time.time() * 1000))
        server = bootstrap.build_api_server(
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


async def _submit(it: Served, who: str, task: str = "t") -> dict[str, Any]:
    status, _, body = await it.call("POST", "/dispatches", who, plan_body(task))
    assert status == 201, body
    approval: dict[str, Any] = body["approval"]
    return approval


async def test_alice_submits_bob_approves_and_the_audit_names_each_with_their_request(
    served: Served,
) -> None:
    it = served
    status, headers, body = await it.call("POST", "/dispatches", "alice", plan_body())
    assert status == 201, body
    approval_id = body["approval"]["approval_request_id"]
    assert body["approval"]["status"] == "pending"
    assert body["approval"]["requested_principal"] == it.names["alice"]
    alice_request = headers["X-Request-Id"]
    status, headers, body = await it.call("POST", f"/approvals/{approval_id}/approve", "bob")
    assert status == 200, body
    bob_request = headers["X-Request-Id"]
    assert body["approval"]["decided_principal"] == it.names["bob"]
    assert body["approval"]["requested_principal"] == it.names["alice"]
    dispatch_id = body["dispatch_id"]
    status, _, shown = await it.call("GET", f"/dispatches/{dispatch_id}", "vic")
    assert status == 200
    assert approval_id in json.dumps(shown)
    rows = await it.audit(approval_id)
    alice, bob = it.names["alice"], it.names["bob"]
    assert [(r["kind"], r["principal"]) for r in rows] == [
        ("approval.created", alice),
        ("api.create", alice),
        ("approval.approved", bob),
        ("api.approve", bob),
        ("approval.consumed", bob),
    ]
    assert (rows[1]["token_id"], rows[1]["client_address"], rows[1]["request_id"]) == (
        it.token_ids["alice"],
        "127.0.0.1",
        alice_request,
    )
    assert (rows[3]["token_id"], rows[3]["client_address"], rows[3]["request_id"]) == (
        it.token_ids["bob"],
        "127.0.0.1",
        bob_request,
    )
    consumed = await it.audit(dispatch_id)
    assert [(r["kind"], r["principal"], r["token_id"], r["request_id"]) for r in consumed] == [
        ("api.consume", bob, it.token_ids["bob"], bob_request)
    ]
    # The queue no longer holds it; approving again is a conflict, not a second dispatch.
    assert_problem(
        await it.call("POST", f"/approvals/{approval_id}/approve", "bob"),
        409,
        "approval_state_conflict",
    )


async def test_alice_approving_her_own_request_is_refused_by_the_database(
    served: Served,
) -> None:
    it = served
    approval = await _submit(it, "alice")
    before = await it.everything()
    answer = await it.call("POST", f"/approvals/{approval['approval_request_id']}/approve", "alice")
    assert_problem(answer, 403, "self_approval_refused")
    assert await it.everything() == before


async def test_a_body_naming_a_principal_is_refused_and_writes_nothing(served: Served) -> None:
    it = served
    before = await it.everything()
    for forged in ("requested_by", "principal", "requested_principal"):
        answer = await it.call(
            "POST", "/dispatches", "sam", {**plan_body(), forged: it.names["bob"]}
        )
        assert_problem(answer, 400, "invalid_input")
        assert answer[2]["field"] == forged
    approval = await _submit(it, "sam")
    before = await it.everything()
    answer = await it.call(
        "POST",
        f"/approvals/{approval['approval_request_id']}/approve",
        "alice",
        {"decided_by": it.names["bob"]},
    )
    assert_problem(answer, 400, "invalid_input")
    assert await it.everything() == before
