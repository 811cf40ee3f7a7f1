"""What the HTTP API asks of the store: tokens, and a store acting as one principal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from qinglong_dispatcher.domain import principals
from qinglong_dispatcher.ports.approvals import ApprovalStore, PlanStore
from qinglong_dispatcher.ports.dispatches import CancelStore, DispatchReadStore
from qinglong_dispatcher.ports.freezes import FreezeLiftStore
from qinglong_dispatcher.ports.notes import NoteStore
from qinglong_dispatcher.ports.recovery import RecoveryStore


class TokenStore(Protocol):
    """API tokens: the store keeps each secret's SHA-256, never the secret.

    Times are the database's clock: expiry and revocation hold from the moment they commit.
    `create_token` and `revoke_token` are the administrator's (on PostgreSQL they also create
    and grant the principal's role); `authenticate` is the API's (the runtime login)."""

    async def create_token(
        self, new: principals.NewToken, *, groups: Sequence[str] = ()
    ) -> principals.Token:
        """Store a token (`principals.NewToken.issue` made it and its secret); refused
        (`TokenRefused`) while the principal holds live tokens of another role. The principal
        joins each approver group of `groups` (docs/security.md#approval-policies): on
        PostgreSQL the group's role, made if missing, is granted to the principal's."""
        ...

    async def approver_groups(self) -> dict[str, list[str]]:
        """Each principal's approver groups, by principal (the groups' members on SQLite, the
        groups' roles granted to principals' roles on PostgreSQL)."""
        ...

    async def list_tokens(self) -> list[principals.Token]:
        """Every token, oldest first, revoked and expired ones too (never a digest)."""
        ...

    async def revoke_token(self, token_id: str) -> principals.Token | None:
        """Revoke now (idempotent); None when no such token exists."""
        ...

    async def authenticate(self, secret: str) -> principals.Authenticated | None:
        """The principal and role of a live token with this secret, its last use moved;
        None for anything else, without saying why."""
        ...

    async def refused(self, failure: principals.AuthFailure) -> None:
        """Append the `api.auth_failed` audit row of a refused authentication (the runtime,
        as itself; no token id)."""
        ...


class ActingStore(
    ApprovalStore,
    PlanStore,
    CancelStore,
    RecoveryStore,
    DispatchReadStore,
    NoteStore,
    FreezeLiftStore,
    Protocol,
):
    """A store whose every transaction acts as one authenticated principal.

    On PostgreSQL each transaction first becomes the principal's role (`SET LOCAL ROLE`), so
    the database's grants and triggers decide and record that principal; on SQLite the store
    records the principal and applies its role, separation of duties and the state machine.
    Pass each write the request's `principals.RequestContext` for its audit row."""


class PrincipalStores(Protocol):
    """The store the API opened: it hands out one acting store per authenticated principal."""

    async def acting_as(self, who: principals.Authenticated) -> ActingStore:
        """A store acting as `who` (cheap: it shares the caller's pool or connection)."""
        ...
