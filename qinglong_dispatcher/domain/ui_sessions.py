"""A sign-in session of the operator UI as the store keeps it: named by the SHA-256 of its
cookie value (never the value), the token it was opened with, and its times on the database
clock."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Final

from qinglong_dispatcher.domain import principals

MAX_PER_PRINCIPAL: Final = 16
"""Unrevoked sessions one principal keeps; opening another revokes its oldest."""
SWEEP_LIMIT: Final = 64
"""Ended sessions deleted at most by one sign-in (the sweep stays bounded)."""


def digest(session_id: str) -> str:
    """The SHA-256 (lowercase hex) of a cookie value: all the store keeps of it."""
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


def csrf_of(session_id: str) -> str:
    """The CSRF token of a session: derived from its cookie value (which the page cannot read,
    `HttpOnly`) under its own label, so no replica keeps it and it is not the stored digest."""
    return hashlib.sha256(b"qinglong-ui-csrf\x00" + session_id.encode("utf-8")).hexdigest()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NewUiSession:
    """What opening a session writes."""

    session_sha256: str
    principal: principals.Authenticated
    idle_ms: int
    lifetime_ms: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class UiSession:
    """A live session, as read now (`now_ms` is the database clock at the read)."""

    session_sha256: str
    principal: principals.Authenticated
    created_at_ms: int
    last_seen_at_ms: int
    idle_ms: int
    expires_at_ms: int
    now_ms: int

    @property
    def ends_in_ms(self) -> int:
        """Milliseconds until it ends if it stays idle."""
        return max(0, min(self.last_seen_at_ms + self.idle_ms, self.expires_at_ms) - self.now_ms)
