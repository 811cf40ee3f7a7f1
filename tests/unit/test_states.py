"""The pure state machine and fencing decisions."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qinglong_dispatcher.domain import fencing, records, states
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import EffectiveStatus, ExecutionStatus, ReleaseKind
from qinglong_dispatcher.domain.tools import steps

NOW = 1_000_000


def row(**changes: Any) -> records.Execution:
    base = records.Execution(
        dispatch_id="d-1",
        project_id="p",
        status=ExecutionStatus.LEASED,
        version=3,
        attempt=1,
        max_attempts=3,
        eligible_at_ms=NOW + 10,
        retry_at_ms=None,
        lease_owner="w1",
        lease_token="t1",
        lease_expires_at_ms=NOW + 10,
        started_at_ms=None,
        result_mutation_id=None,
        result_code=None,
        completed_at_ms=None,
        created_at_ms=0,
        updated_at_ms=0,
        takeovers=0,
    )
    return dataclasses.replace(base, **changes)


def test_recovery_required_is_derived_from_an_expired_executing_lease() -> None:
    executing = row(status=ExecutionStatus.EXECUTING, eligible_at_ms=None, started_at_ms=5)
    assert executing.effective_status(NOW) is EffectiveStatus.EXECUTING
    assert executing.effective_status(NOW + 10) is EffectiveStatus.RECOVERY_REQUIRED
    assert row().effective_status(NOW + 100) is EffectiveStatus.LEASED


def test_transitions_follow_the_machine() -> None:
    assert states.is_allowed(None, ExecutionStatus.PENDING)
    assert states.is_allowed(ExecutionStatus.LEASED, ExecutionStatus.EXECUTING)
    assert not states.is_allowed(ExecutionStatus.EXECUTING, ExecutionStatus.LEASED)
    assert not states.is_allowed(ExecutionStatus.EXECUTING, ExecutionStatus.PENDING)
    for terminal in states.TERMINAL:
        assert not any(states.is_allowed(terminal, after) for after in ExecutionStatus)


def test_row_updates_are_the_ledger_transitions_plus_the_renews() -> None:
    moves = {(before, after) for before, after in states.ROW_UPDATES if before is not after}
    ledger = {pair for pair in states.ALLOWED_TRANSITIONS if pair[0] is not None}
    assert moves == {(before, after) for before, after in ledger if before is not after}
    assert {before for before, after in states.ROW_UPDATES if before is after} == {
        ExecutionStatus.LEASED,  # a renew, or a takeover (which the ledger records)
        ExecutionStatus.EXECUTING,
        ExecutionStatus.PENDING,  # a handler wait made due now
    }
    assert not any(before in states.TERMINAL for before, _ in states.ROW_UPDATES)
    # Every status is reachable from a fresh row: the insert makes it pending.
    reached = {after for _, after in states.ROW_UPDATES} | {ExecutionStatus.PENDING}
    assert reached == set(ExecutionStatus)


def test_step_run_row_updates_are_the_mutations_plus_the_operator_re_arm() -> None:
    beyond_the_ledger = steps.ROW_UPDATES - steps.ALLOWED_TRANSITIONS
    assert beyond_the_ledger == {(steps.StepRunStatus.LOST, steps.StepRunStatus.READY)}
    assert not any(before is after for before, after in steps.ROW_UPDATES)
    assert not any(before in steps.TERMINAL for before, _ in steps.ROW_UPDATES)
    assert steps.TERMINAL.isdisjoint(steps.STARTABLE)


@pytest.mark.parametrize(
    ("kind", "attempt", "expected"),
    [
        (ReleaseKind.YIELD, 3, ExecutionStatus.PENDING),
        (ReleaseKind.WAIT, 3, ExecutionStatus.PENDING),
        (ReleaseKind.RETRY, 1, ExecutionStatus.RETRY_WAIT),
        (ReleaseKind.RETRY, 3, ExecutionStatus.BLOCKED),
        (ReleaseKind.BLOCKED, 1, ExecutionStatus.BLOCKED),
    ],
)
def test_release_targets(kind: ReleaseKind, attempt: int, expected: ExecutionStatus) -> None:
    assert states.release_target(kind, attempt, 3) is expected


@given(
    first=st.integers(1, 10_000),
    attempt=st.integers(1, 40),
    jitter=st.floats(0.5, 1.5),
)
def test_backoff_doubles_is_capped_and_positive(first: int, attempt: int, jitter: float) -> None:
    delay = states.retry_delay_ms(first, attempt, jitter)
    assert 1 <= delay <= int(60_000 * 1.5)


def test_claim_steps() -> None:
    live = row()
    assert fencing.claim_step(live, now_ms=NOW, owner="w2", token=None)[1] is Outcome.LIVE_LEASE
    assert fencing.claim_step(live, now_ms=NOW, owner="w1", token="t1")[1] is Outcome.REPLAYED
    expired = fencing.claim_step(live, now_ms=NOW + 10, owner="w2", token=None)
    assert expired[:2] == (fencing.ClaimStep.LEASE, Outcome.CLAIMED)
    # The attempt budget stops a waiting row; an expired lease is a takeover, which refunds
    # the dead holder's attempt, so only the takeover bound stops it.
    waiting = row(status=ExecutionStatus.RETRY_WAIT, attempt=3, lease_expires_at_ms=None)
    assert fencing.claim_step(waiting, now_ms=NOW + 10, owner="w2", token=None) == (
        fencing.ClaimStep.EXHAUST,
        Outcome.EXHAUSTED,
        "attempts_exhausted",
    )
    last = row(attempt=3, takeovers=states.max_takeovers(3) - 1)
    assert fencing.claim_step(last, now_ms=NOW + 10, owner="w2", token=None)[:2] == (
        fencing.ClaimStep.LEASE,
        Outcome.CLAIMED,
    )
    poison = row(attempt=1, takeovers=states.max_takeovers(3))
    assert fencing.claim_step(poison, now_ms=NOW + 10, owner="w2", token=None) == (
        fencing.ClaimStep.EXHAUST,
        Outcome.EXHAUSTED,
        "takeovers_exhausted",
    )
    started = row(status=ExecutionStatus.EXECUTING, eligible_at_ms=None, started_at_ms=1)
    assert fencing.claim_step(started, now_ms=NOW + 99, owner="w2", token=None)[2] == "started"


def test_complete_accepts_a_grown_version_only_for_the_same_identity() -> None:
    executing = row(
        status=ExecutionStatus.EXECUTING, eligible_at_ms=None, started_at_ms=7, version=9
    )
    identity = fencing.identity_of(dataclasses.replace(executing, version=5))
    assert fencing.complete_refusal(executing, identity) is None
    ahead = dataclasses.replace(identity, version=10)
    assert fencing.complete_refusal(executing, ahead) == "version_regressed"
    other = dataclasses.replace(identity, token="t2")
    assert fencing.complete_refusal(executing, other) == "identity_mismatch"


def test_a_lease_taken_over_before_is_claimed_in_a_page_of_its_own() -> None:
    waiting = row(status=ExecutionStatus.PENDING, lease_owner=None, lease_token=None)
    first_crash = row()
    suspect = row(takeovers=1)
    assert fencing.isolated_prefix([]) == 0
    assert fencing.isolated_prefix([waiting, waiting]) == 2
    assert fencing.isolated_prefix([first_crash, waiting, first_crash]) == 3
    assert fencing.isolated_prefix([suspect, waiting, suspect]) == 1
    assert fencing.isolated_prefix([waiting, waiting, suspect, waiting]) == 2
