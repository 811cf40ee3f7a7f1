"""An expired approval request through the API, on both dialects: each decision on it is
refused `409 approval_expired` and writes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.recovery import reconciler
from tests.support import stores
from tests.support.api_writes import Served, assert_problem, serving


@pytest.fixture(params=stores.DIALECTS)
async def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> AsyncIterator[Served]:
    async with serving(request.param, tmp_path_factory, tmp_path) as it:
        yield it


async def test_every_decision_on_an_expired_request_is_refused_approval_expired(
    served: Served,
) -> None:
    it = served
    short = api.Api(
        it.harness.approver_store, it.clock, api.Policy(approval_ttl_ms=20, max_attempts=5)
    )
    plan = api.run_create_plan({"projectId": "proj-1", "taskId": "task-1", "taskRevision": 4})
    created = await short.create_approval(
        "run.create", plan.to_canonical_dict(), requested_by="alice"
    )
    await anyio.sleep(0.1)
    sweep = reconciler.Reconciler(it.harness.store, {}, it.clock)
    assert (await sweep.reconcile_pass()).approvals_expired == 1
    approval_id = created.approval_request_id
    before = await it.audit(approval_id)
    assert [r["kind"] for r in before] == ["approval.created", "approval.expired"]
    for step, body in (("approve", None), ("reject", {"reason": "late"}), ("consume", None)):
        answer = await it.call("POST", f"/approvals/{approval_id}/{step}", "bob", body)
        assert_problem(answer, 409, "approval_expired")
    assert await it.audit(approval_id) == before
    found = await it.harness.store.get_approval(approval_id)
    assert found is not None
    assert (found.status.value, found.version) == ("expired", 2)
