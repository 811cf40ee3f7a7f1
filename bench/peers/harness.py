"""One peer's run: its script under the peers' venv's Python, on a scratch store of its own (a
temp SQLite file for huey; for pgqueuer a scratch database on the bench's PostgreSQL server,
created and dropped like ours, pass or fail). Each peer runs either of two jobs (`Work`): a
no-op, or the equal work of our `run.create` (a Run under a unique idempotency key, its
receipt and an audit row, in one transaction), which its script counts after the drain."""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import anyio

from bench.peers import steady
from qinglong_dispatcher.bench import dialects
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import errors

SCRIPTS = Path(__file__).resolve().parent / "scripts"
RUN_TIMEOUT_S = 900


class Work(enum.Enum):
    """What a peer's job does (the scripts' WORK argument)."""

    NOOP = "noop"
    """Nothing: the queue's own cost per job."""
    EQUAL = "equal"
    """What the peer's user writes to get what `run.create` gives: a Run under a unique
    idempotency key, its receipt and an audit row, in one transaction."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PeerRun:
    """What one peer run measured."""

    jobs: int
    work: Work
    enqueue_per_s: float
    steady_per_s: float
    """Completions per second between 10 % and 90 % done (`steady`)."""
    drain_s: float
    """From the worker's start to the last completion seen."""
    verified: dict[str, int] | None = None
    """Equal work: the rows counted after the drain (one of each per job, else the run failed)."""

    def report(self) -> dict[str, Any]:
        """The run's figures for `--json`."""
        return {
            "jobs": self.jobs,
            "work": self.work.value,
            "verified": self.verified,
            "enqueue_per_s": round(self.enqueue_per_s, 1),
            "steady_per_s": round(self.steady_per_s, 1),
            "drain_s": round(self.drain_s, 3),
        }


def _env(extra: dict[str, str]) -> dict[str, str]:
    # The peers read none of our variables; a venv of ours must not leak into theirs.
    drop = ("QINGLONG_", "VIRTUAL_ENV", "PYTHONHOME", "NOTIFY_SOCKET")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(drop)}, **extra}


async def _script(
    python: Path, peer: str, work: Work, args: list[str], extra: dict[str, str]
) -> PeerRun:
    script = SCRIPTS / f"{peer}_peer.py"
    with anyio.fail_after(RUN_TIMEOUT_S):
        done = await anyio.run_process(
            [str(python), str(script), args[0], work.value, *args[1:]],
            env=_env(extra),
            check=False,
        )
    if done.returncode != 0:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no message"]
        raise errors.StoreError(
            f"the {peer} peer failed: {lines[-1][:200]}", code="bench_peer_failed"
        )
    figures = json.loads(done.stdout.decode("utf-8").strip().splitlines()[-1])
    samples, jobs = figures["samples"], int(figures["jobs"])
    try:
        rate = steady.steady_per_s(samples, jobs)
    except ValueError as exc:
        raise errors.StoreError(f"the {peer} peer: {exc}", code="bench_peer_failed") from None
    verified = figures.get("verified")
    if work is Work.EQUAL and verified != dict.fromkeys(("runs", "receipts", "audit"), jobs):
        # The scripts fail on a short count themselves; this keeps a script that did not count
        # from passing for one that did.
        raise errors.StoreError(
            f"the {peer} peer's equal work was not verified", code="bench_peer_failed"
        )
    return PeerRun(
        jobs=jobs,
        work=work,
        verified=verified,
        enqueue_per_s=float(figures["enqueue_per_s"]),
        steady_per_s=rate,
        drain_s=float(samples[-1][0]),
    )


async def huey(python: Path, jobs: int, work: Work = Work.NOOP) -> PeerRun:
    """SqliteHuey on a temp file, its consumer with one worker (its default); equal work's
    tables on another temp file, the application's."""
    with tempfile.TemporaryDirectory(prefix="qinglong-peers-") as tmp:
        files = {"HUEY_PEER_FILE": f"{tmp}/huey.db", "HUEY_PEER_APP_FILE": f"{tmp}/app.db"}
        return await _script(python, "huey", work, [str(jobs)], files)


async def pgqueuer(
    python: Path,
    settings: Settings,
    jobs: int,
    *,
    batch_size: int | None,
    work: Work = Work.NOOP,
) -> PeerRun:
    """pgqueuer on a scratch database of `settings`' server: its defaults, or `batch_size`
    (equal work's tables in the same database)."""
    tail = [] if batch_size is None else [str(batch_size)]
    async with dialects.of(settings).scratch_database() as url:
        return await _script(python, "pgqueuer", work, [str(jobs), *tail], {"PEER_DSN": url})
