"""Recovery commands: `recovery list` and the audited `recovery resolve`."""

from __future__ import annotations

import argparse
import datetime

from qinglong_dispatcher import clock
from qinglong_dispatcher.commands import common
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import states, uncertainty
from qinglong_dispatcher.usecases import resolving


def _iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).isoformat(
        timespec="milliseconds"
    )


async def cmd_recovery(settings: Settings, args: argparse.Namespace) -> int:
    """List or manually resolve recovery_required executions."""
    store = await common.open_store(settings)
    the_clock = clock.SystemClock()
    try:
        if args.recovery_command == "resolve":
            await resolving.resolve_manually(
                store,
                the_clock,
                args.dispatch_id,
                resolution=states.Completion(args.resolution),
                operator=args.operator,
                reason=args.reason,
                comment=args.comment,
            )
            if args.json:
                common.print_json(
                    {
                        "dispatch_id": args.dispatch_id,
                        "resolution": args.resolution,
                        "operator": args.operator,
                        "reason": args.reason,
                    }
                )
            else:
                print(f"{args.dispatch_id} resolved as {args.resolution}")
            return common.EXIT_OK
        rows: list[dict[str, object]] = []
        after = None
        while True:
            page = await store.list_recovery_required(
                now_ms=the_clock.now_ms(), limit=64, after=after
            )
            for snap in page:
                obs = snap.observation
                rows.append(
                    {
                        "dispatch_id": snap.dispatch.dispatch_id,
                        "action_type": snap.dispatch.action_type,
                        "since": _iso(snap.since_ms),
                        "last_observation": None
                        if obs is None
                        else {
                            "outcome": obs.outcome.value,
                            "reason": obs.reason_code,
                            "count": obs.count,
                            "at": _iso(obs.last_seen_at_ms),
                            "verdict": uncertainty.observation_verdict(obs),
                        },
                    }
                )
            if len(page) < 64:
                break
            after = (page[-1].since_ms, page[-1].dispatch.dispatch_id)
    finally:
        await store.close()
    if args.json:
        common.print_json(rows)
    elif not rows:
        print("nothing is recovery_required")
    else:
        for row in rows:
            last = row["last_observation"]
            # The words, not the code: `missing` alone reads as "the effect did not happen".
            seen = last["verdict"] if isinstance(last, dict) else "never reconciled"
            print(f"{row['dispatch_id']}  {row['action_type']}  since {row['since']}  {seen}")
    return common.EXIT_OK
