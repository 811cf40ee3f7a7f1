"""The `http.request` evidence provider over a real SQLite store and a real server: the receiver
is asked about the key (`get` or `replay`) only within its retention, and anything it cannot
answer raises (unavailable) instead of inviting an operator to fail the work."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

from qinglong_dispatcher.actions import contract
from qinglong_dispatcher.actions.http_request import evidence, send
from qinglong_dispatcher.actions.http_request import plan as plan_model
from qinglong_dispatcher.domain import plans, recovery
from tests.support import stores
from tests.support.actions import make_api
from tests.support.clock import ManualClock
from tests.support.recovery import started_execution
from tests.unit import test_http_request_send as served

MODELS = {plan_model.ACTION_TYPE: plan_model.HttpRequestPlan}
GET = {"dedupes": True, "key_retention_seconds": 3600, "lookup": "get"}
REPLAY = {"dedupes": True, "key_retention_seconds": 3600, "lookup": "replay"}
Kind = recovery.EvidenceKind


@dataclasses.dataclass
class World:
    harness: stores.Harness
    clock: ManualClock
    server: served.Downstream
    sender: send.Sender
    reader: contract.PlanReader

    def provider(self, idempotency: dict[str, Any]) -> evidence.HttpRequestEvidence:
        chosen = served.receiver_set(self.server.base_url, idempotency=idempotency)
        return evidence.HttpRequestEvidence(self.reader, chosen, self.sender, self.clock)

    async def snapshot(self) -> recovery.Snapshot:
        """A started execution (a dispatcher that died after the barrier), as recovery sees it."""
        plan = plans.parse_plan(plan_model.ACTION_TYPE, served.plan_data(), models=MODELS)
        await make_api(self.harness.approver_store, self.clock).submit(
            [plan], requested_by="tester", approved_by="approver"
        )
        dispatch, _ = await started_execution(self.harness, self.clock)
        execution = await self.harness.store.get_execution(dispatch.dispatch_id)
        assert execution is not None
        return recovery.Snapshot(execution=execution, dispatch=dispatch, observation=None)


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


def with_get_path(idempotency: dict[str, Any]) -> dict[str, Any]:
    return {**idempotency, "lookup_path": "/hooks/keys/{key}"}


async def test_a_completed_lookup_is_verified_with_a_digest(world: World) -> None:
    snapshot = await world.snapshot()
    world.server.then(served.status(200, b'{"status": "completed"}'))
    found = await world.provider(with_get_path(GET)).evidence(snapshot)
    assert found.kind is Kind.VERIFIED_SUCCEEDED
    assert found.evidence_digest is not None
    assert len(found.evidence_digest) == 64
    (seen,) = world.server.seen
    assert (seen.method, seen.path_qs) == ("GET", f"/hooks/keys/{snapshot.dispatch.dispatch_id}")
    assert seen.headers["idempotency-key"] == f'"{snapshot.dispatch.dispatch_id}"'


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (served.status(404), "lookup_missing"),
        (served.status(409), "lookup_in_flight"),
        (served.status(200, b'{"status": "processing"}'), "lookup_in_flight"),
    ],
)
async def test_a_lookup_that_finds_nothing_done_is_missing(
    world: World, answer: served.Answer, reason: str
) -> None:
    snapshot = await world.snapshot()
    world.server.then(answer)
    found = await world.provider(with_get_path(GET)).evidence(snapshot)
    assert (found.kind, found.reason) == (Kind.MISSING, reason)


@pytest.mark.parametrize(
    "answer",
    [
        served.status(500),
        served.status(200, b"not json"),
        served.reset,
        # Nested past the JSON parser's stack (was a RecursionError out of recovery).
        served.status(200, b"[" * 100_000 + b"]" * 100_000),
    ],
)
async def test_a_lookup_that_cannot_answer_raises(world: World, answer: served.Answer) -> None:
    snapshot = await world.snapshot()
    world.server.then(answer)
    with pytest.raises(evidence.LookupUnavailable):
        await world.provider(with_get_path(GET)).evidence(snapshot)


async def test_a_replay_resends_the_exact_bytes_under_the_same_key(world: World) -> None:
    snapshot = await world.snapshot()
    world.server.then(served.status(200, headers={"Idempotency-Replayed": "true"}))
    found = await world.provider(REPLAY).evidence(snapshot)
    assert found.kind is Kind.VERIFIED_SUCCEEDED
    (seen,) = world.server.seen
    assert (seen.method, seen.body) == ("POST", b'{"order": 42}')
    assert seen.headers["idempotency-key"] == f'"{snapshot.dispatch.dispatch_id}"'


async def test_a_replay_answered_422_is_a_key_conflict(world: World) -> None:
    snapshot = await world.snapshot()
    world.server.then(served.status(422))
    found = await world.provider(REPLAY).evidence(snapshot)
    assert (found.kind, found.reason) == (Kind.CONFLICT, "key_reused")


async def test_a_replay_answered_otherwise_raises(world: World) -> None:
    snapshot = await world.snapshot()
    world.server.then(served.status(503))
    with pytest.raises(evidence.LookupUnavailable):
        await world.provider(REPLAY).evidence(snapshot)


async def test_without_a_lookup_the_operator_decides(world: World) -> None:
    snapshot = await world.snapshot()
    found = await world.provider({}).evidence(snapshot)
    assert (found.kind, found.reason) == (Kind.MISSING, "manual_only")
    assert world.server.seen == []


async def test_past_the_receivers_retention_the_operator_decides(world: World) -> None:
    snapshot = await world.snapshot()
    world.clock.advance(s=3600)
    for idempotency in (with_get_path(GET), REPLAY):
        found = await world.provider(idempotency).evidence(snapshot)
        assert (found.kind, found.reason) == (Kind.MISSING, "manual_only")
    assert world.server.seen == []


async def test_an_unreachable_receiver_raises_rather_than_answering_missing(world: World) -> None:
    snapshot = await world.snapshot()
    chosen = served.receiver_set(
        f"http://127.0.0.1:{served.free_port()}", idempotency=with_get_path(GET)
    )
    provider = evidence.HttpRequestEvidence(world.reader, chosen, world.sender, world.clock)
    with pytest.raises(evidence.LookupUnavailable):
        await provider.evidence(snapshot)
