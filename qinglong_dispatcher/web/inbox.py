"""`GET /api/v1/inbox` (`viewer`): everything waiting on the token's principal, and the reads
the UI's inbox page shares with it.

What a principal is offered follows the permission table (`domain/permissions.py`): pending
requests it may vote on (an `approver`; not its own, not yet voted, under a policy whose groups
hold it or that names none) and `recovery_required` dispatches with their evidence's verdict
(an `operator`), each naming the target it holds, if any, the notifications given up
(an `operator`: `dead_letters`), the held targets others wait on and the dispatches a freeze
holds (an `operator`: `inbox_waits`). A viewer's inbox is empty: nothing waits on a reader
(the dispatch list and the freeze banner show it the waits). It reads at most
`SCANNED_PAGES` pages of each queue; `complete` says whether it saw every row.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from aiohttp import web

from qinglong_dispatcher.domain import (
    approval_policies,
    approval_views,
    errors,
    inbox,
    permissions,
    principals,
    recovery,
    uncertainty,
)
from qinglong_dispatcher.domain import notes as note_records
from qinglong_dispatcher.web import auth, context, dead_letters, inbox_waits, notes, reads

SCANNED_PAGES: Final = 4
"""Pages of each queue one inbox reads (`approval_views.MAX_LIMIT` and `PAGE` rows each)."""
PAGE: Final = 500
TEXT_MAX: Final = 200
SORTS: Final = ("oldest", "newest")
PARAMS: Final = ("action", "project", "target", "older_than", "q", "sort")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Found:
    """An inbox as read: its rows in order, whether every queued row was seen, and the notes
    on its rows (by the row's id, oldest first)."""

    items: list[inbox.Item]
    complete: bool
    notes: dict[str, list[note_records.Note]] = dataclasses.field(default_factory=dict)

    def notes_on(self, item: inbox.Item) -> list[note_records.Note]:
        """The notes written on `item` (a dead letter takes none: its subject's notes belong
        to that request's or dispatch's own row)."""
        return self.notes.get(item.subject_id, []) if notes_kept(item) else []


def notes_kept(item: inbox.Item) -> bool:
    """Whether a row of this kind takes notes (a request or a dispatch, not a dead letter)."""
    return item.kind in (inbox.Kind.APPROVAL, inbox.Kind.RECOVERY)


def parse_text(text: str) -> str:
    """The text filter: one line, at most `TEXT_MAX` characters."""
    if len(text) > TEXT_MAX or any(not c.isprintable() for c in text):
        raise errors.InvalidInput(f"q: one line of at most {TEXT_MAX} characters")
    return text.strip()


def parse_sort(text: str) -> bool:
    """Newest first? (`oldest`, the default, or `newest`)."""
    if text not in SORTS:
        raise errors.InvalidInput("sort: oldest or newest")
    return text == "newest"


def filter_of(query: dict[str, str]) -> inbox.Filter:
    """The filters from a query (a bad one is a 400 naming it)."""
    return inbox.Filter(
        action_type=reads.query_field(
            "action", query.get("action") or None, reads.identifier("action")
        ),
        project_id=reads.query_field(
            "project", query.get("project") or None, reads.identifier("project")
        ),
        target_prefix=reads.query_field(
            "target", query.get("target") or None, approval_policies.check_target_prefix
        ),
        older_than_ms=reads.query_field(
            "older_than", query.get("older_than") or None, inbox.parse_older_than
        ),
        text=reads.query_field("q", query.get("q") or None, parse_text),
        newest_first=bool(reads.query_field("sort", query.get("sort") or None, parse_sort)),
    )


async def _approvals(
    ctx: context.Context, who: principals.Authenticated, wanted: inbox.Filter
) -> tuple[list[inbox.Item], bool]:
    items: list[inbox.Item] = []
    after: approval_views.Cursor | None = None
    for _ in range(SCANNED_PAGES):
        page = await ctx.store.list_waiting_approvals(
            approval_views.ListQuery(
                action_type=wanted.action_type,
                project_id=wanted.project_id,
                limit=approval_views.MAX_LIMIT,
                after=after,
            ),
            now_ms=ctx.clock.now_ms(),
            shown=ctx.shown,
        )
        for row in page.approvals:
            if row.requested_principal == who.principal:
                continue
            state = await ctx.store.vote_state(row.approval_request_id)
            if state is None or not inbox.may_decide(who.principal, row.requested_principal, state):
                continue
            policy = "no policy" if state.policy is None else f"policy {state.policy.name}"
            items.append(
                inbox.Item(
                    kind=inbox.Kind.APPROVAL,
                    subject_id=row.approval_request_id,
                    action_type=row.action_type,
                    project_id=row.project_id,
                    since_ms=row.created_at_ms,
                    summary=f"requested by {row.requested_principal}; {policy}",
                )
            )
        if page.next is None:
            return items, True
        after = page.next
    return items, False


def _verdict(snap: recovery.Snapshot) -> str:
    if snap.observation is None:
        said = "no recovery pass has looked yet: check the target"
    else:
        said = uncertainty.observation_verdict(snap.observation)
    target = snap.dispatch.target
    return said if target is None else f"holds target {target} until settled; {said}"


async def _recovery(ctx: context.Context) -> tuple[list[inbox.Item], bool]:
    items: list[inbox.Item] = []
    after: tuple[int, str] | None = None
    for _ in range(SCANNED_PAGES):
        page = await ctx.store.list_recovery_required(
            now_ms=ctx.clock.now_ms(), limit=PAGE, after=after
        )
        items.extend(
            inbox.Item(
                kind=inbox.Kind.RECOVERY,
                subject_id=snap.dispatch.dispatch_id,
                action_type=snap.dispatch.action_type,
                project_id=snap.dispatch.project_id,
                since_ms=snap.since_ms,
                summary=_verdict(snap),
                target=snap.dispatch.target,
            )
            for snap in page
        )
        if len(page) < PAGE:
            return items, True
        after = (page[-1].since_ms, page[-1].dispatch.dispatch_id)
    return items, False


async def read(ctx: context.Context, who: principals.Authenticated, wanted: inbox.Filter) -> Found:
    """What waits on `who`, filtered and in order."""
    items: list[inbox.Item] = []
    complete = True
    if permissions.admits(who, permissions.Operation.APPROVE):
        found, seen = await _approvals(ctx, who, wanted)
        items += found
        complete &= seen
    if permissions.admits(who, permissions.Operation.RESOLVE):
        found, seen = await _recovery(ctx)
        items += found
        complete &= seen
        for reader in (dead_letters.read, inbox_waits.held_targets, inbox_waits.frozen_dispatches):
            found, seen = await reader(ctx)
            items += found
            complete &= seen
    shown = wanted.apply(items, now_ms=ctx.clock.now_ms())
    written = await ctx.store.notes_for(
        [i.subject_id for i in shown if i.kind is inbox.Kind.APPROVAL],
        [i.subject_id for i in shown if i.kind is inbox.Kind.RECOVERY],
    )
    return Found(items=shown, complete=complete, notes=notes.by_subject(written))


@auth.requires(auth.Operation.READ)
async def show_inbox(request: web.Request) -> web.Response:
    """`GET /api/v1/inbox?action=&project=&target=&older_than=&q=&sort=`: what waits on the
    token's principal."""
    reads.only_params(request, PARAMS)
    wanted = filter_of(dict(request.query))
    ctx = context.of(request)
    found = await read(ctx, context.principal(request), wanted)
    now_ms = ctx.clock.now_ms()
    return web.json_response(
        {
            "items": [
                {
                    **i.as_dict(now_ms=now_ms),
                    "notes": [n.as_dict() for n in found.notes_on(i)],
                }
                for i in found.items
            ],
            "complete": found.complete,
        },
        headers={"Cache-Control": "no-store"},
    )
