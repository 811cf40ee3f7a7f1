"""Bulk settle (`operator`): several `recovery_required` dispatches, one outcome, one reason.

`POST /api/v1/recovery/settle` `{"dispatch_ids": [...], "as", "reason", "comment"}` settles
each dispatch alone, in its own transaction, exactly as `POST /recovery/{id}/resolve` would:
the database re-checks each one's fence (a live lease by either clock is refused), writes its
own audit rows, and a refused or failed row undoes nothing of the others. The answer names
every row: settled (its status and version) or refused (its problem code and detail). The
operator UI's inbox sends its selection through the same function.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from aiohttp import web

from qinglong_dispatcher.domain import errors, plans
from qinglong_dispatcher.web import auth, context, operations, problems, writing

MAX_ROWS: Final = 50
"""Dispatches one bulk settle names at most (each is its own transaction)."""
MEMBERS: Final = ("dispatch_ids", "as", "reason", "comment")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Settled:
    """One row's outcome: its transition, or the problem that refused it."""

    dispatch_id: str
    status: str | None = None
    version: int | None = None
    problem: str | None = None
    detail: str | None = None

    def as_dict(self) -> dict[str, object]:
        """JSON members."""
        return dataclasses.asdict(self)


def dispatch_ids(value: object) -> list[str]:
    """The body's `dispatch_ids`: 1 to `MAX_ROWS` distinct ids (a 400 naming it otherwise)."""
    if not isinstance(value, list) or not 0 < len(value) <= MAX_ROWS:
        raise problems.BadField(
            "dispatch_ids", f"dispatch_ids: a list of 1 to {MAX_ROWS} dispatch ids"
        )
    if not all(isinstance(v, str) and plans.is_identifier(v) for v in value):
        raise problems.BadField("dispatch_ids", "dispatch_ids: each must be a dispatch id")
    if len(set(value)) != len(value):
        raise problems.BadField("dispatch_ids", "dispatch_ids: an id is named twice")
    return [str(v) for v in value]


async def settle_each(
    ctx: context.Context, admitted: writing.Write, ids: list[str]
) -> list[Settled]:
    """Settle each of `ids` alone as the admitted operator; every row's outcome, in order.

    The outcome and reason are checked once before any row, so a bad one settles nothing."""
    operations.resolution_of(admitted.body)
    writing.code(admitted.body, "reason")
    done: list[Settled] = []
    for dispatch_id in ids:
        try:
            moved = await operations.resolve_as(ctx, admitted, dispatch_id)
        except errors.QinglongError as exc:
            done.append(
                Settled(dispatch_id=dispatch_id, problem=problems.code_of(exc), detail=str(exc))
            )
            continue
        done.append(
            Settled(
                dispatch_id=dispatch_id,
                status=None if moved.status is None else moved.status.value,
                version=moved.version,
            )
        )
    return done


@auth.requires(auth.Operation.RESOLVE)
async def settle(request: web.Request) -> web.Response:
    """`POST /api/v1/recovery/settle`: settle several `recovery_required` dispatches, each
    alone; 200 with every row's outcome (settled or refused)."""
    admitted = await writing.begin(request, MEMBERS)
    if isinstance(admitted, web.Response):
        return admitted
    ids = dispatch_ids(admitted.body.get("dispatch_ids"))
    done = await settle_each(context.of(request), admitted, ids)
    return writing.ok({"results": [row.as_dict() for row in done]})
