"""`python -m bench.peers`: our edge and cluster dispatch rates beside the peers', one table
(one JSON line under `peers` with --json), run from a checkout with the dispatcher installed.

    python -m bench.peers --database postgresql://… [--replicas 4] [--dispatches 5000]
        [--peers-venv DIR] [--json]

Exit codes and error lines as the dispatcher's own commands: 2 usage, 78 configuration, 69
the server unreachable, 1 any other refusal (a peer that failed).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from bench.peers import compare, installation
from qinglong_dispatcher import cli
from qinglong_dispatcher.commands import common
from qinglong_dispatcher.config.settings import Settings, load_settings
from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.lifecycle import logging as log_setup

PROG = "python -m bench.peers"


def build_parser() -> argparse.ArgumentParser:
    """The options: the cluster's administrator URL, the counts, the peers' venv."""
    p = argparse.ArgumentParser(
        prog=PROG, description="our dispatch rates beside huey's and pgqueuer's, one table"
    )
    p.add_argument(
        "--database",
        metavar="URL",
        help="the PostgreSQL administrator URL (default $QINGLONG_DATABASE_URL): pgqueuer and "
        "our cluster side run on that server; the edge side takes a scratch SQLite file",
    )
    p.add_argument("--dispatches", type=int, default=5_000, metavar="N")
    p.add_argument("--replicas", type=int, default=4, metavar="R", help="cluster replicas (4)")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        metavar="K",
        help=f"measure everything K times, alternating, and show each row's median round "
        f"(1–{compare.MOST_ROUNDS}; 1)",
    )
    p.add_argument(
        "--peers-venv",
        type=Path,
        metavar="DIR",
        help="the peers' venv (default $QINGLONG_BENCH_PEERS_VENV, else var/peers-venv)",
    )
    p.add_argument("--json", action="store_true")
    return p


async def run(settings: Settings, args: argparse.Namespace) -> int:
    """Measure both sides and the peers; print the table (or one JSON line)."""
    if args.replicas < 1:
        raise common.UsageError("--replicas must be at least 1")
    if not 1 <= args.rounds <= compare.MOST_ROUNDS:
        raise common.UsageError(f"--rounds must be 1–{compare.MOST_ROUNDS}")
    if args.dispatches < compare.LEAST_JOBS:
        raise common.UsageError(
            f"--dispatches must be ≥ {compare.LEAST_JOBS} (the peers' steady rate is timed "
            "between 10 % and 90 % done)"
        )
    entry = await compare.compare(
        settings,
        compare.Options(
            dispatches=args.dispatches,
            replicas=args.replicas,
            venv=installation.venv_folder(args.peers_venv),
            rounds=args.rounds,
        ),
    )
    if args.json:
        common.print_json({"peers": entry})
    else:
        pins = ", ".join(f"{name} {version}" for name, version in entry["versions"].items())
        rounds = "" if args.rounds == 1 else f", {args.rounds} rounds: medians"
        print(f"{PROG} ({args.dispatches} dispatches{rounds}; {pins})")
        print(compare.table(entry))
    return common.EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, load the cluster profile's settings, run; every typed error is one line."""
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings(profile="cluster", database_url=args.database)
        log_setup.configure(log_format=settings.log_format, level=settings.log_level)
        return anyio.run(run, settings, args)
    except common.UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return common.EXIT_USAGE
    except errors.QinglongError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return cli.exit_code_for(exc)
    except KeyboardInterrupt:
        return cli.EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
