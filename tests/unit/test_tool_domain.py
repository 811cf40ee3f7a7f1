"""The pure side of tool steps: plan, command and barrier shapes, digests, registry, states."""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any

import pytest

from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.actions.tool_invoke import invocations as tool_invocations
from qinglong_dispatcher.actions.tool_invoke import plan as tool_invoke_plan
from qinglong_dispatcher.domain import canonical, digests, errors, plans, records
from qinglong_dispatcher.domain.tools import barrier_checks as tool_barrier_checks
from qinglong_dispatcher.domain.tools import registry as tool_registry
from qinglong_dispatcher.domain.tools import start as tool_start
from qinglong_dispatcher.domain.tools import steps

Status = steps.StepRunStatus

PLAN = {
    "schemaVersion": 1,
    "actionRef": "act-1",
    "projectId": "proj-1",
    "runId": "r-1",
    "stepRunId": "s-1",
    "toolId": "builtin.file.write",
    "toolVersion": 1,
    "content": "hello\n",
}


def plan() -> tool_invoke_plan.ToolInvocationPlan:
    parsed = plans.parse_plan("tool.invoke", dict(PLAN), models=builtin.PLAN_MODELS)
    assert isinstance(parsed, tool_invoke_plan.ToolInvocationPlan)
    return parsed


def step(status: Status = Status.WAITING_APPROVAL, version: int = 1) -> steps.StepRun:
    the_plan = plan()
    binding = steps.Binding(
        step_run_id="s-1",
        run_id="r-1",
        project_id="proj-1",
        tool_id="builtin.file.write",
        tool_version=1,
        definition_digest=tool_registry.FILE_WRITE_V1.digest,
        action_type="tool.invoke",
        action_ref="act-1",
        action_digest=plans.plan_action_digest(the_plan, digests.PLAIN),
        approval_request_id="a-1",
    )
    return steps.StepRun(
        binding=binding,
        status=status,
        version=version,
        result_code=None,
        binding_digest=binding.digest,
        created_at_ms=1,
        updated_at_ms=1,
    )


def dispatch() -> records.Dispatch:
    return records.Dispatch(
        dispatch_id="d-1",
        approval_request_id="a-1",
        project_id="proj-1",
        action_type="tool.invoke",
        action_ref="act-1",
        action_digest=plans.plan_action_digest(plan(), digests.PLAIN),
        approved_by="approver",
        created_at_ms=1,
    )


def command_dict() -> dict[str, Any]:
    return tool_invocations.build_command(
        ids=tool_invocations.ids_for("d-1"),
        plan=plan(),
        step=step(),
        policy=tool_registry.ToolPolicy(sandbox_root="/srv/sandbox"),
        profile="edge",
        actor="approver",
        dispatch=dispatch(),
        plan_digests=digests.PLAIN,
    ).to_canonical_dict()


@pytest.mark.parametrize(
    "field", ["path", "filePath", "targetDir", "url", "secret", "secretRef", "handler", "output"]
)
def test_a_plan_cannot_carry_a_path_url_secret_or_output(field: str) -> None:
    with pytest.raises(errors.PlanInvalid, match=f"plan invalid: {field}: unknown field"):
        plans.parse_plan("tool.invoke", {**PLAN, field: "/etc/passwd"}, models=builtin.PLAN_MODELS)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"content": "x" * (32 * 1024 + 1)}, "content: must be at most 32768 bytes"),
        ({"content": "\x01" * 20_000}, "larger than 65536 bytes as canonical JSON"),
        ({"toolId": "builtin.shell"}, "toolId: must be 'builtin.file.write'"),
        ({"toolVersion": 9}, "name no reviewed built-in tool"),
        ({"projectId": ".."}, "projectId: must match"),
        ({"content": 7}, "content: must be a string"),
    ],
)
def test_a_plan_out_of_bounds_is_refused_with_one_line(
    change: dict[str, object], message: str
) -> None:
    with pytest.raises(errors.PlanInvalid) as info:
        plans.parse_plan("tool.invoke", {**PLAN, **change}, models=builtin.PLAN_MODELS)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "where", [(), ("tool",), ("admission",), ("approval",), ("stepRun",), ("evidence",)]
)
@pytest.mark.parametrize("field", ["input", "secret", "modulePath", "url", "output", "exception"])
def test_no_command_member_can_carry_input_secrets_code_urls_or_output(
    where: tuple[str, ...], field: str
) -> None:
    data = command_dict()
    target = data
    for key in where:
        target = target[key]
    target[field] = "anything"
    with pytest.raises(errors.InvalidInput, match="extra_forbidden"):
        tool_start.parse_command(data)


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        (("stepRun", "startedVersion"), 3, "startedVersion must be expectedVersion + 1"),
        (("approval",), None, "approval is required"),
        (("admission", "timeoutMs"), 6_000, "admission.admissionDigest does not match"),
        (("tool", "definitionDigest"), "0" * 64, "definitionDigest differs"),
        (("snapshotDigest",), "0" * 64, "snapshotDigest differs"),
        (("adapter", "digest"), "0" * 64, "adapter differs"),
        (("schema",), "qinglong/tool-execution-start-command@v2", "literal_error"),
    ],
)
def test_a_command_binds_consistently_to_the_registry_and_itself(
    path: tuple[str, ...], value: object, reason: str
) -> None:
    data = command_dict()
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(errors.InvalidInput, match=re.escape(reason)):
        tool_start.parse_command(data)


def test_command_and_barrier_digests_are_domain_separated_and_stable() -> None:
    command = tool_start.parse_command(command_dict())
    again = tool_start.parse_command(copy.deepcopy(command_dict()))
    assert command.digest == again.digest
    raw = command.canonical_bytes()
    assert canonical.is_canonical(raw)
    assert len(raw) <= canonical.PLAN_MAX_BYTES
    assert command.digest == digests.digest(tool_start.COMMAND_SCHEMA, raw)
    assert command.digest != digests.digest(tool_start.BARRIER_SCHEMA, raw)
    for banned in (b"hello", b"/srv/sandbox", b"content"):
        assert banned not in raw  # neither the input nor the sandbox path is in the command


def test_a_barrier_stays_within_16_kib_and_refuses_anything_else() -> None:
    command = tool_start.parse_command(command_dict())
    mutation = steps.Mutation(
        mutation_id="d-1:step-start",
        step_run_id="s-1",
        run_id="r-1",
        project_id="proj-1",
        from_status=Status.WAITING_APPROVAL,
        to_status=Status.RUNNING,
        from_version=1,
        to_version=2,
        run_event_seq=2,
        run_version=2,
        reason_code="start_authorised",
        committed_at_ms=5,
    ).signed()
    stored = tool_barrier_checks.build(
        command,
        tool_barrier_checks.Evidence(
            command_digest=command.digest,
            mutation=mutation,
            started_step_run_digest="1" * 64,
            trace_digest="2" * 64,
            audit_event_id=1,
            audit_receipt_digest="3" * 64,
            run_event_seq=2,
            run_version=2,
            committed_at_ms=5,
        ),
    )
    assert len(stored.barrier_json.encode()) <= canonical.BARRIER_MAX_BYTES
    assert stored.barrier.command_digest == command.digest
    assert stored.barrier_digest == digests.digest(
        tool_start.BARRIER_SCHEMA, stored.barrier_json.encode()
    )
    assert tool_start.parse_barrier(stored.barrier_json) == stored.barrier
    with pytest.raises(errors.InvalidInput, match="extra_forbidden"):
        tool_start.parse_barrier(stored.barrier_json[:-1] + ',"output":"x"}')
    with pytest.raises(errors.InvalidInput):
        tool_start.parse_barrier(b"{" + b'"a":"' + b"x" * 20_000 + b'"}')


def test_the_registry_snapshot_changes_only_with_a_reviewed_definition() -> None:
    # Pinned: a change to a definition or its contracts must show up here, in review.
    assert tool_registry.FILE_WRITE_V1.digest == (
        "d9358afd3549fbb500f6843744c59d2a1b4bb91e99ec19053b55c3e53fd8cc00"
    )
    assert tool_registry.snapshot_digest() == (
        "8ffe824009b2fca742485d0488630aad580e9488fb66aef9f32c03c441a12884"
    )
    assert tool_registry.latest("builtin.file.write") is tool_registry.FILE_WRITE_V1
    assert tool_registry.latest("builtin.shell") is None
    fence = tool_registry.ToolPolicy(sandbox_root="/a").fence
    assert fence != tool_registry.ToolPolicy(sandbox_root="/b").fence
    assert fence != tool_registry.ToolPolicy(sandbox_root="/a", max_content_bytes=1).fence


def test_identities_derive_from_the_dispatch_and_stay_identifiers() -> None:
    ids = tool_invocations.ids_for("d-0123456789abcdef")
    assert ids == tool_invocations.ids_for("d-0123456789abcdef")
    for value in (ids.start_id, ids.mutation_id, ids.trace_id, ids.audit_receipt_id):
        assert plans.is_identifier(value)
    with pytest.raises(errors.InvalidInput):
        tool_invocations.ids_for("../x")


def test_step_refusal_checks_status_approval_and_binding() -> None:
    assert tool_invocations.step_refusal(step(), plan(), dispatch()) is None
    assert tool_invocations.step_refusal(None, plan(), dispatch()) == "step_run_missing"
    assert (
        tool_invocations.step_refusal(step(Status.RUNNING), plan(), dispatch())
        == "step_run_not_waiting"
    )
    other = dataclasses.replace(dispatch(), approval_request_id="a-2")
    assert tool_invocations.step_refusal(step(), plan(), other) == "step_run_approval_mismatch"


@pytest.mark.parametrize(
    ("status", "resolution", "started_here", "expected"),
    [
        (Status.RUNNING, "succeeded", True, Status.SUCCEEDED),
        (Status.RUNNING, "failed", True, Status.FAILED),
        (Status.RUNNING, "blocked", True, Status.LOST),
        (Status.RUNNING, "succeeded", False, None),  # another start owns this version
        (Status.WAITING_APPROVAL, "succeeded", False, Status.FAILED),  # it never started
        (Status.WAITING_APPROVAL, "failed", False, Status.FAILED),
        (Status.SUCCEEDED, "failed", True, None),
        (Status.LOST, "succeeded", True, None),
    ],
)
def test_a_step_run_follows_its_dispatch_and_is_never_rearmed(
    status: Status, resolution: str, started_here: bool, expected: Status | None
) -> None:
    assert steps.settle_target(status, resolution, started_here=started_here) is expected


def test_ledger_lines_and_bindings_are_tamper_evident() -> None:
    with pytest.raises(errors.InvalidInput, match="not allowed"):
        steps.Mutation(
            mutation_id="m",
            step_run_id="s-1",
            run_id="r-1",
            project_id="p",
            from_status=Status.LOST,
            to_status=Status.READY,
            from_version=3,
            to_version=4,
            run_event_seq=1,
            run_version=1,
            reason_code="rearm",
        ).signed()
    row = {
        "step_run_id": "s-1",
        "run_id": "r-1",
        "project_id": "proj-1",
        "step_kind": "tool",
        "tool_id": "builtin.file.write",
        "tool_version": 1,
        "definition_digest": tool_registry.FILE_WRITE_V1.digest,
        "action_type": "tool.invoke",
        "action_ref": "act-1",
        "action_digest": step().binding.action_digest,
        "approval_request_id": "a-1",
        "binding_digest": step().binding_digest,
        "status": "waiting_approval",
        "version": 1,
        "result_code": None,
        "created_at_ms": 1,
        "updated_at_ms": 1,
    }
    assert steps.StepRun.from_row(row) == step()
    for change in ({"action_ref": "act-2"}, {"status": "exploded"}, {"step_kind": "shell"}):
        with pytest.raises(errors.StoreCorrupted):
            steps.StepRun.from_row({**row, **change})
