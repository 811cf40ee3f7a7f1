"""The action authors' test kit (`qinglong_dispatcher.testing`): what it reports is what the
ledger holds after the daemon's own path, and its assertions fail when the ledger differs."""

from __future__ import annotations

import dataclasses
import importlib
import subprocess
import sys
from pathlib import Path
from typing import ClassVar, Literal

import pytest

from qinglong_dispatcher import ports, testing
from qinglong_dispatcher.actions import contract, registry
from qinglong_dispatcher.domain import digests, errors, plans, records, recovery
from tests.support.installed_actions import CLASHING, ECHO_TYPE, write_distribution

KIT_TYPE = "test.kit"
EVIDENCE_TAG = "qinglong/test.kit/evidence@v1"
EFFECTS: set[str] = set()
"""The dispatch ids whose effect happened: the kit action's "downstream system"."""


class KitPlan(plans.PlanModel):
    """The plan says what execute does."""

    ACTION_TYPE: ClassVar[str] = KIT_TYPE

    then: Literal["succeed", "fail", "raise", "block"]


class KitHandler:
    action_type = KIT_TYPE

    def __init__(self, ctx: contract.ActionContext) -> None:
        self._plans = ctx.plans

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        plan, digest = await self._plans.resolve(dispatch, KitPlan)
        if plan.then == "block":
            return ports.InspectResult(kind=ports.InspectKind.BLOCKED, code="kit_blocked")
        return ports.InspectResult(kind=ports.InspectKind.READY, action_digest=digest)

    async def execute(self, ctx: ports.ExecutionContext) -> ports.ExecuteResult:
        plan = await self._plans.approved(ctx.dispatch, KitPlan)
        if plan.then == "raise":
            raise RuntimeError("the downstream system hung up")
        if plan.then == "fail":
            return ports.ExecuteResult(kind=ports.ExecuteKind.FAILED, code="kit_refused")
        EFFECTS.add(ctx.idempotency_key)
        return ports.ExecuteResult(
            kind=ports.ExecuteKind.SUCCEEDED, code="kit_done", receipt={"status": 201}
        )


class KitEvidence:
    action_type = KIT_TYPE

    def __init__(self, ctx: contract.ActionContext) -> None:
        self._plans = ctx.plans

    async def evidence(self, snapshot: recovery.Snapshot) -> recovery.Evidence:
        dispatch_id = snapshot.dispatch.dispatch_id
        if dispatch_id not in EFFECTS:
            return recovery.Evidence(kind=recovery.EvidenceKind.MISSING, reason="kit_missing")
        return recovery.Evidence(
            kind=recovery.EvidenceKind.VERIFIED_SUCCEEDED,
            evidence_digest=digests.evidence_digest(
                "qinglong/test.kit/evidence@v1", {"dispatchId": dispatch_id}
            ),
        )


KIT = contract.ActionSpec(
    action_type=KIT_TYPE, plan_model=KitPlan, handler=KitHandler, evidence=KitEvidence
)
MANUAL_KIT = dataclasses.replace(KIT, evidence=contract.MANUAL_ONLY)


def plan(ref: str, then: str) -> dict[str, object]:
    return {"schemaVersion": 1, "actionRef": ref, "projectId": "p1", "then": then}


async def test_a_success_is_the_ledger_s_with_its_receipt_and_two_principals(
    tmp_path: Path,
) -> None:
    async with testing.open_kit(KIT, tmp_path) as kit:
        done = await kit.dispatch(plan("a-1", "succeed"))
        testing.assert_succeeded(done, code="kit_done", attempts=1)
        testing.assert_receipt(done, {"status": 201})
        with pytest.raises(AssertionError, match="receipt"):
            testing.assert_receipt(done, {"status": 200})
        with pytest.raises(AssertionError, match="result code kit_refused"):
            testing.assert_succeeded(done, code="kit_refused")
        with pytest.raises(AssertionError, match="status failed"):
            testing.assert_failed(done)
        with pytest.raises(AssertionError, match="resolution by evidence"):
            testing.assert_settled_by_evidence(done)  # it needed no recovery
        approval = await kit.store.get_approval(done.detail.dispatch.approval_request_id)
        assert approval is not None
        assert approval.requested_principal == testing.REQUESTED_BY
        assert approval.decided_principal == testing.APPROVED_BY
        row = await kit.store.get_execution(done.dispatch_id)
        assert row is not None
        assert (row.status.value, row.result_code, row.attempt) == ("succeeded", "kit_done", 1)
        assert kit.database == tmp_path / "qinglong.db"


async def test_an_execute_that_raises_ends_blocked_as_indeterminate(tmp_path: Path) -> None:
    async with testing.open_kit(KIT, tmp_path) as kit:
        done = await kit.dispatch(plan("a-2", "raise"))
        testing.assert_status(done, "blocked", code="indeterminate:execute_raised", attempts=1)
        assert done.executions == 1
        with pytest.raises(AssertionError, match="status succeeded"):
            testing.assert_succeeded(done)
        failed = await kit.dispatch(plan("a-3", "fail"))
        testing.assert_failed(failed, code="kit_refused")
        assert failed.receipt is None
        blocked = await kit.dispatch(plan("a-4", "block"))
        testing.assert_status(blocked, "blocked", code="kit_blocked")
        assert blocked.executions == 0


async def test_after_a_crash_the_evidence_provider_settles_or_leaves_it(tmp_path: Path) -> None:
    async with testing.open_kit(KIT, tmp_path) as kit:
        effect = await kit.crash(plan("a-5", "succeed"), at="after_execute")
        testing.assert_status(effect, "executing")
        assert (await kit.evidence(effect.dispatch_id)).kind is (
            recovery.EvidenceKind.VERIFIED_SUCCEEDED
        )
        no_effect = await kit.crash(plan("a-6", "succeed"), at="after_start")
        before = await kit.crash(plan("a-7", "succeed"), at="after_inspect")

        report = await kit.recover()
        assert report.outcomes == {"resolved_succeeded": 1, "missing": 1}
        testing.assert_settled_by_evidence(await kit.read(effect.dispatch_id))
        left = await kit.read(no_effect.dispatch_id)
        testing.assert_recovery_required(left, outcome="missing", reason="kit_missing")
        with pytest.raises(AssertionError, match="observation conflict"):
            testing.assert_recovery_required(left, outcome="conflict")
        with pytest.raises(AssertionError, match="expected status succeeded"):
            testing.assert_settled_by_evidence(left)

        await kit.tick()  # the crash before the barrier: another owner takes it over
        taken_over = await kit.read(before.dispatch_id)
        testing.assert_succeeded(taken_over, attempts=1)
        assert testing.SimulatedCrash.__name__ not in taken_over.story()


async def test_a_manual_only_action_is_left_to_an_operator(tmp_path: Path) -> None:
    async with testing.open_kit(MANUAL_KIT, tmp_path) as kit:
        crashed = await kit.crash(plan("a-8", "succeed"), at="after_execute")
        await kit.recover()
        left = await kit.read(crashed.dispatch_id)
        testing.assert_recovery_required(left, outcome="missing", reason="manual_only")
        with pytest.raises(LookupError, match="MANUAL_ONLY"):
            await kit.evidence(crashed.dispatch_id)


async def test_a_crash_point_never_reached_is_an_assertion() -> None:
    async with testing.open_kit(KIT) as kit:
        with pytest.raises(AssertionError, match="never reached after_start"):
            await kit.crash(plan("a-9", "block"), at="after_start")
        with pytest.raises(ValueError, match="at: one of"):
            await kit.crash(plan("a-10", "succeed"), at="nowhere")
        database = kit.database
        assert database.is_file()
    assert not database.parent.exists()  # a kit without a folder had its own, now removed


async def test_the_kit_refuses_what_the_daemon_refuses(tmp_path: Path) -> None:
    with pytest.raises(errors.ActionRegistrationError, match="built in"):
        async with testing.open_kit(CLASHING, tmp_path):
            pass
    async with testing.open_kit(KIT, tmp_path) as kit:
        with pytest.raises(errors.PlanInvalid):
            await kit.submit({**plan("a-11", "succeed"), "extra": 1})


async def test_an_action_is_loaded_from_its_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    write_distribution(site, "qa-kit", {ECHO_TYPE: "tests.support.installed_actions:ECHO"})
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    with pytest.raises(errors.ActionRegistrationError, match=r"test\.absent"):
        testing.from_entry_point("test.absent")
    assert (
        testing.from_entry_point(ECHO_TYPE)
        .sources[ECHO_TYPE]
        .endswith("(tests.support.installed_actions:ECHO)")
    )
    async with testing.open_kit(ECHO_TYPE, tmp_path) as kit:
        done = await kit.dispatch(
            {"schemaVersion": 1, "actionRef": "e-1", "projectId": "p1", "answer": "odd_code"}
        )
        # The installed action's guard, as the daemon wraps it: a code must be an identifier.
        testing.assert_succeeded(done, code=registry.INVALID_CODE)


def test_importing_the_kit_needs_no_test_runner() -> None:
    code = "import sys, qinglong_dispatcher.testing; assert 'pytest' not in sys.modules"
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr
