"""The tool execution start command and barrier: exact shapes and their digests.

Why the barrier is the tool's own: docs/decisions/0019.

`qinglong/tool-execution-start-command@v1` (≤ 64 KiB canonical) binds everything a start is
authorised by; `qinglong/tool-execution-start-barrier@v1` (≤ 16 KiB) is the immutable record
that the start committed. Both carry identities, digests, versions and codes only: no input,
secret, handler object, module path, URL, tool output or exception text can be expressed
(`extra="forbid"`, identifiers and hex digests only).
"""

from __future__ import annotations

from typing import Annotated, Final, Literal, Self

import pydantic
from pydantic import ConfigDict, Field, StringConstraints

from qinglong_dispatcher.domain import canonical, digests, errors, plans
from qinglong_dispatcher.domain.tools import registry as tool_registry

COMMAND_SCHEMA: Final = "qinglong/tool-execution-start-command@v1"
BARRIER_SCHEMA: Final = "qinglong/tool-execution-start-barrier@v1"
ADMISSION_TAG: Final = "qinglong/tool-admission@v1"
TRACE_TAG: Final = "qinglong/trace-anchor@v1"
RECEIPT_TAG: Final = "qinglong/audit-receipt@v1"
TOOL_INVOKE: Final = "tool.invoke"

Hex64 = Annotated[str, StringConstraints(strict=True, pattern=r"^[0-9a-f]{64}$")]
Version = Annotated[int, Field(strict=True, ge=1, le=canonical.MAX_SAFE_INTEGER)]
Count = Annotated[int, Field(strict=True, ge=0, le=canonical.MAX_SAFE_INTEGER)]
Profile = Literal["edge", "cluster"]


class _Exact(pydantic.BaseModel):
    # defer_build: a schema is built when a model first validates, so a command that never
    # reads a plan (status, list) does not pay for building every one at import.
    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, populate_by_name=False, defer_build=True
    )


class ToolBinding(_Exact):
    """The Tool Definition and the trusted handler bound to it."""

    tool_id: plans.Identifier = Field(alias="toolId")
    tool_version: Version = Field(alias="toolVersion")
    definition_digest: Hex64 = Field(alias="definitionDigest")
    handler_binding: plans.Identifier = Field(alias="handlerBinding")


class ActionBinding(_Exact):
    """The approved action and its immutable plan."""

    action_type: Literal["tool.invoke"] = Field(alias="actionType")
    action_ref: plans.Identifier = Field(alias="actionRef")
    action_digest: Hex64 = Field(alias="actionDigest")
    plan_digest: Hex64 = Field(alias="planDigest")


class Admission(_Exact):
    """What `inspect` admitted, and its digest."""

    admission_digest: Hex64 = Field(alias="admissionDigest")
    profile: Profile = Field(alias="profile")
    execution_class: plans.Identifier = Field(alias="executionClass")
    timeout_ms: Annotated[int, Field(strict=True, ge=1, le=3_600_000)] = Field(alias="timeoutMs")


class ContractBinding(_Exact):
    """A reviewed contract by identity and digest."""

    contract_id: plans.Identifier = Field(alias="contractId")
    digest: Hex64 = Field(alias="digest")


class ApprovalBinding(_Exact):
    """The exact approval request, its dispatch and the action digest it approved."""

    approval_request_id: plans.Identifier = Field(alias="approvalRequestId")
    dispatch_id: plans.Identifier = Field(alias="dispatchId")
    action_digest: Hex64 = Field(alias="actionDigest")


class StepRunBinding(_Exact):
    """The Tool StepRun of the same Project and Run, at the version being started."""

    run_id: plans.Identifier = Field(alias="runId")
    step_run_id: plans.Identifier = Field(alias="stepRunId")
    expected_status: Literal["ready", "waiting_approval"] = Field(alias="expectedStatus")
    expected_version: Version = Field(alias="expectedVersion")
    started_version: Version = Field(alias="startedVersion")


class EvidenceBinding(_Exact):
    """The Trace anchor, Audit event and Audit receipt the start commits."""

    trace_id: plans.Identifier = Field(alias="traceId")
    audit_kind: Literal["tool.start_authorised"] = Field(alias="auditKind")
    audit_actor: plans.Identifier = Field(alias="auditActor")
    audit_detail: plans.Identifier = Field(alias="auditDetail")
    audit_receipt_id: plans.Identifier = Field(alias="auditReceiptId")


class MutationBinding(_Exact):
    """The StepRun mutation to `running` and its RunEvent."""

    mutation_id: plans.Identifier = Field(alias="mutationId")
    to_status: Literal["running"] = Field(alias="toStatus")
    run_event_type: Literal["step.started"] = Field(alias="runEventType")


def admission_digest(
    *, action_digest: str, plan_digest: str, profile: str, execution_class: str, timeout_ms: int
) -> str:
    """Digest of the inspect result a start is admitted under."""
    return digests.evidence_digest(
        ADMISSION_TAG,
        {
            "actionDigest": action_digest,
            "planDigest": plan_digest,
            "profile": profile,
            "executionClass": execution_class,
            "timeoutMs": timeout_ms,
        },
    )


def _contract(contract: tool_registry.Contract) -> dict[str, str]:
    return {"contractId": contract.contract_id, "digest": contract.digest}


class StartCommand(_Exact):
    """`qinglong/tool-execution-start-command@v1`: everything one start is authorised by."""

    schema_id: Literal["qinglong/tool-execution-start-command@v1"] = Field(alias="schema")
    start_id: plans.Identifier = Field(alias="startId")
    project_id: plans.Identifier = Field(alias="projectId")
    snapshot_digest: Hex64 = Field(alias="snapshotDigest")
    tool: ToolBinding = Field(alias="tool")
    action: ActionBinding = Field(alias="action")
    admission: Admission = Field(alias="admission")
    policy_fence: Hex64 = Field(alias="policyFence")
    adapter: ContractBinding = Field(alias="adapter")
    redaction: ContractBinding = Field(alias="redaction")
    audit_contract: ContractBinding = Field(alias="auditContract")
    approval: ApprovalBinding | None = Field(alias="approval")
    step_run: StepRunBinding = Field(alias="stepRun")
    evidence: EvidenceBinding = Field(alias="evidence")
    mutation: MutationBinding = Field(alias="mutation")

    @pydantic.model_validator(mode="after")
    def _consistent(self) -> Self:
        step = self.step_run
        if step.started_version != step.expected_version + 1:
            raise ValueError("stepRun.startedVersion must be expectedVersion + 1")
        if (step.expected_status == "waiting_approval") != (self.approval is not None):
            raise ValueError("approval is required exactly when the step waits for approval")
        if self.approval is not None and self.approval.action_digest != self.action.action_digest:
            raise ValueError("approval.actionDigest differs from action.actionDigest")
        admitted = admission_digest(
            action_digest=self.action.action_digest,
            plan_digest=self.action.plan_digest,
            profile=self.admission.profile,
            execution_class=self.admission.execution_class,
            timeout_ms=self.admission.timeout_ms,
        )
        if self.admission.admission_digest != admitted:
            raise ValueError("admission.admissionDigest does not match the admission")
        mismatch = registry_mismatch(self)
        if mismatch is not None:
            raise ValueError(f"{mismatch} differs from the reviewed tool registry")
        return self

    def to_canonical_dict(self) -> dict[str, object]:
        """camelCase members, explicit None for an absent approval."""
        return self.model_dump(by_alias=True, mode="python")

    def canonical_bytes(self) -> bytes:
        """Canonical JSON, at most PLAN_MAX_BYTES."""
        return canonical.dumps(self.to_canonical_dict(), max_bytes=canonical.PLAN_MAX_BYTES)

    @property
    def digest(self) -> str:
        """`commandDigest`: domain-separated by the schema id."""
        return digests.digest(COMMAND_SCHEMA, self.canonical_bytes())


class StartBarrier(_Exact):
    """`qinglong/tool-execution-start-barrier@v1`: the low-sensitivity record of one start."""

    schema_id: Literal["qinglong/tool-execution-start-barrier@v1"] = Field(alias="schema")
    start_id: plans.Identifier = Field(alias="startId")
    project_id: plans.Identifier = Field(alias="projectId")
    run_id: plans.Identifier = Field(alias="runId")
    step_run_id: plans.Identifier = Field(alias="stepRunId")
    started_step_run_version: Version = Field(alias="startedStepRunVersion")
    started_step_run_digest: Hex64 = Field(alias="startedStepRunDigest")
    command_digest: Hex64 = Field(alias="commandDigest")
    snapshot_digest: Hex64 = Field(alias="snapshotDigest")
    tool_id: plans.Identifier = Field(alias="toolId")
    tool_version: Version = Field(alias="toolVersion")
    definition_digest: Hex64 = Field(alias="definitionDigest")
    policy_fence: Hex64 = Field(alias="policyFence")
    action_digest: Hex64 = Field(alias="actionDigest")
    admission_digest: Hex64 = Field(alias="admissionDigest")
    approval_request_id: plans.Identifier | None = Field(alias="approvalRequestId")
    dispatch_id: plans.Identifier | None = Field(alias="dispatchId")
    mutation_id: plans.Identifier = Field(alias="mutationId")
    mutation_digest: Hex64 = Field(alias="mutationDigest")
    run_event_seq: Version = Field(alias="runEventSeq")
    run_version: Version = Field(alias="runVersion")
    trace_id: plans.Identifier = Field(alias="traceId")
    trace_digest: Hex64 = Field(alias="traceDigest")
    audit_event_id: Version = Field(alias="auditEventId")
    audit_receipt_id: plans.Identifier = Field(alias="auditReceiptId")
    audit_receipt_digest: Hex64 = Field(alias="auditReceiptDigest")
    committed_at_ms: Count = Field(alias="committedAtMs")

    def to_canonical_dict(self) -> dict[str, object]:
        """camelCase members, explicit None where there is no approval."""
        return self.model_dump(by_alias=True, mode="python")

    def canonical_bytes(self) -> bytes:
        """Canonical JSON, at most BARRIER_MAX_BYTES."""
        return canonical.dumps(self.to_canonical_dict(), max_bytes=canonical.BARRIER_MAX_BYTES)

    @property
    def digest(self) -> str:
        """`barrierDigest`: domain-separated by the schema id."""
        return barrier_digest(self.canonical_bytes())

    def columns(self) -> dict[str, object]:
        """The mirror columns (snake_case field names), as the table stores them."""
        values = self.model_dump(by_alias=False, mode="python")
        del values["schema_id"]
        return values


def barrier_digest(canonical_bytes: bytes) -> str:
    """`barrierDigest` of a barrier's canonical JSON (`StartBarrier.canonical_bytes`)."""
    return digests.digest(BARRIER_SCHEMA, canonical_bytes)


def _invalid(what: str, exc: pydantic.ValidationError) -> errors.InvalidInput:
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    kind = first["type"]
    reason = str(first.get("ctx", {}).get("error", kind)) if kind == "value_error" else kind
    shown = f"{where}: {reason}" if where else reason
    return errors.InvalidInput(f"{what} invalid: {shown}", code=f"{what}_invalid")


def parse_command(data: dict[str, object]) -> StartCommand:
    """Validate a command from its camelCase members; `InvalidInput` naming the first field."""
    try:
        return StartCommand.model_validate(data, strict=True)
    except pydantic.ValidationError as exc:
        raise _invalid("start_command", exc) from None


def parse_barrier(data: bytes | str) -> StartBarrier:
    """Parse a stored barrier's canonical JSON; anything off raises `InvalidInput`."""
    value = canonical.loads(data, max_bytes=canonical.BARRIER_MAX_BYTES)
    try:
        return StartBarrier.model_validate(value, strict=True)
    except pydantic.ValidationError as exc:
        raise _invalid("start_barrier", exc) from None


def trace_digest(
    *,
    trace_id: str,
    project_id: str,
    run_id: str,
    step_run_id: str,
    start_id: str,
    command_digest: str,
) -> str:
    """Digest of a Trace anchor."""
    return digests.evidence_digest(
        TRACE_TAG,
        {
            "traceId": trace_id,
            "projectId": project_id,
            "runId": run_id,
            "stepRunId": step_run_id,
            "startId": start_id,
            "commandDigest": command_digest,
        },
    )


def receipt_digest(
    *,
    receipt_id: str,
    audit_event_id: int,
    kind: str,
    actor: str,
    principal: str,
    project_id: str,
    subject_id: str,
    detail_code: str,
    trace_id: str,
    trace_digest: str,
    start_id: str,
) -> str:
    """Digest of an Audit receipt: the audit event as stored, bound to its trace and start."""
    return digests.evidence_digest(
        RECEIPT_TAG,
        {
            "receiptId": receipt_id,
            "auditEventId": audit_event_id,
            "kind": kind,
            "actor": actor,
            "principal": principal,
            "projectId": project_id,
            "subjectId": subject_id,
            "detailCode": detail_code,
            "traceId": trace_id,
            "traceDigest": trace_digest,
            "startId": start_id,
        },
    )


def registry_mismatch(command: StartCommand) -> str | None:
    """The first binding that differs from the current built-in registry, or None."""
    definition = tool_registry.lookup(command.tool.tool_id, command.tool.tool_version)
    if definition is None:
        return "tool"
    if command.snapshot_digest != tool_registry.snapshot_digest():
        return "snapshotDigest"
    expected: dict[str, tuple[object, object]] = {
        "definitionDigest": (command.tool.definition_digest, definition.digest),
        "handlerBinding": (command.tool.handler_binding, definition.handler_binding),
        "executionClass": (command.admission.execution_class, definition.execution_class),
        "timeoutMs": (command.admission.timeout_ms, definition.timeout_ms),
        "adapter": (command.adapter.model_dump(by_alias=True), _contract(definition.adapter)),
        "redaction": (
            command.redaction.model_dump(by_alias=True),
            _contract(definition.redaction),
        ),
        "auditContract": (
            command.audit_contract.model_dump(by_alias=True),
            _contract(definition.audit),
        ),
    }
    for name, (got, want) in expected.items():
        if got != want:
            return name
    return None
