"""The store's operations on stored plans: opened as they are read, previewed, read whole by a
plan reader, sealed again and checked (`keys rotate|check`), written once for both dialects."""

from __future__ import annotations

from collections.abc import Sequence

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.sql import plan_keys, plan_reads, query
from qinglong_dispatcher.domain import approval_views, approvals, digests, errors, plan_previews
from qinglong_dispatcher.plan_keys import envelopes as plan_envelopes


class PlanMethods:
    """The plan operations of `SqlStore`: what runs them, and how plans are sealed and opened."""

    runner: query.Runner
    approver: approvals.Principal
    envelopes: plan_envelopes.Envelopes

    @property
    def plan_digests(self) -> digests.PlanDigests:
        """See `ports.PlanStore.plan_digests`."""
        return self.envelopes.digests

    async def get_plan(self, project_id: str, action_ref: str) -> ports.StoredPlan | None:
        """See `ports.PlanStore.get_plan` (a sealed plan opened, or marked unreadable)."""
        found = await self.runner.transaction(
            lambda q: plan_reads.get_plan(q, project_id, action_ref), write=False
        )
        return None if found is None else self.envelopes.open(found)

    async def get_plans(self, keys: Sequence[tuple[str, str]]) -> list[ports.StoredPlan]:
        """See `ports.PlanStore.get_plans` (each sealed plan opened, or marked unreadable)."""
        found = await self.runner.transaction(lambda q: plan_reads.get_plans(q, keys), write=False)
        return [self.envelopes.open(plan) for plan in found]

    async def list_waiting_approvals(
        self,
        request: approval_views.ListQuery,
        *,
        now_ms: int,
        shown: plan_previews.ShownFields,
    ) -> approval_views.Page:
        """See `ports.PlanReadStore.list_waiting_approvals` (each plan opened to be previewed)."""
        return await self.runner.transaction(
            lambda q: plan_reads.list_waiting_approvals(
                q, request, now_ms=now_ms, shown=shown, envelopes=self.envelopes
            ),
            write=False,
        )

    async def read_full_plan(self, dispatch_id: str) -> ports.StoredPlan | None:
        """See `ports.PlanReadStore.read_full_plan` (opened after its audited read)."""
        try:
            found = await self.runner.transaction(
                lambda q: plan_reads.read_full_plan(q, dispatch_id, principal=self.approver.name)
            )
        except errors.StoreError as exc:
            if exc.code != "permission_denied":
                raise
            raise errors.PlanReadRefused(
                "reading a whole plan needs a plan reader login (a member of the "
                "installation's _plan_reader role); nothing was read"
            ) from None
        return None if found is None else self.envelopes.open(found)

    async def reseal_plans(
        self, *, limit: int, after: ports.PlanKey | None = None
    ) -> ports.ResealBatch:
        """See `ports.PlanKeyStore.reseal_plans`."""
        return await self.runner.transaction(
            lambda q: plan_keys.reseal_batch(q, self.envelopes, limit=limit, after=after)
        )

    async def probe_plan_keys(self) -> ports.PlanKeyProbe:
        """See `ports.PlanKeyStore.probe_plan_keys`."""
        return await self.runner.transaction(
            lambda q: plan_keys.probe(q, self.envelopes), write=False
        )

    async def register_plan_keys(self, *, now_ms: int) -> list[str]:
        """See `ports.PlanKeyStore.register_plan_keys`."""
        if self.envelopes.cipher is None:
            return []
        return await self.runner.transaction(
            lambda q: plan_keys.register(q, self.envelopes, now_ms=now_ms)
        )

    async def check_plans(
        self, *, limit: int, after: ports.PlanKey | None = None
    ) -> ports.CheckBatch:
        """See `ports.PlanKeyStore.check_plans`."""
        return await self.runner.transaction(
            lambda q: plan_keys.check_batch(q, self.envelopes, limit=limit, after=after),
            write=False,
        )
