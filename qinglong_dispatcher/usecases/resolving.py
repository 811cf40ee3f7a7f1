"""Resolve by hand: an operator settles a `recovery_required` execution (`recovery resolve`,
`POST /api/v1/recovery/{id}/resolve`, the operator UI's form)."""

from __future__ import annotations

from qinglong_dispatcher import ports, tracing
from qinglong_dispatcher.domain import errors, fencing, plans, principals, records, recovery, states


async def resolve_manually(
    store: ports.Store,
    clock: ports.Clock,
    dispatch_id: str,
    *,
    resolution: states.Completion,
    operator: str,
    reason: str,
    acting: ports.RecoveryStore | None = None,
    context: principals.RequestContext | None = None,
    comment: str | None = None,
) -> records.Transition:
    """An operator settles one recovery_required execution (audited, fenced, one transaction).

    The API reads through `store` and writes through `acting` (the store acting as the token's
    principal), passing its request's `context` for the audit row. The command line's
    `comment` is kept in the settle's own audit row."""
    plans.require_identifier("operator", operator)
    plans.require_identifier("reason", reason)
    said = principals.typed_comment(comment)
    tracer = tracing.current()
    # One read more, only with tracing on: the trace the dispatch was submitted under.
    dispatch = await store.get_dispatch(dispatch_id) if tracer.enabled else None
    with tracing.resolve_span(
        dispatch_id, dispatch, resolution=resolution.value, principal=operator
    ) as span:
        try:
            done = await _resolve(
                store,
                clock,
                dispatch_id,
                resolution=resolution,
                operator=operator,
                reason=reason,
                acting=acting,
                context=context,
                comment=said,
            )
        except errors.QinglongError:
            span.set("qinglong.outcome", "refused")
            raise
        span.set("qinglong.outcome", f"resolved_{resolution.value}")
        return done


async def _resolve(
    store: ports.Store,
    clock: ports.Clock,
    dispatch_id: str,
    *,
    resolution: states.Completion,
    operator: str,
    reason: str,
    acting: ports.RecoveryStore | None,
    context: principals.RequestContext | None,
    comment: str | None,
) -> records.Transition:
    now = clock.now_ms()
    execution = await store.get_execution(dispatch_id)
    if execution is None:
        raise errors.RecoveryRefused(f"dispatch {dispatch_id} not found")
    # The store decides on both clocks again inside its transaction; this only words the refusal.
    settling = recovery.settling_now_ms(now, await store.database_now_ms())
    effective = execution.effective_status(settling)
    if effective is not states.EffectiveStatus.RECOVERY_REQUIRED:
        by_clock = " by the database clock" if execution.effective_status(now) != effective else ""
        raise errors.RecoveryRefused(
            f"dispatch {dispatch_id} is {effective.value}{by_clock}, not recovery_required"
        )
    done = await (store if acting is None else acting).resolve_recovery(
        recovery.Resolution(
            fence=fencing.identity_of(execution),
            project_id=execution.project_id,
            resolution=resolution,
            source=recovery.Source.MANUAL,
            evidence_digest=None,
            resolved_by=operator,
            reason_code=reason,
            comment=comment,
        ),
        now_ms=now,
        context=context,
    )
    if done.outcome is not records.Outcome.COMPLETED:
        raise errors.RecoveryRefused(
            f"dispatch {dispatch_id} changed while resolving ({done.reason})"
        )
    return done
