"""UI session transactions (`ports.UiSessionStore`), written once for both dialects; the
statements write every time on the database's clock and bind digests only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.domain import principals, ui_sessions


def _session(row: Mapping[str, Any], session_sha256: str, role: str) -> ui_sessions.UiSession:
    return ui_sessions.UiSession(
        session_sha256=session_sha256,
        principal=principals.Authenticated(
            token_id=str(row["token_id"]),
            principal=str(row["principal"]),
            role=principals.TokenRole(role),
        ),
        created_at_ms=int(row["created_at_ms"]),
        last_seen_at_ms=int(row["last_seen_at_ms"]),
        idle_ms=int(row["idle_ms"]),
        expires_at_ms=int(row["expires_at_ms"]),
        now_ms=int(row["now_ms"]),
    )


async def open_session(q: query.Query, new: ui_sessions.NewUiSession) -> None:
    """See `ports.UiSessionStore.open_ui_session`."""
    await q.run("sweep_ui_sessions", {"limit": ui_sessions.SWEEP_LIMIT})
    await q.run(
        "insert_ui_session",
        {
            "session_sha256": new.session_sha256,
            "token_id": new.principal.token_id,
            "principal": new.principal.principal,
            "idle_ms": new.idle_ms,
            "lifetime_ms": new.lifetime_ms,
        },
    )
    await q.run(
        "cap_ui_sessions",
        {"principal": new.principal.principal, "keep": ui_sessions.MAX_PER_PRINCIPAL},
    )


async def find_live(
    q: query.Query, session_sha256: str, touch_after_ms: int
) -> tuple[ui_sessions.UiSession, bool] | None:
    """The live session with this digest and whether its last use is older than
    `touch_after_ms` (a read)."""
    row = await q.one(
        "find_ui_session", {"session_sha256": session_sha256, "touch_after_ms": touch_after_ms}
    )
    if row is None:
        return None
    return _session(row, session_sha256, str(row["role"])), bool(row["stale"])


async def touch(q: query.Query, session_sha256: str) -> None:
    """Move a session's last use to now."""
    await q.run("touch_ui_session", {"session_sha256": session_sha256})


async def revoke(q: query.Query, session_sha256: str) -> None:
    """See `ports.UiSessionStore.revoke_ui_session`."""
    await q.run("revoke_ui_session", {"session_sha256": session_sha256})


async def revoke_principal(q: query.Query, principal: str) -> None:
    """See `ports.UiSessionStore.revoke_principal_ui_sessions`."""
    await q.run("revoke_principal_ui_sessions", {"principal": principal})


async def list_sessions(q: query.Query, principal: str) -> list[ui_sessions.UiSession]:
    """See `ports.UiSessionStore.list_ui_sessions`."""
    rows = await q.all("select_ui_sessions", {"principal": principal})
    return [_session(row, str(row["session_sha256"]), str(row["role"])) for row in rows]


async def anchor_token(q: query.Query, principal: str) -> principals.Authenticated | None:
    """See `ports.UiSessionStore.oidc_anchor`."""
    row = await q.one("oidc_anchor_token", {"principal": principal})
    if row is None:
        return None
    return principals.Authenticated(
        token_id=str(row["token_id"]),
        principal=str(row["principal"]),
        role=principals.TokenRole(str(row["role"])),
    )
