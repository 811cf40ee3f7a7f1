"""SIGKILL after `mcp.call` sent its call: each key reaches the server once, and the check tool
settles it; a kill before the call leaves nothing on the server, and the check says so."""

from __future__ import annotations

import functools
import signal
import time
from pathlib import Path

import anyio
import pytest

from qinglong_dispatcher.domain.states import ExecutionStatus
from tests.support import effect_crash, mcp_servers, stores

pytestmark = pytest.mark.slow

ACTION = "mcp.call"
ROUNDS = 12
"""Kills after the call was sent (the CLI killed while the tool sleeps after its effect, or
the batch killing itself once execute returned), and every fourth round a kill before it."""
SERVERS = tuple(f"tickets-{i}" for i in range(ROUNDS))
"""A server per kill: each killed call holds its server (a target) until recovery settles it."""
ENV = {
    **mcp_servers.ENV,
    # One dispatch per claim: each victim holds exactly the dispatch the test just seeded.
    "QINGLONG_PAGE_SIZE": "1",
}


def _plan(ref: str, server: str) -> dict[str, object]:
    return {
        "schemaVersion": 1,
        "actionRef": ref,
        "projectId": "p1",
        "server": server,
        "tool": "slow_ticket",
        "arguments": {},
    }


def _called(folder: Path, dispatch_id: str) -> bool:
    return f"slow_ticket {dispatch_id}" in mcp_servers.calls(folder)


def _still_running(marker: str) -> list[int]:
    """Processes whose command line mentions `marker` (servers left by killed victims)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:  # it ended meanwhile
                continue
            if marker.encode() in cmdline and b"tests.support.mcp_server" in cmdline:
                found.append(int(entry.name))
    return found


@pytest.mark.timeout(600)  # about 90 s per dialect on an idle 2-core machine, more when busy
@pytest.mark.parametrize("dialect", stores.DIALECTS)
async def test_a_sigkill_after_the_call_was_sent_is_settled_by_the_check_and_never_called_again(
    tmp_path: Path, dialect: str
) -> None:
    env = {
        **ENV,
        "QINGLONG_MCP_SERVERS_FILE": str(mcp_servers.servers_file(tmp_path, None, also=SERVERS)),
        "MCP_TEST_TOKEN": "t0ken-for-the-test",
    }
    async with effect_crash.target(dialect, tmp_path, env) as t:
        sent: list[str] = []
        never_sent: list[str] = []
        for i in range(ROUNDS):
            dispatch_id = await t.seed(ACTION, _plan(f"call-{i}", SERVERS[i]))
            if i % 4 == 3:
                # The barrier committed, the call was never made.
                victim = t.start(effect_crash.crash_argv(ACTION, "before_execute"))
                assert await effect_crash.reap(victim) == -signal.SIGKILL, t.log()
                never_sent.append(dispatch_id)
            elif i % 2 == 0:
                # The real CLI, killed while the tool sleeps after its effect.
                victim = t.start(effect_crash.tick_argv())
                await effect_crash.kill_when(
                    victim,
                    functools.partial(_called, tmp_path, dispatch_id),
                    why="the server received the call",
                )
                sent.append(dispatch_id)
            else:
                # The tool answered and execute returned, then the process died.
                victim = t.start(effect_crash.crash_argv(ACTION, "after_execute"))
                assert await effect_crash.reap(victim) == -signal.SIGKILL, t.log()
                assert _called(tmp_path, dispatch_id)
                sent.append(dispatch_id)
            row = await t.store.get_execution(dispatch_id)
            assert row is not None
            assert row.status is ExecutionStatus.EXECUTING  # the kill landed after the barrier

        outcomes = await effect_crash.settle(
            t, [*sent, *never_sent], within_s=240, tick_within_s=120
        )
        for dispatch_id in sent:
            assert outcomes[dispatch_id] == effect_crash.Outcome(
                ExecutionStatus.SUCCEEDED, "evidence", None, 1
            )
        for dispatch_id in never_sent:
            assert outcomes[dispatch_id] == effect_crash.Outcome(
                ExecutionStatus.EXECUTING, None, ("missing", "check_absent"), 1
            )
        keys = [line.split(" ", 1)[1] for line in mcp_servers.calls(tmp_path)]
        assert sorted(keys) == sorted(sent)  # each sent call once, none other

    # The servers the kills left behind end by themselves (their stdin closed).
    deadline = time.monotonic() + 15
    while left := _still_running(str(tmp_path)):
        assert time.monotonic() < deadline, f"MCP servers still running: {left}"
        await anyio.sleep(0.1)
