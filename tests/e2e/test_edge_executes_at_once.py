"""The edge profile carries several executes at once (decision 0056): under the profile's own
defaults, one `tick` holds four sends to four receivers in flight at the same time, so one
slow receiver no longer holds the others' effects behind it."""

from __future__ import annotations

import base64
from pathlib import Path

from tests.support import cli_target
from tests.support.cli import json_out, run_cli
from tests.support.receiver_client import deduping_receivers_file, receivers

HOLD_S = 2.0
"""How long the receiver holds each send before it executes and answers."""
RECEIVERS = ("north", "south", "east", "west")
"""Four names, four targets: one target takes one change at a time whatever the workers."""


async def test_one_tick_holds_four_sends_in_flight_together(tmp_path: Path) -> None:
    with receivers(tmp_path) as make:
        receiver = make()
        config = deduping_receivers_file(
            tmp_path, receiver, connect_s=1.0, read_s=3 * HOLD_S, names=RECEIVERS
        )
        ring = tmp_path / "plan-keys"
        assert run_cli("keys", "generate", "--out", str(ring), cwd=tmp_path).returncode == 0
        env = {"QINGLONG_RECEIVERS_FILE": str(config), "QINGLONG_PLAN_KEYRING_FILE": str(ring)}
        async with cli_target.target("sqlite", tmp_path, env) as t:
            assert t.run(t.admin, "migrate").returncode == 0
            sent = [
                t.dispatch(
                    "http.request",
                    f"hold-{name}",
                    {
                        "projectId": "p1",
                        "receiver": name,
                        "method": "POST",
                        "path": "/effects/held",
                        "query": [],
                        "headers": [],
                        "body": base64.b64encode(b'{"held":true}').decode("ascii"),
                        "contentType": "application/json",
                    },
                )
                for name in RECEIVERS
            ]
            receiver.set_fault("hold_in_flight", count=len(RECEIVERS), seconds=HOLD_S)

            ticked = json_out(t.run(t.runtime, "tick", "--once", "--json"))

            assert ticked["outcomes"] == {"succeeded": len(RECEIVERS)}
            assert [receiver.executed(d) for d in sent] == [1] * len(RECEIVERS)
            # Each send executes HOLD_S after it arrives: one after the other they would end
            # at least HOLD_S apart; carried together they end within one hold.
            ended = sorted(effect["executed_at"] for effect in receiver.effects())
            assert ended[-1] - ended[0] < HOLD_S, ended
