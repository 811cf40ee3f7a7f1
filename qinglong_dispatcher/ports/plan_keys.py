"""The plan key store: sealing stored plans again under the active key, and proving they open."""

from __future__ import annotations

import dataclasses
from typing import Protocol

PlanKey = tuple[str, str]
"""A plan's identity: (project id, action ref), the keyset order of these batches."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ResealBatch:
    """One `keys rotate` batch: plans sealed again, those that did not open (left as they are),
    what is left for later batches, and where the next batch starts."""

    resealed: int
    unreadable: int
    remaining: int
    after: PlanKey | None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CheckBatch:
    """One `keys check` batch: plans read, sealed or clear, by key id, and the codes of
    those that did not open or whose plaintext does not match their digest."""

    checked: int
    clear: int
    by_key: dict[str, int]
    failed: dict[str, int]
    after: PlanKey | None


class PlanKeyStore(Protocol):
    """`keys rotate` and `keys check` (docs/security.md#plans-at-rest)."""

    async def reseal_plans(self, *, limit: int, after: PlanKey | None = None) -> ResealBatch:
        """One transaction: up to `limit` plans (after `after`) not sealed under the active key,
        sealed again under it; a plan that does not open is counted and left as it is."""
        ...

    async def probe_plan_keys(self) -> None:
        """Raise `ConfigurationError` (exit 78) unless the newest sealed plan opens with this
        process's key ring: startup of `run` and `tick`, so that a missing or wrong ring stops
        the daemon instead of blocking every dispatch."""
        ...

    async def check_plans(self, *, limit: int, after: PlanKey | None = None) -> CheckBatch:
        """Read up to `limit` plans after `after`, open each and compare it with its digest."""
        ...
