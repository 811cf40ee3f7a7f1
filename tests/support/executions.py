"""Claiming and starting executions through the store, for the execution contract tests."""

from __future__ import annotations

from qinglong_dispatcher.domain import records
from qinglong_dispatcher.domain.records import Outcome
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.stores import Harness


async def claim_one(h: Harness, clock: ManualClock, owner: str = "w1") -> records.Claim:
    """Claim the next due execution; exactly one must be claimed."""
    batch = await h.store.claim_due(now_ms=clock.now_ms(), owner=owner, limit=1, lease_ms=LEASE_MS)
    assert len(batch.claimed) == 1, batch
    return batch.claimed[0]


def start_request(
    claim: records.Claim,
    *,
    lease: records.Lease | None = None,
    approval_request_id: str | None = None,
    action_digest: str | None = None,
) -> records.StartRequest:
    """The start request of `claim`, bound to its own dispatch unless a member is given."""
    assert claim.lease is not None
    assert claim.dispatch is not None
    return records.StartRequest(
        lease=lease or claim.lease,
        approval_request_id=approval_request_id or claim.dispatch.approval_request_id,
        action_digest=action_digest or claim.dispatch.action_digest,
    )


async def started(h: Harness, clock: ManualClock, owner: str = "w1") -> records.ExecutionIdentity:
    """Claim the next due execution and commit its start barrier."""
    claim = await claim_one(h, clock, owner)
    (result,) = await h.store.start(
        [start_request(claim)], now_ms=clock.now_ms(), lease_ms=LEASE_MS
    )
    assert result.outcome is Outcome.STARTED
    assert result.identity is not None
    return result.identity
