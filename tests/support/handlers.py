"""Test-only actions registered in tests: they record every call so tests can count them."""

from __future__ import annotations

import dataclasses

import anyio

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import records


@dataclasses.dataclass
class RecordingHandler:
    """An action with a separate completion: execute returns an explicit result."""

    action_type: str = "run.create"
    digest_override: str | None = None
    inspect_kind: ports.InspectKind = ports.InspectKind.READY
    inspect_raises: Exception | None = None
    execute_raises: Exception | None = None
    execute_sleep_s: float = 0.0
    result: ports.ExecuteKind = ports.ExecuteKind.SUCCEEDED
    receipt: dict[str, object] | None = None
    inspected: list[str] = dataclasses.field(default_factory=list)
    executed: list[str] = dataclasses.field(default_factory=list)
    contexts: list[ports.ExecutionContext] = dataclasses.field(default_factory=list)
    started: anyio.Event = dataclasses.field(default_factory=anyio.Event)

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        self.inspected.append(dispatch.dispatch_id)
        if self.inspect_raises is not None:
            raise self.inspect_raises
        if self.inspect_kind is not ports.InspectKind.READY:
            return ports.InspectResult(kind=self.inspect_kind, code="test_code")
        return ports.InspectResult(
            kind=ports.InspectKind.READY,
            action_digest=self.digest_override or dispatch.action_digest,
        )

    async def execute(self, ctx: ports.ExecutionContext) -> ports.ExecuteResult:
        self.executed.append(ctx.dispatch.dispatch_id)
        self.contexts.append(ctx)
        self.started.set()
        if self.execute_sleep_s:
            await anyio.sleep(self.execute_sleep_s)
        if self.execute_raises is not None:
            raise self.execute_raises
        return ports.ExecuteResult(kind=self.result, code="test_done", receipt=self.receipt)
