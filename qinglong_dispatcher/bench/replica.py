"""One benchmark replica process: drain the scratch store with the production dispatch path.

Started by the bench with the settings in its environment and a start time in argv, so all
replicas begin together; prints one JSON line: dispatched items, commits, CPU, peak RSS.
"""

from __future__ import annotations

import json
import sys
import time

import anyio

from qinglong_dispatcher import bootstrap, clock
from qinglong_dispatcher.bench import procstat
from qinglong_dispatcher.bootstrap import tracing
from qinglong_dispatcher.config.settings import load_settings
from qinglong_dispatcher.lifecycle import logging as log_setup


async def _drain(start_at: float) -> dict[str, float]:
    settings = load_settings()
    log_setup.configure(
        log_format=settings.log_format, level=settings.log_level, tracer=tracing.start()
    )
    store = await bootstrap.open_store(settings)
    try:
        the_dispatcher = bootstrap.build_dispatcher(settings, store, clock.SystemClock())
        commits_before = store.commits
        await anyio.sleep(max(0.0, start_at - time.time()))
        cpu_before = procstat.of_self().cpu_s
        written_before = procstat.bytes_written_by_self()
        worker_before = store.worker_costs or {}
        begun = time.time()
        dispatched = 0
        try:
            while True:
                report = await the_dispatcher.dispatch_batch()
                dispatched += sum(report.claims.get(k, 0) for k in ("claimed", "replayed"))
                if report.observed == 0:
                    break
            ended = time.time()
            usage = procstat.of_self()
            written = procstat.bytes_written_by_self() - written_before
            worker_after = store.worker_costs or {}
        finally:
            await the_dispatcher.aclose()  # an http.request sender's connections
        return {
            "dispatched": dispatched,
            "commits": store.commits - commits_before,
            "cpu_s": usage.cpu_s - cpu_before,
            "rss_mib": usage.rss_mib,
            "began": begun,
            "ended": ended,
            "bytes_written": written,
            **{f"worker_{k}": v - worker_before[k] for k, v in worker_after.items()},
        }
    finally:
        await store.close()


def main() -> None:
    """`python -m qinglong_dispatcher.bench.replica START_AT` (settings from QINGLONG_*)."""
    result = anyio.run(_drain, float(sys.argv[1]))
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
