"""Submitting actions through the real API, for tests."""

from __future__ import annotations

from typing import Any

from qinglong_dispatcher import api, ports
from qinglong_dispatcher.domain import approvals

DEFAULT_TTL_MS = 86_400_000


def make_api(store: ports.Store, clock: ports.Clock, *, max_attempts: int = 5) -> api.Api:
    """The approval API with test defaults."""
    return api.Api(
        store, clock, api.Policy(approval_ttl_ms=DEFAULT_TTL_MS, max_attempts=max_attempts)
    )


async def submit_runs(
    store: ports.Store,
    clock: ports.Clock,
    count: int,
    *,
    project: str = "proj-1",
    max_attempts: int = 5,
) -> list[approvals.Consumed]:
    """Create, approve and consume `count` run.create actions."""
    plans = [
        api.run_create_plan({"projectId": project, "taskId": f"task-{i}", "taskRevision": i})
        for i in range(count)
    ]
    return await make_api(store, clock, max_attempts=max_attempts).submit(
        plans, requested_by="tester", approved_by="approver"
    )


async def submit_runs_as_approver(
    database: str, clock: ports.Clock, count: int, **kwargs: Any
) -> list[approvals.Consumed]:
    """`submit_runs` on a PostgreSQL test database through a short-lived approver pool.

    `submit` approves its own requests, which the runtime login may never do (migration 0005).
    """
    from tests.support import stores

    approver = await stores.open_postgres(stores.approver_url(database), max_size=1)
    try:
        return await submit_runs(approver, clock, count, **kwargs)
    finally:
        await approver.close()
