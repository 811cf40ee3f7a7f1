"""Test-only actions registered in tests: they record every call so tests can count them."""

from __future__ import annotations

import dataclasses

import anyio

from qinglong_dispatcher import handler_ports
from qinglong_dispatcher.domain import records


@dataclasses.dataclass
class RecordingHandler:
    """An action with a separate completion: execute returns an explicit result."""

    action_type: str = "run.create"
    digest_override: str | None = None
    inspect_kind: handler_ports.InspectKind = handler_ports.InspectKind.READY
    inspect_raises: Exception | None = None
    execute_raises: Exception | None = None
    execute_sleep_s: float = 0.0
    result: handler_ports.ExecuteKind = handler_ports.ExecuteKind.SUCCEEDED
    inspected: list[str] = dataclasses.field(default_factory=list)
    executed: list[str] = dataclasses.field(default_factory=list)
    contexts: list[handler_ports.ExecutionContext] = dataclasses.field(default_factory=list)
    started: anyio.Event = dataclasses.field(default_factory=anyio.Event)

    async def inspect(self, dispatch: records.Dispatch) -> handler_ports.InspectResult:
        self.inspected.append(dispatch.dispatch_id)
        if self.inspect_raises is not None:
            raise self.inspect_raises
        if self.inspect_kind is not handler_ports.InspectKind.READY:
            return handler_ports.InspectResult(kind=self.inspect_kind, code="test_code")
        return handler_ports.InspectResult(
            kind=handler_ports.InspectKind.READY,
            action_digest=self.digest_override or dispatch.action_digest,
        )

    async def execute(self, ctx: handler_ports.ExecutionContext) -> handler_ports.ExecuteResult:
        self.executed.append(ctx.dispatch.dispatch_id)
        self.contexts.append(ctx)
        self.started.set()
        if self.execute_sleep_s:
            await anyio.sleep(self.execute_sleep_s)
        if self.execute_raises is not None:
            raise self.execute_raises
        return handler_ports.ExecuteResult(kind=self.result, code="test_done")
