"""`freeze add|list|end`: change freezes (docs/operations.md#freezes-and-holds). The database
decides who may write them (on PostgreSQL the schema's owner: run with the administrator URL
that runs migrate)."""

from __future__ import annotations

import argparse
import datetime

from qinglong_dispatcher import clock
from qinglong_dispatcher.commands import common
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import errors, freezes, waits


def _moment(text: str, what: str, now_ms: int) -> int:
    """Milliseconds of an ISO 8601 time with a zone, or now plus a DURATION (`4h`, `2d`)."""
    try:
        return waits.parse_moment(text, what, now_ms)
    except errors.InvalidInput as exc:
        raise common.UsageError(f"argument --{exc}") from exc


def _new(args: argparse.Namespace) -> freezes.NewFreeze:
    now_ms = clock.SystemClock().now_ms()
    from_ms = now_ms if args.from_ is None else _moment(args.from_, "from", now_ms)
    try:
        return freezes.NewFreeze(
            action_type=args.action,
            project_id=args.project,
            target_prefix=args.target_prefix,
            from_ms=from_ms,
            until_ms=_moment(args.until, "until", now_ms),
            reason=args.reason,
        ).check()
    except errors.InvalidInput as exc:
        raise common.UsageError(f"argument: {exc}") from exc


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _summary(freeze: freezes.Freeze) -> str:
    ended = "" if freeze.ended_at_ms is None else f"  ended {_when(freeze.ended_at_ms)}"
    return (
        f"{freeze.freeze_id}  {freeze.scope()}  {_when(freeze.from_ms)} … "
        f"{_when(freeze.until_ms)}  by {freeze.created_by}{ended}  {freeze.reason}"
    )


async def cmd_freeze(settings: Settings, args: argparse.Namespace) -> int:
    """Dispatch to the step."""
    step = args.freeze_command
    new = _new(args) if step == "add" else None
    store = await common.open_store(settings)
    try:
        if new is not None:
            done = await store.add_freeze(new)
        elif step == "end":
            done = await store.end_freeze(args.freeze_id)
        else:
            listed = await store.list_freezes(with_ended=args.all)
            if args.json:
                common.print_json([freeze.as_dict() for freeze in listed])
            else:
                print("\n".join(_summary(freeze) for freeze in listed) or "no freezes")
            return common.EXIT_OK
    finally:
        await store.close()
    if args.json:
        common.print_json(done.as_dict())
    else:
        print(f"{'added' if step == 'add' else 'ended'} {_summary(done)}")
    return common.EXIT_OK
