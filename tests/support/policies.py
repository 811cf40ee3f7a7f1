"""A quorum policy over a served API, as the schema's owner writes one: `two` asks run.create
for 2 approvals from one group of three approvers (bob and two more tokens, dan and erin);
alice is an approver outside it. On PostgreSQL the group is the role `<installation>_g_<group>`
granted to the token principals' roles; on SQLite, the file's `approval_group_members`."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator

import asyncpg

from qinglong_dispatcher.domain import principals
from tests.support import stores
from tests.support.api_writes import Served

_NUMBERS = itertools.count()
VOTERS = ("bob", "dan", "erin")
"""The group's members: bob's token is the served one's, dan's and erin's are made here."""


@contextlib.asynccontextmanager
async def two_of_three(it: Served, *, denials: int = 1) -> AsyncIterator[str]:
    """Policy `two` in force, its group of `VOTERS`; the group's name. Dropped after."""
    number = next(_NUMBERS)
    for who in VOTERS[1:]:
        name = stores.session_principal(f"{who}v{number}")
        new, secret = principals.NewToken.issue(
            principal=name, role=principals.TokenRole.APPROVER, ttl_ms=3_600_000, created_by="t"
        )
        await it.admin.create_token(new)
        it.names[who], it.secrets[who], it.token_ids[who] = name, secret, new.token_id
    group = f"ops_{stores.session_login(f'g{number}').removeprefix('qlt_')}"
    members = [it.names[who] for who in VOTERS]
    if it.harness.dialect == "sqlite":
        await it.harness.raw(
            "INSERT INTO approval_policies (name, version, action_type, approvals_required, "
            "denials_to_reject, approver_groups, written_by) VALUES "
            f"('two', 1, 'run.create', 2, {denials}, '[\"{group}\"]', 'owner')"
        )
        rows = ", ".join(f"('{group}', '{m}')" for m in members)
        await it.harness.raw(
            f"INSERT INTO approval_group_members (group_name, principal) VALUES {rows}"
        )
        yield group
        return
    role = f"{stores.INSTALLATION}_g_{group}"
    conn = await asyncpg.connect(stores.admin_dsn(), timeout=5)
    try:
        await conn.execute(f"CREATE ROLE {role} NOLOGIN")
        for member in members:
            await conn.execute(f"GRANT {role} TO {stores.INSTALLATION}_p_{member}")
    finally:
        await conn.close()
    await it.harness.raw(
        "INSERT INTO qinglong.approval_policies (name, action_type, approvals_required, "
        f"denials_to_reject, approver_groups) VALUES ('two', 'run.create', 2, {denials}, "
        f"'{{{group}}}')"
    )
    try:
        yield group
    finally:
        await stores.drop_roles(role)
