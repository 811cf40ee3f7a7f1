"""An action receipt commits with its completion, in the execution row, on every dialect: what
the downstream system answered, shown by `dispatch show`, never rewritten by a replay."""

from __future__ import annotations

import pytest

from qinglong_dispatcher.domain import digests, errors, fencing, records, states
from qinglong_dispatcher.domain.records import Outcome
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.recovery import started_execution
from tests.support.stores import Harness

ANSWER = {"status": 201, "bodyDigest": "ab" * 32, "bodyBytes": 17, "replayed": False}


def _receipt(value: dict[str, object]) -> records.ActionReceipt:
    receipt_json, receipt_digest = digests.action_receipt(value)
    return records.ActionReceipt(receipt_json=receipt_json, receipt_digest=receipt_digest)


async def _complete(
    harness: Harness,
    clock: ManualClock,
    identity: records.ExecutionIdentity,
    receipt: records.ActionReceipt | None,
    completion: states.Completion = states.Completion.SUCCEEDED,
) -> records.Transition:
    return await harness.store.complete(
        identity,
        mutation_id=fencing.mutation_id(identity.dispatch_id, identity.attempt, "complete"),
        completion=completion,
        result_code="http_201",
        now_ms=clock.now_ms(),
        receipt=receipt,
    )


@pytest.mark.parametrize("completion", [states.Completion.SUCCEEDED, states.Completion.FAILED])
async def test_a_completion_commits_its_receipt_and_dispatch_show_reads_it(
    harness: Harness, clock: ManualClock, completion: states.Completion
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    dispatch, identity = await started_execution(harness, clock)
    done = await _complete(harness, clock, identity, _receipt(ANSWER), completion)
    assert done.outcome is Outcome.COMPLETED
    detail = await harness.store.show_dispatch(dispatch.dispatch_id, now_ms=clock.now_ms())
    assert detail is not None
    assert detail.execution.receipt == ANSWER
    assert detail.execution.receipt_digest == _receipt(ANSWER).receipt_digest
    assert detail.as_dict()["execution"]["receipt"] == ANSWER  # type: ignore[index]


async def test_a_replayed_completion_keeps_the_first_receipt(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    dispatch, identity = await started_execution(harness, clock)
    await _complete(harness, clock, identity, _receipt(ANSWER))
    again = await _complete(harness, clock, identity, _receipt({**ANSWER, "status": 200}))
    assert again.outcome is Outcome.EXISTING
    detail = await harness.store.show_dispatch(dispatch.dispatch_id, now_ms=clock.now_ms())
    assert detail is not None
    assert detail.execution.receipt == ANSWER


async def test_a_completion_without_a_receipt_shows_none(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    dispatch, identity = await started_execution(harness, clock)
    await _complete(harness, clock, identity, None)
    detail = await harness.store.show_dispatch(dispatch.dispatch_id, now_ms=clock.now_ms())
    assert detail is not None
    assert (detail.execution.receipt, detail.execution.receipt_digest) == (None, None)


def test_a_receipt_over_its_cap_or_with_a_float_is_refused_before_the_store() -> None:
    with pytest.raises(errors.CanonicalJsonError):
        digests.action_receipt({"head": "x" * (digests.ACTION_RECEIPT_MAX_BYTES + 1)})
    with pytest.raises(errors.CanonicalJsonError):
        digests.action_receipt({"seconds": 1.5})
