"""Real edge daemons killed on a rhythm: their crashes spend no dispatch's budget, and a
dispatch that kills every daemon taking it (a poison pill) stops on its own code and alert.

Each daemon is the real console script over one SQLite file, with the test actions of
`tests.support.crash_actions` installed through an entry point; SIGKILL ends it at a random
instant, a new one starts at once, and a short lease lets the next daemon take over what the
dead one held before its barriers.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import anyio
import pytest

from qinglong_dispatcher.config.settings import load_settings
from tests.support import crash_actions
from tests.support import daemon as daemons

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CHAOS_S = 30.0
"""The chaos phase lasts this long (and at least `MIN_HOLDING_KILLS` kills of a daemon that
held claims) unless every dispatch settled first; a survivor then finishes what it left."""
MIN_HOLDING_KILLS = 3
WORKERS = load_settings(profile="edge", environ={}).concurrency
"""The edge daemon's executes in flight, which inspect side by side."""
LIFE_S = (1.5, 4.0)
"""A daemon's life from its readiness to its SIGKILL: measured from readiness, so a loaded
machine's slow start-up does not turn every life into a start-up that claims and dies."""


async def test_daemons_killed_every_second_or_two_drop_no_approved_dispatch(
    tmp_path: Path,
) -> None:
    rng = random.Random(7)
    lives = [rng.uniform(*LIFE_S) for _ in range(MIN_HOLDING_KILLS)]
    # More dispatches than the first lives can inspect on an idle machine (the profile's
    # workers inspecting side by side), and a page more: those kills land on claims however
    # fast the machine is. Not many more: fresh rows come before expired leases in due order,
    # so the later lives take over and die holding takeovers (claimed one to a page), what the
    # takeover bound must survive.
    count = int(sum(lives) / crash_actions.INSPECT_S * WORKERS) + 16
    path = tmp_path / "qinglong.db"
    site = crash_actions.install(tmp_path / "site")
    ids = await crash_actions.submit_to_file(
        path, [crash_actions.SLOW_TYPE] * count, max_attempts=3
    )
    kills = holding_kills = 0
    started = time.monotonic()
    # Chaos: a ready daemon lives 1.5-4 s, then SIGKILL; never a clean stop. By time, not by a
    # count of kills the workload may finish before; at most 60 s (a start-up that hangs).
    while not crash_actions.settled(path) and (
        time.monotonic() - started < CHAOS_S or holding_kills < MIN_HOLDING_KILLS
    ):
        assert time.monotonic() - started < 60, (kills, holding_kills)
        owner = f"chaos-{kills}"
        port = daemons.free_port()
        env = crash_actions.daemon_env(path, site, port) | {"QINGLONG_OWNER_ID": owner}
        with daemons.running(tmp_path, env, name=owner) as victim:
            await crash_actions.until_ready(victim, port)
            await anyio.sleep(lives[kills] if kills < len(lives) else rng.uniform(*LIFE_S))
            victim.send_signal(signal.SIGKILL)
            assert victim.wait(timeout=10) == -signal.SIGKILL
        # What it held before its barriers only a takeover can finish.
        holding_kills += crash_actions.leased_by(path, owner) > 0
        kills += 1
    # Then one that lives, to finish what the chaos left (and settle a kill after a barrier).
    port = daemons.free_port()
    with daemons.running(
        tmp_path, crash_actions.daemon_env(path, site, port), name="survivor"
    ) as survivor:
        await crash_actions.until_ready(survivor, port)
        daemons.wait_until(lambda: crash_actions.settled(path), timeout=60, interval=0.2)
        survivor.send_signal(signal.SIGTERM)
        assert survivor.wait(timeout=30) == 0
    rows = crash_actions.rows(path)
    assert set(rows) == set(ids)
    # The chaos did kill daemons holding claims and take over the leases of each of them,
    # every takeover refunded: no dispatch is blocked, each one ran once and succeeded within
    # its budget (the message names every row that did not).
    taken_from = crash_actions.taken_over_from(tmp_path)
    assert holding_kills >= MIN_HOLDING_KILLS, (kills, holding_kills)
    assert len(taken_from) >= MIN_HOLDING_KILLS, (kills, sorted(taken_from))
    assert {r["status"] for r in rows.values()} == {"succeeded"}, crash_actions.unfinished(rows)
    assert {r["starts"] for r in rows.values()} == {1}, crash_actions.unfinished(rows)
    assert max(r["attempt"] for r in rows.values()) <= 3


async def test_a_poison_pill_stops_on_its_own_code_and_its_page_mates_run(
    tmp_path: Path,
) -> None:
    path = tmp_path / "qinglong.db"
    site = crash_actions.install(tmp_path / "site")
    # max_attempts 1: before, one takeover spent a whole budget. The page mates come after
    # the poison in its page and die with it twice (its first claim, and the takeover of that
    # page whole); a lease taken over before is then claimed alone, so never again.
    poison, *mates = await crash_actions.submit_to_file(
        path, [crash_actions.POISON_TYPE] + [crash_actions.SLOW_TYPE] * 3, max_attempts=1
    )
    deaths = 0
    deadline = time.monotonic() + 90
    while True:
        port = daemons.free_port()
        with daemons.running(
            tmp_path, crash_actions.daemon_env(path, site, port), name=f"taker-{deaths}"
        ) as taker:
            while taker.poll() is None and crash_actions.rows(path)[poison]["status"] != "blocked":
                assert time.monotonic() < deadline, crash_actions.rows(path)
                await anyio.sleep(0.1)
            if taker.poll() is not None:
                assert taker.wait(timeout=1) == -signal.SIGKILL
                deaths += 1
                continue
            # The survivor blocked the poison pill: it says so in its log and its metrics.
            daemons.wait_until(lambda: crash_actions.settled(path), timeout=30, interval=0.2)
            metrics = daemons.metric_values(daemons.get(port, "/metrics")[1])
            taker.send_signal(signal.SIGTERM)
            assert taker.wait(timeout=30) == 0
            events = daemons.log_events(taker.stderr)
            break
    rows = crash_actions.rows(path)
    assert (rows[poison]["status"], rows[poison]["result_code"]) == (
        "blocked",
        "takeovers_exhausted",
    )
    bound = 4  # TAKEOVERS_PER_ATTEMPT × max_attempts 1
    assert (rows[poison]["attempt"], rows[poison]["takeovers"], rows[poison]["starts"]) == (
        1,
        bound,
        0,
    )
    assert deaths == bound + 1  # its first claim and every takeover died
    assert [(rows[m]["status"], rows[m]["starts"], rows[m]["takeovers"]) for m in mates] == [
        ("succeeded", 1, 2)
    ] * 3
    assert metrics["qinglong_dispatcher_takeovers_exhausted_total"] == 1.0
    (suspected,) = [e for e in events if e.get("event") == "dispatch.poison_suspected"]
    assert (suspected["level"], suspected["dispatch_id"]) == ("error", poison)
