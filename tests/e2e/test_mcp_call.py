"""`mcp.call` end to end, on SQLite and PostgreSQL, against real MCP servers written with the
`mcp` SDK (stdio subprocesses and streamable HTTP on loopback): the real console script calls
an approved tool once; an unknown tool or server, arguments its schema refuses and a schema
changed since approval are `blocked` before the barrier; `isError` is `failed`; a server that
hangs, one that dies mid-call and one that cuts the HTTP stream after the request are
`recovery_required` until the check tool settles them; none is ever called twice.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from qinglong_dispatcher.actions.mcp_call import client, servers
from tests.support import cli_target, mcp_servers, stores
from tests.support.cli import json_out
from tests.support.cli_target import Target

ACTION = "mcp.call"
ENV = {**mcp_servers.ENV, "QINGLONG_LOG_LEVEL": "debug"}


@pytest.fixture
def http_url(tmp_path: Path) -> Iterator[str]:
    with mcp_servers.http_server(tmp_path) as url:
        yield url


@pytest.fixture(params=stores.DIALECTS)
async def target(
    request: pytest.FixtureRequest, tmp_path: Path, http_url: str
) -> AsyncIterator[Target]:
    env = {
        **ENV,
        "QINGLONG_MCP_SERVERS_FILE": str(
            mcp_servers.servers_file(tmp_path, http_url, also=("tickets-2",))
        ),
        "MCP_TEST_TOKEN": f"secret-{uuid.uuid4().hex}",
    }
    async with cli_target.target(request.param, tmp_path, env) as made:
        yield made


def _dispatch(
    t: Target, ref: str, server: str, tool: str, arguments: dict[str, Any], **more: Any
) -> str:
    plan = {"projectId": "p1", "server": server, "tool": tool, "arguments": arguments, **more}
    return t.dispatch(ACTION, ref, plan)


def _tick(t: Target) -> dict[str, int]:
    outcomes: dict[str, int] = json_out(t.run(t.runtime, "tick", "--once", "--json"))["outcomes"]
    return outcomes


def _ticks(t: Target, count: int) -> dict[str, int]:
    """Tick until `count` dispatches had an outcome; the outcomes summed. A server is a target:
    a tick's claim leases one call per server, the rest wait for the next tick."""
    summed: dict[str, int] = {}
    deadline = time.monotonic() + 60
    while sum(summed.values()) < count:
        assert time.monotonic() < deadline, f"only {summed} of {count} had an outcome"
        for outcome, n in _tick(t).items():
            summed[outcome] = summed.get(outcome, 0) + n
    return summed


def _execution(t: Target, dispatch_id: str) -> dict[str, Any]:
    execution: dict[str, Any] = t.show(dispatch_id)["execution"]
    return execution


def _settled(t: Target, ids: list[str]) -> dict[str, dict[str, Any]]:
    """Tick until recovery has looked at every one of `ids` (their leases must run out)."""
    deadline = time.monotonic() + 60
    while True:
        _tick(t)
        shown = {i: t.show(i) for i in ids}
        if all(s["execution"]["status"] != "executing" or s["observation"] for s in shown.values()):
            return shown
        assert time.monotonic() < deadline, "recovery never looked at the uncertain calls"
        time.sleep(0.5)


async def _schema_digest(folder: Path, tool: str) -> str:
    configured = servers.load(folder / "mcp-servers.toml").get("tickets")
    assert configured is not None
    async with client.connect(configured, {"MCP_TEST_TOKEN": "x"}) as session:
        return session.tools[tool].digest


def _end_to_end(t: Target, approved_digest: str) -> None:
    folder = t.cwd
    assert t.run(t.admin, "migrate").returncode == 0

    # Runs once, with the dispatch id as its key; the receipt keeps the answer's digest.
    ran = _dispatch(t, "m-1", "tickets", "create_ticket", {"title": "disk"})
    remote = _dispatch(t, "m-2", "remote", "create_ticket", {"title": "net"})
    big = _dispatch(t, "m-2b", "tickets", "big", {"size": 200_000})  # above max_output_bytes
    flood = _dispatch(t, "m-2f", "tickets", "flood", {"count": 50})  # notifications, then done
    assert mcp_servers.calls(folder) == []  # approving and consuming called nothing
    assert _ticks(t, 4) == {"succeeded": 4}
    # The stdio server got its secret by reference and nothing of the daemon's environment;
    # the HTTP server got its header secret on every request.
    token = t.env["MCP_TEST_TOKEN"]
    assert (folder / "environment.txt").read_text() == f"token={len(token)} leaked=\n"
    assert set((folder / "headers.txt").read_text().splitlines()) == {f"token={len(token)}"}
    assert sorted(mcp_servers.calls(folder)) == sorted(
        [f"create_ticket {ran}", f"create_ticket {remote}"]
    )
    receipt = _execution(t, ran)["receipt"]
    assert (receipt["isError"], receipt["server"], receipt["tool"]) == (
        False,
        "tickets",
        "create_ticket",
    )
    assert receipt["hints"]["idempotentHint"] is True
    # The answer echoed the (sensitive) argument: the excerpt keeps the rest of it.
    assert '"ticket":"T-' in receipt["excerpt"]
    assert "disk" not in receipt["excerpt"]
    assert "[redacted]" in receipt["excerpt"]

    oversized = _execution(t, big)["receipt"]
    assert (oversized["truncated"], oversized["answerBytes"] > 200_000) == (True, True)
    assert len(oversized["excerpt"]) <= 2048
    assert "flooded" in _execution(t, flood)["receipt"]["excerpt"]

    # Refused before the barrier, nothing sent: blocked, never started.
    refused = {
        _dispatch(t, "m-3", "tickets", "nope_tool", {}): "mcp_tool_unknown",
        _dispatch(t, "m-4", "tickets", "drop_stream", {"key": "k"}): "mcp_tool_not_allowed",
        _dispatch(t, "m-5", "elsewhere", "create_ticket", {"title": "x"}): "mcp_server_unknown",
        _dispatch(t, "m-6", "tickets", "create_ticket", {"title": 5}): "mcp_arguments_invalid",
        _dispatch(t, "m-7", "tickets", "create_ticket", {"title": "x", "key": "mine"}): (
            "mcp_key_argument_taken"
        ),
        _dispatch(
            t, "m-8", "tickets", "create_ticket", {"title": "x"}, inputSchemaDigest=approved_digest
        ): "mcp_schema_drift",
    }
    (folder / "variant").write_text("2")  # the server was upgraded since the approval
    assert _ticks(t, len(refused)) == {"blocked": len(refused)}
    (folder / "variant").unlink()
    for dispatch_id, code in refused.items():
        execution = _execution(t, dispatch_id)
        assert (execution["status"], execution["result_code"]) == ("blocked", code)
        assert execution["started_at_ms"] is None
    assert len(mcp_servers.calls(folder)) == 2

    # The tool answered isError: failed, its text kept.
    failed = _dispatch(t, "m-9", "tickets", "refuse_ticket", {"title": "x"})
    assert _tick(t) == {"failed": 1}
    execution = _execution(t, failed)
    assert (execution["result_code"], execution["receipt"]["isError"]) == ("mcp_tool_error", True)
    assert "refuse_ticket" in execution["receipt"]["excerpt"]

    # Lost answers: a hang, a crash mid-call, an HTTP stream cut after the request, and a
    # hang on a server without a check; one server each, since a lost answer holds its server.
    lost = [
        _dispatch(t, "m-10", "tickets", "hang", {}),
        _dispatch(t, "m-11", "tickets-2", "crash", {}),
        _dispatch(t, "m-12", "remote", "drop_stream", {}),
    ]
    manual = _dispatch(t, "m-13", "plain", "hang", {"key": "manual-1"})
    assert _tick(t) == {"uncertain": 4}
    shown = _settled(t, [*lost, manual])
    for dispatch_id in lost:
        assert shown[dispatch_id]["execution"]["status"] == "succeeded"
        assert shown[dispatch_id]["resolution"]["source"] == "evidence"
    assert shown[manual]["execution"]["status"] == "executing"
    assert shown[manual]["observation"]["outcome"] == "missing"
    assert shown[manual]["observation"]["reason_code"] == "manual_only"

    # Every call reached its server exactly once; nothing ran again.
    for _ in range(2):
        _tick(t)
    keys = [line.split(" ", 1)[1] for line in mcp_servers.calls(folder)]
    assert sorted(keys) == sorted([ran, remote, *lost, "manual-1"])


@pytest.mark.slow
@pytest.mark.timeout(600)  # about a minute per dialect on an idle 2-core machine, more when busy
async def test_an_approved_mcp_call_runs_once_and_lost_answers_are_settled_by_the_check(
    target: Target,
) -> None:
    digest = await _schema_digest(target.cwd, "create_ticket")
    await anyio.to_thread.run_sync(_end_to_end, target, digest)
    token = target.env["MCP_TEST_TOKEN"]
    assert all(token not in text for text in target.printed)
    assert token.encode() not in await anyio.to_thread.run_sync(target.stored_bytes)
