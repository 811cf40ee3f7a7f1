"""The evidence of uncertain outcomes on an edge file, by a plain `sqlite3` connection (the
file's owner is the runtime and the operator at once, docs/security.md): what the daemon knew
is written only for the started row of the attempt and owner it names, and never changed or
deleted but by a prune; the `recovery_required` mark follows an observation or a resolution
of a started row, never a hand-written line.

SQLite keeps no lease proof (one daemon owns the file): PostgreSQL's side of these rules
(tests/security/test_hostile_evidence_postgres.py) also binds the proof and the roles. Each
test asserts the trigger's own abort and that nothing changed, then runs the product's shape.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from qinglong_dispatcher.domain import recovery
from tests.support import refusals, stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.recovery import started_execution


@pytest.fixture
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    async with stores.open_harness("sqlite", tmp_path_factory) as harness:
        yield harness


async def _everything(h: stores.Harness) -> tuple[Any, ...]:
    return (
        await h.raw("SELECT * FROM uncertain_outcomes ORDER BY dispatch_id"),
        await h.raw("SELECT * FROM recovery_required_marks ORDER BY dispatch_id"),
        await h.raw("SELECT * FROM approved_action_dispatch_executions ORDER BY dispatch_id"),
    )


def _outcome(dispatch_id: str, attempt: int, owner: str) -> str:
    return (
        "INSERT INTO uncertain_outcomes (dispatch_id, execution_attempt, lease_owner, "
        f"result_code, evidence_json, recorded_at_ms) VALUES ('{dispatch_id}', {attempt}, "
        f"'{owner}', 'command_exit_uncertain', '{{\"exitCode\":1}}', 1)"
    )


async def test_what_the_daemon_knew_names_its_started_row_and_stays_as_written(
    edge: stores.Harness, clock: ManualClock
) -> None:
    submitted = await submit_runs(edge.approver_store, clock, 2)
    dispatch, _ = await started_execution(edge, clock, owner="w1")
    (waiting,) = [d.dispatch_id for d in submitted if d.dispatch_id != dispatch.dispatch_id]
    before = await _everything(edge)
    refused = "qinglong:fence_refused: an uncertain outcome names its started row"
    for sql in (
        _outcome(dispatch.dispatch_id, 2, "w1"),
        _outcome(dispatch.dispatch_id, 1, "w9"),
        _outcome(waiting, 1, "w1"),
    ):
        assert await refusals.sqlite_abort(edge, sql) == refused
    assert await _everything(edge) == before
    await edge.raw(_outcome(dispatch.dispatch_id, 1, "w1"))  # the product's shape
    written = await _everything(edge)
    where = f"WHERE dispatch_id = '{dispatch.dispatch_id}'"
    change = "UPDATE uncertain_outcomes SET evidence_json = '{\"exitCode\":0}' " + where
    assert await refusals.sqlite_abort(edge, change) == "uncertain_outcomes is immutable"
    assert await refusals.sqlite_abort(edge, f"DELETE FROM uncertain_outcomes {where}") == (
        "uncertain_outcomes: only a prune deletes an outcome"
    )
    assert await _everything(edge) == written


async def test_a_mark_follows_an_observation_of_a_started_row_only(
    edge: stores.Harness, clock: ManualClock
) -> None:
    (one,) = await submit_runs(edge.approver_store, clock, 1)
    dispatch, fence = await started_execution(edge, clock, owner="w1")
    mark = (
        "INSERT INTO recovery_required_marks (dispatch_id, execution_attempt, "
        "execution_version, lease_owner, lease_expires_at_ms, noticed_by, committed_at_ms) "
        f"VALUES ('{dispatch.dispatch_id}', 1, {fence.version}, 'w1', 0, 'recovery_pass', 1)"
    )
    before = await _everything(edge)
    assert await refusals.sqlite_abort(edge, mark) == (
        "qinglong:transition_refused: a mark follows an observation or a resolution"
    )
    assert await _everything(edge) == before
    # The product's shape: the recovery pass observes the expired lease, the database marks it.
    clock.advance(ms=LEASE_MS)
    await edge.store.record_observation(
        dispatch.dispatch_id,
        outcome=recovery.ObservationOutcome.MISSING,
        reason_code="manual_only",
        now_ms=clock.ms,
    )
    (marked,) = await edge.raw("SELECT * FROM recovery_required_marks")
    assert (marked["dispatch_id"], marked["noticed_by"]) == (one.dispatch_id, "recovery_pass")
    where = f"WHERE dispatch_id = '{dispatch.dispatch_id}'"
    change = f"UPDATE recovery_required_marks SET noticed_by = 'resolution' {where}"
    assert await refusals.sqlite_abort(edge, change) == "recovery_required_marks is immutable"
    assert await refusals.sqlite_abort(edge, f"DELETE FROM recovery_required_marks {where}") == (
        "recovery_required_marks: only a prune deletes a mark"
    )
