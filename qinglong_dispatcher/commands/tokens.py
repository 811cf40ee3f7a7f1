"""`token create|list|revoke`: API tokens, created by the file's owner or an administrator.

`create` prints the secret once (the store keeps only its SHA-256); on PostgreSQL it runs with
the administrator URL that runs `migrate`, because it also makes the principal's role and
grants it to the API's role. `revoke` takes effect at once on the database clock.
"""

from __future__ import annotations

import argparse
import datetime
import os
import pwd

from qinglong_dispatcher import clock
from qinglong_dispatcher.commands import common
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import errors, installation, principals

DEFAULT_EXPIRES = "30d"
"""A token's lifetime when `--expires` is not given."""


def add_arguments(p: argparse.ArgumentParser, shared: argparse.ArgumentParser) -> None:
    """`token create|list|revoke`."""
    sub = p.add_subparsers(dest="token_command", metavar="STEP", required=True)
    c = sub.add_parser("create", parents=[shared], help="create a token; prints its secret once")
    c.add_argument("--principal", required=True, metavar="NAME", help="a plain identifier")
    c.add_argument(
        "--role",
        choices=[role.value for role in principals.TokenRole],
        default=principals.DEFAULT_ROLE.value,
        help="what the principal may do (default: viewer, the least)",
    )
    c.add_argument(
        "--expires",
        default=DEFAULT_EXPIRES,
        metavar="TTL",
        help=f"lifetime like 30d, 12h, 90m, at most 365d (default: {DEFAULT_EXPIRES})",
    )
    c.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="G",
        help="an approver group the principal joins (repeatable; docs/security.md)",
    )
    c.add_argument(
        "--oidc-group",
        action="append",
        default=[],
        metavar="G",
        help="enrol for OIDC sign-in: the role and approver groups QINGLONG_OIDC_FILE maps "
        "these provider groups to (repeatable; not with --role or --group; no secret shown)",
    )
    c.add_argument("--json", action="store_true")
    listing = sub.add_parser("list", parents=[shared], help="every token (never a secret)")
    listing.add_argument("--json", action="store_true")
    r = sub.add_parser("revoke", parents=[shared], help="revoke a token now")
    r.add_argument("token_id", metavar="TOKEN_ID")
    r.add_argument("--json", action="store_true")


def _who() -> str:
    """The OS user creating the token (its effective uid's name, never `$USER`)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid:{os.geteuid()}"


def _shown(token: principals.Token, groups: list[str] | None = None) -> dict[str, object]:
    shown: dict[str, object] = {
        "token_id": token.token_id,
        "principal": token.principal,
        "role": token.role.value,
        "created_by": token.created_by,
        "created_at_ms": token.created_at_ms,
        "expires_at_ms": token.expires_at_ms,
        "last_used_at_ms": token.last_used_at_ms,
        "revoked_at_ms": token.revoked_at_ms,
    }
    if groups is not None:
        shown["groups"] = groups
    return shown


def _day(ms: int | None) -> str:
    if ms is None:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="minutes").replace("+00:00", "Z")


def _state(token: principals.Token, now_ms: int) -> str:
    if token.revoked_at_ms is not None:
        return "revoked"
    return "expired" if token.expires_at_ms <= now_ms else "active"


def _print_table(
    tokens: list[principals.Token], groups: dict[str, list[str]], *, now_ms: int
) -> None:
    """One row per token, under a header; times in UTC to the minute; the principal's
    approver groups last (`-`: none)."""
    if not tokens:
        print("no tokens")
        return
    print(
        f"{'TOKEN':<20} {'PRINCIPAL':<20} {'ROLE':<9} {'STATE':<7} {'EXPIRES':<17} "
        f"{'LAST USED':<17} GROUPS"
    )
    for token in tokens:
        print(
            f"{token.token_id:<20} {token.principal:<20} {token.role.value:<9} "
            f"{_state(token, now_ms):<7} {_day(token.expires_at_ms):<17} "
            f"{_day(token.last_used_at_ms):<17} {','.join(groups.get(token.principal, [])) or '-'}"
        )


def _enrolled(settings: Settings, args: argparse.Namespace) -> tuple[str, list[str]]:
    """The role and approver groups the OIDC file maps `--oidc-group`s to (its mapping applied
    as a sign-in would apply it); refused with `--role` or `--group`, or without the file."""
    from qinglong_dispatcher.web.oidc import mapping

    if args.group or args.role != principals.DEFAULT_ROLE.value:
        raise errors.InvalidInput("--oidc-group takes the role and groups from the OIDC file")
    if settings.oidc_file is None:
        raise errors.InvalidInput("--oidc-group needs QINGLONG_OIDC_FILE")
    config = mapping.load(settings.oidc_file).mapping
    claims = {config.principal_claim: args.principal, config.groups_claim: args.oidc_group}
    try:
        admitted = config.admit(claims)
    except mapping.Refusal as exc:
        raise errors.InvalidInput(exc.detail) from None
    return admitted.role.value, list(admitted.approver_groups)


async def cmd_token(settings: Settings, args: argparse.Namespace) -> int:
    """Dispatch to the step."""
    if args.token_command == "create":
        try:
            ttl_ms = principals.parse_ttl(args.expires)
            principals.check_name(args.principal)
            if args.oidc_group:
                args.role, args.group = _enrolled(settings, args)
            groups = sorted({installation.check_group(group) for group in args.group})
        except Exception as exc:
            raise common.UsageError(f"argument: {exc}") from exc
    store = await common.open_store(settings)
    try:
        if args.token_command == "create":
            new, secret = principals.NewToken.issue(
                principal=args.principal,
                role=principals.TokenRole(args.role),
                ttl_ms=ttl_ms,
                created_by=_who(),
            )
            token = await store.create_token(new, groups=groups)
            # Enrolled for OIDC, the person signs in through the provider: no secret shown.
            shown = None if args.oidc_group else secret
            if args.json:
                common.print_json(
                    {**_shown(token, groups), **({} if shown is None else {"secret": shown})}
                )
            elif shown is None:
                print(
                    f"enrolled {token.principal} ({token.role.value}, groups "
                    f"{','.join(groups) or '-'}) for OIDC sign-in as token {token.token_id}, "
                    f"until {_day(token.expires_at_ms)}"
                )
            else:
                print(shown)
                print(
                    f"token {token.token_id} for {token.principal} ({token.role.value}), "
                    f"expires {_day(token.expires_at_ms)}; the secret above is shown once: "
                    "store it now"
                )
            return common.EXIT_OK
        if args.token_command == "list":
            tokens = await store.list_tokens()
            members = await store.approver_groups()
            if args.json:
                common.print_json([_shown(t, members.get(t.principal, [])) for t in tokens])
            else:
                _print_table(tokens, members, now_ms=clock.SystemClock().now_ms())
            return common.EXIT_OK
        revoked = await store.revoke_token(args.token_id)
    finally:
        await store.close()
    if revoked is None:
        # Echoed only when it has a token id's shape: it may hold anything.
        shown = args.token_id
        if not principals.TOKEN_ID.fullmatch(shown):
            shown = "(not a token id)"
        raise errors.TokenNotFound(f"no token {shown}")
    if args.json:
        common.print_json(_shown(revoked))
    else:
        print(f"revoked {revoked.token_id} ({revoked.principal})")
    return common.EXIT_OK
