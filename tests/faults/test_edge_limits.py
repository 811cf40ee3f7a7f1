"""The edge daemon under its limits: memory the kernel caps, a quarter core.

The real `run` daemon, edge profile, runs in a cgroup with the unit's `MemoryMax=96M` (no
swap) and a CPU quota of 25 ms per 100 ms (`tests.support.edge_limits`), while this process
submits `run.create` dispatches through the API on its own connection at a steady rate. At
five moments drawn from a seeded RNG the daemon is SIGKILLed and, as `Restart=on-failure`
would, started again. Then the backlog drains and:

- the daemon's RSS never went over the limit, and the kernel OOM-killed nothing;
- 0 duplicates and 0 lost, checked over the whole ledger as it was written (the daemon
  prunes it as it goes; `tests.support.ledger_witness`): one `→ executing` line per
  dispatch, one Run each with a receipt naming it and the started attempt, every ledger whole
  and ending `succeeded`, nothing in the file that was not submitted;
- `PRAGMA integrity_check` is `ok`;
- retention keeps the file bounded: the finished trees in the file never exceed what the
  retention window holds, and the file grows only by the Runs (kept: they are business data).

Production profile except the cadences: the edge cadence (5 s, at most 4 pages of 16 a
tick) caps the daemon at 12.8 dispatches/s, so the dispatch cadence is 0.25 s (256/s at
most) and the reconcile pass (which prunes) runs every 2.5 s with a 10 s retention; page
size, concurrency, lease (30 s), pragmas and everything else are the profile's (the log
level is `warning`: its lines go to a file per daemon life).

The kill moments are drawn first; at each, the kill waits for the daemon to be ready and
then at work (a thread running, `edge_limits.busy`), so that kills land inside ticks and page
transactions rather than in the sleep between ticks.

Slow: `DISPATCHES` at `RATE` per second in `make test-slow` (25 s of submitting, ≈ 50 s in all);
`QINGLONG_EDGE_LIMITS_DISPATCHES=100000` runs 100,000 dispatches (docs/performance.md);
`QINGLONG_EDGE_LIMITS_SEED` picks other kill moments.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from qinglong_dispatcher import api, clock
from qinglong_dispatcher.domain import errors
from tests.support import edge_limits, ledger_witness, stores
from tests.support.actions import make_api
from tests.support.cli import SCRIPT, run_cli
from tests.support.daemon import clean_env, free_port, ready, wait_until

DISPATCHES = int(os.environ.get("QINGLONG_EDGE_LIMITS_DISPATCHES") or 2_500)
RATE = float(os.environ.get("QINGLONG_EDGE_LIMITS_RATE") or 100)
"""Dispatches submitted per second, in batches of `BATCH`."""
SEED = int(os.environ.get("QINGLONG_EDGE_LIMITS_SEED") or 15)
KILLS = 5
BATCH = 10
RESTART_S = 1.0
"""Between a kill and the restart (the unit says `RestartSec=5`; shorter keeps the test short)."""
RETENTION_S = 10.0
RECONCILE_S = 2.5
LEASE_S = 10.0
"""A page the killed daemon had claimed waits this long for a new owner (the profile says
30 s; a third keeps the test short and still outlasts every page a life takes)."""
BUSY_WAIT_S = 2.0
"""A kill waits at most this long for the ready daemon to be at work (a tick, a prune)."""
WITNESS_S = 0.5
SIZE_EVERY_S = 2.0
LIMITS = edge_limits.Limits()
SUBMIT_S = DISPATCHES / RATE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(SUBMIT_S * 2 + 300))]


@dataclasses.dataclass(frozen=True)
class Sample:
    """The file as the witness saw it at one moment."""

    submitted: int
    trees: int
    db_bytes: int
    wal_bytes: int


def _kill_moments(rng: random.Random) -> list[float]:
    """Seconds into the submitting: one in each of `KILLS` slots over its first half, each at
    least a second after the previous restart (a kill may still meet a daemon starting up),
    so that the last kill's stranded page is taken over before long after the last submit."""
    slot = 0.45 * SUBMIT_S / KILLS
    spare = slot - (RESTART_S + 1)
    assert spare > 0, f"{DISPATCHES} dispatches at {RATE}/s leave no room for {KILLS} kills"
    return [0.05 * SUBMIT_S + i * slot + rng.uniform(0, spare) for i in range(KILLS)]


def _env(port: int) -> dict[str, str]:
    days = RETENTION_S / 86_400
    return clean_env(
        {
            "QINGLONG_CADENCE_SECONDS": "0.25",
            "QINGLONG_RECONCILE_SECONDS": str(RECONCILE_S),
            "QINGLONG_RETENTION_DAYS": f"{days:.9f}",
            "QINGLONG_AUDIT_RETENTION_DAYS": f"{days:.9f}",
            "QINGLONG_LEASE_SECONDS": str(LEASE_S),
            "QINGLONG_METRICS_PORT": str(port),
            "QINGLONG_LOG_LEVEL": "warning",
        }
    )


class Supervisor:
    """What systemd does for the unit: start the daemon in its cgroup, restart it when killed."""

    def __init__(self, group: edge_limits.Cgroup, sampler: edge_limits.Sampler, path: Path):
        self._group = group
        self._sampler = sampler
        self._path = path
        self.lives: list[subprocess.Popen[bytes]] = []
        self.at_work = 0
        """Kills that met the daemon running (not asleep between ticks)."""
        self.port = 0
        """The current life's metrics and health listener."""

    def start(self) -> None:
        argv = [str(SCRIPT), "--profile", "edge", "--database", f"sqlite:///{self._path}", "run"]
        log = self._path.with_name(f"daemon-{len(self.lives)}.log")
        self.port = free_port()
        with log.open("wb") as stderr:
            process = subprocess.Popen(
                self._group.wrap(argv),
                cwd=self._path.parent,
                env=_env(self.port),
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        self.lives.append(process)
        self._sampler.follow(process.pid)

    @property
    def current(self) -> subprocess.Popen[bytes]:
        return self.lives[-1]

    async def end(self, signum: int, *, at_work: bool = False) -> int:
        """Send `signum` to the running daemon (which must still be running) and reap it;
        with `at_work`, at the first moment within `BUSY_WAIT_S` that it is running."""
        number = len(self.lives) - 1
        process, port = self.current, self.port

        def send() -> int:
            if at_work:
                # Past its start-up (`/readyz`: migrated, durable, one tick done), then busy.
                wait_until(lambda: process.poll() is not None or ready(port), timeout=60)
            if at_work and edge_limits.when_busy(process.pid, within_s=BUSY_WAIT_S):
                self.at_work += 1
            self._sampler.sample()
            assert process.poll() is None, (
                f"daemon {number} ended by itself ({process.returncode}): "
                + self._path.with_name(f"daemon-{number}.log").read_text()[-2000:]
            )
            process.send_signal(signum)
            return process.wait(timeout=60)

        return await anyio.to_thread.run_sync(send)

    def kill_all(self) -> None:
        for process in self.lives:
            if process.poll() is None:
                process.kill()
                process.wait()


async def _submit(the_api: api.Api, count: int, submitted: list[str]) -> None:
    """`count` dispatches at `RATE`, on an absolute schedule (a slow batch is caught up)."""
    started = time.monotonic()
    for n, first in enumerate(range(0, count, BATCH)):
        await anyio.sleep(max(0.0, started + n * BATCH / RATE - time.monotonic()))
        plans = [
            api.run_create_plan({"projectId": "edge", "taskId": f"t-{i}", "taskRevision": i})
            for i in range(first, min(first + BATCH, count))
        ]
        while True:
            try:
                consumed = await the_api.submit(plans, requested_by="tester", approved_by="tester")
                break
            except errors.StoreBusy:
                continue  # the daemon held the write lock past the busy timeout: nothing written
        submitted.extend(c.dispatch_id for c in consumed)


async def _kill_and_restart(supervisor: Supervisor, moments: list[float], t0: float) -> None:
    for moment in moments:
        await anyio.sleep(max(0.0, t0 + moment - time.monotonic()))
        assert await supervisor.end(signal.SIGKILL, at_work=True) == -signal.SIGKILL
        await anyio.sleep(RESTART_S)
        supervisor.start()


async def _watch(
    witness: ledger_witness.Witness, path: Path, outcome: Outcome, drained: anyio.Event
) -> None:
    """Read the ledger on the witness cadence and sample the file; `drained` once every
    dispatch is submitted and none is left unfinished (the verdict then says how each ended)."""
    last_sample = 0.0
    while True:
        await anyio.to_thread.run_sync(witness.poll)
        if time.monotonic() - last_sample >= SIZE_EVERY_S:
            last_sample = time.monotonic()
            trees = await anyio.to_thread.run_sync(ledger_witness.trees, path)
            db_bytes, wal_bytes = ledger_witness.file_bytes(path)
            outcome.samples.append(Sample(len(outcome.submitted), trees, db_bytes, wal_bytes))
        if (
            len(outcome.submitted) == DISPATCHES
            and await anyio.to_thread.run_sync(ledger_witness.unfinished, path) == 0
        ):
            await anyio.to_thread.run_sync(witness.poll)  # the lines of the last completions
            drained.set()
        await anyio.sleep(WITNESS_S)


@dataclasses.dataclass
class Outcome:
    """What one run measured."""

    moments: list[float]
    submitted: list[str] = dataclasses.field(default_factory=list)
    samples: list[Sample] = dataclasses.field(default_factory=list)
    submit_s: float = 0.0
    kills_at_work: int = 0
    drained_s: float | None = None
    """When every dispatch had finished (None: some never did)."""


async def _run(
    group: edge_limits.Cgroup,
    sampler: edge_limits.Sampler,
    witness: ledger_witness.Witness,
    path: Path,
    outcome: Outcome,
) -> None:
    """Submit at the steady rate while the supervisor kills and restarts; drain; stop."""
    store = await stores.open_sqlite(path)
    supervisor = Supervisor(group, sampler, path)
    try:
        supervisor.start()
        t0 = time.monotonic()
        async with anyio.create_task_group() as tg:
            drained = anyio.Event()
            tg.start_soon(_watch, witness, path, outcome, drained)
            killed = anyio.Event()

            async def kill() -> None:
                await _kill_and_restart(supervisor, outcome.moments, t0)
                killed.set()

            tg.start_soon(kill)
            await _submit(make_api(store, clock.SystemClock()), DISPATCHES, outcome.submitted)
            outcome.submit_s = time.monotonic() - t0
            await killed.wait()
            # A dispatch never finished fails below with its ledger, not with a timeout here.
            with anyio.move_on_after(LEASE_S + 120):
                await drained.wait()
                outcome.drained_s = time.monotonic() - t0
                # Past the retention: the daemon's next passes prune what finished last.
                await anyio.sleep(RETENTION_S + 2 * RECONCILE_S)
            tg.cancel_scope.cancel()
        outcome.kills_at_work = supervisor.at_work
        assert await supervisor.end(signal.SIGTERM) == 0  # a graceful stop still works
    finally:
        supervisor.kill_all()
        await store.close()
    await anyio.to_thread.run_sync(witness.poll)


async def test_the_edge_daemon_under_its_memory_and_cpu_limits_survives_five_sigkills(
    tmp_path: Path,
) -> None:
    path = tmp_path / "edge.db"
    migrated = run_cli(
        "--profile", "edge", "--database", f"sqlite:///{path}", "migrate", cwd=tmp_path
    )
    assert migrated.returncode == 0, migrated.stderr
    outcome = Outcome(moments=_kill_moments(random.Random(SEED)))
    with contextlib.ExitStack() as stack:
        try:
            group = stack.enter_context(edge_limits.limited(LIMITS))
        except edge_limits.Unavailable as exc:
            if os.environ.get("CI") == "true":
                pytest.fail(f"the limits cannot be enforced here: {exc}")
            pytest.skip(f"the limits cannot be enforced here: {exc}")
        witness = ledger_witness.Witness(path)
        stack.callback(witness.close)
        with edge_limits.Sampler() as sampler:
            await _run(group, sampler, witness, path, outcome)
        peak_usage = group.peak_usage_bytes()
        oom_kills = group.oom_kills()
        limit_hits = group.limit_hits()
        describe = group.describe()

    final_db, final_wal = ledger_witness.file_bytes(path)
    free_bytes = ledger_witness.free_bytes(path)
    mib = edge_limits.MIB
    figures = {
        "seed": SEED,
        "kills_at_s": [round(m, 1) for m in outcome.moments],
        "kills_at_work": outcome.kills_at_work,
        "dispatches": DISPATCHES,
        "rate_per_s": RATE,
        "submit_s": round(outcome.submit_s, 1),
        "all_finished_at_s": outcome.drained_s and round(outcome.drained_s, 1),
        "peak_rss_mib": round(sampler.peak_rss_bytes / mib, 1),
        "peak_rss_mib_per_life": [round(life.peak_rss_bytes / mib, 1) for life in sampler.lives],
        "cgroup_peak_mib": peak_usage and round(peak_usage / mib, 1),
        "cgroup_limit_hits": limit_hits,
        "oom_kills": oom_kills,
        "cpu_s": round(sampler.cpu_s, 2),
        "cpu_s_per_life": [round(life.cpu_s, 2) for life in sampler.lives],
        "cpu_s_per_1000": round(sampler.cpu_s / DISPATCHES * 1000, 3),
        "witness_max_gap_s": round(witness.max_gap_s, 2),
        "max_trees": max(s.trees for s in outcome.samples),
        "max_db_mib": round(max(s.db_bytes for s in outcome.samples) / mib, 2),
        "max_wal_mib": round(max(s.wal_bytes for s in outcome.samples) / mib, 2),
        "final_trees": ledger_witness.trees(path),
        "final_db_mib": round(final_db / mib, 2),
        "final_db_mib_per_1000": round(final_db / mib / DISPATCHES * 1000, 3),
        "final_free_mib": round(free_bytes / mib, 2),
        "db_mib_over_time": [round(s.db_bytes / mib, 1) for s in outcome.samples[::5]],
        "group": describe,
    }
    verdict = witness.verdict(outcome.submitted, ledger_witness.runs_by_key(path))
    figures["taken_over"] = verdict.taken_over
    print(f"edge limits: {figures}")

    # The limits held: the kernel ended nothing, and RSS stayed under the cap in every life.
    assert oom_kills == 0, figures
    assert 0 < sampler.peak_rss_bytes < LIMITS.memory_bytes, figures
    assert len(sampler.lives) == KILLS + 1

    # 0 duplicates, 0 lost, over every ledger line the file ever held.
    assert witness.max_gap_s < RETENTION_S / 2, figures
    assert verdict.problems == [], verdict.problems[:20]
    assert verdict.succeeded == DISPATCHES == len(outcome.submitted)
    assert ledger_witness.integrity(path) == "ok"

    # Retention: the trees in the file never exceed the retention window's worth (plus a
    # reconcile pass and a lease of backlog) whatever the total; past the retention only the
    # tree of the newest ledger line is left (its id is never handed out again), and their
    # space went back to the system: what stays is the Runs.
    window = RATE * (RETENTION_S + 2 * RECONCILE_S + LEASE_S)
    assert max(s.trees for s in outcome.samples) <= window, figures
    assert figures["final_trees"] == 1, figures
    assert final_wal == 0  # a graceful stop checkpoints the log away
    assert free_bytes <= final_db // 10, figures
