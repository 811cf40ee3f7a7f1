"""Installations whose names extend each other share no role, in either order.

A principal's role is `<installation>_p_<principal>`, so installation `x`'s principal
`approver` and installation `x_p`'s approver role have one name. A new installation may not
take such a name, and neither `migrate` nor `token create` takes a role it did not create (its
mark, `COMMENT ON ROLE`, says whose it is) or one with a membership it did not grant: the
refusal is one line and a non-zero exit, and no membership is granted. `x_p` is an installation
an older release named (it is the only way one still gets such a name); these tests make it as
that release did: unmarked roles, and the schema owned by its migrator.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from qinglong_dispatcher.domain import errors, installation
from tests.support import cli, stores
from tests.support.clock import START_MS

pytestmark = pytest.mark.postgres

REFUSED = 1


async def _migrate(database: str, requested: str | None = None) -> list[int]:
    store = await stores.open_postgres(stores.pg_url(database), max_size=1, installation=requested)
    try:
        return await store.migrate(now_ms=START_MS)
    finally:
        await store.close()


async def _as_an_older_release(database: str) -> None:
    """What an older release's `migrate` left before its first file: the installation's roles
    (those missing: it took any that existed), unmarked, and the schema its migrator owns."""
    conn = await asyncpg.connect(stores.pg_url(database), timeout=5)
    try:
        for role in installation.roles(database):
            if not await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", role):
                inherit = " NOINHERIT" if role.endswith("_api") else ""
                await conn.execute(f"CREATE ROLE {role} NOLOGIN{inherit}")
        await conn.execute(
            f"CREATE SCHEMA qinglong AUTHORIZATION {installation.role(database, 'migrator')}"
        )
    finally:
        await conn.close()


_MEMBERSHIPS = """
SELECT g.rolname AS role, m.rolname AS member FROM pg_auth_members AS am
JOIN pg_roles AS g ON g.oid = am.roleid JOIN pg_roles AS m ON m.oid = am.member
WHERE (g.rolname = ANY($1::text[]) OR m.rolname = ANY($1::text[]))
  AND NOT (m.rolsuper OR m.rolcreaterole)
ORDER BY 1, 2
"""
"""The memberships between the roles a test made, and of them in anything (never others')."""


async def _memberships(*names: str) -> set[tuple[str, str]]:
    roles = [role for name in names for role in installation.roles(name)]
    roles += [installation.principal_role(name, p) for name in names for p in _PRINCIPALS]
    conn = await asyncpg.connect(stores.admin_dsn(), timeout=5)
    try:
        return {(r["role"], r["member"]) for r in await conn.fetch(_MEMBERSHIPS, roles)}
    finally:
        await conn.close()


async def _mark(role: str) -> str | None:
    conn = await asyncpg.connect(stores.admin_dsn(), timeout=5)
    try:
        mark = await conn.fetchval(
            "SELECT shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = $1", role
        )
        return None if mark is None else str(mark)
    finally:
        await conn.close()


_PRINCIPALS = ("approver", "migrator", "alice")


def _token(database: str, principal: str, role: str, cwd: Path) -> Any:
    return cli.run_cli(
        "--profile", "cluster", "--database", stores.pg_url(database),
        "token", "create", "--principal", principal, "--role", role, "--json", cwd=cwd,
    )  # fmt: skip


def _migrate_cli(database: str, cwd: Path) -> Any:
    return cli.run_cli(
        "--profile", "cluster", "--database", stores.pg_url(database), "migrate", cwd=cwd
    )


def _refused(result: Any, code: int = REFUSED) -> str:
    """The one line a refused command printed (and no traceback)."""
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = cli.error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


async def _tokens(database: str) -> list[Any]:
    return await stores.raw(database, "SELECT principal FROM qinglong.api_tokens ORDER BY 1")


@contextlib.asynccontextmanager
async def _pair() -> AsyncIterator[tuple[str, str]]:
    """Installations `x` and `x_p` of this session (uniquely prefixed), their databases and
    roles and every principal role of `x` dropped afterwards."""
    principals = [installation.principal_role(stores.session_installation("x"), p) for p in
                  _PRINCIPALS]  # fmt: skip
    try:
        async with (
            stores.installation_database("x") as x,
            stores.installation_database("x_p") as x_p,
        ):
            yield x, x_p
    finally:
        await stores.drop_roles(*principals)


async def test_a_new_installation_may_not_take_a_name_that_extends_anothers(
    tmp_path: Path,
) -> None:
    async with _pair() as (x, x_p):
        await _migrate(x)
        line = _refused(_migrate_cli(x_p, tmp_path), code=78)
        assert "choose another name" in line
        with pytest.raises(errors.ConfigurationError):
            await _migrate(x_p)
        # Nothing of `x_p` was made: no role, no schema.
        assert await _memberships(x_p) == set()
        for role in installation.roles(x_p):
            assert await _mark(role) is None
        assert await stores.raw(x_p, "SELECT count(*) AS n FROM pg_namespace "
                                "WHERE nspname = 'qinglong'") == [{"n": 0}]  # fmt: skip
        # `x_self`'s approver role would be `x`'s self-approver role: refused the same way.
        async with stores.installation_database("x_self") as x_self:
            assert "choose another name" in _refused(_migrate_cli(x_self, tmp_path), code=78)
            assert await _memberships(x_self) == set()
            assert await _mark(installation.role(x, "self_approver")) == installation.role_mark(
                x, "self_approver"
            )


async def test_token_create_refuses_the_roles_of_an_installation_migrated_first(
    tmp_path: Path,
) -> None:
    async with _pair() as (x, x_p):
        await _migrate(x)
        await _as_an_older_release(x_p)
        await _migrate(x_p)  # upgraded: the older release's roles are now marked as `x_p`'s
        assert await _mark(f"{x_p}_approver") == installation.role_mark(x_p, "approver")
        before = await _memberships(x, x_p)
        for principal, role in (("approver", "approver"), ("migrator", "operator")):
            line = _refused(_token(x, principal, role, tmp_path))
            assert f"role {x_p}_{principal} exists but token create of installation {x}" in line
        assert await _memberships(x, x_p) == before
        assert (f"{x}_approver", f"{x_p}_approver") not in before
        assert await _tokens(x) == []
        # The API's login of `x` cannot become `x_p`'s migrator: the database says so itself.
        login = stores.session_login("login_of_xs_api")
        await stores.create_login(login, installation.role(x, "api"))
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await stores.as_login(stores.pg_url(x_p, login=login), f"SET ROLE {x_p}_migrator")


async def test_migrate_refuses_a_role_token_create_made_first(tmp_path: Path) -> None:
    async with _pair() as (x, x_p):
        await _migrate(x)
        made = cli.json_out(_token(x, "approver", "approver", tmp_path))
        assert made["principal"] == "approver"
        principal_role = installation.principal_role(x, "approver")
        assert principal_role == f"{x_p}_approver"
        assert await _mark(principal_role) == installation.principal_mark(x, "approver")
        # Then an older release set `x_p` up beside it (taking the role), and this one upgrades.
        await _as_an_older_release(x_p)
        before = await _memberships(x, x_p)
        line = _refused(_migrate_cli(x_p, tmp_path))
        assert f"role {x_p}_approver exists but migrate of installation {x_p}" in line
        assert await _memberships(x, x_p) == before
        assert await stores.raw(x_p, "SELECT count(*) AS n FROM pg_tables "
                                "WHERE schemaname = 'qinglong'") == [{"n": 0}]  # fmt: skip
        # `x`'s principal stays `x`'s only: a member of `x`'s approver and `x`'s API role's.
        assert {m for m in before if principal_role in m} == {
            (f"{x}_approver", principal_role),
            (principal_role, f"{x}_api"),
        }


async def test_an_older_releases_principal_role_is_kept_only_with_its_evidence(
    tmp_path: Path,
) -> None:
    async with _pair() as (x, x_p):
        await _migrate(x)
        alice = installation.principal_role(x, "alice")
        approver = installation.principal_role(x, "approver")
        cli.json_out(_token(x, "alice", "viewer", tmp_path))
        cli.json_out(_token(x, "approver", "approver", tmp_path))
        # As an older release left them: unmarked. Alice's is taken again (and marked) ...
        await stores.raw(x, f"COMMENT ON ROLE {alice} IS NULL")
        cli.json_out(_token(x, "alice", "viewer", tmp_path))
        assert await _mark(alice) == installation.principal_mark(x, "alice")
        # ... `approver`'s is not once an installation `x_p` exists, whose approver it could be.
        await stores.raw(x, f"COMMENT ON ROLE {approver} IS NULL")
        await _as_an_older_release(x_p)
        before = await _memberships(x, x_p)
        line = _refused(_token(x, "approver", "approver", tmp_path))
        assert f"role {approver} exists but token create" in line
        assert await _memberships(x, x_p) == before
        assert [t["principal"] for t in await _tokens(x)] == ["alice", "alice", "approver"]


async def test_neither_command_takes_a_role_an_administrator_made(tmp_path: Path) -> None:
    async with _pair() as (x, _):
        await _migrate(x)
        # A role named like `x`'s principal alice, made by hand: never adopted.
        alice = installation.principal_role(x, "alice")
        await stores.raw(x, f"CREATE ROLE {alice} NOLOGIN")
        before = await _memberships(x)
        assert "token create of installation" in _refused(_token(x, "alice", "viewer", tmp_path))
        assert await _memberships(x) == before
        assert await _mark(alice) is None
        assert await _tokens(x) == []
        # A new installation whose runtime role an administrator made: nothing is created.
        async with stores.installation_database("y") as y:
            runtime = installation.role(y, "runtime")
            await stores.raw(y, f"CREATE ROLE {runtime} NOLOGIN")
            line = _refused(_migrate_cli(y, tmp_path))
            assert f"role {runtime} exists but migrate of installation {y}" in line
            assert await _memberships(y) == set()
            names = ", ".join(f"'{role}'" for role in installation.roles(y))
            made = await stores.raw(y, f"SELECT rolname FROM pg_roles WHERE rolname IN ({names})")
            assert [r["rolname"] for r in made] == [runtime]


@pytest.mark.slow
async def test_neither_command_takes_a_role_with_a_membership_it_did_not_grant(
    tmp_path: Path,
) -> None:
    async with _pair() as (x, _):
        await _migrate(x)
        cli.json_out(_token(x, "alice", "approver", tmp_path))
        alice = installation.principal_role(x, "alice")
        # What an administrator may grant a principal beside its kind (self-approval) stays.
        await stores.raw(x, f"GRANT {installation.role(x, 'self_approver')} TO {alice}")
        cli.json_out(_token(x, "alice", "approver", tmp_path))
        outsider = stores.session_login("outsider")
        await stores.create_login(outsider, alice)
        before = await _memberships(x)
        line = _refused(_token(x, "alice", "approver", tmp_path))
        assert f"membership with {outsider}" in line
        assert await _memberships(x) == before
        await stores.raw(x, f"REVOKE {alice} FROM {outsider}")
        runtime = installation.role(x, "runtime")
        # PostgreSQL's predefined roles are no installation's: an administrator may grant them.
        await stores.raw(x, f"GRANT pg_read_all_stats TO {runtime}")
        assert _migrate_cli(x, tmp_path).returncode == 0
        # A role of the installation made a member of a role it did not grant: `migrate` stops.
        await stores.raw(x, f"GRANT {outsider} TO {runtime}")
        before = await _memberships(x)
        line = _refused(_migrate_cli(x, tmp_path))
        assert f"role {runtime} is a member of {outsider}, which installation {x} did not" in line
        assert await _memberships(x) == before


async def test_a_role_an_older_release_let_two_installations_share_stops_the_next_migrate(
    tmp_path: Path,
) -> None:
    async with _pair() as (x, x_p):
        await _migrate(x)
        cli.json_out(_token(x, "approver", "approver", tmp_path))
        shared = installation.principal_role(x, "approver")
        # As an older release left it: `x`'s principal role unmarked, and `x_p` took it as its
        # approver role when it was set up beside `x`.
        await stores.raw(x, f"COMMENT ON ROLE {shared} IS NULL")
        await _as_an_older_release(x_p)
        before = await _memberships(x, x_p)
        line = _refused(_migrate_cli(x_p, tmp_path))
        assert f"role {shared} is a member of {x}_approver, which installation {x_p}" in line
        assert await _memberships(x, x_p) == before
        assert await _mark(shared) is None
        # The way out docs/security.md gives: revoke it, then `x_p` upgrades.
        await stores.raw(x, f"REVOKE {x}_approver FROM {shared}")
        await stores.raw(x, f"REVOKE {shared} FROM {x}_api")
        assert _migrate_cli(x_p, tmp_path).returncode == 0
        assert await _mark(shared) == installation.role_mark(x_p, "approver")
