"""Sign-in sessions of the operator UI, kept in the store (`ports.UiSessionStore`).

A session is a random id (the cookie) of which the store keeps only the SHA-256, naming the
token it was opened with. Every daemon on the store accepts it, and a restart keeps it. It
ends after `idle_s` without a request, after `lifetime_s` in any case, at sign out, and when
its token is revoked or expires — all on the database's clock. Its CSRF token is derived from
the cookie value (`domain.ui_sessions.csrf_of`), so no process keeps anything of it.
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import Final

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import principals, ui_sessions

COOKIE: Final = "qinglong_ui"
COOKIE_PATH: Final = "/ui"
IDLE_S: Final = 15 * 60.0
"""A session unused for this long ends (the default of `QINGLONG_UI_IDLE_TIMEOUT_SECONDS`)."""
LIFETIME_S: Final = 8 * 3600.0
"""No session lives longer than this (`QINGLONG_UI_SESSION_LIFETIME_SECONDS`)."""
MAX_PER_PRINCIPAL: Final = ui_sessions.MAX_PER_PRINCIPAL
"""Sessions one principal may hold; opening another ends its oldest, so that one signed-in
principal cannot fill the table."""


@dataclasses.dataclass(slots=True)
class Session:
    """One signed-in browser, as this request sees it."""

    session_id: str
    """The cookie value: in this request's memory only, never stored or logged."""
    principal: principals.Authenticated
    csrf: str
    """The value every form of this session carries in a hidden field."""


class Sessions:
    """The UI's sessions in the store, each with an idle and an absolute deadline."""

    def __init__(
        self,
        store: ports.UiSessionStore,
        *,
        idle_s: float = IDLE_S,
        lifetime_s: float = LIFETIME_S,
    ) -> None:
        if idle_s <= 0 or lifetime_s <= 0:
            raise ValueError("idle_s and lifetime_s must be positive")
        self.store = store
        self.idle_s = idle_s
        self.lifetime_s = lifetime_s

    def _touch_after_ms(self) -> int:
        # A request writes its last use at most once a minute, or a tenth of the idle time
        # when that is shorter: the idle deadline stays within a tenth of exact.
        return int(min(60_000.0, self.idle_s * 100.0))

    async def open(self, principal: principals.Authenticated) -> Session:
        """A new session for a token that just authenticated."""
        session_id = secrets.token_urlsafe(32)
        await self.store.open_ui_session(
            ui_sessions.NewUiSession(
                session_sha256=ui_sessions.digest(session_id),
                principal=principal,
                idle_ms=max(1, int(self.idle_s * 1000)),
                lifetime_ms=max(1, int(self.lifetime_s * 1000)),
            )
        )
        return Session(session_id, principal, ui_sessions.csrf_of(session_id))

    async def find(self, session_id: str | None) -> Session | None:
        """The live session of a cookie value (its token still authenticates), its idle
        deadline moved on; None when it is unknown, ended, or its token no longer valid."""
        if not session_id or len(session_id) > 256:
            return None
        found = await self.store.find_ui_session(
            ui_sessions.digest(session_id), touch_after_ms=self._touch_after_ms()
        )
        if found is None:
            return None
        return Session(session_id, found.principal, ui_sessions.csrf_of(session_id))

    async def close(self, session_id: str) -> None:
        """End one session (sign out)."""
        await self.store.revoke_ui_session(ui_sessions.digest(session_id))

    async def close_all(self, principal: str) -> None:
        """End every session of a principal, on every daemon (sign out everywhere)."""
        await self.store.revoke_principal_ui_sessions(principal)

    async def of_principal(self, principal: str) -> list[ui_sessions.UiSession]:
        """The live sessions of one principal, oldest first."""
        return await self.store.list_ui_sessions(principal)
