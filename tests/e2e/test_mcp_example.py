"""The example MCP server (`examples/mcp-tickets`) through the real console script: an
approved `create_ticket` opens one ticket keyed by the dispatch id, and its `get_ticket`
answers the check as recovery reads it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio.to_thread
import pytest

from qinglong_dispatcher.actions.mcp_call import client, servers
from tests.support import cli_target
from tests.support.cli import json_out
from tests.support.cli_target import Target

SERVER = Path(__file__).resolve().parents[2] / "examples" / "mcp-tickets" / "server.py"


def _configure(folder: Path) -> Path:
    config = folder / "mcp-servers.toml"
    command = [sys.executable, str(SERVER), str(folder / "tickets")]
    config.write_text(
        f"""
[servers.tickets]
command = {json.dumps(command)}
tools = ["create_ticket", "get_ticket"]

[servers.tickets.checks]
create_ticket = {{ tool = "get_ticket", key_argument = "key", call_key_argument = "key" }}
""",
        encoding="utf-8",
    )
    return config


def _run(t: Target) -> str:
    assert t.run(t.admin, "migrate").returncode == 0
    plan = {"projectId": "ops", "server": "tickets", "tool": "create_ticket"}
    dispatch_id = t.dispatch("mcp.call", "ticket-7", {**plan, "arguments": {"title": "disk"}})
    outcomes = json_out(t.run(t.runtime, "tick", "--once", "--json"))["outcomes"]
    assert outcomes == {"succeeded": 1}
    assert t.show(dispatch_id)["execution"]["result_code"] == "mcp_succeeded"
    return dispatch_id


@pytest.mark.slow
async def test_the_example_server_opens_one_ticket_per_dispatch_and_answers_its_check(
    tmp_path: Path,
) -> None:
    env = {"QINGLONG_MCP_SERVERS_FILE": str(_configure(tmp_path))}
    async with cli_target.target("sqlite", tmp_path, env) as t:
        dispatch_id = await anyio.to_thread.run_sync(_run, t)
    ticket = json.loads((tmp_path / "tickets" / f"{dispatch_id}.json").read_text("utf-8"))
    assert (ticket["key"], ticket["title"]) == (dispatch_id, "disk")
    assert [p.name for p in (tmp_path / "tickets").iterdir()] == [f"{dispatch_id}.json"]

    tickets = servers.load(tmp_path / "mcp-servers.toml").get("tickets")
    assert tickets is not None
    async with client.connect(tickets) as session:
        assert session.tools["get_ticket"].hints["readOnlyHint"] is True
        found = await session.call("get_ticket", {"key": dispatch_id}, dispatch_id, 5)
        absent = await session.call("get_ticket", {"key": "d-none"}, "d-none", 5)
    assert found.structured["status"] == "completed"
    assert absent.structured == {"status": "absent"}
