"""The evidence-only reconciler: one bounded pass over `recovery_required` executions, and
bounded sweeps of the approval requests whose reminder came due or whose lifetime ran out.

It holds the recovery store and the evidence providers, and no handler: nothing here can
call `execute`. Verified evidence settles a row as `succeeded`; anything else is recorded as
an observation and the row stays for the next pass or an operator.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping

import structlog

from qinglong_dispatcher import ports, tracing
from qinglong_dispatcher.domain import errors, recovery, states
from qinglong_dispatcher.domain.records import Outcome

log = structlog.get_logger("qinglong_dispatcher.recovery")

MAX_PAGE = 64


@dataclasses.dataclass(kw_only=True)
class ReconcileReport:
    """What one pass saw and did."""

    observed: int = 0
    outcomes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    approvals_expired: int = 0
    """Pending approval requests this pass expired (database clock)."""
    approval_reminders: int = 0
    """`approval.expiring` events this pass wrote (database clock)."""
    windows_expired: int = 0
    """Waiting dispatches this pass ended because their window closed (database clock)."""

    def as_dict(self) -> dict[str, object]:
        """The JSON shape used by `tick --json`."""
        return {
            "observed": self.observed,
            "outcomes": dict(sorted(self.outcomes.items())),
            "approvals_expired": self.approvals_expired,
            "approval_reminders": self.approval_reminders,
            "windows_expired": self.windows_expired,
        }


class Reconciler:
    """Asks each row's evidence provider and settles or observes it."""

    def __init__(
        self,
        store: ports.RecoveryStore,
        providers: Mapping[str, ports.EvidenceProvider],
        clock: ports.Clock,
        *,
        page_size: int = MAX_PAGE,
    ) -> None:
        if not 1 <= page_size <= MAX_PAGE:
            raise errors.ConfigurationError(f"reconcile page must be 1…{MAX_PAGE}")
        self._store = store
        self._providers = dict(providers)
        self._clock = clock
        self._page_size = page_size
        self._cursor: tuple[int, str] | None = None

    async def aclose(self) -> None:
        """Release what the providers hold (an HTTP client's connections)."""
        for provider in self._providers.values():
            if isinstance(provider, ports.Closable):
                await provider.aclose()

    async def reconcile_pass(self) -> ReconcileReport:
        """One page; the cursor moves on so rows that stay stuck do not starve the rest."""
        page = await self._store.list_recovery_required(
            now_ms=self._clock.now_ms(), limit=self._page_size, after=self._cursor
        )
        if len(page) < self._page_size:
            self._cursor = None
        else:
            self._cursor = (page[-1].since_ms, page[-1].dispatch.dispatch_id)
        report = ReconcileReport(observed=len(page))
        for snapshot in page:
            with tracing.recovery_span(snapshot.dispatch) as span:
                outcome = await self._settle(snapshot)
                span.set("qinglong.outcome", outcome)
            report.outcomes[outcome] += 1
        report.approval_reminders = await self._remind_approvals()
        report.approvals_expired = await self._expire_approvals()
        report.windows_expired = await self._expire_windows()
        return report

    async def _expire_windows(self) -> int:
        """One page of waiting dispatches past their execution window ends `cancelled`
        (`window_expired`): never started late, never left waiting for nothing."""
        ended = await self._store.expire_past_window(
            now_ms=self._clock.now_ms(), limit=self._page_size
        )
        for dispatch_id in ended:
            log.info("dispatch.window_expired", dispatch_id=dispatch_id)
        return len(ended)

    async def _remind_approvals(self) -> int:
        """One page of waiting requests whose policy's reminder came due gets its
        `approval.expiring` event (a row for the notifications to deliver)."""
        reminded = await self._store.remind_approvals(limit=self._page_size)
        for approval_request_id in reminded:
            log.info("approval.expiring", approval_request_id=approval_request_id)
        return len(reminded)

    async def _expire_approvals(self) -> int:
        """One page of pending requests past their lifetime becomes `expired`: an outcome
        with its audit row, never a request that silently can no longer be used."""
        expired = await self._store.expire_approvals(
            now_ms=self._clock.now_ms(), limit=self._page_size
        )
        for approval in expired:
            log.info(
                "approval.expired",
                approval_request_id=approval.approval_request_id,
                project_id=approval.project_id,
                action_type=approval.action_type,
            )
        return len(expired)

    async def _settle(self, snapshot: recovery.Snapshot) -> str:
        dispatch = snapshot.dispatch
        provider = self._providers.get(dispatch.action_type)
        if provider is None:
            return await self._observe(
                snapshot, recovery.ObservationOutcome.MISSING, recovery.MANUAL_ONLY
            )
        try:
            evidence = await provider.evidence(snapshot)
        except Exception as exc:  # any provider failure means we could not look
            code = exc.code if isinstance(exc, errors.QinglongError) else "provider_error"
            return await self._observe(snapshot, recovery.ObservationOutcome.UNAVAILABLE, code)
        if evidence.kind is not recovery.EvidenceKind.VERIFIED_SUCCEEDED:
            outcome = recovery.ObservationOutcome(evidence.kind.value)
            return await self._observe(snapshot, outcome, evidence.reason or outcome.value)
        done = await self._store.resolve_recovery(
            recovery.Resolution(
                fence=snapshot.fence,
                project_id=dispatch.project_id,
                resolution=states.Completion.SUCCEEDED,
                source=recovery.Source.EVIDENCE,
                evidence_digest=evidence.evidence_digest,
                resolved_by="reconciler",
                reason_code="evidence_verified",
            ),
            now_ms=self._clock.now_ms(),
        )
        if done.outcome is Outcome.COMPLETED:
            log.info(
                "recovery.resolved",
                dispatch_id=dispatch.dispatch_id,
                attempt=snapshot.execution.attempt,
                source="evidence",
                outcome="succeeded",
            )
            return "resolved_succeeded"
        log.info("recovery.resolve_lost", dispatch_id=dispatch.dispatch_id, reason=done.reason)
        return "resolve_conflict"

    async def _observe(
        self, snapshot: recovery.Snapshot, outcome: recovery.ObservationOutcome, reason: str
    ) -> str:
        await self._store.record_observation(
            snapshot.dispatch.dispatch_id,
            outcome=outcome,
            reason_code=reason[:128],
            now_ms=self._clock.now_ms(),
        )
        log.warning(
            "recovery.observed",
            dispatch_id=snapshot.dispatch.dispatch_id,
            attempt=snapshot.execution.attempt,
            outcome=outcome.value,
            reason=reason,
        )
        return outcome.value
