"""A test-only action with a separate completion: its effect is a file, its evidence that file."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import records, recovery


@dataclasses.dataclass
class MarkerAction:
    """`execute` writes `<folder>/<dispatch_id>` once; the dispatcher completes it afterwards."""

    folder: Path
    action_type: str = "run.create"
    executed: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        return ports.InspectResult(
            kind=ports.InspectKind.READY, action_digest=dispatch.action_digest
        )

    async def execute(self, ctx: ports.ExecutionContext) -> ports.ExecuteResult:
        self.executed.append((ctx.dispatch.dispatch_id, ctx.identity.owner))
        target = self.folder / ctx.idempotency_key
        with target.open("a") as handle:  # appending shows a second effect if one ever happens
            handle.write(f"{ctx.identity.attempt}\n")
        return ports.ExecuteResult(kind=ports.ExecuteKind.SUCCEEDED, code="marker_written")


@dataclasses.dataclass
class MarkerEvidence:
    """Verified when exactly one marker line exists for the dispatch."""

    folder: Path
    action_type: str = "run.create"

    async def evidence(self, snapshot: recovery.Snapshot) -> recovery.Evidence:
        target = self.folder / snapshot.dispatch.dispatch_id
        if not target.exists():
            return recovery.Evidence(kind=recovery.EvidenceKind.MISSING, reason="marker_missing")
        content = target.read_bytes()
        if content.count(b"\n") != 1:
            return recovery.Evidence(kind=recovery.EvidenceKind.CONFLICT, reason="marker_twice")
        return recovery.Evidence(
            kind=recovery.EvidenceKind.VERIFIED_SUCCEEDED,
            evidence_digest=hashlib.sha256(content).hexdigest(),
        )
