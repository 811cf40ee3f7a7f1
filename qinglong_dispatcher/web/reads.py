"""The read endpoints (`viewer`): dispatches, one dispatch, recovery, audit, status, events.

They print what the CLI's `--json` prints and nothing more: the views have no lease token
field, and a plan shows only its non-sensitive members (`dispatch_views.PLAN_FIELDS`).
Unknown query parameters are refused (400 naming them), so a typo never widens a page.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from typing import Final, TypeVar

from aiohttp import web

from qinglong_dispatcher.domain import (
    audit_views,
    dispatch_views,
    errors,
    keysets,
    plans,
    recovery,
    states,
    uncertainty,
)
from qinglong_dispatcher.web import auth, context, events, problems

T = TypeVar("T")

RECOVERY_MAX_LIMIT: Final = 500


def _json(value: object) -> web.Response:
    return web.json_response(value, headers={"Cache-Control": "no-store"})


def only_params(request: web.Request, allowed: Collection[str]) -> None:
    for name in request.query:
        if name not in allowed:
            raise problems.BadField(name, f"{name}: unknown query parameter")
    for name in allowed:
        if len(request.query.getall(name, [])) > 1:
            raise problems.BadField(name, f"{name}: given more than once")


def query_field(name: str, text: str | None, parse: Callable[[str], T]) -> T | None:
    """`parse(text)`, a failure named as the field `name`; None when absent."""
    if text is None:
        return None
    try:
        return parse(text)
    except (errors.InvalidInput, ValueError) as exc:
        message = str(exc) if isinstance(exc, errors.InvalidInput) else "not a valid value"
        shown = message if message.startswith(name) else f"{name}: {message}"
        raise problems.BadField(name, shown) from None


def parse_limit(text: str) -> int:
    if not text.isdigit() or len(text) > 6:
        raise errors.InvalidInput("limit: must be a whole number")
    return int(text)


def parse_ms(text: str) -> int:
    """A Unix time in milliseconds (a whole number of at most 16 digits)."""
    if not text.isdigit() or len(text) > 16:
        raise errors.InvalidInput("must be a Unix time in milliseconds")
    return int(text)


def identifier(name: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        plans.require_identifier(name, text)
        return text

    return parse


@auth.requires(auth.Operation.READ)
async def list_dispatches(request: web.Request) -> web.Response:
    """`GET /api/v1/dispatches`: a keyset page, newest first (`from_ms` inclusive and `to_ms`
    exclusive bound the creation time)."""
    only_params(
        request, ("status", "action", "project", "target", "from_ms", "to_ms", "limit", "after")
    )
    q = request.query
    status = query_field("status", q.get("status"), states.EffectiveStatus)
    action = query_field("action", q.get("action"), identifier("action"))
    project = query_field("project", q.get("project"), identifier("project"))
    limit = query_field("limit", q.get("limit"), parse_limit)
    after = query_field("after", q.get("after"), dispatch_views.Cursor.parse)
    target = query_field("target", q.get("target"), identifier("target"))
    from_ms = query_field("from_ms", q.get("from_ms"), parse_ms)
    to_ms = query_field("to_ms", q.get("to_ms"), parse_ms)
    if from_ms is not None and to_ms is not None and from_ms >= to_ms:
        raise problems.BadField("to_ms", "to_ms: must be after from_ms")
    query = query_field(
        "limit",
        "",
        lambda _: dispatch_views.ListQuery(
            status=status,
            action_type=action,
            project_id=project,
            limit=dispatch_views.DEFAULT_LIMIT if limit is None else limit,
            after=after,
            target=target,
            from_ms=from_ms,
            to_ms=to_ms,
        ),
    )
    assert query is not None
    ctx = context.of(request)
    page = await ctx.store.list_dispatches(query, now_ms=ctx.clock.now_ms())
    return _json(
        {
            "dispatches": [row.as_dict() for row in page.dispatches],
            "next": None if page.next is None else str(page.next),
        }
    )


@auth.requires(auth.Operation.READ)
async def show_dispatch(request: web.Request) -> web.Response:
    """`GET /api/v1/dispatches/{dispatch_id}`: what `dispatch show --json` prints."""
    only_params(request, ())
    dispatch_id = request.match_info["dispatch_id"]
    if not plans.is_identifier(dispatch_id):
        # Not echoed: it is not an id, and may hold anything.
        raise errors.DispatchNotFound("no dispatch has this id (not a dispatch id)")
    ctx = context.of(request)
    detail = await ctx.store.show_dispatch(dispatch_id, now_ms=ctx.clock.now_ms(), shown=ctx.shown)
    if detail is None:
        raise errors.DispatchNotFound(f"dispatch {dispatch_id} not found")
    return _json(detail.as_dict())


def _recovery_cursor(text: str) -> tuple[int, str]:
    return keysets.parse(text, form="<since_ms>:<dispatch_id>")


def limit_up_to(maximum: int) -> Callable[[str], int]:
    """`parse_limit` of a page size between 1 and `maximum`."""

    def parse(text: str) -> int:
        value = parse_limit(text)
        if not 1 <= value <= maximum:
            raise errors.InvalidInput(f"limit: must be between 1 and {maximum}")
        return value

    return parse


def _snapshot(snap: recovery.Snapshot) -> dict[str, object]:
    obs = snap.observation
    return {
        "dispatch_id": snap.dispatch.dispatch_id,
        "project_id": snap.dispatch.project_id,
        "action_type": snap.dispatch.action_type,
        "since_ms": snap.since_ms,
        "last_observation": None
        if obs is None
        else {
            "outcome": obs.outcome.value,
            "reason": obs.reason_code,
            "count": obs.count,
            "at_ms": obs.last_seen_at_ms,
            "verdict": uncertainty.observation_verdict(obs),
        },
    }


@auth.requires(auth.Operation.READ)
async def list_recovery(request: web.Request) -> web.Response:
    """`GET /api/v1/recovery`: a keyset page of `recovery_required` executions, by lease expiry."""
    only_params(request, ("limit", "after"))
    limit = query_field("limit", request.query.get("limit"), limit_up_to(RECOVERY_MAX_LIMIT)) or 50
    after = query_field("after", request.query.get("after"), _recovery_cursor)
    ctx = context.of(request)
    page = await ctx.store.list_recovery_required(
        now_ms=ctx.clock.now_ms(), limit=limit, after=after
    )
    last = page[-1] if len(page) == limit else None
    return _json(
        {
            "recovery_required": [_snapshot(snap) for snap in page],
            "next": None if last is None else f"{last.since_ms}:{last.dispatch.dispatch_id}",
        }
    )


def audit_record(event: recovery.AuditEvent) -> dict[str, object]:
    """One audit record as the API prints it (a token's id, never the token)."""
    return dataclasses.asdict(event)


@auth.requires(auth.Operation.READ)
async def list_audit(request: web.Request) -> web.Response:
    """`GET /api/v1/audit`: a keyset page of the security audit log, newest first."""
    only_params(request, ("subject", "principal", "kind", "limit", "after"))
    q = request.query
    limit = query_field("limit", q.get("limit"), limit_up_to(audit_views.MAX_LIMIT))
    page = await context.of(request).store.audit_page(
        audit_views.AuditQuery(
            subject_id=query_field("subject", q.get("subject"), identifier("subject")),
            principal=query_field("principal", q.get("principal"), identifier("principal")),
            kind=query_field("kind", q.get("kind"), audit_views.parse_kind),
            limit=audit_views.DEFAULT_LIMIT if limit is None else limit,
            before=query_field("after", q.get("after"), audit_views.parse_cursor),
        )
    )
    return _json(
        {
            "audit": [audit_record(event) for event in page.events],
            "next": None if page.next is None else str(page.next),
        }
    )


@auth.requires(auth.Operation.READ)
async def status(request: web.Request) -> web.Response:
    """`GET /api/v1/status`: what `status --json` prints."""
    only_params(request, ())
    ctx = context.of(request)
    counts = await ctx.store.counts(now_ms=ctx.clock.now_ms())
    return _json(
        {
            "profile": ctx.profile,
            "executions": {s.value: n for s, n in counts.executions.items()},
            "due": counts.due,
            "oldest_due_age_seconds": (counts.oldest_due_age_ms or 0) / 1000,
            "runs": counts.runs,
            "step_runs": dict(counts.step_runs),
        }
    )


@auth.requires(auth.Operation.READ)
async def stream_events(request: web.Request) -> web.StreamResponse:
    """`GET /api/v1/events`: Server-Sent Events."""
    only_params(request, ())
    ctx = context.of(request)
    try:
        return await events.stream(request, ctx.hub, ctx.read_timeout_s)
    except events.TooManyStreams:
        return problems.response("too_many_streams")


@auth.requires(auth.PUBLIC)
async def healthz(request: web.Request) -> web.Response:
    """`GET /api/v1/healthz`: liveness, as the metrics listener's `/healthz` (no token)."""
    ok, reason = context.of(request).health.alive()
    return web.json_response({"ok": ok, "reason": reason}, status=200 if ok else 503)
