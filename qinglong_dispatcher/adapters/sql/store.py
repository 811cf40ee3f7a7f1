"""`SqlStore`: the store port operations written once; a dialect supplies the runner.

Each method is one shared transaction (`adapters/sql/*`) run by the dialect's runner; a
dialect's store subclasses this and adds only what is its own (opening, migrations, the
durability check, measured fast paths).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from qinglong_dispatcher.adapters.sql import approvals, completions, query
from qinglong_dispatcher.domain import approvals as approval_records
from qinglong_dispatcher.domain import records, states


class SqlStore:
    """The operations whose transactions are shared (the rest move here as they are)."""

    def __init__(self, runner: query.Runner, approver: approval_records.Principal) -> None:
        self.runner = runner
        self.approver = approver
        """Who creates, decides and consumes approvals through this store."""

    async def release_preflight(
        self,
        lease: records.Lease,
        *,
        mutation_id: str,
        kind: states.ReleaseKind,
        result_code: str,
        retry_at_ms: int | None,
        now_ms: int,
    ) -> records.Transition:
        """See `ports.ExecutionStore.release_preflight`."""
        return await self.runner.transaction(
            functools.partial(
                completions.release_preflight,
                lease=lease,
                mutation_id=mutation_id,
                kind=kind,
                result_code=result_code,
                retry_at_ms=retry_at_ms,
                now_ms=now_ms,
            )
        )

    async def complete(
        self,
        identity: records.ExecutionIdentity,
        *,
        mutation_id: str,
        completion: states.Completion,
        result_code: str,
        now_ms: int,
    ) -> records.Transition:
        """See `ports.ExecutionStore.complete`."""
        return await self.runner.transaction(
            functools.partial(
                completions.complete,
                identity=identity,
                mutation_id=mutation_id,
                completion=completion,
                result_code=result_code,
                now_ms=now_ms,
            )
        )

    async def create_approval(
        self, new: approval_records.NewApproval, *, now_ms: int
    ) -> approval_records.Approval:
        """See `ports.ApprovalStore.create_approval`."""
        return await self.runner.transaction(
            functools.partial(approvals.create, new=new, principal=self.approver, now_ms=now_ms)
        )

    async def approve(
        self, approval_request_id: str, *, decided_by: str, now_ms: int
    ) -> approval_records.Approval:
        """See `ports.ApprovalStore.approve`."""
        return await self.runner.transaction(
            functools.partial(
                approvals.approve,
                approval_request_id=approval_request_id,
                decided_by=decided_by,
                principal=self.approver,
                now_ms=now_ms,
            )
        )

    async def reject(
        self, approval_request_id: str, *, decided_by: str, now_ms: int
    ) -> approval_records.Approval:
        """See `ports.ApprovalStore.reject`."""
        return await self.runner.transaction(
            functools.partial(
                approvals.reject,
                approval_request_id=approval_request_id,
                decided_by=decided_by,
                principal=self.approver,
                now_ms=now_ms,
            )
        )

    async def consume(
        self, approval_request_id: str, *, now_ms: int, max_attempts: int
    ) -> approval_records.Consumed:
        """See `ports.ApprovalStore.consume`."""
        return await self.runner.transaction(
            functools.partial(
                approvals.consume,
                approval_request_id=approval_request_id,
                principal=self.approver,
                now_ms=now_ms,
                max_attempts=max_attempts,
            )
        )

    async def submit(
        self,
        items: Sequence[approval_records.NewApproval],
        *,
        approved_by: str,
        now_ms: int,
        max_attempts: int,
    ) -> list[approval_records.Consumed]:
        """See `ports.ApprovalStore.submit`."""
        return await self.runner.transaction(
            functools.partial(
                approvals.submit,
                items=tuple(items),
                approved_by=approved_by,
                principal=self.approver,
                now_ms=now_ms,
                max_attempts=max_attempts,
            )
        )

    async def get_approval(self, approval_request_id: str) -> approval_records.Approval | None:
        """See `ports.ApprovalStore.get_approval`."""
        return await self.runner.transaction(
            functools.partial(approvals.get, approval_request_id=approval_request_id),
            write=False,
        )
