"""The OIDC file (`QINGLONG_OIDC_FILE`): the provider and this client, which claim names the
principal, and which identity-provider groups give which role and which approver groups. No
mapped group, no access.

```toml
issuer = "https://idp.example.com/realms/ops"  # https (http only to a loopback address)
client_id = "qinglong"
client_secret_file = "/etc/qinglong/oidc-client-secret"  # optional: a public client without
redirect_url = "https://qinglong.example.com/ui/oidc/callback"
principal_claim = "email"          # or "sub"; never a display name
groups_claim = "groups"
[principals]                       # a claim value that is not a principal's name, renamed
"alice@example.com" = "alice"
[roles]                            # an IdP group -> viewer | submitter | approver | operator
"ops" = "operator"
[approver_groups]                  # an IdP group -> the approver groups it stands for
"release-managers" = ["release"]
```
"""

from __future__ import annotations

import dataclasses
import ipaddress
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final
from urllib import parse

from qinglong_dispatcher.domain import errors, principals

PRINCIPAL_CLAIMS: Final = ("sub", "email")
"""The claims a principal may come from: stable identifiers, never a display name."""


class Refusal(Exception):
    """An identity the mapping does not admit; `reason` is the audit row's code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Admitted:
    """What a verified identity maps to."""

    principal: str
    role: principals.TokenRole
    approver_groups: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class OidcMapping:
    """The mapping file, validated."""

    principal_claim: str
    groups_claim: str
    renamed: Mapping[str, str]
    roles: Mapping[str, principals.TokenRole]
    approver_groups: Mapping[str, tuple[str, ...]]

    def admit(self, claims: Mapping[str, object]) -> Admitted:
        """The principal, its highest mapped role and its approver groups; `Refusal` when the
        claim is missing or no principal's name, or no group of the identity is mapped."""
        value = claims.get(self.principal_claim)
        if not isinstance(value, str) or not value:
            raise Refusal("oidc_no_principal", f"the ID token has no {self.principal_claim}")
        name = self.renamed.get(value, value)
        if not principals.NAME.fullmatch(name):
            raise Refusal(
                "oidc_bad_principal",
                f"your {self.principal_claim} is not a principal's name and the mapping file"
                " renames it to none",
            )
        sent = claims.get(self.groups_claim, [])
        groups = [g for g in sent if isinstance(g, str)] if isinstance(sent, list) else []
        roles = [self.roles[g] for g in groups if g in self.roles]
        if not roles:
            raise Refusal("oidc_no_mapped_group", "none of your groups is mapped to a role")
        ranked = max(roles, key=principals.ROLES.index)
        approver = sorted({a for g in groups for a in self.approver_groups.get(g, ())})
        return Admitted(principal=name, role=ranked, approver_groups=tuple(approver))


def _strings(table: object, what: str) -> dict[str, object]:
    if not isinstance(table, dict) or not all(isinstance(k, str) for k in table):
        raise errors.InvalidInput(f"OIDC file: [{what}] must be a table")
    return dict(table)


def _mapping(data: dict[str, Any]) -> OidcMapping:
    claim = data.get("principal_claim", "sub")
    if claim not in PRINCIPAL_CLAIMS:
        raise errors.InvalidInput("OIDC file: principal_claim must be 'sub' or 'email'")
    groups_claim = data.get("groups_claim", "groups")
    if not isinstance(groups_claim, str) or not groups_claim:
        raise errors.InvalidInput("OIDC file: groups_claim must be a claim's name")
    renamed: dict[str, str] = {}
    for value, name in _strings(data.get("principals", {}), "principals").items():
        if not isinstance(name, str) or not principals.NAME.fullmatch(name):
            raise errors.InvalidInput(f"OIDC file: {value!r} is renamed to no principal name")
        renamed[value] = name
    roles: dict[str, principals.TokenRole] = {}
    for group, role in _strings(data.get("roles", {}), "roles").items():
        if role not in principals.ROLES:
            raise errors.InvalidInput(f"OIDC file: group {group!r} maps to no role")
        roles[group] = principals.TokenRole(str(role))
    approver: dict[str, tuple[str, ...]] = {}
    for group, names in _strings(data.get("approver_groups", {}), "approver_groups").items():
        if not isinstance(names, list) or not all(
            isinstance(n, str) and principals.NAME.fullmatch(n) for n in names
        ):
            raise errors.InvalidInput(f"OIDC file: {group!r} names no approver groups")
        approver[group] = tuple(str(n) for n in names)
    return OidcMapping(
        principal_claim=str(claim),
        groups_claim=groups_claim,
        renamed=renamed,
        roles=roles,
        approver_groups=approver,
    )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class OidcFile:
    """The whole OIDC file, validated."""

    issuer: str
    client_id: str
    client_secret: str | None
    redirect_url: str
    mapping: OidcMapping


_KEYS: Final = frozenset(
    {"issuer", "client_id", "client_secret_file", "redirect_url", "principal_claim",
     "groups_claim", "principals", "roles", "approver_groups"}
)  # fmt: skip


def _url(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    found = parse.urlsplit(value) if isinstance(value, str) else None
    if found is None or not found.hostname or found.scheme not in ("https", "http"):
        raise errors.InvalidInput(f"OIDC file: {key} must be an https URL")
    if found.scheme == "http":
        try:
            loopback = ipaddress.ip_address(found.hostname).is_loopback
        except ValueError:
            loopback = found.hostname == "localhost"
        if not loopback:
            raise errors.InvalidInput(f"OIDC file: {key} must be https (http only to loopback)")
    return str(value)


def parse_file(text: str, *, secret: str | None = None) -> OidcFile:
    """The OIDC file from TOML text (`secret`: the client secret file's contents, if named);
    `InvalidInput` naming the first fault."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise errors.InvalidInput(f"OIDC file: not TOML ({exc})") from None
    unknown = set(data) - _KEYS
    if unknown:
        raise errors.InvalidInput(f"OIDC file: unknown key {sorted(unknown)[0]!r}")
    client_id = data.get("client_id")
    if not isinstance(client_id, str) or not 0 < len(client_id) <= 256:
        raise errors.InvalidInput("OIDC file: client_id is required")
    return OidcFile(
        issuer=_url(data, "issuer").rstrip("/"),
        client_id=client_id,
        client_secret=secret,
        redirect_url=_url(data, "redirect_url"),
        mapping=_mapping(data),
    )


def load(path: Path) -> OidcFile:
    """The OIDC file at `path`, and its client secret file when it names one."""
    try:
        text = path.read_text(encoding="utf-8")
        named = tomllib.loads(text).get("client_secret_file")
        secret = None
        if isinstance(named, str):
            secret = (path.parent / named).read_text(encoding="utf-8").strip() or None
    except OSError as exc:
        raise errors.InvalidInput(
            f"OIDC file: cannot read {exc.filename} ({exc.strerror})"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise errors.InvalidInput(f"OIDC file: not TOML ({exc})") from None
    return parse_file(text, secret=secret)
