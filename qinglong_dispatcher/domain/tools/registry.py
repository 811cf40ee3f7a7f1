"""The built-in tool registry: reviewed definitions, their digests, the snapshot, the policy fence.

A tool definition names the reviewed adapter, its redaction contract and its audit contract,
each by identity and by the digest of its terms; the registry's digest is the "snapshot" a
start barrier binds (docs/decisions/0019). The tool policy (sandbox root and size caps) is hashed
into the policy fence. Nothing here touches a file: callers pass resolved values in.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from qinglong_dispatcher.domain import digests

TOOL_FILE_WRITE: Final = "builtin.file.write"
"""The first built-in tool: write bounded plan content into the tool sandbox."""

MAX_CONTENT_BYTES: Final = 32 * 1024
"""Largest `builtin.file.write` content, in UTF-8 bytes (the plan stays within 64 KiB)."""

AUDIT_KIND_TOOL_START: Final = "tool.start_authorised"
"""The `security_audit_events.kind` of a committed start barrier."""

CONTRACT_TAG: Final = "qinglong/tool-contract@v1"
DEFINITION_TAG: Final = "qinglong/tool-definition@v1"
SNAPSHOT_TAG: Final = "qinglong/tool-registry-snapshot@v1"
POLICY_TAG: Final = "qinglong/tool-policy@v1"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Contract:
    """A reviewed contract: its identity and the terms its digest covers."""

    contract_id: str
    terms: Mapping[str, object]
    _digest: str = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Hashed once: every tool step binds and re-checks these digests several times (its
        # command, its barrier, the StepRun's binding), and they never change. The terms are
        # copied read-only, so nothing can move them under the digest.
        terms = MappingProxyType(dict(self.terms))
        object.__setattr__(self, "terms", terms)
        object.__setattr__(
            self,
            "_digest",
            digests.evidence_digest(
                CONTRACT_TAG, {"contractId": self.contract_id, "terms": dict(terms)}
            ),
        )

    @property
    def digest(self) -> str:
        """Digest of identity and terms in domain CONTRACT_TAG."""
        return self._digest


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolDefinition:
    """One reviewed built-in tool at one version, and the trusted handler bound to it."""

    tool_id: str
    version: int
    handler_binding: str
    execution_class: str
    timeout_ms: int
    adapter: Contract
    redaction: Contract
    audit: Contract
    _digest: str = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Hashed once, as a contract's: every field is immutable (see `Contract`).
        object.__setattr__(
            self, "_digest", digests.evidence_digest(DEFINITION_TAG, self.canonical_fields())
        )

    def canonical_fields(self) -> dict[str, object]:
        """Every bound field, camelCase, contracts by identity and digest."""
        return {
            "toolId": self.tool_id,
            "version": self.version,
            "handlerBinding": self.handler_binding,
            "executionClass": self.execution_class,
            "timeoutMs": self.timeout_ms,
            "adapter": {"contractId": self.adapter.contract_id, "digest": self.adapter.digest},
            "redaction": {
                "contractId": self.redaction.contract_id,
                "digest": self.redaction.digest,
            },
            "audit": {"contractId": self.audit.contract_id, "digest": self.audit.digest},
        }

    @property
    def digest(self) -> str:
        """Digest of the definition in domain DEFINITION_TAG."""
        return self._digest


FILE_WRITE_V1: Final = ToolDefinition(
    tool_id=TOOL_FILE_WRITE,
    version=1,
    handler_binding="builtin:file-write:v1",
    execution_class="builtin.local-file",
    timeout_ms=5_000,
    adapter=Contract(
        contract_id="adapter:builtin.file.write:v1",
        terms={
            "target": "sandbox/<projectId>/<dispatchId>",
            "pathSource": "derived; never from the plan",
            "write": "temp file, fsync, rename, fsync directory",
            "idempotencyKey": "dispatchId",
            "sameContentPresent": "succeeded",
            "otherContentPresent": "failed",
            "sandboxAbsent": "failed before any write",
            "maxContentBytes": MAX_CONTENT_BYTES,
        },
    ),
    redaction=Contract(
        contract_id="redaction:builtin.file.write:v1",
        terms={
            "command": "identities and digests only",
            "logs": "identities, digests and result codes only",
            "content": "never logged, never in a command, barrier or audit record",
        },
    ),
    audit=Contract(
        contract_id="audit:tool-start:v1",
        terms={
            "kind": AUDIT_KIND_TOOL_START,
            "subject": "stepRunId",
            "detail": "toolId@version",
            "receipt": "same transaction as the barrier",
        },
    ),
)

BUILT_IN: Final[Mapping[tuple[str, int], ToolDefinition]] = MappingProxyType(
    {(FILE_WRITE_V1.tool_id, FILE_WRITE_V1.version): FILE_WRITE_V1}
)
"""Every reviewed built-in tool by (tool id, version)."""


def lookup(tool_id: str, version: int) -> ToolDefinition | None:
    """The reviewed definition of a tool version, or None."""
    return BUILT_IN.get((tool_id, version))


def latest(tool_id: str) -> ToolDefinition | None:
    """The newest reviewed version of a tool, or None."""
    versions = [d for (name, _), d in BUILT_IN.items() if name == tool_id]
    return max(versions, key=lambda d: d.version, default=None)


@functools.cache
def snapshot_digest() -> str:
    """The registry snapshot: digest of every (tool, version, definition digest), sorted."""
    entries = [
        {"toolId": d.tool_id, "version": d.version, "definitionDigest": d.digest}
        for _, d in sorted(BUILT_IN.items())
    ]
    return digests.evidence_digest(SNAPSHOT_TAG, {"tools": entries})


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolPolicy:
    """The tool policy settings a start is admitted under (`sandbox_root` already resolved)."""

    sandbox_root: str
    max_content_bytes: int = MAX_CONTENT_BYTES
    _fence: str = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Hashed once per policy, not once per tool step: both settings are immutable.
        object.__setattr__(
            self,
            "_fence",
            digests.evidence_digest(
                POLICY_TAG,
                {"sandboxRoot": self.sandbox_root, "maxContentBytes": self.max_content_bytes},
            ),
        )

    @property
    def fence(self) -> str:
        """The policy fence: digest of the settings in domain POLICY_TAG."""
        return self._fence
