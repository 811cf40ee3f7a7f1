"""The UI session operations of `SqlStore` (`ports.UiSessionStore`)."""

from __future__ import annotations

from qinglong_dispatcher.adapters.sql import query, ui_sessions
from qinglong_dispatcher.domain import ui_sessions as records

operation = query.operation


class UiSessionMethods:
    """UI sessions: what runs them."""

    runner: query.Runner

    open_ui_session = operation(ui_sessions.open_session)
    revoke_ui_session = operation(ui_sessions.revoke)
    revoke_principal_ui_sessions = operation(ui_sessions.revoke_principal)
    list_ui_sessions = operation(ui_sessions.list_sessions, write=False)
    oidc_anchor = operation(ui_sessions.anchor_token, write=False)

    async def find_ui_session(
        self, session_sha256: str, *, touch_after_ms: int
    ) -> records.UiSession | None:
        """See `ports.UiSessionStore.find_ui_session`: a read, and a write of the last use only
        when it is older than `touch_after_ms`."""
        found = await self.runner.transaction(
            lambda q: ui_sessions.find_live(q, session_sha256, touch_after_ms), write=False
        )
        if found is None:
            return None
        session, stale = found
        if stale:
            await self.runner.transaction(lambda q: ui_sessions.touch(q, session_sha256))
        return session
