"""Approval policies: what the `policy` command writes and lists, and what a reader (the API,
the UI, the metrics) sees of policies and votes."""

from __future__ import annotations

from typing import Protocol

from qinglong_dispatcher.domain import approval_policies, policies


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


class PolicyReadStore(Protocol):
    """Reads of the policies the database holds and the votes it counted."""

    async def vote_state(self, approval_request_id: str) -> policies.VoteState | None:
        """One request's policy copy (or none), its votes so far, who else may vote where the
        store can tell, and its expiry by the database's clock; None: no such request."""
        ...

    async def policies_in_force(self) -> list[policies.PolicyInForce]:
        """The newest version of each policy name, unless that version retired it."""
        ...

    async def waiting_by_policy(self) -> dict[str, int]:
        """Pending requests not yet expired (database clock), by the policy name they carry
        (`""`: none)."""
        ...
