"""Writing and listing approval policies (both dialects): `policy set|list|show|delete`.

The database holds the rules (migrations 0026, 0027, 0032): it numbers each version, names its
writer and its time, audits it, and on PostgreSQL admits only the schema's owner (any other
login is refused `42501`, surfaced here as `PolicyRefused`). This module only writes the next
version and reads the versions back.
"""

from __future__ import annotations

import json

from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.domain import approval_policies as policies
from qinglong_dispatcher.domain import approvals, errors

OWNER_ONLY = (
    "only the schema's owner writes approval policies: on PostgreSQL run this with the "
    "administrator URL that runs migrate (the database refused this login)"
)


def _policy(row: query.Row) -> policies.Policy:
    return policies.Policy(
        name=row["name"],
        version=int(row["version"]),
        action_type=row["action_type"],
        project_id=row["project_id"],
        target_prefix=row["target_prefix"],
        approvals_required=int(row["approvals_required"]),
        denials_to_reject=int(row["denials_to_reject"]),
        approver_groups=tuple(json.loads(row["approver_groups"])),
        reason_required=bool(row["reason_required"]),
        lifetime_ms=row["lifetime_ms"],
        remind_before_ms=row["remind_before_ms"],
        not_before_delay_ms=row["not_before_delay_ms"],
        window_ms=row["window_ms"],
        proceed_on_unknown=bool(row["proceed_on_unknown"]),
        retired=bool(row["retired"]),
        written_by=row["written_by"],
        written_at_ms=int(row["written_at_ms"]),
    )


async def _written(q: query.Query, name: str, params: query.Params) -> policies.Policy:
    row = await q.one(name, params)
    assert row is not None
    return _policy(row)


async def set_policy(
    q: query.Query, principal: approvals.Principal, new: policies.NewPolicy
) -> policies.Policy:
    """Write the next version of `new.name` (its first, or a change); the version written."""
    new.check()
    return await _written(
        q,
        "insert_policy",
        {
            "name": new.name,
            "action_type": new.action_type,
            "project_id": new.project_id,
            "target_prefix": new.target_prefix,
            "approvals_required": new.approvals_required,
            "denials_to_reject": new.denials_to_reject,
            "approver_groups": json.dumps(list(new.approver_groups)),
            "reason_required": new.reason_required,
            "lifetime_ms": new.lifetime_ms,
            "remind_before_ms": new.remind_before_ms,
            "not_before_delay_ms": new.not_before_delay_ms,
            "window_ms": new.window_ms,
            "proceed_on_unknown": new.proceed_on_unknown,
            "principal": principal.name,
        },
    )


async def retire_policy(
    q: query.Query, principal: approvals.Principal, name: str
) -> policies.Policy:
    """Write a retired version of the policy in force named `name`; that version."""
    policies.check_name(name)
    newest = await q.one("policy_versions", {"name": name})
    if newest is None or newest["retired"]:
        raise errors.PolicyNotFound(f"no approval policy {name} is in force")
    return await _written(q, "retire_policy", {"name": name, "principal": principal.name})


async def policy_versions(q: query.Query, name: str) -> list[policies.Policy]:
    """Every version of the policy `name`, newest first (empty: none was ever written)."""
    policies.check_name(name)
    return [_policy(row) for row in await q.all("policy_versions", {"name": name})]


async def list_policies(q: query.Query, *, with_retired: bool = False) -> list[policies.Policy]:
    """The newest version of each policy, by name: those in force, and with `with_retired`
    the retired ones too."""
    rows = await q.all("newest_policies", {"with_retired": with_retired})
    return [_policy(row) for row in rows]


class PolicyMethods:
    """The policy operations of `SqlStore`, written as its principal."""

    runner: query.Runner
    approver: approvals.Principal

    async def set_policy(self, new: policies.NewPolicy) -> policies.Policy:
        """See `ports.PolicyStore.set_policy`."""
        return await self._write(lambda q: set_policy(q, self.approver, new))

    async def retire_policy(self, name: str) -> policies.Policy:
        """See `ports.PolicyStore.retire_policy`."""
        return await self._write(lambda q: retire_policy(q, self.approver, name))

    async def _write(self, work: query.Work[policies.Policy]) -> policies.Policy:
        """One write transaction; the database's refusal of the writer as `PolicyRefused`."""
        try:
            return await self.runner.transaction(work)
        except errors.StoreError as refused:
            if refused.code == "permission_denied":
                raise errors.PolicyRefused(OWNER_ONLY) from refused
            raise

    policy_versions = query.operation(policy_versions, write=False)
    list_policies = query.operation(list_policies, write=False)
