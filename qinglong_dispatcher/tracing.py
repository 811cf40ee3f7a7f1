"""The process's tracer: `ports.NOOP` until the composition root installs another.

OpenTelemetry's own provider is process-wide too; one holder here keeps the hooks into the
dispatch path, the use cases and the effects to one call each (`current()`), and lets a
process that never turns tracing on import nothing of it (docs/traces.md).
"""

from __future__ import annotations

import contextlib

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import approvals, records

_current: ports.Tracer = ports.NOOP


def current() -> ports.Tracer:
    """The tracer spans are opened with."""
    return _current


def install(tracer: ports.Tracer) -> ports.Tracer:
    """Make `tracer` the process's tracer; returns the one it replaces (tests put it back)."""
    global _current
    previous, _current = _current, tracer
    return previous


def effect_traceparent(span: ports.Span, stored: str | None) -> str | None:
    """The context an effect is handed: the execute span's when tracing is on, else the
    traceparent the dispatch was submitted under (None: neither, and nothing is sent)."""
    return span.traceparent or stored


def span_attributes(dispatch: records.Dispatch) -> dict[str, ports.tracing.AttributeValue | None]:
    """What a dispatch's spans name: ids, action, project and target, never a plan member."""
    return {
        "qinglong.dispatch_id": dispatch.dispatch_id,
        "qinglong.approval_request_id": dispatch.approval_request_id,
        "qinglong.action_type": dispatch.action_type,
        "qinglong.project_id": dispatch.project_id,
        "qinglong.target": dispatch.target,
    }


def claim_span(
    dispatch: records.Dispatch, lease: records.Lease, *, taken_over: bool
) -> contextlib.AbstractContextManager[ports.Span]:
    """The `dispatch.claim` span of one claimed item: a child of the trace its dispatch was
    submitted under on the first claim; a retry or a takeover starts a new trace linked to
    that one, never a child of the attempt before it (whose process may be dead)."""
    tracer = current()
    if not tracer.enabled:
        return tracer.span("dispatch.claim")  # no attributes built for nothing
    parent, links, attributes = _claim(dispatch, lease, taken_over=taken_over)
    return tracer.span(
        "dispatch.claim",
        parent=parent,
        new_trace=parent is None,
        links=links,
        attributes=attributes,
    )


def mark_committed_claim(
    dispatch: records.Dispatch, lease: records.Lease, *, taken_over: bool
) -> None:
    """The `dispatch.claim` span of an item a page transaction committed (its start, effect
    and completion were that one transaction): parented as `claim_span`'s, recorded once the
    page committed, with nothing under it."""
    tracer = current()
    if not tracer.enabled:
        return
    parent, links, attributes = _claim(dispatch, lease, taken_over=taken_over)
    attributes["qinglong.page"] = True
    attributes["qinglong.outcome"] = "succeeded"
    tracer.mark(
        "dispatch.claim",
        parent=parent,
        new_trace=parent is None,
        links=links,
        attributes=attributes,
    )


def _claim(
    dispatch: records.Dispatch, lease: records.Lease, *, taken_over: bool
) -> tuple[str | None, tuple[str, ...], dict[str, ports.tracing.AttributeValue | None]]:
    """A claim span's parent (None: a new trace), links and attributes."""
    fresh = lease.attempt <= 1 and not taken_over
    stored = dispatch.traceparent
    return (
        stored if fresh else None,
        () if fresh or stored is None else (stored,),
        {
            **span_attributes(dispatch),
            "qinglong.attempt": lease.attempt,
            "qinglong.owner": lease.owner,
            "qinglong.takeover": taken_over,
        },
    )


def recovery_span(dispatch: records.Dispatch) -> contextlib.AbstractContextManager[ports.Span]:
    """The `recovery.settle` span of one reconcile of a dispatch: a new trace (the attempt it
    settles may have died with its process) linked to the one it was submitted under."""
    stored = dispatch.traceparent
    tracer = current()
    if not tracer.enabled:
        return tracer.span("recovery.settle")
    return tracer.span(
        "recovery.settle",
        new_trace=True,
        links=() if stored is None else (stored,),
        attributes=span_attributes(dispatch),
    )


def resolve_span(
    dispatch_id: str, dispatch: records.Dispatch | None, *, resolution: str, principal: str
) -> contextlib.AbstractContextManager[ports.Span]:
    """The `recovery.resolve` span of a resolution by hand: an operator's decision on the
    request, so a child of the trace its dispatch was submitted under, as a vote is (the
    request's span ended when it was submitted; the dead attempt is no parent); a new trace
    when the dispatch has none (or tracing read none: `dispatch` None)."""
    stored = None if dispatch is None else dispatch.traceparent
    named = (
        span_attributes(dispatch) if dispatch is not None else {"qinglong.dispatch_id": dispatch_id}
    )
    return current().span(
        "recovery.resolve",
        parent=stored,
        new_trace=stored is None,
        attributes={**named, "qinglong.resolution": resolution, "qinglong.principal": principal},
    )


def mark_decision(name: str, approval: approvals.Approval, **attributes: str | None) -> None:
    """A span for a step an approval took (`approval.vote`, `approval.consume`), once its
    transaction committed: a child of the trace the request was submitted under."""
    tracer = current()
    if not tracer.enabled:
        return
    tracer.mark(
        name,
        parent=approval.traceparent,
        new_trace=approval.traceparent is None,
        attributes={
            "qinglong.approval_request_id": approval.approval_request_id,
            "qinglong.action_type": approval.action_type,
            "qinglong.project_id": approval.project_id,
            "qinglong.status": approval.status.value,
            **{f"qinglong.{key}": value for key, value in attributes.items()},
        },
    )
