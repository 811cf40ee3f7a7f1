"""Authentication of API callers: a bearer token in, a principal (or nothing) out."""

from __future__ import annotations

from typing import Protocol

from qinglong_dispatcher.domain import principals


class Authenticator(Protocol):
    """Turns a bearer token into the principal it was issued to (the token store fills it)."""

    async def authenticate(self, secret: str) -> principals.Authenticated | None:
        """The principal of a valid, unexpired, unrevoked token; None for anything else.

        It must not tell an unknown token from a revoked or expired one (the caller answers
        401 alike), and should compare secrets in constant time."""
        ...

    async def refused(self, failure: principals.AuthFailure) -> None:
        """Record a refused authentication (an `api.auth_failed` audit row)."""
        ...
