"""Token transactions (create, list, revoke, authenticate) and the audit row of an API write.

Times are the database's clock, written by the statements: a token expires and a revocation
takes effect on that clock, at once, whatever the caller's clock says. The secret never
reaches the database: the statements bind its SHA-256.
"""

from __future__ import annotations

from collections.abc import Sequence

from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.domain import errors, principals


async def live_roles(q: query.Query, principal: str) -> set[principals.TokenRole]:
    """The roles of the principal's tokens that still authenticate."""
    rows = await q.all("live_token_roles", {"principal": principal})
    return {principals.TokenRole(str(row["role"])) for row in rows}


async def get(q: query.Query, token_id: str) -> principals.Token | None:
    """One token (never its digest)."""
    row = await q.one("select_token", {"token_id": token_id})
    return None if row is None else principals.Token.from_row(row)


async def create(q: query.Query, new: principals.NewToken) -> principals.Token:
    """Insert a token; refused while the principal holds a live token of another role (a
    principal has one role: on PostgreSQL its role is a member of exactly that kind)."""
    other = await live_roles(q, new.principal) - {new.role}
    if other:
        raise errors.TokenRefused(
            f"principal {new.principal} holds live {sorted(other)[0]} tokens: revoke them "
            f"before giving it the role {new.role.value}"
        )
    await q.run(
        "insert_token",
        {
            "token_id": new.token_id,
            "secret_sha256": new.secret_sha256,
            "principal": new.principal,
            "role": new.role.value,
            "created_by": new.created_by,
            "ttl_ms": new.ttl_ms,
        },
    )
    created = await get(q, new.token_id)
    assert created is not None
    return created


async def join_groups(q: query.Query, principal: str, groups: Sequence[str]) -> None:
    """SQLite: `principal` is a member of each approver group (PostgreSQL grants roles)."""
    for group in groups:
        await q.run("insert_group_member", {"group_name": group, "principal": principal})


async def group_members(q: query.Query) -> dict[str, list[str]]:
    """Each principal's approver groups, as the file holds them (SQLite)."""
    found: dict[str, list[str]] = {}
    for row in await q.all("group_members"):
        found.setdefault(str(row["principal"]), []).append(str(row["group_name"]))
    return found


async def list_tokens(q: query.Query) -> list[principals.Token]:
    """Every token, oldest first (revoked and expired ones too)."""
    return [principals.Token.from_row(row) for row in await q.all("select_tokens")]


async def revoke(q: query.Query, token_id: str) -> principals.Token | None:
    """Revoke a token now (a revoked one stays as it was), and every UI session opened with it
    in the same transaction; None when there is no such token."""
    await q.run("revoke_token", {"token_id": token_id})
    await q.run("revoke_token_ui_sessions", {"token_id": token_id})
    return await get(q, token_id)


async def find_live(q: query.Query, secret: str) -> tuple[principals.Authenticated, bool] | None:
    """The principal and role of a live token with this secret, and whether its recorded last
    use is over a minute old; None for anything else (unknown, revoked, expired, malformed) —
    the caller learns nothing more. A read: a request writes only when its last use is stale."""
    if not principals.SECRET.fullmatch(secret):
        return None
    row = await q.one("authenticate_token", {"secret_sha256": principals.digest(secret)})
    if row is None:
        return None
    found = principals.Authenticated(
        token_id=str(row["token_id"]),
        principal=str(row["principal"]),
        role=principals.TokenRole(str(row["role"])),
    )
    return found, bool(row["stale"])


async def touch(q: query.Query, token_id: str) -> None:
    """Move a token's last use to now (at most once a minute)."""
    await q.run("touch_token", {"token_id": token_id})


async def record_refusal(
    q: query.Query, failure: principals.AuthFailure, *, principal: str
) -> None:
    """The audit row of a refused authentication, by the login that refused it (on PostgreSQL
    the statement writes the acting principal itself and ignores `principal`)."""
    await q.run(
        "insert_request_audit",
        {
            "kind": principals.AUTH_FAILED,
            "actor": "api",
            "principal": principal,
            "project_id": "-",
            "subject_id": "api",
            "detail_code": failure.reason,
            "token_id": None,
            "client_address": failure.client_address,
            "request_id": failure.request_id,
            "comment": None,
        },
    )


async def record_request(
    q: query.Query,
    context: principals.RequestContext | None,
    *,
    principal: str | None,
    operation: str,
    actor: str,
    project_id: str,
    subject_id: str,
    detail_code: str,
) -> None:
    """The audit row of an API write, in the caller's transaction; nothing without a request.

    On PostgreSQL the statement writes the acting principal itself and ignores `principal`."""
    if context is None:
        return
    await q.run(
        "insert_request_audit",
        {
            "kind": principals.audit_kind(operation),
            "actor": actor,
            "principal": principal,
            "project_id": project_id,
            "subject_id": subject_id,
            "detail_code": detail_code[:128],
            "token_id": context.token_id,
            "client_address": context.client_address,
            "request_id": context.request_id,
            "comment": context.comment,
        },
    )
