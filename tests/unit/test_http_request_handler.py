"""The `http.request` handler over a real SQLite store and a real server on 127.0.0.1: inspect
blocks what a receiver refuses before the barrier, execute answers what the response proves,
resends only what cannot be delivered twice, and never lets a secret out."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
from collections.abc import AsyncIterator
from typing import Any

import pytest

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import contract
from qinglong_dispatcher.actions.http_request import handler, send
from qinglong_dispatcher.actions.http_request import plan as plan_model
from qinglong_dispatcher.domain import errors, plans, records
from tests.support import stores, targets
from tests.support.actions import make_api
from tests.support.clock import ManualClock
from tests.support.recovery import started_execution
from tests.unit import test_http_request_send as served

MODELS = {plan_model.ACTION_TYPE: plan_model.HttpRequestPlan}
SECRET_VAR = "QL_TEST_HTTP_BEARER"
SECRET = "tok-5f0c1e9a7b2d4c6e8a0b"
WEBHOOK_VAR = "QL_TEST_HTTP_WEBHOOK"
WEBHOOK_KEY = b"webhook-key-for-tests-0123456789"


@dataclasses.dataclass
class World:
    harness: stores.Harness
    clock: ManualClock
    server: served.Downstream
    sender: send.Sender
    reader: contract.PlanReader
    started: list[records.ExecutionIdentity] = dataclasses.field(default_factory=list)

    def handler(self, base_url: str | None = None, **extra: Any) -> handler.HttpRequestHandler:
        chosen = served.receiver_set(base_url or self.server.base_url, **extra)
        return handler.HttpRequestHandler(self.reader, chosen, self.sender, self.clock)

    async def submit(self, **fields: Any) -> records.Dispatch:
        plan = plans.parse_plan(plan_model.ACTION_TYPE, served.plan_data(**fields), models=MODELS)
        (consumed,) = await make_api(self.harness.approver_store, self.clock).submit(
            [plan], requested_by="tester", approved_by="approver"
        )
        dispatch = await self.harness.store.get_dispatch(consumed.dispatch_id)
        assert dispatch is not None
        return dispatch

    async def context(self, *, budget_ms: int = 3000, **fields: Any) -> ports.ExecutionContext:
        # The receiver is the plans' target: the execution started before (which these tests
        # never complete) is settled first, or it would keep the next one from its claim.
        for earlier in self.started:
            await targets.finish(self.harness.store, earlier, now_ms=self.clock.now_ms())
        await self.submit(**fields)
        dispatch, identity = await started_execution(self.harness, self.clock)
        self.started.append(identity)
        return ports.ExecutionContext(
            dispatch=dispatch, identity=identity, deadline_ms=self.clock.now_ms() + budget_ms
        )


@pytest.fixture
async def world(
    tmp_path_factory: pytest.TempPathFactory, clock: ManualClock
) -> AsyncIterator[World]:
    async with (
        stores.open_harness("sqlite", tmp_path_factory) as harness,
        served.downstream() as server,
    ):
        sender = send.Sender()
        try:
            yield World(harness, clock, server, sender, contract.PlanReader(harness.store, MODELS))
        finally:
            await sender.aclose()


async def test_inspect_is_ready_with_the_approved_digest_and_sends_nothing(world: World) -> None:
    dispatch = await world.submit()
    result = await world.handler().inspect(dispatch)
    assert (result.kind, result.action_digest) == (
        ports.InspectKind.READY,
        dispatch.action_digest,
    )
    assert world.server.seen == []


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"path": "/admin/users"}, "path_outside_receiver"),
        ({"path": "/hooksmith"}, "path_outside_receiver"),
        ({"method": "DELETE"}, "method_not_allowed"),
        ({"receiver": "nobody"}, "receiver_unknown"),
    ],
)
async def test_inspect_blocks_what_the_receiver_refuses(
    world: World, fields: dict[str, Any], code: str
) -> None:
    dispatch = await world.submit(**fields)
    result = await world.handler().inspect(dispatch)
    assert (result.kind, result.code) == (ports.InspectKind.BLOCKED, code)
    assert world.server.seen == []


async def test_inspect_waits_for_a_secret_that_cannot_be_read_now(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SECRET_VAR, raising=False)
    dispatch = await world.submit()
    result = await world.handler(auth=f"env:{SECRET_VAR}").inspect(dispatch)
    assert (result.kind, result.code) == (ports.InspectKind.TRANSIENT, "secret_unavailable")


async def test_a_2xx_succeeds_with_a_receipt_that_holds_no_body(world: World) -> None:
    world.server.then(served.status(200, b'{"secret-body": 1}', {"X-Request-Id": "r-1"}))
    result = await world.handler().execute(await world.context())
    assert (result.kind, result.code) == (ports.ExecuteKind.SUCCEEDED, "http_200")
    assert result.receipt == {
        "receiver": "hooks",
        "status": 200,
        "headers": {"x-request-id": "r-1"},
        "bodyDigest": hashlib.sha256(b'{"secret-body": 1}').hexdigest(),
        "bodyBytes": 18,
        "replayed": False,
    }
    assert "secret-body" not in repr(result)


@pytest.mark.parametrize("code", [400, 422])
async def test_a_failed_status_fails_with_its_receipt(world: World, code: int) -> None:
    world.server.then(served.status(code))
    result = await world.handler().execute(await world.context())
    assert (result.kind, result.code) == (ports.ExecuteKind.FAILED, f"http_{code}")
    assert result.receipt is not None
    assert result.receipt["status"] == code
    assert len(world.server.seen) == 1


async def test_a_5xx_is_uncertain_and_never_retried(world: World) -> None:
    world.server.then(served.status(500))
    result = await world.handler().execute(await world.context())
    assert (result.kind, result.code) == (ports.ExecuteKind.UNCERTAIN, "http_500")
    assert result.receipt is None
    assert len(world.server.seen) == 1


async def test_in_flight_at_a_deduping_receiver_is_resent_with_the_same_bytes_and_key(
    world: World,
) -> None:
    world.server.then(served.status(409, headers={"Retry-After": "0"}), served.status(201))
    chosen = world.handler(idempotency={"dedupes": True})
    result = await chosen.execute(await world.context())
    assert (result.kind, result.code) == (ports.ExecuteKind.SUCCEEDED, "http_201")
    first, second = world.server.seen
    assert first.headers["idempotency-key"] == second.headers["idempotency-key"]
    assert first.headers["idempotency-key"].startswith('"d')
    assert first.body == second.body == b'{"order": 42}'
    assert first.path_qs == second.path_qs


async def test_in_flight_without_dedupes_is_uncertain(world: World) -> None:
    world.server.then(served.status(409), served.status(201))
    result = await world.handler().execute(await world.context())
    assert (result.kind, result.code) == (ports.ExecuteKind.UNCERTAIN, "in_flight")
    assert len(world.server.seen) == 1


async def test_a_refused_connection_fails_once_the_deadline_leaves_no_room(world: World) -> None:
    chosen = world.handler(
        f"http://127.0.0.1:{served.free_port()}",
        connect_timeout_seconds=0.2,
        read_timeout_seconds=0.2,
        total_timeout_seconds=0.3,
    )
    result = await chosen.execute(await world.context(budget_ms=700))
    assert (result.kind, result.code) == (ports.ExecuteKind.FAILED, "http_not_sent")


async def test_the_bearer_secret_is_sent_and_appears_nowhere_else(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_VAR, SECRET)
    chosen = world.handler(auth=f"env:{SECRET_VAR}")
    world.server.then(served.status(200, headers={"X-Request-Id": "r-2"}))
    result = await chosen.execute(await world.context())
    assert world.server.seen[0].headers["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in repr(result)
    assert SECRET not in repr(chosen.__dict__)
    world.server.then(served.status(500))
    uncertain = await chosen.execute(await world.context(actionRef="act-2"))
    assert SECRET not in repr(uncertain)


async def test_the_webhook_signature_verifies_independently(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WEBHOOK_VAR, "whsec_" + base64.b64encode(WEBHOOK_KEY).decode())
    chosen = world.handler(webhook_secret=f"env:{WEBHOOK_VAR}")
    ctx = await world.context()
    await chosen.execute(ctx)
    (seen,) = world.server.seen
    assert seen.headers["webhook-id"] == ctx.idempotency_key
    assert seen.headers["webhook-timestamp"] == str(world.clock.now_ms() // 1000)
    signed = f"{seen.headers['webhook-id']}.{seen.headers['webhook-timestamp']}.".encode()
    expected = hmac.new(WEBHOOK_KEY, signed + seen.body, hashlib.sha256).digest()
    assert seen.headers["webhook-signature"] == "v1," + base64.b64encode(expected).decode()


async def test_a_plan_that_drifted_after_approval_is_never_sent(world: World) -> None:
    ctx = await world.context()
    drifted = dataclasses.replace(ctx.dispatch, action_digest="0" * 64)
    result = await world.handler().execute(dataclasses.replace(ctx, dispatch=drifted))
    assert (result.kind, result.code) == (ports.ExecuteKind.FAILED, "digest_drift")
    assert world.server.seen == []


def test_a_receiver_set_can_be_checked_against_the_execute_timeout() -> None:
    chosen = served.receiver_set("http://127.0.0.1:1", total_timeout_seconds=30)
    chosen.require_within(31.0)
    with pytest.raises(errors.ConfigurationError, match=r"hooks\.total_timeout_seconds"):
        chosen.require_within(30.0)


async def test_the_receiver_gets_the_trace_context_only_when_there_is_one(world: World) -> None:
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    world.server.then(served.status(200), served.status(200))
    traced = dataclasses.replace(await world.context(), traceparent=traceparent)
    assert (await world.handler().execute(traced)).kind is ports.ExecuteKind.SUCCEEDED
    plain = await world.context(actionRef="act-2")
    assert (await world.handler().execute(plain)).kind is ports.ExecuteKind.SUCCEEDED
    first, second = world.server.seen
    assert first.headers["traceparent"] == traceparent
    assert "traceparent" not in second.headers
