"""The start barrier's pure refusal rule, member by member (`barrier_checks.start_refusal`).

Each compared member is moved alone, so dropping any one of them from a comparison fails a
case here; the contract suite checks the same refusals through the real barrier.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.actions.tool_invoke import invocations as tool_invocations
from qinglong_dispatcher.actions.tool_invoke import plan as tool_invoke_plan
from qinglong_dispatcher.domain import digests, plans, records, runs
from qinglong_dispatcher.domain.tools import barrier_checks as tool_barrier_checks
from qinglong_dispatcher.domain.tools import registry as tool_registry
from qinglong_dispatcher.domain.tools import start as tool_start
from qinglong_dispatcher.domain.tools import steps


def _plan() -> tool_invoke_plan.ToolInvocationPlan:
    parsed = plans.parse_plan(
        "tool.invoke",
        {
            "schemaVersion": 1,
            "actionRef": "act-1",
            "projectId": "proj-1",
            "runId": "r-1",
            "stepRunId": "s-1",
            "toolId": "builtin.file.write",
            "toolVersion": 1,
            "content": "hello\n",
        },
        models=builtin.PLAN_MODELS,
    )
    assert isinstance(parsed, tool_invoke_plan.ToolInvocationPlan)
    return parsed


PLAN = _plan()
ACTION_DIGEST = plans.plan_action_digest(PLAN, digests.PLAIN)

BINDING = steps.Binding(
    step_run_id="s-1",
    run_id="r-1",
    project_id="proj-1",
    tool_id="builtin.file.write",
    tool_version=1,
    definition_digest=tool_registry.FILE_WRITE_V1.digest,
    action_type="tool.invoke",
    action_ref="act-1",
    action_digest=ACTION_DIGEST,
    approval_request_id="a-1",
)
STEP = steps.StepRun(
    binding=BINDING,
    status=steps.StepRunStatus.WAITING_APPROVAL,
    version=1,
    result_code=None,
    binding_digest=BINDING.digest,
    created_at_ms=1,
    updated_at_ms=1,
)
DISPATCH = records.Dispatch(
    dispatch_id="d-1",
    approval_request_id="a-1",
    project_id="proj-1",
    action_type="tool.invoke",
    action_ref="act-1",
    action_digest=ACTION_DIGEST,
    approved_by="approver",
    created_at_ms=1,
)
RUN = runs.Run(
    run_id="r-1",
    project_id="proj-1",
    task_id="t-1",
    task_revision=1,
    executor_type="local",
    priority=0,
    task_name=None,
    task_snapshot_ref=None,
    input_ref=None,
    status=runs.RunStatus.QUEUED,
    trigger_type="approved_action",
    execution_origin="dispatcher",
    execution_owner="dispatcher",
    request_id=None,
    idempotency_key="d-0",
    accepted_at_ms=1,
    version=1,
    event_seq=1,
    created_at_ms=1,
)
OTHER_DIGEST = "e" * 64


def command(
    step: steps.StepRun = STEP, dispatch: records.Dispatch | None = DISPATCH
) -> tool_start.StartCommand:
    """The command the action builds for `step` (approved under `dispatch` when given)."""
    return tool_invocations.build_command(
        ids=tool_invocations.ids_for("d-1"),
        plan=PLAN,
        step=step,
        policy=tool_registry.ToolPolicy(sandbox_root="/srv/sandbox"),
        profile="edge",
        actor="approver",
        dispatch=dispatch,
        plan_digests=digests.PLAIN,
    )


def with_binding(**changes: Any) -> steps.StepRun:
    """STEP bound to something else (the rule never re-hashes the binding; the read did)."""
    return dataclasses.replace(STEP, binding=dataclasses.replace(BINDING, **changes))


def test_the_command_of_its_own_rows_goes_ahead() -> None:
    assert tool_barrier_checks.start_refusal(command(), RUN, STEP, DISPATCH) is None
    ready = dataclasses.replace(
        with_binding(approval_request_id=None), status=steps.StepRunStatus.READY
    )
    assert tool_barrier_checks.start_refusal(command(ready, None), RUN, ready, None) is None


@pytest.mark.parametrize(
    "change",
    [
        {"action_type": "run.create"},
        {"action_ref": "act-other"},
        {"action_digest": OTHER_DIGEST},
    ],
    ids=["action_type", "action_ref", "action_digest"],
)
@pytest.mark.parametrize("approved", [True, False], ids=["approved", "ready"])
def test_a_step_bound_to_another_action_is_an_action_mismatch(
    change: dict[str, Any], approved: bool
) -> None:
    if approved:
        wanted, held, dispatch = command(), with_binding(**change), DISPATCH
    else:  # no approval: nothing after this comparison would refuse the start
        ready = dataclasses.replace(
            with_binding(approval_request_id=None), status=steps.StepRunStatus.READY
        )
        wanted = command(ready, None)
        held = dataclasses.replace(ready, binding=dataclasses.replace(ready.binding, **change))
        dispatch = None
    assert tool_barrier_checks.start_refusal(wanted, RUN, held, dispatch) == "action_mismatch"


@pytest.mark.parametrize(
    "change",
    [
        {"approval_request_id": "a-other"},
        {"action_digest": OTHER_DIGEST},
        {"project_id": "proj-other"},
        {"action_type": "run.create"},
    ],
    ids=["approval_request_id", "action_digest", "project_id", "action_type"],
)
def test_a_dispatch_that_is_not_the_approvals_is_a_dispatch_mismatch(
    change: dict[str, Any],
) -> None:
    other = dataclasses.replace(DISPATCH, **change)
    assert tool_barrier_checks.start_refusal(command(), RUN, STEP, other) == "dispatch_mismatch"


def test_a_missing_dispatch_is_a_dispatch_mismatch() -> None:
    assert tool_barrier_checks.start_refusal(command(), RUN, STEP, None) == "dispatch_mismatch"


def test_the_dispatch_is_compared_only_when_the_command_carries_an_approval() -> None:
    ready = dataclasses.replace(
        with_binding(approval_request_id=None), status=steps.StepRunStatus.READY
    )
    stray = dataclasses.replace(DISPATCH, approval_request_id="a-other")
    assert tool_barrier_checks.start_refusal(command(ready, None), RUN, ready, stray) is None
