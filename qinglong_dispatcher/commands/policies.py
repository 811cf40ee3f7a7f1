"""`policy set|list|show|delete`: approval policies, each change a new version.

Only the schema's owner writes them: on PostgreSQL the login `migrate` runs with (the
database refuses any other, and the refusal is this command's one line); on SQLite the file's
owner. The database numbers each version, names its writer and time, and audits it.
"""

from __future__ import annotations

import argparse
import datetime

from qinglong_dispatcher.commands import common
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import approval_policies as policies
from qinglong_dispatcher.domain import errors, instants


def _new(args: argparse.Namespace) -> policies.NewPolicy:
    """The policy `set` asks for, checked: bad input is a usage error, nothing written."""
    try:
        lifetime = (
            None if args.lifetime is None else policies.parse_duration(args.lifetime, "lifetime")
        )
        remind = (
            None
            if args.remind_before is None
            else policies.parse_duration(args.remind_before, "reminder")
        )
        delay, window = (
            None if text is None else policies.parse_duration(text, what)
            for text, what in ((args.not_before_delay, "window delay"), (args.window, "window"))
        )
        return policies.NewPolicy(
            name=args.name,
            action_type=args.action,
            project_id=args.project,
            target_prefix=args.target_prefix,
            approvals_required=args.approvals,
            denials_to_reject=args.denials,
            approver_groups=tuple(args.groups),
            reason_required=args.reason_required,
            lifetime_ms=lifetime,
            remind_before_ms=remind,
            not_before_delay_ms=delay,
            window_ms=window,
            proceed_on_unknown=args.proceed_on_unknown,
        ).check()
    except errors.InvalidInput as exc:
        raise common.UsageError(f"argument: {exc}") from exc


def _checked_name(name: str) -> str:
    try:
        return policies.check_name(name)
    except errors.InvalidInput as exc:
        raise common.UsageError(f"argument NAME: {exc}") from exc


def _when(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _duration(ms: int | None) -> str:
    return "-" if ms is None else instants.duration(ms)


def _summary(policy: policies.Policy) -> str:
    """One line: what the version asks for."""
    groups = ",".join(policy.approver_groups) or "any approver"
    reason = " reason-required" if policy.reason_required else ""
    retired = "  retired" if policy.retired else ""
    return (
        f"{policy.name}@v{policy.version}  {policy.action_type}  "
        f"{policy.project_id or '*'}  target-prefix={policy.target_prefix or '-'}  "
        f"approvals={policy.approvals_required} "
        f"denials={policy.denials_to_reject} groups={groups}{reason} "
        f"lifetime={_duration(policy.lifetime_ms)} "
        f"remind-before={_duration(policy.remind_before_ms)} "
        f"not-before-delay={_duration(policy.not_before_delay_ms)} "
        f"window={_duration(policy.window_ms)} "
        f"on-unknown={'proceed' if policy.proceed_on_unknown else 'hold'}{retired}"
    )


async def cmd_policy(settings: Settings, args: argparse.Namespace) -> int:
    """Dispatch to the step."""
    step = args.policy_command
    new = _new(args) if step == "set" else None
    name = _checked_name(args.name) if step in ("show", "delete") else None
    store = await common.open_store(settings)
    try:
        if new is not None:
            return _written(await store.set_policy(new), args.json, "set")
        if step == "delete":
            assert name is not None
            return _written(await store.retire_policy(name), args.json, "retired")
        if step == "list":
            listed = await store.list_policies(with_retired=args.all)
            if args.json:
                common.print_json([policy.as_dict() for policy in listed])
            else:
                print("\n".join(_summary(policy) for policy in listed) or "no policies")
            return common.EXIT_OK
        assert name is not None
        versions = await store.policy_versions(name)
    finally:
        await store.close()
    if not versions:
        raise errors.PolicyNotFound(f"no approval policy {name}")
    in_force = None if versions[0].retired else versions[0]
    if args.json:
        common.print_json(
            {
                "in_force": None if in_force is None else in_force.as_dict(),
                "versions": [policy.as_dict() for policy in versions],
            }
        )
        return common.EXIT_OK
    print(_summary(versions[0]) if in_force is None else _summary(in_force))
    for policy in versions:
        state = "retired" if policy.retired else "set"
        print(
            f"  v{policy.version}  {state:<7}  {_when(policy.written_at_ms)}  {policy.written_by}"
        )
    return common.EXIT_OK


def _written(policy: policies.Policy, as_json: bool, what: str) -> int:
    if as_json:
        common.print_json(policy.as_dict())
    else:
        print(f"{what} {_summary(policy)}")
    return common.EXIT_OK
