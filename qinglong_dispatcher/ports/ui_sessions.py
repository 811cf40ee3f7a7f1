"""Sessions of the operator UI in the store, so every daemon on it accepts them."""

from __future__ import annotations

from typing import Protocol

from qinglong_dispatcher.domain import principals, ui_sessions


class UiSessionStore(Protocol):
    """Sessions by the SHA-256 of their cookie value; times on the database clock. On
    PostgreSQL the runtime login (which authenticates for the API) opens, reads and revokes
    them; `revoke_token` revokes a token's sessions in its own transaction."""

    async def open_ui_session(self, new: ui_sessions.NewUiSession) -> None:
        """Open a session (its principal's oldest beyond `MAX_PER_PRINCIPAL` revoked) and delete
        at most `SWEEP_LIMIT` ended ones."""
        ...

    async def find_ui_session(
        self, session_sha256: str, *, touch_after_ms: int
    ) -> ui_sessions.UiSession | None:
        """The live session with this digest whose token still authenticates, its last use
        moved when older than `touch_after_ms`; None for anything else."""
        ...

    async def revoke_ui_session(self, session_sha256: str) -> None:
        """End one session now (idempotent)."""
        ...

    async def revoke_principal_ui_sessions(self, principal: str) -> None:
        """End every session of a principal now."""
        ...

    async def list_ui_sessions(self, principal: str) -> list[ui_sessions.UiSession]:
        """The live sessions of a principal, oldest first."""
        ...

    async def oidc_anchor(self, principal: str) -> principals.Authenticated | None:
        """The principal's newest live token (its role and token id), on which a session opened
        by an OIDC sign-in stands; None when it holds none (not enrolled)."""
        ...
