"""Installed actions for tests: specs that fake distributions' entry points name, and the
distributions themselves (a dist-info folder with `entry_points.txt`, read by the real
`importlib.metadata`)."""

from __future__ import annotations

import dataclasses
import importlib.metadata
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import ConfigDict

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import contract
from qinglong_dispatcher.domain import digests, plans, records, recovery

ECHO_TYPE = "test.echo"

Answer = Literal["succeeded", "failed", "committed", "odd_code", "unverifiable"]


class EchoPlan(plans.PlanModel):
    """The plan says how execute answers (and, for `unverifiable`, how evidence does)."""

    ACTION_TYPE: ClassVar[str] = ECHO_TYPE

    answer: Answer


@dataclasses.dataclass
class Calls:
    """Every inspect and execute of any EchoHandler, by dispatch id."""

    inspected: list[str] = dataclasses.field(default_factory=list)
    executed: list[str] = dataclasses.field(default_factory=list)


CALLS = Calls()


class EchoHandler:
    """Answers what its plan says."""

    action_type = ECHO_TYPE

    def __init__(self, ctx: contract.ActionContext) -> None:
        self._plans = ctx.plans

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        CALLS.inspected.append(dispatch.dispatch_id)
        _, digest = await self._plans.resolve(dispatch, EchoPlan)
        return ports.InspectResult(kind=ports.InspectKind.READY, action_digest=digest)

    async def execute(self, ctx: ports.ExecutionContext) -> ports.ExecuteResult:
        CALLS.executed.append(ctx.dispatch.dispatch_id)
        plan = await self._plans.approved(ctx.dispatch, EchoPlan)
        kind = {
            "failed": ports.ExecuteKind.FAILED,
            "committed": ports.ExecuteKind.COMMITTED,
        }.get(plan.answer, ports.ExecuteKind.SUCCEEDED)
        code = "not a code!" if plan.answer == "odd_code" else "echoed"
        return ports.ExecuteResult(kind=kind, code=code)


class EchoEvidence:
    """Verified for every plan but `unverifiable`, which answers verified without a digest."""

    action_type = ECHO_TYPE

    def __init__(self, ctx: contract.ActionContext) -> None:
        self._plans = ctx.plans

    async def evidence(self, snapshot: recovery.Snapshot) -> recovery.Evidence:
        plan = await self._plans.approved(snapshot.dispatch, EchoPlan)
        verified = recovery.EvidenceKind.VERIFIED_SUCCEEDED
        if plan.answer == "unverifiable":
            return recovery.Evidence(kind=verified)
        return recovery.Evidence(
            kind=verified,
            evidence_digest=digests.evidence_digest(
                "qinglong/test.echo/evidence@v1", {"dispatchId": snapshot.dispatch.dispatch_id}
            ),
        )


ECHO = contract.ActionSpec(
    action_type=ECHO_TYPE, plan_model=EchoPlan, handler=EchoHandler, evidence=EchoEvidence
)


class ManualPlan(EchoPlan):
    ACTION_TYPE: ClassVar[str] = "test.manual"


class ManualHandler(EchoHandler):
    action_type = "test.manual"


MANUAL = contract.ActionSpec(
    action_type="test.manual",
    plan_model=ManualPlan,
    handler=ManualHandler,
    evidence=contract.MANUAL_ONLY,
)

CLASHING = dataclasses.replace(ECHO, action_type="run.create")
SILENT = dataclasses.replace(MANUAL, evidence=None)


class LoosePlan(plans.PlanModel):
    model_config = ConfigDict(extra="allow")
    ACTION_TYPE: ClassVar[str] = "test.loose"


LOOSE = dataclasses.replace(MANUAL, action_type="test.loose", plan_model=LoosePlan)
MISNAMED = dataclasses.replace(ECHO, action_type="test.misnamed")


class MisspeltPlan(plans.PlanModel):
    """Declares a sensitive member it does not have: `headers` would be shown in previews."""

    ACTION_TYPE: ClassVar[str] = "test.misspelt"
    SENSITIVE_FIELDS: ClassVar[tuple[str, ...]] = ("header",)

    headers: list[str]


MISSPELT = dataclasses.replace(MANUAL, action_type="test.misspelt", plan_model=MisspeltPlan)


class AimlessPlan(EchoPlan):
    """Names a target member it does not have."""

    ACTION_TYPE: ClassVar[str] = "test.aimless"
    TARGET_MEMBER: ClassVar[str | None] = "router"


class SecretTargetPlan(EchoPlan):
    """Names a sensitive member as its target: the target is kept and shown in clear."""

    ACTION_TYPE: ClassVar[str] = "test.secret_target"
    SENSITIVE_FIELDS: ClassVar[tuple[str, ...]] = ("answer",)
    TARGET_MEMBER: ClassVar[str | None] = "answer"


AIMLESS = dataclasses.replace(MANUAL, action_type="test.aimless", plan_model=AimlessPlan)
SECRET_TARGET = dataclasses.replace(
    MANUAL, action_type="test.secret_target", plan_model=SecretTargetPlan
)
NOT_A_SPEC = {"action_type": "test.dict"}


def _raise(ctx: contract.ActionContext) -> ports.ApprovedActionHandler:
    raise RuntimeError("secret-in-message")


FACTORY_RAISES = dataclasses.replace(ECHO, handler=_raise)

HERE = "tests.support.installed_actions"


def write_distribution(root: Path, name: str, entries: Mapping[str, str]) -> None:
    """A distribution `name` in `root` whose entry points of our group are `entries`
    (entry point name → `module:attribute`)."""
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = [f"[{contract.ENTRY_POINT_GROUP}]"] + [f"{k} = {v}" for k, v in entries.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


def entry_points_in(root: Path) -> list[importlib.metadata.EntryPoint]:
    """Our group's entry points of the distributions in `root`, as the real loader reads them."""
    return [
        entry
        for dist in importlib.metadata.distributions(path=[str(root)])
        for entry in dist.entry_points
        if entry.group == contract.ENTRY_POINT_GROUP
    ]
