"""The recovery store: `recovery_required` rows, resolutions, observations, audit."""

from __future__ import annotations

from typing import Protocol

from qinglong_dispatcher.domain import (
    approvals,
    audit_views,
    principals,
    records,
    recovery,
)


class RecoveryStore(Protocol):
    """Listing and settling `recovery_required` executions; nothing here can execute."""

    async def list_recovery_required(
        self, *, now_ms: int, limit: int, after: tuple[int, str] | None = None
    ) -> list[recovery.Snapshot]:
        """A keyset page (by lease expiry) of executing rows whose lease expired."""
        ...

    async def resolve_recovery(
        self,
        resolution: recovery.Resolution,
        *,
        now_ms: int,
        context: principals.RequestContext | None = None,
    ) -> records.Transition:
        """Settle one row if it still matches the snapshot fence; records who decided."""
        ...

    async def record_observation(
        self,
        dispatch_id: str,
        *,
        outcome: recovery.ObservationOutcome,
        reason_code: str,
        now_ms: int,
    ) -> None:
        """Upsert the last reconcile outcome of a dispatch."""
        ...

    async def expire_approvals(self, *, now_ms: int, limit: int = 64) -> list[approvals.Expired]:
        """Expire at most `limit` pending requests whose lifetime ran out on the database's
        clock (`pending → expired`, audited); those it expired."""
        ...

    async def expire_past_window(self, *, now_ms: int, limit: int = 64) -> list[str]:
        """End at most `limit` waiting executions whose window closed on the database's clock
        (`cancelled`, code `window_expired`); their dispatch ids."""
        ...

    async def remind_approvals(self, *, limit: int = 64) -> list[str]:
        """Write the one `approval.expiring` event of at most `limit` waiting requests whose
        policy's reminder came due on the database's clock; the requests reminded."""
        ...

    async def get_resolution(self, dispatch_id: str) -> recovery.StoredResolution | None:
        """The resolution of a dispatch, if one committed."""
        ...

    async def audit_events(self, subject_id: str) -> list[recovery.AuditEvent]:
        """Security audit records about one subject (a dispatch id)."""
        ...

    async def audit_page(self, request: audit_views.AuditQuery) -> audit_views.AuditPage:
        """A page of the security audit log, newest first."""
        ...
