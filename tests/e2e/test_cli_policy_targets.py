"""A policy by target prefix through the real console script, on both profiles: `policy set
--target-prefix prod-` asks http.request for two approvals, a default policy for one; a request
to the receiver `prod-db` then needs two votes and one to `staging-db` needs one. A prefix with
a wildcard is one line (exit 2) and writes nothing.

On cluster the votes are the CLI's, as two approver logins. On edge the console script's
principal is the OS user (docs/decisions/0029), who requested: the voters are token principals
acting through the store, the path the API's votes take."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

from qinglong_dispatcher import clock
from qinglong_dispatcher.domain import approvals, principals
from qinglong_dispatcher.usecases import voting
from tests.support import cli_target, stores
from tests.support.cli import error_lines, json_out, run_cli
from tests.support.cli_target import Target

ACTION = "http.request"


@pytest.fixture(params=stores.DIALECTS)
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    config = tmp_path / "receivers.toml"
    config.write_text(
        "".join(
            f'[receivers.{name}]\nbase_url = "http://127.0.0.1:9/"\nmethods = ["POST"]\n'
            'path_prefixes = ["/effects/"]\n\n'
            for name in ("prod-db", "staging-db")
        ),
        encoding="utf-8",
    )
    ring = tmp_path / "plan-keys"
    assert run_cli("keys", "generate", "--out", str(ring), cwd=tmp_path).returncode == 0
    env = {"QINGLONG_PLAN_KEYRING_FILE": str(ring), "QINGLONG_RECEIVERS_FILE": str(config)}
    async with cli_target.target(request.param, tmp_path, env) as made:
        assert made.run(made.admin, "migrate").returncode == 0
        yield made


def _request(t: Target, ref: str, receiver: str) -> str:
    """`approval create` of one POST to `receiver`, as the runtime login: its request id."""
    plan = t.cwd / f"{ref}.json"
    body = base64.b64encode(b'{"x":1}').decode("ascii")
    fields = {
        "schemaVersion": 1,
        "actionRef": ref,
        "projectId": "p1",
        "receiver": receiver,
        "method": "POST",
        "path": "/effects/x",
        "query": [],
        "headers": [],
        "body": body,
        "contentType": "application/json",
    }
    plan.write_text(json.dumps(fields), encoding="utf-8")
    created = json_out(
        t.run(
            t.runtime,
            "approval",
            "create",
            "--action",
            ACTION,
            "--plan",
            str(plan),
            "--requested-by",
            "alice",
            "--json",
        )
    )
    return str(created["approval_request_id"])


def _status(t: Target, request: str) -> str:
    shown = json_out(t.run(t.runtime, "approval", "show", request, "--json"))
    return str(shown["status"])


def _set_policies(t: Target) -> list[dict[str, Any]]:
    refused = t.run(
        t.admin, "policy", "set", "wild", "--action", ACTION, "--approvals", "2",
        "--target-prefix", "prod-*",
    )  # fmt: skip
    assert refused.returncode == 2, refused.stdout
    (line,) = error_lines(refused.stderr)
    assert "target prefix" in line, line
    assert "wildcard" in line, line
    assert "Traceback" not in refused.stderr
    for args in (
        ("prod", "--approvals", "2", "--target-prefix", "prod-"),
        ("default", "--approvals", "1"),
    ):
        done = t.run(t.admin, "policy", "set", args[0], "--action", ACTION, *args[1:])
        assert done.returncode == 0, done.stderr
    text = t.run(t.admin, "policy", "list")
    assert text.returncode == 0, text.stderr
    assert "prod@v1  http.request  *  target-prefix=prod-  approvals=2" in text.stdout
    assert "default@v1  http.request  *  target-prefix=-  approvals=1" in text.stdout
    shown = json_out(t.run(t.admin, "policy", "show", "prod", "--json"))
    assert shown["in_force"]["target_prefix"] == "prod-"
    listed: list[dict[str, Any]] = json_out(t.run(t.admin, "policy", "list", "--json"))
    return listed


@pytest.mark.slow
async def test_a_prod_target_needs_two_votes_and_a_staging_one_needs_one(target: Target) -> None:
    t = target
    listed = await anyio.to_thread.run_sync(_set_policies, t)
    assert [(p["name"], p["target_prefix"]) for p in listed] == [
        ("default", None),
        ("prod", "prod-"),
    ]
    prod = await anyio.to_thread.run_sync(_request, t, "to-prod", "prod-db")
    staging = await anyio.to_thread.run_sync(_request, t, "to-staging", "staging-db")
    if t.dialect == "postgres":

        def vote(login: list[str], request: str) -> str:
            done = t.run(login, "approval", "vote", request, "--approve")
            assert done.returncode == 0, done.stderr
            return done.stdout.strip()

        first = await anyio.to_thread.run_sync(vote, t.approver, prod)
        assert first == f"{prod} pending (1 of 2 approvals, 0 of 1 denials)"
        assert await anyio.to_thread.run_sync(vote, t.self_approver, prod) == f"{prod} approved"
        assert await anyio.to_thread.run_sync(vote, t.approver, staging) == f"{staging} approved"
    else:
        store = await stores.open_sqlite(t.cwd / "q.db", busy_timeout_s=5.0)
        try:
            alice, carol = [
                await store.acting_as(
                    principals.Authenticated(
                        token_id="tok_" + "1" * 16,
                        principal=who,
                        role=principals.TokenRole.APPROVER,
                    )
                )
                for who in ("alice", "carol")
            ]
            now, approve = clock.SystemClock(), approvals.Vote.APPROVE
            one_of_two = await voting.vote(alice, now, prod, approve)
            assert one_of_two.status is approvals.ApprovalStatus.PENDING
            two_of_two = await voting.vote(carol, now, prod, approve)
            assert two_of_two.status is approvals.ApprovalStatus.APPROVED
            one_of_one = await voting.vote(alice, now, staging, approve)
            assert one_of_one.status is approvals.ApprovalStatus.APPROVED
        finally:
            await store.close()
    assert await anyio.to_thread.run_sync(_status, t, prod) == "approved"
    assert await anyio.to_thread.run_sync(_status, t, staging) == "approved"
