"""SIGKILLs around the effects of `http.request` and `command.run`: an entry point and its harness.

`python -m tests.support.effect_crash ACTION_TYPE POINT` runs one dispatch batch whose built-in
handler of ACTION_TYPE SIGKILLs its own process at POINT — `before_execute` (the start barrier
committed, no effect yet) or `after_execute` (the effect done, the execution not completed).
Settings come from the environment like the daemon's. The rest is the test side: a database
per dialect, one dispatch seeded at a time, victims started, killed and reaped, and the ticks
that let recovery settle what the kills left.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path

import anyio
import anyio.to_thread

from qinglong_dispatcher import bootstrap, clock, ports
from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.config.settings import load_settings
from qinglong_dispatcher.domain import plans
from qinglong_dispatcher.domain.states import ExecutionStatus
from tests.support import external_crash

REPO = Path(__file__).resolve().parents[2]
POLL_S = 0.005
VICTIM_TIMEOUT_S = 20.0
_WAITING = frozenset({ExecutionStatus.PENDING, ExecutionStatus.LEASED, ExecutionStatus.RETRY_WAIT})


async def main(action_type: str, point: str) -> None:
    """One batch with the built-in `action_type` killed at `point`."""
    settings = load_settings()
    store = await bootstrap.open_store(settings, create=False)
    the_clock = clock.SystemClock()
    inner = bootstrap.handlers(store, the_clock, settings=settings)[action_type]
    the_dispatcher = bootstrap.build_dispatcher(
        settings,
        store,
        the_clock,
        extra_handlers={action_type: external_crash.KilledAt(inner, point)},
    )
    try:
        await the_dispatcher.dispatch_batch()
    finally:
        await the_dispatcher.aclose()
        await store.close()


# -- the test side -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Outcome:
    """Where one dispatch ended, and how it got there."""

    status: ExecutionStatus
    resolution: str | None
    """`evidence` or `manual` when recovery settled it."""
    observation: tuple[str, str] | None
    """The last reconcile outcome and reason of a row still `recovery_required`."""
    starts: int
    """How often the ledger saw it start (`→ executing`)."""


@dataclasses.dataclass
class Target:
    """One dialect's fresh database: the settings every process gets, and the test's stores."""

    dialect: str
    cwd: Path
    env: dict[str, str]
    store: ports.Store
    """Reads (the runtime login on PostgreSQL)."""
    approver: ports.Store
    """Seeds: `submit` is a self-approval, which the runtime login may never make."""
    database: str | None = None
    victims: int = 0

    def process_env(self, **extra: str) -> dict[str, str]:
        """This environment without stray QINGLONG_ variables, plus the target's and `extra`."""
        clean = {k: v for k, v in os.environ.items() if not k.startswith("QINGLONG_")}
        clean.pop("NOTIFY_SOCKET", None)
        return {**clean, **self.env, "PYTHONPATH": str(REPO), **extra}

    async def seed(self, action_type: str, plan: Mapping[str, object]) -> str:
        """Create, approve and consume one plan: its dispatch id (now the only one due)."""
        parsed = plans.parse_plan(action_type, plan, models=builtin.PLAN_MODELS)
        # Imported here: the entry point above never needs the test helpers.
        from tests.support.actions import make_api

        (consumed,) = await make_api(self.approver, clock.SystemClock()).submit(
            [parsed], requested_by="alice", approved_by="bob"
        )
        return consumed.dispatch_id

    def start(self, argv: Sequence[str], **extra: str) -> subprocess.Popen[bytes]:
        """Start a process with the target's settings; stderr goes to a log file of its own."""
        self.victims += 1
        log = self.cwd / f"victim-{self.victims}.log"
        with log.open("wb") as sink:
            return subprocess.Popen(
                list(argv),
                cwd=self.cwd,
                env=self.process_env(**extra),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=sink,
            )

    def log(self) -> str:
        """The last victim's stderr."""
        path = self.cwd / f"victim-{self.victims}.log"
        return path.read_text(encoding="utf-8", errors="replace")[-3000:]

    async def outcome(self, dispatch_id: str) -> Outcome:
        """Where `dispatch_id` stands now."""
        row = await self.store.get_execution(dispatch_id)
        assert row is not None, dispatch_id
        resolution = await self.store.get_resolution(dispatch_id)
        observation = None
        if row.status is ExecutionStatus.EXECUTING:
            page = await self.store.list_recovery_required(
                now_ms=clock.SystemClock().now_ms(), limit=64
            )
            for snapshot in page:
                seen = snapshot.observation
                if snapshot.dispatch.dispatch_id == dispatch_id and seen is not None:
                    observation = (seen.outcome.value, seen.reason_code)
        events = await self.store.execution_events(dispatch_id)
        return Outcome(
            status=row.status,
            resolution=None if resolution is None else resolution.source.value,
            observation=observation,
            starts=[e.to_status for e in events].count(ExecutionStatus.EXECUTING),
        )


@contextlib.asynccontextmanager
async def target(dialect: str, cwd: Path, env: Mapping[str, str]) -> AsyncIterator[Target]:
    """A fresh migrated database of `dialect`, its stores open, closed (and dropped) after."""
    from tests.support import stores

    system = clock.SystemClock()
    if dialect == "sqlite":
        path = cwd / "qinglong.db"
        store = await stores.open_sqlite(path)
        try:
            await store.migrate(now_ms=system.now_ms())
            settings = {"QINGLONG_PROFILE": "edge", "QINGLONG_DATABASE_URL": f"sqlite:///{path}"}
            yield Target(dialect, cwd, {**env, **settings}, store, store)
        finally:
            await store.close()
        return
    async with stores.fresh_database() as name:
        url = stores.runtime_url(name)
        runtime = await stores.open_postgres(url, max_size=2)
        try:
            approver = await stores.open_postgres(stores.approver_url(name), max_size=1)
            try:
                settings = {"QINGLONG_PROFILE": "cluster", "QINGLONG_DATABASE_URL": url}
                yield Target(dialect, cwd, {**env, **settings}, runtime, approver, name)
            finally:
                await approver.close()
        finally:
            await runtime.close()


def crash_argv(action_type: str, point: str) -> list[str]:
    """The argv of this module's entry point."""
    return [sys.executable, "-m", "tests.support.effect_crash", action_type, point]


def cli_argv(*args: str) -> list[str]:
    """The argv of the real console script with `args`."""
    return [str(Path(sys.executable).with_name("qinglong-dispatcher")), *args]


def tick_argv() -> list[str]:
    """`tick --once`: one batch, then one reconcile pass."""
    return cli_argv("tick", "--once")


async def reap(process: subprocess.Popen[bytes], within_s: float = VICTIM_TIMEOUT_S) -> int:
    """Wait for `process` to end (SIGKILL it past `within_s`); its return code."""
    deadline = time.monotonic() + within_s
    while process.poll() is None:
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            break
        await anyio.sleep(POLL_S)
    return process.returncode


async def kill_when(
    process: subprocess.Popen[bytes], landed: Callable[[], bool], *, why: str
) -> None:
    """SIGKILL `process` as soon as `landed()` holds (polled every few ms), and reap it; the
    process must still be running then."""
    deadline = time.monotonic() + VICTIM_TIMEOUT_S
    try:
        while not landed():
            assert process.poll() is None, f"the victim ended before {why}"
            assert time.monotonic() < deadline, f"never {why}"
            await anyio.sleep(POLL_S)
        assert process.poll() is None, f"the victim ended before the kill ({why})"
        process.kill()
    finally:
        await reap(process)
    assert process.returncode == -signal.SIGKILL


async def settle(
    t: Target,
    ids: Sequence[str],
    *,
    within_s: float = 30.0,
    tick_within_s: float = VICTIM_TIMEOUT_S,
) -> dict[str, Outcome]:
    """Tick (the real CLI) until each dispatch of `ids` is terminal or `recovery_required` with
    a reconcile observation that is an answer (`unavailable` is asked again); their outcomes.
    `tick_within_s` bounds each tick (an action whose evidence starts a process per dispatch,
    `mcp.call`'s stdio check, needs longer for a page of them)."""
    deadline = time.monotonic() + within_s
    while True:
        outcomes = {d: await t.outcome(d) for d in ids}
        waiting = [
            d
            for d, o in outcomes.items()
            if o.status in _WAITING
            or (
                o.status is ExecutionStatus.EXECUTING
                and (o.observation is None or o.observation[0] == "unavailable")
            )
        ]
        if not waiting:
            return outcomes
        assert time.monotonic() < deadline, f"still waiting: {waiting}"
        # Anything never claimed is dispatched too, a page at a time.
        ticked = t.start(cli_argv("tick", "--drain"), QINGLONG_PAGE_SIZE="16")
        assert await reap(ticked, tick_within_s) == 0, t.log()
        await anyio.sleep(0.2)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
