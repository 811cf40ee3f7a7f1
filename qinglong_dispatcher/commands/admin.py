"""Schema and store commands: `migrate`, `health`, `status`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from qinglong_dispatcher import bootstrap, clock
from qinglong_dispatcher.commands import common
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import errors


async def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    """Apply pending migrations, or only verify them with --check."""
    if args.move_to is not None:
        return await _move(settings, args)
    store = await common.open_store(settings, require_current=False, create=not args.check)
    try:
        if args.check:
            state = await store.schema_state()
            if not state.current:
                try:
                    state.require_current()
                except errors.SchemaError as exc:
                    print(f"{common.PROG}: {exc}", file=sys.stderr)
                    if args.json:
                        common.print_json({"current": False, "reason": exc.code})
                return common.EXIT_REFUSED
            _migrated(args, current=True, applied=[])
            return common.EXIT_OK
        applied = await store.migrate(now_ms=clock.SystemClock().now_ms())
        # The owner is who says which plan keys exist (docs/security.md#plans-at-rest).
        registered = await store.register_plan_keys(now_ms=clock.SystemClock().now_ms())
        if granted := await store.public_privileges():
            # Not a refusal: the schema holds without it (docs/security.md), but every login
            # can create the temporary objects a known attack on definer functions starts with.
            print(
                f"{common.PROG}: warning: every login holds {' and '.join(granted)} on this "
                f"database; revoke them: REVOKE {', '.join(granted)} ON DATABASE <db> FROM PUBLIC",
                file=sys.stderr,
            )
        _migrated(args, current=True, applied=applied, registered=registered)
        return common.EXIT_OK
    finally:
        await store.close()


async def _move(settings: Settings, args: argparse.Namespace) -> int:
    if args.check:
        raise common.UsageError("--move-to and --check: choose one")
    moved_from, members = await bootstrap.move_installation(settings, args.move_to)
    if args.json:
        common.print_json({"from": moved_from, "to": args.move_to, "members": members})
        return common.EXIT_OK
    if moved_from == args.move_to:
        print(f"the database already belongs to installation {args.move_to}")
        return common.EXIT_OK
    print(f"moved from installation {moved_from} to {args.move_to}")
    if members:
        # Roles are server-wide: which of these logins serve this database only the
        # administrator knows, so the new roles are theirs to grant.
        print(
            f"members of the {moved_from}_* roles, to grant the {args.move_to}_* role of the "
            f"same kind where they serve this database: {', '.join(members)}"
        )
    return common.EXIT_OK


def _migrated(
    args: argparse.Namespace, *, current: bool, applied: list[int], registered: Sequence[str] = ()
) -> None:
    if args.json:
        keys = {"plan_keys_registered": list(registered)} if registered else {}
        common.print_json({"current": current, "applied": applied, **keys})
    else:
        print(f"applied {len(applied)} migration(s)" if applied else "schema is current")
        if registered:
            print(f"registered plan key(s) {', '.join(registered)}")


async def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    """Counts per effective status, due backlog, oldest due age, Runs, StepRuns per state."""
    store = await common.open_store(settings)
    try:
        counts = await store.counts(now_ms=clock.SystemClock().now_ms())
    finally:
        await store.close()
    # 0 when nothing is due, exactly what the `oldest_due_age_seconds` gauge reports.
    age = (counts.oldest_due_age_ms or 0) / 1000
    executions = {status.value: n for status, n in counts.executions.items()}
    result = {
        "profile": settings.profile,
        "executions": executions,
        "due": counts.due,
        "oldest_due_age_seconds": age,
        "runs": counts.runs,
        "step_runs": dict(counts.step_runs),
        "expired_leases": {
            "count": counts.expired_leases,
            "by_owner": dict(counts.expired_lease_owners),
        },
    }
    if args.json:
        common.print_json(result)
    else:
        owners = ", ".join(f"{o}: {n}" for o, n in counts.expired_lease_owners.items())
        rows = [
            *((status, str(n)) for status, n in executions.items()),
            ("due", str(counts.due)),
            ("oldest due age", f"{age:.1f}s"),
            ("runs", str(counts.runs)),
            *((f"step_runs {state}", str(n)) for state, n in counts.step_runs.items()),
            ("expired leases", str(counts.expired_leases)),
        ]
        print(_columns(rows, note={"expired leases": f"({owners})" if owners else ""}))
    return common.EXIT_OK


def _columns(rows: list[tuple[str, str]], *, note: dict[str, str]) -> str:
    """Labels left-aligned, values right-aligned, whatever their widths; a note after a value."""
    label_width = max(len(label) for label, _ in rows)
    value_width = max(len(value) for _, value in rows)
    lines = []
    for label, value in rows:
        after = f" {note[label]}" if note.get(label) else ""
        lines.append(f"{label:<{label_width}}  {value:>{value_width}}{after}")
    return "\n".join(lines)


async def cmd_health(settings: Settings, args: argparse.Namespace) -> int:
    """Exit 0 when the store is reachable and migrated."""
    ok, reason = True, "ok"
    try:
        store = await bootstrap.open_store(settings, create=False)
        try:
            (await store.schema_state()).require_current()
        finally:
            await store.close()
    except errors.StoreError as exc:
        ok, reason = False, exc.code
    if args.json:
        common.print_json({"ok": ok, "reason": reason})
    else:
        print("ok" if ok else f"not ok: {reason}")
    return common.EXIT_OK if ok else common.EXIT_REFUSED
