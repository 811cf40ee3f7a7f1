"""Our edge and cluster dispatch rates beside huey's and pgqueuer's, measured in one run, as one
table (docs/performance.md, "Beside the peers").

Ours: the bench's own enqueue and dispatch phases (`phases.enqueue`, `phases.dispatch`) on a
scratch store of each profile. The table compares steady rates on both sides (`steady`):
ours from every dispatch's completion time as the store recorded it, theirs from each peer's
harness (`harness`) in the peers' venv. The full bench's `dispatch_per_s` (the whole drain)
is reported beside ours.

Each peer runs twice: its no-op job (the queue's own cost, beside our whole `run.create`), and
its job doing equal work (a Run under a unique idempotency key, its receipt and an audit row,
in one transaction: what its user writes to get what `run.create` gives). Both kinds of rows
are in the one table, measured in the same run.

With `rounds` above one, every measurement is made again in each round, ours and the peers'
alternating, and a row shows its median round (by its ratio): each ratio pairs two figures
measured minutes apart, so a shared machine's drift between rounds (a third of a rate, run to
run) moves both sides of a ratio alike, and one round's outlier does not move the median.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread

from bench.peers import harness, installation, steady
from qinglong_dispatcher import clock
from qinglong_dispatcher.bench import phases, scratch
from qinglong_dispatcher.config.settings import Settings, load_settings
from qinglong_dispatcher.domain import dispatch_views

BATCH = 100
"""pgqueuer's second run: `batch_size=100` (its default is 10)."""
EQUAL_WORK = "equal work (its job: Run, receipt, audit row in one transaction)"
"""The rows whose peer job does what `run.create` gives, named in the table."""
LEAST_JOBS = 100
"""Fewer leave too few samples between 10 % and 90 % done to time."""
MOST_ROUNDS = 9
"""Each round is every measurement again: a few minutes with 5,000 dispatches."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Options:
    """What `python -m bench.peers` was asked to do."""

    dispatches: int = 5_000
    replicas: int = 4
    venv: Path = installation.DEFAULT_VENV
    rounds: int = 1


async def _ours(settings: Settings, count: int, replicas: int) -> dict[str, Any]:
    """Enqueue, then R replica processes drain: the full bench's dispatch phase."""
    async with scratch.scratch(settings) as made:
        enqueue_per_s = await phases.enqueue(made, count)
        dispatched = await phases.dispatch(made, count, replicas)
        completed = await _completion_times(made)
    return {
        "replicas": replicas,
        "enqueue_per_s": round(enqueue_per_s, 1),
        "steady_per_s": round(steady.steady_per_s(steady.samples_of(completed), count), 1),
        "dispatch_per_s": round(dispatched["dispatch_per_s"], 1),
        "costs_per_dispatch": dispatched["costs"],
    }


async def _completion_times(made: scratch.Scratch) -> list[int]:
    """When each dispatch completed: its execution's last change (every one succeeded, which
    `phases.dispatch` verified), read in keyset pages after the drain."""
    store = await made.open()
    try:
        times: list[int] = []
        after: dispatch_views.Cursor | None = None
        while True:
            page = await store.list_dispatches(
                dispatch_views.ListQuery(limit=dispatch_views.MAX_LIMIT, after=after),
                now_ms=clock.SystemClock().now_ms(),
            )
            times += [summary.updated_at_ms for summary in page.dispatches]
            if page.next is None:
                return times
            after = page.next
    finally:
        await store.close()


def _edge_settings() -> Settings:
    # The scratch store is a temp file of its own: this URL only names the dialect (and keeps
    # a PostgreSQL QINGLONG_DATABASE_URL of the environment out of the edge profile).
    placeholder = Path(tempfile.gettempdir()) / "qinglong-peers-edge.db"
    return load_settings(profile="edge", database_url=f"sqlite:///{placeholder}")


def _row(label: str, ours: Sequence[float], peer: Sequence[float]) -> dict[str, Any]:
    """A row over the rounds: its median round's figures (the lower middle one of an even
    count), so the row's ratio is its rates' ratio, and every round's ratio."""
    ratios = [round(o / p, 3) for o, p in zip(ours, peer, strict=True)]
    middle = ratios.index(statistics.median_low(ratios))
    return {
        "row": label,
        "ours_per_s": ours[middle],
        "peer_per_s": peer[middle],
        "ratio": ratios[middle],
        "ratios": ratios,
        "round": middle + 1,
    }


async def _round(
    settings: Settings, options: Options, python: Path
) -> tuple[dict[str, Any], dict[str, harness.PeerRun]]:
    """Ours on both profiles, then each peer's two jobs: one round of every measurement."""
    count, replicas = options.dispatches, options.replicas
    ours = {
        "edge": await _ours(_edge_settings(), count, 1),
        "cluster": await _ours(settings, count, replicas),
    }
    equal = harness.Work.EQUAL
    runs = {
        "huey": await harness.huey(python, count),
        "pgqueuer": await harness.pgqueuer(python, settings, count, batch_size=None),
        f"pgqueuer_batch_{BATCH}": await harness.pgqueuer(
            python, settings, count, batch_size=BATCH
        ),
        "huey_equal": await harness.huey(python, count, equal),
        "pgqueuer_equal": await harness.pgqueuer(
            python, settings, count, batch_size=None, work=equal
        ),
        f"pgqueuer_batch_{BATCH}_equal": await harness.pgqueuer(
            python, settings, count, batch_size=BATCH, work=equal
        ),
    }
    return ours, runs


def rows(replicas: int, rounds: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The table's six rows over `rounds` (each `{"ours": …, "peer_runs": …}` as reported)."""

    def ours(side: str) -> list[float]:
        return [r["ours"][side]["steady_per_s"] for r in rounds]

    def peer(name: str) -> list[float]:
        return [r["peer_runs"][name]["steady_per_s"] for r in rounds]

    edge, cluster = ours("edge"), ours("cluster")
    batch = f"pgqueuer_batch_{BATCH}"
    return [
        _row("edge (SQLite, `run.create`) vs huey (SqliteHuey, 1 worker)", edge, peer("huey")),
        _row(f"cluster R={replicas} (PostgreSQL) vs pgqueuer default", cluster, peer("pgqueuer")),
        _row(f"cluster R={replicas} vs pgqueuer `batch_size={BATCH}`", cluster, peer(batch)),
        _row(f"edge vs huey, {EQUAL_WORK}", edge, peer("huey_equal")),
        _row(
            f"cluster R={replicas} vs pgqueuer default, {EQUAL_WORK}",
            cluster,
            peer("pgqueuer_equal"),
        ),
        _row(
            f"cluster R={replicas} vs pgqueuer `batch_size={BATCH}`, {EQUAL_WORK}",
            cluster,
            peer(f"{batch}_equal"),
        ),
    ]


async def compare(settings: Settings, options: Options) -> dict[str, Any]:
    """Every measurement of the table, `options.rounds` times, in one run (`settings`: the
    cluster profile's)."""
    python = await anyio.to_thread.run_sync(installation.ensure, options.venv)
    by_round: list[dict[str, Any]] = []
    for _ in range(options.rounds):
        ours, runs = await _round(settings, options, python)
        by_round.append(
            {"ours": ours, "peer_runs": {name: run.report() for name, run in runs.items()}}
        )
    return {
        "dispatches": options.dispatches,
        "versions": dict(installation.PINS),
        "rounds": options.rounds,
        "rows": rows(options.replicas, by_round),
        "by_round": by_round,
    }


def table(entry: dict[str, Any]) -> str:
    """The rows as a Markdown table (dispatches or jobs per second; ratio ours / peer; over
    several rounds each row's median round, and every round's ratio)."""
    several = len(entry["rows"][0]["ratios"]) > 1 if entry["rows"] else False
    lines = (
        ["| | ours | peer | ratio | by round |", "|---|---|---|---|---|"]
        if several
        else ["| | ours | peer | ratio |", "|---|---|---|---|"]
    )
    for r in entry["rows"]:
        line = (
            f"| {r['row']} | {r['ours_per_s']:,.1f}/s | {r['peer_per_s']:,.1f}/s "
            f"| {r['ratio']:.3f} |"
        )
        if several:
            line += " " + ", ".join(f"{ratio:.2f}" for ratio in r["ratios"]) + " |"
        lines.append(line)
    return "\n".join(lines)
