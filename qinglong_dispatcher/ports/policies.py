"""What a reader (the API, the UI, the metrics) sees of approval policies and votes."""

from __future__ import annotations

from typing import Protocol

from qinglong_dispatcher.domain import policies


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
