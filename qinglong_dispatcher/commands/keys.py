"""`keys generate`, `keys rotate` and `keys check`: the plan key ring and the plans it seals.

`generate` writes a new ring (0600) or adds a key to one and makes it active; it prints key
ids, never a key. `rotate` seals every stored plan again under the active key, one bounded
transaction per batch, beside running replicas; stopped anywhere, it resumes where the
remaining plans are. `check` proves that every stored plan opens and matches its digest.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from qinglong_dispatcher import ports
from qinglong_dispatcher.bootstrap import tools
from qinglong_dispatcher.commands import common
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import errors

BATCH_MAX = 1000


def add_arguments(p: argparse.ArgumentParser, shared: argparse.ArgumentParser) -> None:
    """`keys generate|rotate|check`."""
    sub = p.add_subparsers(dest="keys_command", metavar="STEP", required=True)
    g = sub.add_parser(
        "generate", parents=[shared], help="write a new key ring (0600), or add a key to one"
    )
    g.add_argument("--out", required=True, type=Path, metavar="FILE", help="the ring file")
    g.add_argument(
        "--add", action="store_true", help="add a key to an existing ring and make it active"
    )
    g.add_argument("--json", action="store_true")
    r = sub.add_parser(
        "rotate", parents=[shared], help="seal every stored plan again under the active key"
    )
    r.add_argument(
        "--batch", type=int, default=200, metavar="N", help=f"plans per transaction, 1…{BATCH_MAX}"
    )
    r.add_argument(
        "--max-batches", type=int, metavar="N", help="stop after N batches (resume later)"
    )
    r.add_argument("--json", action="store_true")
    c = sub.add_parser("check", parents=[shared], help="prove every stored plan opens")
    c.add_argument("--json", action="store_true")


async def cmd_keys(settings: Settings, args: argparse.Namespace) -> int:
    """Dispatch to the step."""
    if args.keys_command == "generate":
        return _generate(args)
    if args.keys_command == "rotate":
        return await _rotate(settings, args)
    return await _check(settings, args)


def _generate(args: argparse.Namespace) -> int:
    active, count = tools.write_plan_keys(args.out, add=args.add)
    if args.json:
        common.print_json({"file": str(args.out), "active": active, "keys": count})
    else:
        verb = "added" if args.add else "wrote"
        print(f"{verb} key {active} ({count} key(s) in {args.out}); keep the file private")
    return common.EXIT_OK


def _require_ring(settings: Settings) -> None:
    if settings.plan_keyring_file is None:
        raise errors.ConfigurationError(
            "QINGLONG_PLAN_KEYRING_FILE: no plan key ring is configured",
            code="plan_keyring_missing",
        )


async def _rotate(settings: Settings, args: argparse.Namespace) -> int:
    _require_ring(settings)
    if not 1 <= args.batch <= BATCH_MAX:
        raise common.UsageError(f"argument --batch: must be between 1 and {BATCH_MAX}")
    if args.max_batches is not None and args.max_batches < 1:
        raise common.UsageError("argument --max-batches: must be at least 1")
    store = await common.open_store(settings)
    resealed = unreadable = batches = 0
    after: ports.PlanKey | None = None
    try:
        while True:
            batch = await store.reseal_plans(limit=args.batch, after=after)
            batches += 1
            resealed += batch.resealed
            unreadable += batch.unreadable
            after = batch.after
            if after is None or batches == args.max_batches:
                break
    finally:
        await store.close()
    result = {"resealed": resealed, "unreadable": unreadable, "remaining": batch.remaining}
    if args.json:
        common.print_json(result)
    else:
        print(
            f"resealed {resealed} plan(s); {batch.remaining} not under the active key"
            + (f", {unreadable} that do not open" if unreadable else "")
        )
    return common.EXIT_OK if unreadable == 0 else common.EXIT_REFUSED


async def _check(settings: Settings, args: argparse.Namespace) -> int:
    store = await common.open_store(settings)
    checked = clear = 0
    by_key: dict[str, int] = {}
    failed: dict[str, int] = {}
    after: ports.PlanKey | None = None
    try:
        while True:
            batch = await store.check_plans(limit=BATCH_MAX, after=after)
            checked += batch.checked
            clear += batch.clear
            for key_id, n in batch.by_key.items():
                by_key[key_id] = by_key.get(key_id, 0) + n
            for code, n in batch.failed.items():
                failed[code] = failed.get(code, 0) + n
            after = batch.after
            if after is None:
                break
    finally:
        await store.close()
    ok = not failed
    if args.json:
        common.print_json(
            {"ok": ok, "checked": checked, "clear": clear, "by_key": by_key, "failed": failed}
        )
    else:
        keys = ", ".join(f"{k}: {n}" for k, n in sorted(by_key.items())) or "none"
        print(f"{checked} plan(s): {clear} clear; sealed by key: {keys}")
        for code, n in sorted(failed.items()):
            print(f"  {n} {code}")
    return common.EXIT_OK if ok else common.EXIT_REFUSED
