"""An action with a target, for the tests of one change at a time per target: its plan names a
router (`TARGET_MEMBER`), submitted through the real API."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import ClassVar

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import fencing, plans, records, states
from tests.support.actions import make_api

TARGET_TYPE = "test.target"


class RouterPlan(plans.PlanModel):
    """A change to one router (the target), or to none."""

    ACTION_TYPE: ClassVar[str] = TARGET_TYPE
    SENSITIVE_FIELDS: ClassVar[tuple[str, ...]] = ()
    TARGET_MEMBER: ClassVar[str | None] = "router"

    router: plans.Identifier | None = None


MODELS: plans.PlanModels = {TARGET_TYPE: RouterPlan}


async def submit_change(
    store: ports.Store, clock: ports.Clock, action_ref: str, router: str | None
) -> str:
    """Create, approve and consume one change of `router`; its dispatch id."""
    plan = plans.parse_plan(
        TARGET_TYPE,
        {"schemaVersion": 1, "actionRef": action_ref, "projectId": "p1", "router": router},
        models=MODELS,
    )
    (consumed,) = await make_api(store, clock).submit(
        [plan], requested_by="tester", approved_by="approver"
    )
    return consumed.dispatch_id


async def finish(
    store: ports.Store, identity: records.ExecutionIdentity, *, now_ms: int
) -> records.Transition:
    """Complete a started execution `succeeded` under its fence."""
    return await store.complete(
        identity,
        mutation_id=fencing.mutation_id(identity.dispatch_id, identity.attempt, "complete"),
        completion=states.Completion.SUCCEEDED,
        result_code="changed",
        now_ms=now_ms,
    )


async def claim_and_start(
    store: ports.Store, clock: ports.Clock, *, lease_ms: int, owner: str = "w1"
) -> tuple[records.Dispatch, records.ExecutionIdentity]:
    """Claim the next due execution and commit its start barrier with a lease of `lease_ms`
    (a short one leaves it `recovery_required` soon), without executing it."""
    batch = await store.claim_due(now_ms=clock.now_ms(), owner=owner, limit=1, lease_ms=lease_ms)
    (claim,) = batch.claimed
    assert claim.lease is not None
    assert claim.dispatch is not None
    (result,) = await store.start(
        [
            records.StartRequest(
                lease=claim.lease,
                approval_request_id=claim.dispatch.approval_request_id,
                action_digest=claim.dispatch.action_digest,
            )
        ],
        now_ms=clock.now_ms(),
        lease_ms=lease_ms,
    )
    assert result.identity is not None
    return claim.dispatch, result.identity


_SETTLED = frozenset(
    {
        states.ExecutionStatus.SUCCEEDED,
        states.ExecutionStatus.FAILED,
        states.ExecutionStatus.BLOCKED,
        states.ExecutionStatus.CANCELLED,
    }
)


async def effect_windows(
    store: ports.Store, dispatch_ids: Sequence[str]
) -> dict[str, tuple[int, int | None]]:
    """Each started dispatch's window on its target, from its ledger (the database's clock):
    its start barrier's line to its settlement's (None: not settled)."""
    windows: dict[str, tuple[int, int | None]] = {}
    for dispatch_id in dispatch_ids:
        events = await store.execution_events(dispatch_id)
        starts = [
            e.committed_at_ms for e in events if e.to_status is states.ExecutionStatus.EXECUTING
        ]
        ends = [e.committed_at_ms for e in events if e.to_status in _SETTLED]
        if starts:
            windows[dispatch_id] = (min(starts), max(ends) if ends else None)
    return windows


def overlaps(windows: Mapping[str, tuple[int, int | None]]) -> list[tuple[str, str]]:
    """The pairs of windows (in start order) where the later began before the earlier settled."""
    ordered = sorted(windows.items(), key=lambda item: item[1][0])
    return [
        (before, after)
        for (before, (_, end)), (after, (start, _)) in itertools.pairwise(ordered)
        if end is None or start < end
    ]
