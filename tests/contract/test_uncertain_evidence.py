"""Evidence of uncertain outcomes on every dialect: what the lease holder knew is kept beside its
started row (once, never for another row), `dispatch show` gives it with recovery's verdict in
words, and the ledger shows `recovery_required` when recovery first saw it and names the
principal who settled the row."""

from __future__ import annotations

import dataclasses
import json

import pytest

from qinglong_dispatcher import api, bootstrap, ports
from qinglong_dispatcher.domain import errors, records, states, uncertainty
from qinglong_dispatcher.domain.states import EffectiveStatus, ExecutionStatus
from tests.support import faults, tools
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS, make_dispatcher
from tests.support.recovery import started_execution
from tests.support.stores import Harness

SECRET = "s3cr3t-4f1e"
KNEW = {"exitCode": 1, "signal": None, "durationMs": 12, "stderrHead": "token=[redacted]\nboom"}


def _lost(identity: records.ExecutionIdentity, **evidence: object) -> uncertainty.LostTrack:
    return uncertainty.LostTrack(
        identity=identity, result_code="command_exit_uncertain", evidence=evidence or KNEW
    )


async def _rows(h: Harness, table: str) -> list[dict[str, object]]:
    return await h.raw(f"SELECT * FROM {faults.table(h, table)} ORDER BY dispatch_id")


def _ledger(detail: object) -> list[tuple[object, ...]]:
    assert detail is not None
    return [
        (e.from_status, e.to_status, e.by, e.settled_by, e.noticed_by)
        for e in detail.events  # type: ignore[attr-defined]
    ]


async def test_the_holder_keeps_what_it_knew_and_show_gives_it_with_the_ledger(
    harness: Harness, clock: ManualClock
) -> None:
    (one,) = await submit_runs(harness.approver_store, clock, 1)
    _, identity = await started_execution(harness, clock, owner="w1")
    await harness.store.record_uncertain(_lost(identity))
    await harness.store.record_uncertain(_lost(identity, exitCode=2))  # a replay: nothing
    (row,) = await _rows(harness, "uncertain_outcomes")
    assert (row["execution_attempt"], row["lease_owner"], row["result_code"]) == (
        1,
        "w1",
        "command_exit_uncertain",
    )
    assert json.loads(str(row["evidence_json"])) == KNEW
    assert row["lease_proof"] is None

    clock.advance(ms=LEASE_MS)
    assert (await bootstrap.build_reconciler(harness.store, clock).reconcile_pass()).observed == 1
    shown = await harness.store.show_dispatch(one.dispatch_id, now_ms=clock.now_ms())
    assert shown is not None
    assert shown.uncertain is not None
    assert shown.execution.effective_status is EffectiveStatus.RECOVERY_REQUIRED
    assert (shown.uncertain.result_code, dict(shown.uncertain.evidence)) == (
        "command_exit_uncertain",
        KNEW,
    )
    assert ("exit code", "1") in shown.uncertain.lines()
    assert ("stderr (redacted head)", "token=[redacted]\nboom") in shown.uncertain.lines()
    (verdict,) = shown.verdicts()
    assert verdict.startswith("no receipt: the Run was not created; check the target (seen 1×")
    assert _ledger(shown)[-2:] == [
        (ExecutionStatus.LEASED, EffectiveStatus.EXECUTING, "w1", None, None),
        (ExecutionStatus.EXECUTING, EffectiveStatus.RECOVERY_REQUIRED, "w1", None, "recovery_pass"),
    ]
    as_json = shown.as_dict()
    assert as_json["uncertain"] == {
        "attempt": 1,
        "lease_owner": "w1",
        "result_code": "command_exit_uncertain",
        "evidence": KNEW,
        "recorded_at_ms": row["recorded_at_ms"],
    }
    assert as_json["verdicts"] == [verdict]

    # The operator settles it: the ledger's last line names the operator's principal, not the
    # daemon that held the lease; the mark stays where it was.
    await api.resolve_manually(
        harness.operator_store,
        clock,
        one.dispatch_id,
        resolution=states.Completion.FAILED,
        operator="oncall-1",
        reason="checked_target",
    )
    after = await harness.store.show_dispatch(one.dispatch_id, now_ms=clock.now_ms())
    assert after is not None
    assert after.resolution is not None
    principal = after.resolution.principal
    assert principal
    assert principal != "w1"
    assert _ledger(after)[-3:] == [
        (ExecutionStatus.LEASED, EffectiveStatus.EXECUTING, "w1", None, None),
        (ExecutionStatus.EXECUTING, EffectiveStatus.RECOVERY_REQUIRED, "w1", None, "recovery_pass"),
        (ExecutionStatus.EXECUTING, EffectiveStatus.FAILED, principal, "oncall-1", None),
    ]
    assert after.verdicts()[0].startswith(f"settled failed by oncall-1 (principal {principal})")
    assert after.uncertain == shown.uncertain  # kept as it was
    (mark,) = await _rows(harness, "recovery_required_marks")
    assert (mark["noticed_by"], mark["execution_attempt"], mark["lease_owner"]) == (
        "recovery_pass",
        1,
        "w1",
    )


async def test_a_settle_before_any_pass_marks_recovery_required_itself(
    harness: Harness, clock: ManualClock
) -> None:
    (one,) = await submit_runs(harness.approver_store, clock, 1)
    _, _identity = await started_execution(harness, clock, owner="w1")
    clock.advance(ms=LEASE_MS)
    before = await harness.store.show_dispatch(one.dispatch_id, now_ms=clock.now_ms())
    assert before is not None
    assert [line for line in before.verdicts() if "no recovery pass" in line]
    assert [line for line in before.verdicts() if "recorded nothing" in line]
    await api.resolve_manually(
        harness.operator_store,
        clock,
        one.dispatch_id,
        resolution=states.Completion.SUCCEEDED,
        operator="oncall-2",
        reason="seen_on_target",
    )
    after = await harness.store.show_dispatch(one.dispatch_id, now_ms=clock.now_ms())
    assert after is not None
    assert after.resolution is not None
    assert [line[1:] for line in _ledger(after)[-2:]] == [
        (EffectiveStatus.RECOVERY_REQUIRED, "w1", None, "resolution"),
        (EffectiveStatus.SUCCEEDED, after.resolution.principal, "oncall-2", None),
    ]
    assert after.uncertain is None
    assert (await _rows(harness, "uncertain_outcomes")) == []


async def test_evidence_is_refused_for_a_row_its_writer_does_not_hold(
    harness: Harness, clock: ManualClock
) -> None:
    submitted = await submit_runs(harness.approver_store, clock, 2)
    _, identity = await started_execution(harness, clock, owner="w1")
    (waiting,) = [d.dispatch_id for d in submitted if d.dispatch_id != identity.dispatch_id]
    others = (
        dataclasses.replace(identity, attempt=2),
        dataclasses.replace(identity, owner="w9"),
        dataclasses.replace(identity, dispatch_id=waiting),  # not started
    )
    for other in others:
        with pytest.raises(errors.StoreError):
            await harness.store.record_uncertain(_lost(other))
    assert await _rows(harness, "uncertain_outcomes") == []
    # Once settled, the row is no longer the holder's: nothing more is kept for it.
    done = await harness.store.complete(
        identity,
        mutation_id="m-done",
        completion=states.Completion.FAILED,
        result_code="done",
        now_ms=clock.now_ms(),
    )
    assert done.outcome is records.Outcome.COMPLETED
    with pytest.raises(errors.StoreError):
        await harness.store.record_uncertain(_lost(identity))
    assert await _rows(harness, "uncertain_outcomes") == []


async def test_evidence_too_large_for_the_cap_keeps_only_its_code(
    harness: Harness, clock: ManualClock
) -> None:
    (one,) = await submit_runs(harness.approver_store, clock, 1)
    _, identity = await started_execution(harness, clock)
    await harness.store.record_uncertain(_lost(identity, stderrHead="x" * 20_000))
    shown = await harness.store.show_dispatch(one.dispatch_id, now_ms=clock.now_ms())
    assert shown is not None
    assert shown.uncertain is not None
    assert dict(shown.uncertain.evidence) == uncertainty.TRUNCATED


class _Uncertain:
    """An action whose execute answers `uncertain` with what it knew, a secret redacted."""

    action_type = "run.create"

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        return ports.InspectResult(
            kind=ports.InspectKind.READY, action_digest=dispatch.action_digest
        )

    async def execute(self, ctx: ports.ExecutionContext) -> ports.ExecuteResult:
        return ports.ExecuteResult(
            kind=ports.ExecuteKind.UNCERTAIN,
            code="lost_answer",
            evidence={"error": "read_timeout", "reached": "connected", "status": None},
        )


async def test_the_dispatcher_keeps_what_an_uncertain_execute_knew(
    harness: Harness, clock: ManualClock
) -> None:
    (one,) = await submit_runs(harness.approver_store, clock, 1)
    dispatcher = make_dispatcher(harness.store, clock, handlers={"run.create": _Uncertain()})
    assert (await dispatcher.dispatch_batch()).outcomes == {"uncertain": 1}
    shown = await harness.store.show_dispatch(one.dispatch_id, now_ms=clock.now_ms())
    assert shown is not None
    assert shown.uncertain is not None
    assert shown.execution.status is ExecutionStatus.EXECUTING
    assert (shown.uncertain.result_code, dict(shown.uncertain.evidence)) == (
        "lost_answer",
        {"error": "read_timeout", "reached": "connected", "status": None},
    )
    assert ("transport error", "read_timeout") in shown.uncertain.lines()
    assert ("HTTP status", "none") in shown.uncertain.lines()


async def test_a_lost_tool_step_is_named_as_the_tools_last_step(
    harness: Harness, clock: ManualClock
) -> None:
    run = await tools.live_run(harness, clock)
    started = await tools.started_tool(harness, clock, run)
    clock.advance(ms=LEASE_MS)  # the daemon died after its barrier: nothing was recorded
    shown = await harness.store.show_dispatch(started.dispatch.dispatch_id, now_ms=clock.now_ms())
    assert shown is not None
    assert shown.execution.effective_status is EffectiveStatus.RECOVERY_REQUIRED
    assert shown.uncertain is None
    assert shown.verdicts() == (
        "no recovery pass has looked yet: check the target",
        "the daemon recorded nothing when it lost track (it stopped, or lost its lease or the "
        "database, while the action ran)",
        f"tool's last step: {started.step.step_run_id} is waiting_approval",
    )
