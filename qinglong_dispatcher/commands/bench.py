"""`bench`: the benchmark a user runs on their own hardware (docs/performance.md)."""

from __future__ import annotations

import argparse

from qinglong_dispatcher.commands import common
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import errors


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `bench`."""
    p.add_argument("--dispatches", type=int, default=5_000, metavar="N")
    p.add_argument(
        "--mixed-dispatches",
        type=int,
        metavar="N",
        help="mixed phase: 90%% run.create, 10%% tool.invoke (default --dispatches; 0 skips it)",
    )
    p.add_argument(
        "--mcp-dispatches",
        type=int,
        default=100,
        metavar="N",
        help="mixed MCP phase: 90%% run.create, 10%% mcp.call to a stdio server (0 skips it)",
    )
    p.add_argument(
        "--api-dispatches",
        type=int,
        default=1_000,
        metavar="N",
        help="API phase (edge): submitted and approved over HTTP (0 skips it)",
    )
    p.add_argument(
        "--approval-policy",
        type=int,
        default=1,
        metavar="N",
        help="policy phase: requests under a policy of N approvals beside none (0 skips it)",
    )
    p.add_argument(
        "--notify-dispatches",
        type=int,
        default=0,
        metavar="N",
        help="notification phase: N with the failure kinds subscribed and N without (0 skips)",
    )
    p.add_argument(
        "--replicas", type=int, metavar="R", help="replica processes (edge 1, cluster 4)"
    )
    p.add_argument("--scan-rows", type=int, default=1_000_000, metavar="N")
    p.add_argument("--idle-seconds", type=float, default=30.0, metavar="S")
    p.add_argument("--json", action="store_true")


async def cmd_bench(settings: Settings, args: argparse.Namespace) -> int:
    """Measure on scratch stores; print one JSON line with --json, else a short table."""
    from qinglong_dispatcher.bench import runner  # only the bench pays for its imports

    replicas = (
        args.replicas if args.replicas is not None else (4 if settings.profile == "cluster" else 1)
    )
    if settings.profile == "edge" and replicas != 1:
        raise errors.ConfigurationError("--replicas: the edge profile has one store owner (1)")
    for name, value in (("--dispatches", args.dispatches), ("--replicas", replicas)):
        if value < 1:
            raise common.UsageError(f"{name} must be at least 1")
    if args.scan_rows < 0 or args.idle_seconds <= 0:
        raise common.UsageError("--scan-rows must be ≥ 0 and --idle-seconds > 0")
    mixed = args.dispatches if args.mixed_dispatches is None else args.mixed_dispatches
    if mixed < 0:
        raise common.UsageError("--mixed-dispatches must be ≥ 0 (0 skips the mixed phase)")
    if args.mcp_dispatches < 0:
        raise common.UsageError("--mcp-dispatches must be ≥ 0 (0 skips the mixed MCP phase)")
    if args.api_dispatches < 0:
        raise common.UsageError("--api-dispatches must be ≥ 0 (0 skips the API phase)")
    if args.notify_dispatches < 0:
        raise common.UsageError("--notify-dispatches must be ≥ 0 (0 skips the phase)")
    if not 0 <= args.approval_policy <= 100:
        raise common.UsageError("--approval-policy must be 0…100 (0 skips the policy phase)")
    report = await runner.run(
        settings,
        runner.Options(
            dispatches=args.dispatches,
            mixed_dispatches=mixed,
            mcp_dispatches=args.mcp_dispatches,
            api_dispatches=args.api_dispatches,
            approval_policy=args.approval_policy,
            notify_dispatches=args.notify_dispatches,
            replicas=replicas,
            scan_rows=args.scan_rows,
            idle_seconds=args.idle_seconds,
        ),
    )
    if args.json:
        common.print_json(report)
    else:
        print(
            f"qinglong-dispatcher bench ({settings.profile}, {args.dispatches} dispatches, "
            f"{replicas} replica(s))"
        )
        print(runner.table(report))
    return common.EXIT_OK
