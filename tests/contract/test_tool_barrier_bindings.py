"""Step 2 of the tool start barrier refuses a command bound to another action or dispatch.

A command passes its own checks (it is internally consistent) yet names an action the StepRun
was not bound to, or a dispatch that is not the one its approval produced: the barrier must
refuse it typed and write nothing, on every dialect.
"""

from __future__ import annotations

from typing import Any

import pytest

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import runs
from qinglong_dispatcher.domain.tools import start as tool_start
from tests.support import repositories, tools
from tests.support.clock import ManualClock
from tests.support.stores import Harness

Outcome = ports.StartOutcome

OTHER_DIGEST = "e" * 64


def _members(value: object) -> dict[str, Any]:
    assert isinstance(value, dict)
    return dict(value)


def rebound(command: tool_start.StartCommand, **changes: Any) -> tool_start.StartCommand:
    """`command` with other action or approval members, still valid on its own.

    `actionDigest` moves the approval's digest and the admission digest with it, so the
    command's own consistency checks pass and only the barrier's comparison can refuse it.
    """
    data = command.to_canonical_dict()
    action, approval, admission = (
        _members(data["action"]),
        _members(data["approval"]),
        _members(data["admission"]),
    )
    if "action_digest" in changes:
        action["actionDigest"] = approval["actionDigest"] = changes["action_digest"]
    if "action_ref" in changes:
        action["actionRef"] = changes["action_ref"]
    if "dispatch_id" in changes:
        approval["dispatchId"] = changes["dispatch_id"]
    admission["admissionDigest"] = tool_start.admission_digest(
        action_digest=action["actionDigest"],
        plan_digest=action["planDigest"],
        profile=admission["profile"],
        execution_class=admission["executionClass"],
        timeout_ms=admission["timeoutMs"],
    )
    return tool_start.parse_command(
        {**data, "action": action, "approval": approval, "admission": admission}
    )


async def refused_without_a_write(
    harness: Harness, started: tools.Started, command: tool_start.StartCommand, reason: str
) -> None:
    """`prepare(command)` is a typed conflict for `reason`, and the database did not move."""
    step_id = started.step.step_run_id
    counts = await tools.fact_counts(harness)
    position = await tools.positions(harness, started.step.binding.run_id, step_id)
    step_before = await repositories.steps(harness.store).get_step_run(step_id)
    result = await repositories.steps(harness.store).prepare(command)
    assert (result.outcome, result.reason, result.barrier) == (Outcome.CONFLICT, reason, None)
    assert await tools.fact_counts(harness) == counts
    assert await tools.positions(harness, started.step.binding.run_id, step_id) == position
    assert await repositories.steps(harness.store).get_step_run(step_id) == step_before
    assert await repositories.steps(harness.store).get_by_start_id(command.start_id) is None
    assert await repositories.steps(harness.store).step_run_mutations(step_id) == []
    # The refusal left the step startable: the command it was bound to still starts it.
    good = await repositories.steps(harness.store).prepare(started.command())
    assert good.outcome is Outcome.CREATED


@pytest.mark.parametrize(
    "change",
    [{"action_digest": OTHER_DIGEST}, {"action_ref": "act-other"}],
    ids=["action_digest", "action_ref"],
)
async def test_a_command_for_another_action_is_refused_and_writes_nothing(
    harness: Harness, clock: ManualClock, change: dict[str, str]
) -> None:
    run = await tools.live_run(harness, clock)
    started = await tools.started_tool(harness, clock, run)
    command = rebound(started.command(), **change)
    assert command.step_run == started.command().step_run
    await refused_without_a_write(harness, started, command, "action_mismatch")


async def dispatch_named(
    harness: Harness, clock: ManualClock, run: runs.Run, started: tools.Started, which: str
) -> str:
    """A dispatch id that is not the one the StepRun's approval produced."""
    if which == "missing":
        return "d-missing"
    if which == "run_create":  # the dispatch that created the Run: another action type
        return run.idempotency_key
    assert which == "other_tool_step"  # same Project, type and Run; another approval
    other = await tools.submit_tool(harness, clock, run, content="another step\n")
    assert other.consumed.dispatch_id != started.dispatch.dispatch_id
    return other.consumed.dispatch_id


@pytest.mark.parametrize("which", ["missing", "run_create", "other_tool_step"])
async def test_a_command_naming_another_dispatch_is_refused_and_writes_nothing(
    harness: Harness, clock: ManualClock, which: str
) -> None:
    run = await tools.live_run(harness, clock)
    started = await tools.started_tool(harness, clock, run)
    dispatch_id = await dispatch_named(harness, clock, run, started, which)
    if which != "missing":
        assert await harness.store.get_dispatch(dispatch_id) is not None
    command = rebound(started.command(), dispatch_id=dispatch_id)
    assert command.approval is not None
    assert command.approval.approval_request_id == started.step.binding.approval_request_id
    assert command.action == started.command().action
    await refused_without_a_write(harness, started, command, "dispatch_mismatch")
