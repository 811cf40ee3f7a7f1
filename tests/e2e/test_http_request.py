"""`http.request` end to end, on SQLite and PostgreSQL: the real console script sends approved
requests to a real receiver process (stored results per key, faults on demand), the receipt
commits with the completion, an uncertain answer waits in `recovery_required` until the
receiver's own record settles it, and the bearer secret is found nowhere but on the wire.
"""

from __future__ import annotations

import base64
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

from tests.support import cli_target, daemon, stores
from tests.support.cli import json_out, run_cli
from tests.support.cli_target import Target
from tests.support.receiver_client import Receiver, receivers

ACTION = "http.request"
MARKER = "customer-4e1b-marker"
FIRST_BODY = f'{{"matchers":[{{"name":"alertname","value":"{MARKER}"}}]}}'.encode()


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[Receiver, str]]:
    """A receiver that demands a bearer token, and the token (unique to this test)."""
    token = f"tok-{uuid.uuid4().hex}"
    bearer = tmp_path / "bearer"
    bearer.write_text(token, encoding="utf-8")
    with receivers(tmp_path) as make:
        yield make(bearer_file=bearer), token


@pytest.fixture(params=stores.DIALECTS)
async def target(
    request: pytest.FixtureRequest, tmp_path: Path, receiver: tuple[Receiver, str]
) -> AsyncIterator[Target]:
    the_receiver, token = receiver
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "receiver-token").write_text(token + "\n", encoding="utf-8")
    config = tmp_path / "receivers.toml"
    config.write_text(
        f"""
[receivers.orders]
base_url = "{the_receiver.url}"
methods = ["POST"]
path_prefixes = ["/effects/"]
connect_timeout_seconds = 0.5
read_timeout_seconds = 0.8
total_timeout_seconds = 1.0
keep_headers = ["idempotency-replayed"]
auth = "credential:receiver-token"

[receivers.orders.idempotency]
dedupes = true
key_retention_seconds = 3600
lookup = "get"
lookup_path = "/idempotency/{{key}}"
""",
        encoding="utf-8",
    )
    ring = tmp_path / "plan-keys"
    assert run_cli("keys", "generate", "--out", str(ring), cwd=tmp_path).returncode == 0
    env = {
        "QINGLONG_PLAN_KEYRING_FILE": str(ring),
        "QINGLONG_RECEIVERS_FILE": str(config),
        "CREDENTIALS_DIRECTORY": str(credentials),
        # A short lease, so that an uncertain send reaches recovery quickly.
        "QINGLONG_LEASE_SECONDS": "2",
        "QINGLONG_EXECUTE_TIMEOUT_SECONDS": "1.5",
        "QINGLONG_LOG_LEVEL": "debug",
    }
    async with cli_target.target(request.param, tmp_path, env) as made:
        yield made


def _dispatch(t: Target, ref: str, body: bytes) -> str:
    """Approve and consume one POST of `body` to the receiver: its dispatch id."""
    return t.dispatch(
        ACTION,
        ref,
        {
            "projectId": "p1",
            "receiver": "orders",
            "method": "POST",
            "path": "/effects/silences",
            "query": [],
            "headers": [],
            "body": base64.b64encode(body).decode("ascii"),
            "contentType": "application/json",
        },
    )


def _show(t: Target, dispatch_id: str) -> dict[str, Any]:
    return t.show(dispatch_id)


def _outcome_counted(port: int) -> str | None:
    status, page = daemon.get(port, "/metrics")
    return page if status == 200 and 'action_type="http.request"' in page else None


def _settle_by_evidence(t: Target, dispatch_id: str) -> dict[str, Any]:
    """Tick until the reconciler has settled `dispatch_id` (its lease must run out first)."""
    deadline = time.monotonic() + 30
    while True:
        json_out(t.run(t.runtime, "tick", "--once", "--json"))
        shown = _show(t, dispatch_id)
        if shown["execution"]["status"] != "executing":
            return shown
        assert time.monotonic() < deadline, "recovery never settled the uncertain send"
        time.sleep(0.3)


def _end_to_end(t: Target, receiver: Receiver) -> None:
    assert t.run(t.admin, "migrate").returncode == 0
    sent = _dispatch(t, "silence-1", FIRST_BODY)
    assert receiver.executed(sent) == 0  # approving and consuming sent nothing

    ticked = json_out(t.run(t.runtime, "tick", "--once", "--json"))
    assert ticked["outcomes"] == {"succeeded": 1}
    assert receiver.executed(sent) == 1
    (effect,) = receiver.effects()
    assert effect["body_sha256"] == _sha256(FIRST_BODY)  # the marker reached the receiver
    shown = _show(t, sent)
    assert shown["execution"]["result_code"] == "http_201"
    receipt = shown["execution"]["receipt"]
    assert (receipt["status"], receipt["replayed"]) == (201, False)
    assert len(receipt["bodyDigest"]) == 64
    plan = shown["plan"]
    assert {k: plan[k] for k in ("projectId", "receiver", "method", "path")} == {
        "projectId": "p1",
        "receiver": "orders",
        "method": "POST",
        "path": "/effects/silences",
    }
    # The request's query, headers and body only as their size and digest prefix.
    assert all(plan[k]["redacted"] is True for k in ("query", "headers", "body"))

    # The receiver commits, then answers 500: uncertain, never resent by the dispatcher; the
    # receiver's record of the key settles it once the lease has run out.
    receiver.set_fault("error_after_commit")
    uncertain = _dispatch(t, "silence-2", b'{"matchers":[]}')
    ticked = json_out(t.run(t.runtime, "tick", "--once", "--json"))
    assert ticked["outcomes"] == {"uncertain": 1}
    shown = _show(t, uncertain)
    assert shown["execution"]["status"] == "executing"
    # What the daemon knew is kept: the status, and that the receiver answered.
    assert shown["uncertain"]["result_code"] == "http_500"
    assert {k: shown["uncertain"]["evidence"][k] for k in ("status", "error", "sends")} == {
        "status": 500,
        "error": None,
        "sends": 1,
    }
    settled = _settle_by_evidence(t, uncertain)
    assert settled["execution"]["status"] == "succeeded"
    assert settled["resolution"]["source"] == "evidence"
    assert receiver.executed(uncertain) == 1

    # A 422 proves nothing happened under this receiver's profile: failed, with its receipt.
    receiver.set_fault("status", status=422)
    refused = _dispatch(t, "silence-3", b"{}")
    ticked = json_out(t.run(t.runtime, "tick", "--once", "--json"))
    assert ticked["outcomes"] == {"failed": 1}
    shown = _show(t, refused)
    assert (shown["execution"]["result_code"], shown["execution"]["receipt"]["status"]) == (
        "http_422",
        422,
    )
    assert receiver.executed(refused) == 0

    # The receiver commits, then stalls past the read timeout: uncertain, and settled too.
    receiver.set_fault("stall", seconds=2.0)
    stalled = _dispatch(t, "silence-4", b'{"comment":"stalled"}')
    ticked = json_out(t.run(t.runtime, "tick", "--once", "--json"))
    assert ticked["outcomes"] == {"uncertain": 1}
    # The response was lost: the transport error and how far the request got are kept.
    lost = _show(t, stalled)["uncertain"]
    assert (lost["result_code"], lost["evidence"]["error"], lost["evidence"]["status"]) == (
        "read_timeout",
        "read_timeout",
        None,
    )
    assert lost["evidence"]["reached"].startswith("connected: the request may have been delivered")
    text = t.run(t.runtime, "dispatch", "show", stalled).stdout
    assert "transport error: read_timeout" in text
    assert "how far it got: connected" in text
    settled = _settle_by_evidence(t, stalled)
    assert settled["resolution"]["source"] == "evidence"
    assert settled["verdicts"][0].startswith("receiver says: completed (verified at ")
    assert [e["to_status"] for e in settled["events"]][-2:] == ["recovery_required", "succeeded"]

    # Nothing is ever sent twice: another tick finds nothing due.
    assert json_out(t.run(t.runtime, "tick", "--once", "--json"))["outcomes"] == {}
    assert [receiver.executed(d) for d in (sent, uncertain, refused, stalled)] == [1, 1, 0, 1]

    # The daemon sends one more and serves its metrics page; its log and page are read too.
    daemon_sent = _dispatch(t, "silence-5", b'{"comment":"by the daemon"}')
    port = daemon.free_port()
    login = t.runtime[t.runtime.index("--database") + 1]
    env = {
        **t.env,
        "QINGLONG_DATABASE_URL": login,
        "QINGLONG_METRICS_PORT": str(port),
        "QINGLONG_CADENCE_SECONDS": "0.2",
    }
    if t.dialect == "postgres":
        env["QINGLONG_PROFILE"] = "cluster"
    with daemon.running(t.cwd, env) as running:
        daemon.wait_until(lambda: receiver.executed(daemon_sent) == 1)
        # The outcome is counted once the completion is written, a moment after the effect.
        page = daemon.wait_until(lambda: _outcome_counted(port))
        assert page is not None
        running.send_signal(signal.SIGTERM)
        assert running.wait(timeout=30) == 0
        t.printed += [page, running.stderr]


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


@pytest.mark.slow
async def test_approved_requests_are_sent_once_receipted_and_recovered_by_the_receivers_record(
    target: Target, receiver: tuple[Receiver, str]
) -> None:
    the_receiver, token = receiver
    await anyio.to_thread.run_sync(_end_to_end, target, the_receiver)
    # The secret went over the wire (the receiver refuses a request without it) and nowhere
    # else: not in any output or log line at debug level, nor in the database.
    stored = await anyio.to_thread.run_sync(target.stored_bytes)
    # The plan is sealed at rest: its body is in no output, log or stored byte either.
    for secret in (token, MARKER, base64.b64encode(FIRST_BODY).decode()):
        assert all(secret not in text for text in target.printed)
        assert secret.encode() not in stored
