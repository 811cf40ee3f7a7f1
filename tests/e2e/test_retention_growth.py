"""200,000 dispatches through one edge SQLite file with a short retention, pruned
as the daemon prunes between rounds; the file's size levels off instead of growing."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.adapters.sqlite import store as sqlite_store
from qinglong_dispatcher.domain import retention, states
from qinglong_dispatcher.lifecycle import pruning
from tests.support import stores
from tests.support.actions import make_api
from tests.support.clock import ManualClock

TOTAL = 200_000
ROUNDS = 20
PER_ROUND = TOTAL // ROUNDS
ROUND_MS = 10_000
KEEP_ROUNDS = 2
"""The retention: trees finished in the last two rounds stay, older ones go."""

REAL_PER_ROUND = 100
"""Submitted through the real API each round; the rest of the round through `_SUBMIT`."""

# The rest of a round created, approved and consumed set-based, one statement per step, in one
# transaction: the rows (plan, request, three audit records, dispatch, pending execution) and
# the triggers (approval transitions and audit, the dispatch guard, the execution insert
# check) of `submit`, without a transaction per chunk and no Python per row.
_SUBMIT = (
    """WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :count)
       INSERT INTO action_plans (project_id, action_ref, action_type, plan_json, plan_digest,
                                 created_at_ms)
       SELECT 'edge', 'ref-' || :round || '-' || i, 'run.create',
              json_object('actionRef', 'ref-' || :round || '-' || i, 'executorType', 'shell',
                          'inputRef', NULL, 'priority', 0, 'projectId', 'edge',
                          'schemaVersion', 1, 'taskId', 't-' || :round || '-' || i,
                          'taskName', NULL, 'taskRevision', i, 'taskSnapshotRef', NULL),
              lower(hex(randomblob(32))), :now
       FROM n""",
    """INSERT INTO approval_requests (
           approval_request_id, project_id, action_type, action_ref, action_digest, status,
           version, requested_by, decided_by, requested_principal, expires_at_ms,
           created_at_ms, updated_at_ms, db_expires_at_ms)
       SELECT 'a-' || action_ref, project_id, action_type, action_ref,
              lower(hex(randomblob(32))), 'pending', 1, 'tester', NULL, 'tester',
              :now + 86400000, :now, :now,
              CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + 86400000
       FROM action_plans WHERE created_at_ms = :now
         AND NOT EXISTS (SELECT 1 FROM approval_requests AS r
                         WHERE r.project_id = action_plans.project_id
                           AND r.action_ref = action_plans.action_ref)""",
    """UPDATE approval_requests
       SET status = 'approved', version = 2, decided_by = 'approver',
           decided_principal = 'approver', updated_at_ms = :now
       WHERE status = 'pending'""",
    """UPDATE approval_requests
       SET status = 'consumed', version = 3, consumed_at_ms = :now,
           consumed_principal = 'tester', updated_at_ms = :now
       WHERE status = 'approved'""",
    """INSERT INTO approved_action_dispatches (
           dispatch_id, approval_request_id, project_id, action_type, action_ref,
           action_digest, approved_by, created_at_ms)
       SELECT 'd-' || approval_request_id, approval_request_id, project_id, action_type,
              action_ref, action_digest, decided_by, :now
       FROM approval_requests WHERE status = 'consumed' AND consumed_at_ms = :now
         AND approval_request_id LIKE 'a-ref-%'""",
    """INSERT INTO approved_action_dispatch_executions (
           dispatch_id, project_id, status, version, attempt, max_attempts, eligible_at_ms,
           created_at_ms, updated_at_ms)
       SELECT dispatch_id, project_id, 'pending', 0, 0, 5, :now, :now, :now
       FROM approved_action_dispatches WHERE created_at_ms = :now
         AND dispatch_id LIKE 'd-a-ref-%'""",
)

# Every pending dispatch claimed, started and succeeded, one set-based statement per step (the
# triggers write its three ledger lines): the rows and triggers of the real claim, start
# barrier and completion.
_SETTLE = (
    """UPDATE approved_action_dispatch_executions
       SET status = 'leased', version = 1, attempt = 1, eligible_at_ms = :lease,
           lease_owner = 'bulk', lease_token = 'bulk-' || dispatch_id,
           lease_expires_at_ms = :lease, updated_at_ms = :now
       WHERE status = 'pending'""",
    """UPDATE approved_action_dispatch_executions
       SET status = 'executing', version = 2, eligible_at_ms = NULL, started_at_ms = :now,
           updated_at_ms = :now
       WHERE status = 'leased' AND lease_owner = 'bulk'""",
    """UPDATE approved_action_dispatch_executions
       SET status = 'succeeded', version = 3, result_code = 'ok',
           result_mutation_id = 'complete-' || dispatch_id, completed_at_ms = :now,
           updated_at_ms = :now
       WHERE status = 'executing' AND lease_owner = 'bulk'""",
)


async def _run_round(
    store: sqlite_store.SqliteStore, the_api: api.Api, n: int, now_ms: int
) -> None:
    """One round's dispatches: some through the real API, the rest set-based; all succeeded."""
    plans = [
        api.run_create_plan({"projectId": "edge", "taskId": f"t-{n}-{i}", "taskRevision": i})
        for i in range(REAL_PER_ROUND)
    ]
    await the_api.submit(plans, requested_by="tester", approved_by="approver")

    def body(conn: sqlite3.Connection) -> None:
        params = {
            "count": PER_ROUND - REAL_PER_ROUND,
            "round": n,
            "now": now_ms,
            "lease": now_ms + 30_000,
        }
        for statement in (*_SUBMIT, *_SETTLE):
            conn.execute(statement, params)

    await store.db.write(body)


def _size(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


@pytest.mark.slow
@pytest.mark.timeout(300)  # about 35 s on an idle 2-core machine; room for a busy CI host
async def test_two_hundred_thousand_dispatches_leave_a_file_that_levels_off(
    tmp_path: Path,
) -> None:
    path = tmp_path / "edge.db"
    # Rounds are 10 s apart on a clock an hour behind the database's: every cutoff is in the
    # past, as the database requires.
    clock = ManualClock(start_ms=int(time.time() * 1000) - 3_600_000)
    store = await stores.open_sqlite(path)
    await store.migrate(now_ms=clock.now_ms())
    the_api = make_api(store, clock)
    pruner = pruning.Pruner(store, clock)
    round_clock: list[int] = []
    round_db_clock: list[int] = []
    sizes: list[int] = []
    pruned = retention.PruneCounts()
    try:
        for n in range(ROUNDS):
            round_clock.append(clock.now_ms())
            round_db_clock.append(await store.database_now_ms())
            await _run_round(store, the_api, n, clock.now_ms())
            if n >= KEEP_ROUNDS:
                report = await pruner.prune_and_reclaim(
                    retention.Cutoffs(
                        dispatch_before_ms=round_clock[n - KEEP_ROUNDS + 1],
                        audit_before_ms=round_db_clock[n - KEEP_ROUNDS + 1],
                    )
                )
                pruned += report.counts
            sizes.append(_size(path))
            clock.advance(ms=ROUND_MS)
        counts = await store.counts(now_ms=clock.now_ms())
    finally:
        await store.close()

    # Every round's dispatches went through, and all but the kept rounds were pruned.
    assert pruned.dispatches == TOTAL - KEEP_ROUNDS * PER_ROUND
    assert sum(counts.executions.values()) == KEEP_ROUNDS * PER_ROUND
    assert counts.executions[states.EffectiveStatus.SUCCEEDED] == KEEP_ROUNDS * PER_ROUND
    # Without pruning the file grows by a round's worth each round (the first rounds show
    # the slope); with it, the last rounds stay within a small factor of the early size.
    per_round = sizes[1] - sizes[0]
    assert per_round > 0
    settled = max(sizes[KEEP_ROUNDS : KEEP_ROUNDS + 3])
    assert max(sizes[-5:]) <= settled * 1.25, sizes
    assert max(sizes) < sizes[0] + per_round * ROUNDS / 4, sizes
    print(f"file sizes per round (MiB): {[round(s / 2**20, 1) for s in sizes]}")
