"""An installation's name and the PostgreSQL role names it gives.

Roles are server-wide, so two dispatcher databases on one server that used the same role
names would share their approvers, operators and runtime. Every installation therefore
names its roles after itself (`<installation>_runtime`, …); `migrate` records the name in
the database, so every later `migrate` (and a database cloned from it) keeps it. A
database migrated before installations had names keeps the legacy name `qinglong`.

Names are unambiguous: no role of one installation (`<installation>_<kind>`, or a principal's
`<installation>_p_<principal>`, or an approver group's `<installation>_g_<group>`) can be
named like a role of another, because a new installation's name never contains `_p_` or `_g_`
nor ends with `_p`, `_g` or `_self` (`check_new_name`).
Each role the product creates carries a mark (`COMMENT ON ROLE`) naming its installation, so
a command never takes as its own a role someone else made
(`adapters/installation_roles/claims.py`).
"""

from __future__ import annotations

import re

from qinglong_dispatcher.domain import errors

LEGACY = "qinglong"
"""The installation of a database migrated before installations had names."""

KINDS = (
    "migrator",
    "runtime",
    "operator",
    "approver",
    "self_approver",
    "pruner",
    "recorder",
    "plan_reader",
    "viewer",
    "submitter",
    "api",
)
"""Every role an installation has; the migration files name them `qinglong_<kind>`. `api` is
NOINHERIT: the API's login, a member, only ever becomes a principal (`principal_role`)."""

NOINHERIT_KINDS = frozenset({"api"})

PRINCIPAL_KINDS = ("viewer", "submitter", "approver", "operator")
"""The kinds a principal's role may be a member of: exactly one, its tokens' role."""

ADMINISTRATOR_GRANTS = ("self_approver", "plan_reader")
"""The kinds an administrator may grant a principal's role beside its tokens' kind (docs:
installation.md, security.md); `token create` refuses a principal's role in any other role."""

NAME = re.compile(r"[a-z][a-z0-9_]{0,47}")
"""A plain lower-case identifier short enough that `<name>_self_approver` fits PostgreSQL's
63 bytes, and that needs no quoting anywhere it is spliced into a statement."""

_NOT_NAME = re.compile(r"[^a-z0-9_]+")


def check_name(name: str) -> str:
    """`name` if it is a valid installation name, else `ConfigurationError` (one line)."""
    if not NAME.fullmatch(name):
        raise errors.ConfigurationError(
            f"installation name {name!r} is not a lower-case identifier of at most 48 "
            "characters starting with a letter"
        )
    return name


PRINCIPAL_INFIX = "_p_"
"""What separates an installation from a principal in the principal's role name."""

GROUP_INFIX = "_g_"
"""What separates an installation from an approver group in the group's role name."""

SHARED_SUFFIXES = tuple(
    sorted({f"_{wide.removesuffix(f'_{kind}')}" for kind in KINDS for wide in KINDS
            if wide != kind and wide.endswith(f"_{kind}")})
)  # fmt: skip
"""Endings that would make `<name>_<kind>` another installation's role of a wider kind:
installation `x_self`'s approver would be `x_self_approver`, installation `x`'s self-approver."""


def ambiguity(name: str) -> str | None:
    """Why a role of installation `name` could be named like another installation's, or None.

    `<a>_p_<principal>` is a principal's role; it could be installation `b`'s role only if `b`
    extends `a` by `_p` (`x_p`'s approver is `x`'s principal `approver`) or by `_p_…`, and a
    kind role `<a>_<kind>` could be `b`'s only if `a` extends `b` by one of `SHARED_SUFFIXES`.
    The same holds for a group's role `<a>_g_<group>`. No kind starts with `p_` or `g_` or
    contains `_p_` or `_g_` (a unit test holds this), so these are all."""
    for infix in (PRINCIPAL_INFIX, GROUP_INFIX):
        if infix in name or name.endswith(infix[:-1]):
            return f"contains {infix!r} or ends with {infix[:-1]!r}"
    for suffix in SHARED_SUFFIXES:
        if name.endswith(suffix):
            return f"ends with {suffix!r}"
    return None


def check_new_name(name: str) -> str:
    """`name` if a new installation may take it (`check_name`, and no `ambiguity`), else
    `ConfigurationError`. An installation named before this rule keeps its name."""
    check_name(name)
    reason = ambiguity(name)
    if reason is not None:
        raise errors.ConfigurationError(
            f"installation name {name!r} {reason}: its roles could be named like another "
            "installation's (docs/installation.md); choose another name"
        )
    return name


MARK = "qinglong-dispatcher"
"""How the mark on a role the product created begins."""


def role_mark(installation: str, kind: str) -> str:
    """The mark `migrate` puts on the role of `kind` it creates for `installation`."""
    return f"{MARK}: {kind} role of installation {check_name(installation)}"


def principal_mark(installation: str, principal: str) -> str:
    """The mark `token create` puts on the role it creates for a principal of `installation`."""
    return f"{MARK}: principal {principal} of installation {check_name(installation)}"


def from_database_name(database: str) -> str:
    """The default installation of a new database: its name, lower-cased, other characters
    as `_` (`Shop-EU` → `shop_eu`)."""
    candidate = _NOT_NAME.sub("_", database.lower()).strip("_")
    if not NAME.fullmatch(candidate):
        raise errors.ConfigurationError(
            f"database name {database!r} gives no installation name: set QINGLONG_INSTALLATION"
        )
    return candidate


def role(installation: str, kind: str) -> str:
    """The role of `kind` in `installation` (`shop`, `runtime` → `shop_runtime`)."""
    if kind not in KINDS:
        raise ValueError(f"not a role kind: {kind!r}")
    return f"{check_name(installation)}_{kind}"


def group_role(installation: str, group: str) -> str:
    """The role whose members may vote under a policy naming approver group `group`
    (`shop`, `ops` → `shop_g_ops`; docs/security.md#approval-policies)."""
    return f"{installation}{GROUP_INFIX}{group}"


GROUP = re.compile(r"[a-z][a-z0-9_]{0,31}")
"""An approver group's name: what a policy may name (both dialects' policy triggers)."""


def check_group(group: str) -> str:
    """`group` if it is an approver group's name, else `InvalidInput`."""
    if not GROUP.fullmatch(group):
        raise errors.InvalidInput(
            f"group {group!r}: a lower-case identifier of at most 32 characters "
            "(a letter first, then letters, digits or _)"
        )
    return group


def group_prefix(installation: str) -> str:
    """How the role of every approver group of `installation` begins (`shop_g_`)."""
    return f"{check_name(installation)}{GROUP_INFIX}"


def group_mark(installation: str, group: str) -> str:
    """The mark `token create --group` puts on the group role it creates."""
    return f"{MARK}: approver group {group} of installation {check_name(installation)}"


def principal_role(installation: str, principal: str) -> str:
    """The NOLOGIN role of an API principal (`shop`, `alice` → `shop_p_alice`); the API's
    login becomes it for a request. A plain identifier that fits 63 bytes, or `ValueError`."""
    name = f"{principal_prefix(installation)}{principal}"
    if not _PRINCIPAL.fullmatch(principal) or len(name) > 63:
        raise ValueError(f"not a principal of installation {installation}: {principal!r}")
    return name


_PRINCIPAL = re.compile(r"[a-z][a-z0-9_]{0,51}")


def principal_prefix(installation: str) -> str:
    """How the role of every principal of `installation` begins (`shop_p_`)."""
    return f"{check_name(installation)}{PRINCIPAL_INFIX}"


def roles(installation: str) -> tuple[str, ...]:
    """Every role of `installation`, in `KINDS` order."""
    return tuple(role(installation, kind) for kind in KINDS)


def render(sql: str, installation: str, *, source: str = LEGACY) -> str:
    """`sql` with the role names of installation `source` made `installation`'s: a migration
    file's template names (`qinglong_runtime`, …; its checksum stays that of the file as
    shipped), or a function definition's when a database moves to another installation."""
    check_name(installation)
    names = re.compile(rf"\b{check_name(source)}_({'|'.join(KINDS)})\b")
    return names.sub(lambda match: f"{installation}_{match.group(1)}", sql)
