"""Sign-in sessions of the operator UI, kept in this process's memory.

A session is a random id (the cookie) naming the token it was opened with, its CSRF token and
its times. It ends after `idle_s` without a request, after `lifetime_s` in any case, at sign
out, and whenever its token no longer authenticates (checked on every request by the caller).
Nothing is written anywhere: a restart of the process signs everyone out.
"""

from __future__ import annotations

import collections
import dataclasses
import secrets
import time
from collections.abc import Callable
from typing import Final

from qinglong_dispatcher.domain import principals

COOKIE: Final = "qinglong_ui"
COOKIE_PATH: Final = "/ui"
IDLE_S: Final = 15 * 60.0
"""A session unused for this long ends (the default of `QINGLONG_UI_IDLE_TIMEOUT_SECONDS`)."""
LIFETIME_S: Final = 8 * 3600.0
"""No session lives longer than this (`QINGLONG_UI_SESSION_LIFETIME_SECONDS`)."""
MAX_SESSIONS: Final = 10_000
"""Sessions kept at most; the least recently used goes first (memory stays bounded)."""
MAX_PER_PRINCIPAL: Final = 16
"""Sessions one principal may hold; its least recently used goes first, so that one signed-in
principal cannot push everyone else's sessions out."""


@dataclasses.dataclass(slots=True)
class Session:
    """One signed-in browser."""

    session_id: str
    secret: str
    """The token it was opened with: re-checked against the token store on every request."""
    principal: principals.Authenticated
    csrf: str
    """The value every form of this session carries in a hidden field."""
    created_at: float
    last_seen_at: float


class Sessions:
    """The open sessions of this process, bounded in number, each with an idle and an absolute
    deadline (monotonic clock)."""

    def __init__(
        self,
        *,
        idle_s: float = IDLE_S,
        lifetime_s: float = LIFETIME_S,
        max_sessions: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if idle_s <= 0 or lifetime_s <= 0 or max_sessions < 1:
            raise ValueError("idle_s, lifetime_s and max_sessions must be positive")
        self.idle_s = idle_s
        self.lifetime_s = lifetime_s
        self._max = max_sessions
        self.clock = clock
        self._open: collections.OrderedDict[str, Session] = collections.OrderedDict()

    def open(self, secret: str, principal: principals.Authenticated) -> Session:
        """A new session for a token that just authenticated."""
        now = self.clock()
        session = Session(
            session_id=secrets.token_urlsafe(32),
            secret=secret,
            principal=principal,
            csrf=secrets.token_urlsafe(32),
            created_at=now,
            last_seen_at=now,
        )
        mine = [s for s in self._open.values() if s.principal.principal == principal.principal]
        for oldest in mine[: max(0, len(mine) - MAX_PER_PRINCIPAL + 1)]:
            del self._open[oldest.session_id]
        self._open[session.session_id] = session
        while len(self._open) > self._max:
            self._open.popitem(last=False)
        return session

    def find(self, session_id: str | None) -> Session | None:
        """The live session of a cookie value, its idle deadline moved on; None (and the
        session gone) when it is unknown, idle too long or past its lifetime."""
        if not session_id:
            return None
        session = self._open.get(session_id)
        if session is None:
            return None
        now = self.clock()
        if now - session.last_seen_at >= self.idle_s or now - session.created_at >= self.lifetime_s:
            del self._open[session_id]
            return None
        session.last_seen_at = now
        self._open.move_to_end(session_id)
        return session

    def close(self, session_id: str) -> None:
        """End one session (sign out, or its token no longer authenticates)."""
        self._open.pop(session_id, None)

    def of_principal(self, principal: str) -> list[Session]:
        """The live sessions of one principal, oldest first."""
        now = self.clock()
        return [
            s
            for s in self._open.values()
            if s.principal.principal == principal
            and now - s.last_seen_at < self.idle_s
            and now - s.created_at < self.lifetime_s
        ]

    def expires_in(self, session: Session) -> float:
        """Seconds until `session` ends if it stays idle."""
        now = self.clock()
        return max(
            0.0,
            min(session.last_seen_at + self.idle_s, session.created_at + self.lifetime_s) - now,
        )

    def __len__(self) -> int:
        return len(self._open)
