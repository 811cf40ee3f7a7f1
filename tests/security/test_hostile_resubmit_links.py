"""What a request was made again from (`approval_requests.resubmitted_from`, decision 0048),
attacked from plain logins holding only their documented roles (PostgreSQL: a submitter login
and the approver login of docs/security.md; SQLite: a plain connection to the file): a request
names only a failed, blocked or cancelled dispatch, or an expired request, of its own project
and action type, and the link never changes."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import approvals, errors
from qinglong_dispatcher.usecases import requesting
from tests.support import faults, refusals, stores
from tests.support.actions import DEFAULT_TTL_MS, submit_runs
from tests.support.clock import ManualClock

SUBMITTER = stores.session_login("rs_submitter")
SQLITE_MADE_UP = (
    "qinglong:resubmit_refused: a request is made again only from a failed, blocked or "
    "cancelled dispatch or an expired request of its project and action type"
)
SQLITE_CHANGED = "qinglong:resubmit_refused: what a request was made again from never changes"


async def _database(h: stores.Harness) -> str:
    return str(await h.scalar("SELECT current_database()"))


async def _links(h: stores.Harness) -> list[Any]:
    rows = await h.raw(
        f"SELECT approval_request_id, resubmitted_from FROM "
        f"{faults.table(h, 'approval_requests')} ORDER BY approval_request_id"
    )
    return [(r["approval_request_id"], r["resubmitted_from"]) for r in rows]


async def _origins(h: stores.Harness, clock: ManualClock) -> tuple[str, str]:
    """A cancelled dispatch and one still pending, both of `run.create` in `proj-1`."""
    cancelled, pending = await submit_runs(h.approver_store, clock, 2)
    await api.cancel_dispatch(
        h.operator_store, clock, cancelled.dispatch_id, operator="ops", reason="wrong_time"
    )
    return cancelled.dispatch_id, pending.dispatch_id


def _new(h: stores.Harness, clock: ManualClock, origin: str, project: str = "proj-1") -> Any:
    plan = api.run_create_plan({"projectId": project, "taskId": "again", "taskRevision": 1})
    new = requesting.new_approval(
        plan,
        requested_by="sam",
        now_ms=clock.now_ms(),
        approval_ttl_ms=DEFAULT_TTL_MS,
        plan_digests=h.approver_store.plan_digests,
    )
    return dataclasses.replace(new, resubmitted_from=origin)


async def test_a_request_names_only_an_origin_that_qualifies(
    harness: stores.Harness, clock: ManualClock
) -> None:
    """The store's own write, as a caller that skipped the use case's checks would make it."""
    h = harness
    cancelled, pending = await _origins(h, clock)
    before = await _links(h)
    for origin, project in (
        ("d-0000000000000000000000000000", "proj-1"),  # made up
        (pending, "proj-1"),  # still moving
        (cancelled, "elsewhere"),  # another project's
    ):
        with pytest.raises(errors.QinglongError):
            await h.approver_store.create_approval(
                _new(h, clock, origin, project), now_ms=clock.now_ms()
            )
    assert await _links(h) == before
    made = await h.approver_store.create_approval(_new(h, clock, cancelled), now_ms=clock.now_ms())
    assert made.resubmitted_from == cancelled
    assert await h.store.requested_again(cancelled) == (made.approval_request_id,)


async def test_the_link_never_changes(harness: stores.Harness, clock: ManualClock) -> None:
    h = harness
    cancelled, _ = await _origins(h, clock)
    made: approvals.Approval = await h.approver_store.create_approval(
        _new(h, clock, cancelled), now_ms=clock.now_ms()
    )
    plain = await requesting.request_approval(
        h.approver_store,
        clock,
        api.Policy(approval_ttl_ms=DEFAULT_TTL_MS, max_attempts=5),
        api.run_create_plan({"projectId": "proj-1", "taskId": "plain", "taskRevision": 1}),
        requested_by="sam",
    )
    before = await _links(h)
    requests = faults.table(h, "approval_requests")
    principal = "session_user" if h.dialect == "postgres" else "'bob'"
    for target, value in (
        (made.approval_request_id, "NULL"),
        (plain.approval_request_id, f"'{cancelled}'"),  # a link added afterwards
    ):
        # The approver's own approve, which the approval rules admit, moving the link.
        sql = (
            f"UPDATE {requests} SET status = 'approved', version = 2, decided_by = 'bob', "
            f"decided_principal = {principal}, updated_at_ms = {clock.now_ms()}, "
            f"resubmitted_from = {value} WHERE approval_request_id = '{target}'"
        )
        if h.dialect == "postgres":
            url = stores.approver_url(await _database(h))
            assert await refusals.sqlstate_as(url, sql) == "QLI01"
        else:
            assert await refusals.sqlite_abort(h, sql) == SQLITE_CHANGED
    assert await _links(h) == before


@pytest.mark.postgres
async def test_a_submitter_login_cannot_forge_an_origin(
    pg: stores.Harness, clock: ManualClock
) -> None:
    """A plain login holding only `qinglong_submitter` writes a request row by hand naming a
    made-up origin, a running dispatch, or a request that did not expire: `QLI01`, nothing
    written."""
    h = pg
    cancelled, pending = await _origins(h, clock)
    await stores.create_login(SUBMITTER, "qinglong_submitter")
    url = stores.pg_url(await _database(h), login=SUBMITTER)
    (request,) = await h.raw(
        "SELECT approval_request_id FROM qinglong.approval_requests WHERE status = 'consumed' "
        "ORDER BY approval_request_id LIMIT 1"
    )
    before = await _links(h)
    now = clock.now_ms()
    for origin in ("d-0000000000000000000000000000", pending, request["approval_request_id"]):
        sql = (
            "INSERT INTO qinglong.approval_requests (approval_request_id, project_id, "
            "action_type, action_ref, action_digest, status, version, requested_by, "
            "requested_principal, expires_at_ms, created_at_ms, updated_at_ms, "
            f"resubmitted_from) VALUES ('a-forged', 'proj-1', 'run.create', 'act-forged', "
            f"'x', 'pending', 1, 'mallory', session_user, {now + 60_000}, {now}, {now}, "
            f"'{origin}')"
        )
        assert await refusals.sqlstate_as(url, sql) == "QLI01"
    assert await _links(h) == before
    assert cancelled  # the one origin that qualifies is the store's own test above
