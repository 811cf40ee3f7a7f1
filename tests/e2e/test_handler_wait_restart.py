"""A dispatch that waited for its action's handler runs right after the restart that loads it.

A real edge daemon without the action claims the dispatch and gives it back as a handler wait
(`handler_missing`, due again about a minute later); the daemon restarted with the action
installed makes that wait due at its start, so the dispatch runs within seconds, not after
the rest of its backoff.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.support import crash_actions
from tests.support import daemon as daemons

BACKOFF_FLOOR_S = 30
"""The shortest handler wait (half of a minute, jittered): the run must come well before."""


async def test_a_restart_that_loads_the_handler_runs_its_waiting_dispatch_at_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "qinglong.db"
    site = crash_actions.install(tmp_path / "site")
    (dispatch_id,) = await crash_actions.submit_to_file(
        path, [crash_actions.SLOW_TYPE], max_attempts=5
    )
    port = daemons.free_port()
    with daemons.running(
        tmp_path, crash_actions.daemon_env(path, None, port), name="without"
    ) as without:
        waiting = daemons.wait_until(
            lambda: (
                (row := crash_actions.rows(path)[dispatch_id])["result_code"] == "handler_missing"
                and row
            ),
            timeout=30,
        )
        without.send_signal(signal.SIGTERM)
        assert without.wait(timeout=30) == 0
    assert (waiting["status"], waiting["attempt"]) == ("pending", 0)
    assert waiting["eligible_at_ms"] > time.time() * 1000 + 20_000  # parked for its backoff
    restarted = time.monotonic()
    port = daemons.free_port()
    with daemons.running(tmp_path, crash_actions.daemon_env(path, site, port), name="with") as run:
        daemons.wait_until(
            lambda: crash_actions.rows(path)[dispatch_id]["status"] == "succeeded", timeout=20
        )
        elapsed = time.monotonic() - restarted
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=30) == 0
        events = daemons.log_events(run.stderr)
    assert elapsed < BACKOFF_FLOOR_S / 2, elapsed
    (woken,) = [e for e in events if e["event"] == "daemon.handler_waits_woken"]
    assert (woken["count"], woken["first_ids"]) == (1, [dispatch_id])
    row = crash_actions.rows(path)[dispatch_id]
    assert (row["attempt"], row["starts"]) == (1, 1)
