"""A plan's target: the member its action declares (`TARGET_MEMBER`), for the built-in actions
the receiver of `http.request`, the command of `command.run` and the server of `mcp.call`;
`run.create` and `tool.invoke` have none. A plan whose target differs from its dispatch's never
resolves."""

from __future__ import annotations

import pytest

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import builtin, contract
from qinglong_dispatcher.domain import digests, errors, plans, records
from tests.support.targets import MODELS, TARGET_TYPE

PLANS: dict[str, dict[str, object]] = {
    "http.request": {"receiver": "router-1", "method": "POST", "path": "/reload"},
    "command.run": {"command": "deploy", "args": []},
    "mcp.call": {"server": "tickets", "tool": "create_ticket", "arguments": {}},
    "run.create": {"taskId": "t", "taskRevision": 1, "executorType": "shell", "priority": 0},
}


@pytest.mark.parametrize(
    ("action_type", "target"),
    [
        ("http.request", "router-1"),
        ("command.run", "deploy"),
        ("mcp.call", "tickets"),
        ("run.create", None),
    ],
)
def test_the_built_in_actions_targets(action_type: str, target: str | None) -> None:
    data = {"schemaVersion": 1, "actionRef": "act-1", "projectId": "p1", **PLANS[action_type]}
    plan = plans.parse_plan(action_type, data, models=builtin.PLAN_MODELS)
    assert plans.plan_target(plan) == target


def test_tool_invoke_has_no_target() -> None:
    assert builtin.PLAN_MODELS["tool.invoke"].TARGET_MEMBER is None


def _plan(router: str | None) -> plans.AnyPlan:
    data = {"schemaVersion": 1, "actionRef": "act-1", "projectId": "p1", "router": router}
    return plans.parse_plan(TARGET_TYPE, data, models=MODELS)


class _OnePlan:
    """A plan store holding one plan (the reader's port), in clear."""

    plan_digests = digests.PlanDigests()

    def __init__(self, plan: plans.AnyPlan) -> None:
        self._plan = plan

    async def get_plan(self, project_id: str, action_ref: str) -> ports.StoredPlan:
        return ports.StoredPlan(
            project_id=project_id,
            action_ref=action_ref,
            action_type=TARGET_TYPE,
            plan_json=plans.plan_canonical(self._plan).decode(),
            plan_digest="0" * 64,
        )


def _dispatch(plan: plans.AnyPlan, target: str | None) -> records.Dispatch:
    return records.Dispatch(
        dispatch_id="d-1",
        approval_request_id="a-1",
        project_id="p1",
        action_type=TARGET_TYPE,
        action_ref="act-1",
        action_digest=plans.plan_action_digest(plan, digests.PlanDigests()),
        approved_by="bob",
        created_at_ms=1,
        target=target,
    )


@pytest.mark.parametrize("stored_target", [None, "router-2"])
async def test_a_plan_whose_target_differs_from_its_dispatchs_never_resolves(
    stored_target: str | None,
) -> None:
    plan = _plan("router-1")
    reader = contract.PlanReader(_OnePlan(plan), MODELS)  # type: ignore[arg-type]
    with pytest.raises(errors.PlanInvalid) as refused:
        await reader.resolve(_dispatch(plan, stored_target), type(plan))
    assert refused.value.code == "plan_target_mismatch"
    resolved, _ = await reader.resolve(_dispatch(plan, "router-1"), type(plan))
    assert plans.plan_target(resolved) == "router-1"
