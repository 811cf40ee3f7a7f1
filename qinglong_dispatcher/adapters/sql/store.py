"""`SqlStore`: the store port operations, each a shared transaction run by the dialect's runner.

Most operations are a transaction of `adapters/sql/*` made a method by `query.operation`; the
explicit methods add something of the store's own: its principal, a composite read, or a
refusal turned into a typed result. A built-in action's own tables are written by its own
repository, which the action builds over this store (`ports.action_tables.StoreHost`); the
store only loads their statements and calls their hooks (`tables`, handed over by the
composition root), and names no action. A dialect's store subclasses this and adds only what
is its own (opening, migrations, the durability check, measured fast paths).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.sql import (
    approval_expiry,
    approvals,
    audit_export,
    cancels,
    completions,
    dispatch_reads,
    executions,
    handler_waits,
    notes,
    notifications,
    page,
    passage,
    plan_store,
    policies,
    policy_reads,
    query,
    recovery,
    retention,
    rows,
    shared,
    submits,
    target_reads,
    token_store,
    ui_session_store,
    uncertain_outcomes,
    votes,
    windows,
)
from qinglong_dispatcher.domain import approvals as approval_records
from qinglong_dispatcher.domain import cancels as cancel_records
from qinglong_dispatcher.domain import errors, permissions, principals, records
from qinglong_dispatcher.domain import recovery as recovery_records
from qinglong_dispatcher.domain import retention as retention_records
from qinglong_dispatcher.plan_keys import envelopes as plan_envelopes
from qinglong_dispatcher.ports import action_tables
from qinglong_dispatcher.ports import transactions as tx

P = ParamSpec("P")
T = TypeVar("T")

Operation = permissions.Operation
_REFUSALS = (errors.ApprovalError, errors.TransitionRefused, errors.PrincipalNotPermitted)
"""What refuses one request of an `approve_many` (a store fault is raised as it is)."""

operation = query.operation


def as_approver(
    work: Callable[Concatenate[query.Query, approval_records.Principal, P], Coroutine[Any, Any, T]],
    operation: permissions.Operation | None = None,
) -> Callable[Concatenate[SqlStore, P], Coroutine[Any, Any, T]]:
    """`query.operation` for a transaction that acts as the store's principal (`approver`),
    which must be permitted `operation` (see `Principal.require`)."""

    async def method(self: SqlStore, /, *args: P.args, **kwargs: P.kwargs) -> T:
        if operation is not None:
            self.approver.require(operation)
        return await self.runner.transaction(lambda q: work(q, self.approver, *args, **kwargs))

    method.__name__ = work.__name__
    method.__doc__ = work.__doc__
    return method


class SqlStore(
    plan_store.PlanMethods,
    token_store.TokenMethods,
    ui_session_store.UiSessionMethods,
    policies.PolicyMethods,
    policy_reads.PolicyReadMethods,
    notifications.NotificationMethods,
    notes.NoteMethods,
    dispatch_reads.DispatchReadMethods,
    target_reads.TargetReadMethods,
    windows.WaitMethods,
):
    """Every store port operation whose transaction is shared by both dialects (the mixins'
    in their modules: stored plans in `plan_store`, API tokens in `token_store`, …)."""

    def __init__(
        self,
        runner: query.Runner,
        approver: approval_records.Principal,
        envelopes: plan_envelopes.Envelopes | None = None,
        *,
        tables: action_tables.BuiltInTables,
    ) -> None:
        self.runner = runner
        self.approver = approver
        """Who creates, decides and consumes approvals through this store."""
        self.envelopes = envelopes or plan_envelopes.Envelopes(None)
        """Seals plans as they are written and opens them as they are read."""
        self.tables = tables
        self.shared: tx.Shared = shared

    # -- executions (docs/state-machine.md) ----------------------------------------------------

    claim_due = operation(executions.claim_due)
    claim = operation(executions.claim)
    renew = operation(executions.renew)
    start = operation(executions.start)
    release_preflight = operation(completions.release_preflight)
    complete = operation(completions.complete)
    complete_many = operation(completions.complete_many)
    record_uncertain = operation(uncertain_outcomes.record_uncertain)
    list_due = operation(executions.list_due, write=False)
    backlog = operation(executions.backlog, write=False)
    execution_events = operation(executions.events, write=False)
    wake_handler_waits = operation(handler_waits.wake_handler_waits)

    async def counts(self, *, now_ms: int) -> records.StatusCounts:
        """See `ports.ExecutionStore.counts` (with the actions' rows, from one snapshot)."""

        async def read(q: query.Query) -> records.StatusCounts:
            counts = await executions.counts(q, now_ms=now_ms)
            for own in self.tables.each:
                counts = await own.count(q, counts)
            return counts

        return await self.runner.transaction(read, write=False)

    async def get_execution(self, dispatch_id: str) -> records.Execution | None:
        """See `ports.ExecutionStore.get_execution`."""
        found = await self.runner.transaction(lambda q: rows.read_row(q, dispatch_id), write=False)
        return None if found is None else found[0]

    async def get_dispatch(self, dispatch_id: str) -> records.Dispatch | None:
        """See `ports.ExecutionStore.get_dispatch`."""
        found = await self.runner.transaction(lambda q: rows.read_row(q, dispatch_id), write=False)
        return None if found is None else found[1]

    # -- approvals: the store's principal creates, decides and consumes ------------------------

    consume = as_approver(approvals.consume, Operation.CONSUME)
    vote = as_approver(votes.vote, Operation.APPROVE)
    vote_tally = operation(votes.tally, write=False)
    get_approval = operation(approvals.get, write=False)

    async def approve(
        self,
        approval_request_id: str,
        *,
        decided_by: str,
        now_ms: int,
        context: principals.RequestContext | None = None,
        comment: str | None = None,
    ) -> approval_records.Approval:
        """See `ports.ApprovalStore.approve`."""
        self.approver.require(Operation.APPROVE)
        return await self.runner.transaction(
            lambda q: approvals.approve(
                q,
                self.approver,
                approval_request_id,
                decided_by=decided_by,
                now_ms=now_ms,
                context=context,
                comment=comment,
            )
        )

    async def approve_many(
        self, ids: Sequence[str], *, decided_by: str, now_ms: int, comment: str | None = None
    ) -> list[approval_records.Approval]:
        """See `ports.ApprovalStore.approve_many`."""
        self.approver.require(Operation.APPROVE)
        at: list[str] = []  # the requests tried: the last one is where a refusal came
        try:
            return await self.runner.transaction(
                lambda q: approvals.approve_each(
                    q,
                    self.approver,
                    ids,
                    decided_by=decided_by,
                    now_ms=now_ms,
                    at=at,
                    comment=comment,
                )
            )
        except _REFUSALS as exc:
            raise approvals.refused_in_batch(exc, at[-1], len(ids)) from None

    async def reject(
        self,
        approval_request_id: str,
        *,
        decided_by: str,
        now_ms: int,
        context: principals.RequestContext | None = None,
        reason: str | None = None,
        comment: str | None = None,
    ) -> approval_records.Approval:
        """See `ports.ApprovalStore.reject`."""
        self.approver.require(Operation.REJECT)
        return await self.runner.transaction(
            lambda q: approvals.reject(
                q,
                self.approver,
                approval_request_id,
                decided_by=decided_by,
                now_ms=now_ms,
                context=context,
                reason=reason,
                comment=comment,
            )
        )

    async def create_approval(
        self,
        new: approval_records.NewApproval,
        *,
        now_ms: int,
        context: principals.RequestContext | None = None,
    ) -> approval_records.Approval:
        """See `ports.ApprovalStore.create_approval` (the plan sealed when there is a ring)."""
        self.approver.require(Operation.CREATE)
        sealed = self.envelopes.seal(new)
        try:
            return await self.runner.transaction(
                lambda q: approvals.create(q, self.approver, sealed, now_ms=now_ms, context=context)
            )
        except errors.StoreError as refused:
            # A create racing another for the same plan passed the read and met the unique
            # keys (the plan's, the one live request per plan): the same refusal as the read's.
            await self._name_taken_plan(refused, [sealed])
            raise

    async def _name_taken_plan(
        self, refused: errors.StoreError, sealed: Sequence[approval_records.NewApproval]
    ) -> None:
        """Raise the conflict naming the plan a unique key refused, if one is stored now."""
        if refused.code == "constraint_violation":
            taken = await self.runner.transaction(
                lambda q: submits.taken_plan(q, sealed), write=False
            )
            if taken is not None:
                raise taken from None

    async def submit(
        self,
        items: Sequence[approval_records.NewApproval],
        *,
        approved_by: str,
        now_ms: int,
        max_attempts: int,
    ) -> list[approval_records.Consumed]:
        """See `ports.ApprovalStore.submit` (each plan sealed when there is a ring)."""
        self.approver.require(Operation.SUBMIT)
        sealed = [self.envelopes.seal(new) for new in items]
        try:
            return await self.submit_sealed(
                sealed, approved_by=approved_by, now_ms=now_ms, max_attempts=max_attempts
            )
        except errors.StoreError as refused:
            # No plan is read first: its unique key refused the batch; a read names the plan.
            await self._name_taken_plan(refused, sealed)
            raise

    # `submit`'s write, its plans sealed already: the shared transaction (PostgreSQL tries
    # one plan in one round trip first).
    submit_sealed = as_approver(submits.submit)

    # -- the passage and the page transaction ------------------------------------------------

    async def pass_due(
        self,
        action_type: str,
        effects: ports.PageEffects,
        effect_of: ports.EffectOf,
        *,
        now_ms: int,
        owner: str,
        limit: int,
    ) -> ports.PassageBatch:
        """See `ports.PageStore.pass_due` (each sealed plan opened in the transaction)."""

        def work(q: query.Query) -> Coroutine[Any, Any, ports.PassageBatch]:
            return passage.pass_due(
                q, action_type, effects, effect_of, envelopes=self.envelopes, now_ms=now_ms,
                owner=owner, limit=limit
            )  # fmt: skip

        return await self.runner.transaction(work)

    async def commit_page(
        self,
        effects: ports.PageEffects,
        items: Sequence[ports.PageItem[Any]],
        *,
        now_ms: int,
        lease_ms: int,
    ) -> list[ports.PageResult]:
        """See `ports.PageStore.commit_page`."""
        try:
            return await self.runner.transaction(
                lambda q: page.commit_page(q, effects, items, now_ms=now_ms, lease_ms=lease_ms)
            )
        except errors.StoreFull:
            # Every item would fail alike, and the per-item path would commit start barriers
            # it could not follow with effects: the page waits for its leases to run out.
            raise
        except (errors.StoreError, page.PartRefused):
            # Rolled back whole (or its commit unacknowledged: then every item it committed is
            # fenced now and comes back not taken). Again, each item under its own savepoint.
            return await self.runner.transaction(
                lambda q: page.commit_each(q, effects, items, now_ms=now_ms, lease_ms=lease_ms)
            )

    # -- recovery (docs/operations.md), cancels and retention ----------------------------------

    database_now_ms = operation(recovery.database_now_ms, write=False)
    list_recovery_required = operation(recovery.list_recovery_required, write=False)
    record_observation = operation(recovery.record_observation)
    expire_approvals = as_approver(approval_expiry.expire_due)
    remind_approvals = operation(approval_expiry.remind_due)
    get_resolution = operation(recovery.get_resolution, write=False)
    audit_events = operation(recovery.audit_events, write=False)
    audit_page = operation(recovery.audit_page, write=False)
    audit_export_probe = operation(audit_export.probe, write=False)
    audit_export_rows = operation(audit_export.rows, write=False)

    async def resolve_recovery(
        self,
        resolution: recovery_records.Resolution,
        *,
        now_ms: int,
        context: principals.RequestContext | None = None,
    ) -> records.Transition:
        """See `ports.RecoveryStore.resolve_recovery`."""
        self.approver.require(Operation.RESOLVE)
        own = self.tables.each
        return await self.runner.transaction(
            lambda q: recovery.resolve(
                q, resolution, own, principal=self.approver.name, now_ms=now_ms, context=context
            )
        )

    async def cancel_dispatch(
        self,
        request: cancel_records.Cancel,
        *,
        now_ms: int,
        context: principals.RequestContext | None = None,
    ) -> records.Transition:
        """See `ports.CancelStore.cancel_dispatch`."""
        self.approver.require(Operation.CANCEL)
        own = self.tables.each
        return await self.runner.transaction(
            lambda q: cancels.cancel(
                q, request, own, principal=self.approver.name, now_ms=now_ms, context=context
            )
        )

    async def prune_batch(
        self, *, cutoff_ms: int, audit_cutoff_ms: int, limit: int, dry_run: bool = False
    ) -> retention_records.PruneCounts:
        """See `ports.PruneStore.prune_batch`."""
        if dry_run:
            return await self.runner.transaction(
                lambda q: retention.count_prunable(
                    q, cutoff_ms=cutoff_ms, audit_cutoff_ms=audit_cutoff_ms
                ),
                write=False,
            )
        return await self.runner.transaction(
            lambda q: retention.prune_batch(
                q, cutoff_ms=cutoff_ms, audit_cutoff_ms=audit_cutoff_ms, limit=limit
            )
        )

    # -- what a built-in action's repository runs on (`ports.action_tables.StoreHost`) -------

    async def barrier_transaction(self, work: query.Work[T]) -> T:
        """Run a start barrier's transaction (a dialect may give it a stricter isolation)."""
        return await self.runner.transaction(work)

    async def fast_statement(self, name: str, params: query.Params) -> Any:
        """None: the shared transaction is the happy path (a dialect may run one statement)."""
        return None
