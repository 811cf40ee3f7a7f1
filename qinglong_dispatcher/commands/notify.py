"""`notify add|list|test|remove`: where the notification outbox is delivered.

Only the schema's owner writes subscriptions, as with policies: on PostgreSQL the login
`migrate` runs with (the database refuses any other, and the refusal is this command's one
line); on SQLite the file's owner. `test` reads the subscription's secret by its reference in
this process's environment and posts one signed sample event, recorded nowhere.
"""

from __future__ import annotations

import argparse

from qinglong_dispatcher.actions import secrets
from qinglong_dispatcher.commands import common
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import notifications as n


def _new(args: argparse.Namespace) -> n.Subscription:
    """The subscription `add` asks for, checked: bad input is a usage error, nothing written."""
    try:
        return n.Subscription(
            name=args.name,
            url=args.url,
            secret_ref=args.secret_ref,
            kinds=tuple(dict.fromkeys(args.kinds)) or n.DEFAULT_KINDS,
            action_type=args.action,
            project_id=args.project,
            target_prefix=args.target_prefix,
            format=args.format,
        ).check()
    except n.SubscriptionInvalid as exc:
        raise common.UsageError(f"argument: {exc}") from exc


def _summary(sub: n.Subscription) -> str:
    kinds = "default" if sub.kinds == n.DEFAULT_KINDS else ",".join(sub.kinds)
    return (
        f"{sub.name}  {sub.url}  secret={sub.secret_ref}  kinds={kinds}  "
        f"action={sub.action_type or '*'}  project={sub.project_id or '*'}  "
        f"target={sub.target_prefix + '*' if sub.target_prefix else '*'}  format={sub.format}"
    )


async def _test(sub: n.Subscription, as_json: bool, ui_base: str | None) -> int:
    from qinglong_dispatcher.notifying import samples

    try:
        key = samples.key_of(sub)
    except (ValueError, secrets.SecretUnavailable, n.SubscriptionInvalid) as exc:
        raise common.UsageError(f"subscription {sub.name}: {exc}") from None
    sent = await samples.post(sub, key, ui_base=ui_base)
    if as_json:
        common.print_json(
            {
                "name": sub.name,
                "webhook_id": sent.webhook_id,
                "status": sent.code,
                "error": sent.error_code,
                "latency_ms": sent.latency_ms,
                "delivered": sent.delivered,
            }
        )
    else:
        answer = sent.code if sent.code is not None else sent.error_code
        print(f"{sub.name}: {sent.webhook_id} answered {answer} in {sent.latency_ms} ms")
    return common.EXIT_OK if sent.delivered else common.EXIT_REFUSED


async def cmd_notify(settings: Settings, args: argparse.Namespace) -> int:
    """Dispatch to the step."""
    step = args.notify_command
    new = _new(args) if step == "add" else None
    store = await common.open_store(settings)
    try:
        if new is not None:
            written = await store.add_subscription(new)
            if args.json:
                common.print_json(written.as_dict())
            else:
                print(f"added {_summary(written)}")
            return common.EXIT_OK
        if step == "list":
            listed = await store.list_subscriptions()
            if args.json:
                common.print_json([sub.as_dict() for sub in listed])
            else:
                print("\n".join(_summary(sub) for sub in listed) or "no subscriptions")
            return common.EXIT_OK
        found = await store.get_subscription(args.name)
        if found is None:
            raise n.SubscriptionNotFound(f"no subscription {args.name}")
        if step == "remove":
            await store.remove_subscription(args.name)
            if args.json:
                common.print_json({"removed": args.name})
            else:
                print(f"removed {args.name}")
            return common.EXIT_OK
    finally:
        await store.close()
    return await _test(found, args.json, settings.public_url)
