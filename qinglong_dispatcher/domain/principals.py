"""Who calls the control-plane API: a principal the server derived, and the order of roles."""

from __future__ import annotations

import dataclasses
from typing import Final, Literal, get_args

Role = Literal["viewer", "submitter", "approver", "operator"]
"""The API roles, least privilege first; each may do what the ones before it may."""

ROLES: Final[tuple[Role, ...]] = get_args(Role)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Principal:
    """An authenticated caller. The server derives it from the bearer token: no request field
    can name it. `token_id` identifies the token (never the secret itself)."""

    name: str
    role: Role
    token_id: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"unknown role {self.role!r}")

    def may(self, needed: Role) -> bool:
        """Whether this principal's role is `needed` or above it."""
        return ROLES.index(self.role) >= ROLES.index(needed)
