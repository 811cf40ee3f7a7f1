"""The `run.create` repository: the Run an approved dispatch creates, its receipt."""

from __future__ import annotations

import dataclasses
import enum
from typing import Protocol

from qinglong_dispatcher.domain import (
    records,
    runs,
)


class RunCreateOutcome(enum.StrEnum):
    """Results of the `run.create` effect transaction."""

    CREATED = "created"
    EXISTING = "existing"
    CONFLICT = "conflict"
    FENCED = "fenced"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunCreateRequest:
    """Everything the `run.create` effect transaction binds."""

    dispatch: records.Dispatch
    identity: records.ExecutionIdentity
    run: runs.Run
    mutation_id: str
    now_ms: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunCreateResult:
    """The effect transaction's result; `run` and `receipt` are set when created or existing."""

    outcome: RunCreateOutcome
    run: runs.Run | None = None
    receipt: runs.RunReceipt | None = None
    reason: str | None = None


class RunCreateRepository(Protocol):
    """Run + attempt + event + receipt + completion in one transaction (docs/actions.md)."""

    async def create_run(self, request: RunCreateRequest) -> RunCreateResult:
        """Create the Run or replay it from its receipt; never a Run without a receipt."""
        ...

    async def get_receipt(self, dispatch_id: str) -> runs.RunReceipt | None:
        """The receipt of a dispatch, by primary key."""
        ...

    async def get_run_by_key(self, project_id: str, idempotency_key: str) -> runs.Run | None:
        """The Run holding an idempotency key, by unique key."""
        ...

    async def get_run(self, run_id: str) -> runs.Run | None:
        """One Run by primary key."""
        ...
