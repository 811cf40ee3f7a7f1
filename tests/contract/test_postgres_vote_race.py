"""Two votes by one principal racing past the store's check (PostgreSQL): the vote's key
refuses the second (23505), which arrives as the same typed refusal as the check's
(`AlreadyVoted`, the API's 409 `already_voted`), never as a store fault."""

from __future__ import annotations

import time

import anyio
import asyncpg
import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import approvals, errors
from qinglong_dispatcher.usecases import voting
from tests.support import stores
from tests.support.actions import make_api
from tests.support.clock import ManualClock

pytestmark = pytest.mark.postgres


async def _waiting_on_locks(conn: asyncpg.Connection, user: str) -> int:
    # Inside the holder's transaction the activity view is a snapshot: take a fresh one.
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND wait_event_type = 'Lock'",
            user,
        )
    )


async def test_a_twin_vote_racing_the_check_is_already_voted(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    async with stores.open_harness("postgres", tmp_path_factory) as pg:
        await pg.raw(
            "INSERT INTO qinglong.approval_policies (name, action_type, approvals_required) "
            "VALUES ('two', 'run.create', 2)"
        )
        clock = ManualClock(int(time.time() * 1000))
        plan = api.run_create_plan(
            {"projectId": "p", "taskId": "t", "taskRevision": 1, "actionRef": "race"}
        ).to_canonical_dict()
        created = await make_api(pg.approver_store, clock).create_approval(
            "run.create", plan, requested_by="req"
        )
        request = created.approval_request_id
        database = str(await pg.scalar("SELECT current_database()"))
        voter = await stores.open_postgres(stores.strict_approver_url(database), max_size=2)
        holder = await asyncpg.connect(stores.pg_url(database), timeout=5)
        outcomes: list[object] = []

        async def cast() -> None:
            try:
                outcomes.append(await voting.vote(voter, clock, request, approvals.Vote.APPROVE))
            except errors.QinglongError as exc:
                outcomes.append(exc)

        try:
            # Both votes pass the store's check, then wait on the request's row lock.
            tx = holder.transaction()
            await tx.start()
            await holder.execute(
                "SELECT 1 FROM qinglong.approval_requests WHERE approval_request_id = $1 "
                "FOR UPDATE",
                request,
            )
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(cast)
                tasks.start_soon(cast)
                with anyio.fail_after(10):
                    # Polling the server's view: no event tells when a backend starts waiting.
                    while await _waiting_on_locks(holder, stores.STRICT_APPROVER_LOGIN) < 2:  # noqa: ASYNC110
                        await anyio.sleep(0.05)
                await tx.commit()
        finally:
            await holder.close()
            await voter.close()
        refused = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(outcomes) == 2
        assert [type(o) for o in refused] == [errors.AlreadyVoted], outcomes
        rows = await pg.raw(
            "SELECT count(*) AS n FROM qinglong.approval_votes "
            f"WHERE approval_request_id = '{request}'"
        )
        assert rows[0]["n"] == 1
