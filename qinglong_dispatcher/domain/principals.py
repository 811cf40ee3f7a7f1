"""API principals: token roles, token values, durations and the context of one request."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import re
import secrets
from typing import Final

from qinglong_dispatcher.domain import errors, records


class TokenRole(enum.StrEnum):
    """What a token's principal may do, least privilege first."""

    VIEWER = "viewer"
    """Reads requests and dispatches; writes nothing (the default of a new token)."""
    SUBMITTER = "submitter"
    """Also creates plans and approval requests; decides nothing."""
    APPROVER = "approver"
    """Creates, approves, rejects and consumes requests (not its own, unless allowed)."""
    OPERATOR = "operator"
    """Cancels waiting dispatches and resolves `recovery_required` ones by hand."""


DEFAULT_ROLE = TokenRole.VIEWER

NAME = re.compile(r"[a-z][a-z0-9_]{0,51}")
"""A principal's name: a plain identifier, spliced into its PostgreSQL role's name
(`<installation>_p_<name>`, which must still fit 63 bytes) and never quoted."""

TOKEN_ID = re.compile(r"tok_[0-9a-f]{16}")
SECRET_PREFIX = "qlt_"
"""Every secret starts so: secret scanners (and people) recognise a leaked one."""
SECRET = re.compile(r"qlt_[A-Za-z0-9_-]{43}")
"""The prefix and 32 random bytes, base64url without padding."""

MIN_TTL_MS = 60_000
MAX_TTL_MS = 365 * 86_400_000
DEFAULT_TTL_MS = 30 * 86_400_000
_DURATION = re.compile(r"([1-9][0-9]{0,6})([smhd])")
_UNIT_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_UNIT_NAMES = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def check_name(name: str) -> str:
    """`name` if it is a principal's name, else `InvalidInput`."""
    if not NAME.fullmatch(name):
        raise errors.InvalidInput(
            f"principal {name!r} is not a lower-case identifier of at most 52 characters "
            "starting with a letter"
        )
    return name


def parse_ttl(text: str) -> int:
    """Milliseconds of a lifetime like `30d`, `12h` or `90m`, bounded 1 minute … 365 days."""
    return parse_duration(
        text, what="expiry", units="mhd", bounds=(MIN_TTL_MS, MAX_TTL_MS, "1 minute", "365 days")
    )


def parse_duration(text: str, *, what: str, units: str, bounds: tuple[int, int, str, str]) -> int:
    """Milliseconds of a duration like `90m` in one of `units` (of `s`, `m`, `h`, `d`), within
    `bounds` (least and most milliseconds, and how to say each); else `InvalidInput`."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or match.group(2) not in units:
        names = [_UNIT_NAMES[unit] for unit in units]
        named = " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
        raise errors.InvalidInput(f"{what} {text!r} is not a number of {named}")
    duration_ms = int(match.group(1)) * _UNIT_MS[match.group(2)]
    least, most, least_said, most_said = bounds
    if not least <= duration_ms <= most:
        raise errors.InvalidInput(f"{what} {text!r} is not between {least_said} and {most_said}")
    return duration_ms


def new_secret() -> str:
    """A fresh secret: the prefix and 32 random bytes. Shown once, never stored."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def new_token_id() -> str:
    """A fresh token id: what lists, audit rows and revocations name."""
    return "tok_" + secrets.token_hex(8)


def digest(secret: str) -> str:
    """The SHA-256 (lowercase hex) of a secret: all the store keeps of it."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NewToken:
    """What `create_token` writes; the secret itself stays with the caller."""

    token_id: str
    secret_sha256: str
    principal: str
    role: TokenRole
    ttl_ms: int
    created_by: str

    @classmethod
    def issue(
        cls, *, principal: str, role: TokenRole, ttl_ms: int, created_by: str
    ) -> tuple[NewToken, str]:
        """A new token and its secret (to print once)."""
        if not MIN_TTL_MS <= ttl_ms <= MAX_TTL_MS:
            raise errors.InvalidInput("a token lives between 1 minute and 365 days")
        secret = new_secret()
        token = cls(
            token_id=new_token_id(),
            secret_sha256=digest(secret),
            principal=check_name(principal),
            role=role,
            ttl_ms=ttl_ms,
            created_by=created_by,
        )
        return token, secret


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Token:
    """A stored token as `token list` shows it (never its digest)."""

    token_id: str
    principal: str
    role: TokenRole
    created_by: str
    created_at_ms: int
    expires_at_ms: int
    last_used_at_ms: int | None
    revoked_at_ms: int | None

    @classmethod
    def from_row(cls, row: records.RowLike) -> Token:
        """Build from an `api_tokens` row."""
        values = {f.name: row[f.name] for f in dataclasses.fields(cls)}
        values["role"] = TokenRole(str(row["role"]))
        return cls(**values)


ROLES: tuple[TokenRole, ...] = tuple(TokenRole)
"""The roles, least privilege first: a route admits its least role and every one above it
(what each role may do is `domain/permissions.py`'s table)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Authenticated:
    """Who a request's token proved it is: the server derives it, no request field names it.
    `token_id` identifies the token (never the secret itself)."""

    token_id: str
    principal: str
    role: TokenRole

    def __post_init__(self) -> None:
        TokenRole(self.role)  # ValueError for a role that is not one

    def may(self, needed: TokenRole) -> bool:
        """Whether this principal's role is `needed` or above it."""
        return ROLES.index(self.role) >= ROLES.index(needed)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RequestContext:
    """One API request, recorded in the audit row its write commits with."""

    token_id: str
    client_address: str
    request_id: str
    comment: str | None = None
    """The person's comment on this write (approve, reject, settle), kept in its audit row."""

    def __post_init__(self) -> None:
        if not TOKEN_ID.fullmatch(self.token_id):
            raise errors.InvalidInput("not a token id")
        if not 0 < len(self.request_id) <= 128 or len(self.client_address) > 128:
            raise errors.InvalidInput("a request id and a client address fit 128 characters")
        if self.comment is not None:
            check_comment(self.comment)


COMMENT_MAX_CHARS: Final = 500
"""A comment's length limit (the audit table's check holds the same)."""


def check_comment(text: str) -> str:
    """A comment: one printable line of 1 to `COMMENT_MAX_CHARS` characters."""
    if not 0 < len(text) <= COMMENT_MAX_CHARS or not text.isprintable():
        raise errors.InvalidInput(
            f"comment: one printable line of 1 to {COMMENT_MAX_CHARS} characters"
        )
    return text


def typed_comment(text: str | None) -> str | None:
    """A comment as a person typed it: surrounding blanks dropped, a blank one is none, and
    anything else one line as `check_comment` holds it (the API's and the command line's)."""
    if text is None or not text.strip():
        return None
    return check_comment(text.strip())


AUDIT_PREFIX = "api."
"""`security_audit_events.kind` of an API write: `api.<operation>`."""

AUTH_FAILED: Final = "api.auth_failed"
"""`security_audit_events.kind` of a refused authentication: no principal, no token id."""

OIDC_FAILURE_REASONS: Final = frozenset(
    {
        "oidc_provider_unavailable",
        "oidc_provider_error",
        "oidc_state_unknown",
        "oidc_state_foreign",
        "oidc_code_refused",
        "oidc_no_id_token",
        "oidc_bad_signature",
        "oidc_wrong_audience",
        "oidc_expired",
        "oidc_bad_claim",
        "oidc_nonce_mismatch",
        "oidc_no_principal",
        "oidc_bad_principal",
        "oidc_no_mapped_group",
        "oidc_not_enrolled",
        "oidc_role_mismatch",
        "oidc_groups_mismatch",
    }
)
"""Why an OIDC sign-in of the operator UI was refused (docs/security.md#oidc-principals)."""
AUTH_FAILURE_REASONS: Final = frozenset({"missing", "malformed", "invalid"}) | OIDC_FAILURE_REASONS
"""Why a request did not authenticate: no credentials, not a bearer token, or a token that is
unknown, expired or revoked (never told apart); or why an OIDC sign-in was refused."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AuthFailure:
    """A refused authentication, recorded with its client and request (never the token)."""

    client_address: str
    request_id: str
    reason: str

    def __post_init__(self) -> None:
        if self.reason not in AUTH_FAILURE_REASONS:
            raise errors.InvalidInput("not a reason for a failed authentication")
        if not 0 < len(self.request_id) <= 128 or not 0 < len(self.client_address) <= 128:
            raise errors.InvalidInput("a request id and a client address fit 128 characters")


def audit_kind(operation: str) -> str:
    """The audit kind of an API write (`approve` → `api.approve`)."""
    return AUDIT_PREFIX + operation
