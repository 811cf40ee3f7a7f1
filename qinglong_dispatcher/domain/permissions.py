"""Who may do what: the one table of operations and the token roles that may perform each.

The SQLite store applies it to an API principal (SQLite has no logins); the API and the UI
derive every route's guard from it; on PostgreSQL the grants and triggers of the migrations
decide on their own, and a test holds them and this table to the same answers for every
operation and role (`tests/security/test_permission_table.py`).

A route admits the least role the table allows and every role ranked above it (a role below
is `403 forbidden`); a role above it that the table does not list reaches the store, and the
store (SQLite) or the database (PostgreSQL) refuses it.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Mapping

from qinglong_dispatcher.domain import principals

Role = principals.TokenRole


class Operation(enum.StrEnum):
    """What a principal asks of the dispatcher."""

    READ = "read"
    """Read requests, dispatches, recovery, the audit log and the status."""
    SESSION = "session"
    """See and end one's own UI sessions (the UI's only: the daemon's own login keeps the
    sessions, never acting as the principal)."""
    CREATE = "create"
    """Create a plan and its pending approval request."""
    APPROVE = "approve"
    """Approve a pending request (one or a batch)."""
    REJECT = "reject"
    """Reject a pending request."""
    CONSUME = "consume"
    """Turn an approved request into its dispatch."""
    SUBMIT = "submit"
    """Create, approve and consume at once (`submit`)."""
    CANCEL = "cancel"
    """Cancel a waiting dispatch."""
    RESOLVE = "resolve"
    """Settle a `recovery_required` execution by hand."""
    NOTE = "note"
    """Write a note on a request or a dispatch that waits on people (the inbox's rows)."""
    LIFT = "lift"
    """Lift the freezes covering one waiting dispatch, for it alone (never its requester's:
    the database refuses that whatever the role)."""
    TEST_SUBSCRIPTION = "test_subscription"
    """Send one signed sample to a subscription's destination, as `notify test` does (nothing
    is written: the web layer sends it, never the store)."""


ALL = frozenset(Role)

MAY: Mapping[Operation, frozenset[Role]] = types.MappingProxyType(
    {
        Operation.READ: ALL,
        Operation.SESSION: ALL,
        Operation.CREATE: frozenset({Role.SUBMITTER, Role.APPROVER}),
        Operation.APPROVE: frozenset({Role.APPROVER}),
        Operation.REJECT: frozenset({Role.APPROVER}),
        Operation.CONSUME: frozenset({Role.APPROVER}),
        Operation.SUBMIT: frozenset({Role.APPROVER}),
        Operation.CANCEL: frozenset({Role.OPERATOR}),
        Operation.RESOLVE: frozenset({Role.OPERATOR}),
        Operation.NOTE: frozenset({Role.APPROVER, Role.OPERATOR}),
        Operation.LIFT: frozenset({Role.OPERATOR}),
        Operation.TEST_SUBSCRIPTION: frozenset({Role.OPERATOR}),
    }
)
"""The roles that may perform each operation."""

APPROVAL_STEPS = frozenset(
    {Operation.CREATE, Operation.APPROVE, Operation.REJECT, Operation.CONSUME, Operation.SUBMIT}
)
"""Operations on approval requests: the store refuses them `ApprovalNotPermitted`, the others
`PrincipalNotPermitted`."""

WEB_ONLY = frozenset({Operation.SESSION, Operation.TEST_SUBSCRIPTION})
"""Operations the store never performs as the principal."""


def permits(role: Role | str, operation: Operation) -> bool:
    """Whether `role` may perform `operation`."""
    return role in MAY[operation]


def least_role(operation: Operation) -> Role:
    """The least privileged role that may perform `operation`: what its routes require."""
    return min(MAY[operation], key=principals.ROLES.index)


def admits(who: principals.Authenticated, operation: Operation) -> bool:
    """Whether a route of `operation` lets `who` through (its role at least `least_role`)."""
    return who.may(least_role(operation))
