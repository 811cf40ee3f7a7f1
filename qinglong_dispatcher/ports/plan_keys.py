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


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PlanKeyProbe:
    """What the start check found that blocks some plans but not the process: registered keys
    this ring lacks (plans sealed under them are blocked), and the code of the newest sealed
    plan when it does not open (that plan is blocked alone)."""

    not_in_ring: tuple[str, ...] = ()
    newest_unreadable: str | None = None


class PlanKeyStore(Protocol):
    """`keys rotate` and `keys check` (docs/security.md#plans-at-rest)."""

    async def reseal_plans(self, *, limit: int, after: PlanKey | None = None) -> ResealBatch:
        """One transaction: up to `limit` plans (after `after`) not sealed under the active key,
        sealed again under it; a plan that does not open is counted and left as it is."""
        ...

    async def probe_plan_keys(self) -> PlanKeyProbe:
        """The start check of `run` and `tick`, against the keys the database has registered.

        Raises `ConfigurationError` (exit 78) when the process has no ring while keys are
        registered or plans sealed (`plan_keyring_missing`), when its ring holds none of the
        registered keys (`plan_key_unknown`: another installation's ring), or when its active
        key is not registered (`plan_key_unregistered`: every plan it wrote would be refused).
        Nothing a login below the owner can write decides it: a plan that does not open is
        reported here and blocked alone at dispatch."""
        ...

    async def register_plan_keys(self, *, now_ms: int) -> list[str]:
        """Register every key id of this process's ring (the owner's: `migrate`); the ids
        registered now, oldest first. Nothing without a ring."""
        ...

    async def check_plans(self, *, limit: int, after: PlanKey | None = None) -> CheckBatch:
        """Read up to `limit` plans after `after`, open each and compare it with its digest."""
        ...
