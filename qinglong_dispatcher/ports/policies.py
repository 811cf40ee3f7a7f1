"""The approval policy store: writing the next version of a policy and reading them."""

from __future__ import annotations

from typing import Protocol

from qinglong_dispatcher.domain import approval_policies


class PolicyStore(Protocol):
    """Approval policies, every version kept (docs/security.md#approval-policies)."""

    async def set_policy(self, new: approval_policies.NewPolicy) -> approval_policies.Policy:
        """Write the next version of a policy; the version written. Refused
        (`PolicyRefused`) for a writer that is not the schema's owner."""
        ...

    async def retire_policy(self, name: str) -> approval_policies.Policy:
        """Write a retired version of a policy in force (`PolicyNotFound` if none is)."""
        ...

    async def policy_versions(self, name: str) -> list[approval_policies.Policy]:
        """Every version of one policy, newest first."""
        ...

    async def list_policies(self, *, with_retired: bool = False) -> list[approval_policies.Policy]:
        """The newest version of each policy, by name (retired ones only when asked)."""
        ...
