"""The test HTTP receiver, a real process: idempotency-key semantics, auth, faults, durability."""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import http.client
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import receiver_client
from tests.support.receiver_client import Receiver

ROOT = Path(__file__).resolve().parents[2]
PATH = "/effects/silences"
BODY = b'{"matchers": [{"name": "alertname", "value": "Disk"}]}'
ORPHANING_PARENT = """
import pathlib, sys, time
from tests.support.receiver_client import Receiver
print(Receiver(pathlib.Path(sys.argv[1])).start().pid, flush=True)
time.sleep(60)
"""
"""A parent that starts a receiver, says its pid, and waits to be killed."""

Make = Callable[..., Receiver]


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Make]:
    """Start receivers with options; all are stopped after the test."""
    with receiver_client.receivers(tmp_path) as started:
        yield started


@pytest.fixture
def receiver(make: Make) -> Receiver:
    """A receiver with the default flags."""
    return make()


@pytest.fixture
def key() -> str:
    """A fresh idempotency key, as a dispatch would carry."""
    return "dispatch-" + secrets.token_hex(8)


def _fresh(answer: receiver_client.Answer) -> bool:
    """A 201 from an execution, not a replay."""
    return answer.status == 201 and not answer.replayed


def test_the_first_send_executes_once_and_answers_201_with_the_effect(
    receiver: Receiver, key: str
) -> None:
    answer = receiver.request("POST", PATH, BODY, key=key)
    assert _fresh(answer)
    (row,) = receiver.effects()
    assert answer.json() == {"effect_id": row["effect_id"], "key": key}
    assert row["method"] == "POST"
    assert row["path"] == PATH
    assert row["body_sha256"] == hashlib.sha256(BODY).hexdigest()
    assert row["body_length"] == len(BODY)
    assert receiver.executed(key) == 1


def test_a_replay_answers_the_stored_response_marked_replayed_and_does_not_execute(
    receiver: Receiver, key: str
) -> None:
    first = receiver.request("POST", PATH, BODY, key=key)
    again = receiver.request("POST", PATH, BODY, key=key)
    assert (again.status, again.replayed) == (201, True)
    assert again.body == first.body
    assert receiver.executed(key) == 1


def test_a_missing_key_is_a_400_problem_and_executes_nothing(receiver: Receiver) -> None:
    answer = receiver.request("POST", PATH, BODY)
    assert answer.status == 400
    assert answer.problem == "idempotency-key-missing"
    assert receiver.effects() == []


@pytest.mark.parametrize(
    "field",
    ["abc", '"abc', '"a\\b"', '""', '"a", "b"', "42", ":YWJj:", '"a" junk', '"a";Bad=1'],
)
def test_a_key_that_is_not_an_sf_string_is_a_400_problem(receiver: Receiver, field: str) -> None:
    answer = receiver.request("POST", PATH, BODY, {"Idempotency-Key": field})
    assert answer.status == 400
    assert answer.problem == "idempotency-key-malformed"
    assert receiver.effects() == []


def test_an_escaped_key_is_unescaped_and_its_parameters_are_ignored(receiver: Receiver) -> None:
    key = 'a"b\\c d'
    field = receiver_client.sf_string(key) + ';v=1;note="x"'
    assert receiver.request("POST", PATH, BODY, {"Idempotency-Key": field}).status == 201
    assert receiver.executed(key) == 1
    assert receiver.lookup(key).json()["key"] == key


def test_the_same_key_while_the_first_is_in_flight_is_a_409(receiver: Receiver, key: str) -> None:
    receiver.set_fault("hold_in_flight", seconds=0.8)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(receiver.request, "POST", PATH, BODY, key=key)
        receiver.wait_until_in_flight(key)
        second = receiver.request("POST", PATH, BODY, key=key)
        assert second.status == 409
        assert second.problem == "idempotency-key-in-flight"
        assert receiver.executed(key) == 0
        assert first.result().status == 201
    assert receiver.executed(key) == 1


def test_many_concurrent_sends_of_one_key_execute_once(receiver: Receiver, key: str) -> None:
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda _: receiver.request("POST", PATH, BODY, key=key), range(8)))
    assert len([a for a in answers if _fresh(a)]) == 1
    assert {a.status for a in answers} <= {201, 409}
    assert receiver.executed(key) == 1


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("POST", PATH, b"{}"), ("PUT", PATH, BODY), ("POST", "/effects/other", BODY)],
    ids=["other-bytes", "other-method", "other-path"],
)
def test_the_same_key_on_another_request_is_a_422(
    receiver: Receiver, key: str, method: str, path: str, body: bytes
) -> None:
    assert receiver.request("POST", PATH, BODY, key=key).status == 201
    answer = receiver.request(method, path, body, key=key)
    assert answer.status == 422
    assert answer.problem == "idempotency-key-reused"
    assert receiver.executed(key) == 1


def test_the_lookup_answers_a_completed_key_and_404_for_an_unknown_one(
    receiver: Receiver, key: str
) -> None:
    assert receiver.lookup(key).status == 404
    effect_id = receiver.request("POST", PATH, BODY, key=key).json()["effect_id"]
    assert receiver.lookup(key).json() == {
        "key": key,
        "status": "completed",
        "response_status": 201,
        "body_digest": hashlib.sha256(BODY).hexdigest(),
        "effect_id": effect_id,
    }


def test_a_key_is_forgotten_after_its_retention_and_then_executes_again(
    make: Make, key: str
) -> None:
    receiver = make(key_retention_s=1.0)
    assert receiver.request("POST", PATH, BODY, key=key).status == 201
    assert receiver.lookup(key).status == 200
    time.sleep(1.1)
    assert receiver.lookup(key).status == 404
    again = receiver.request("POST", PATH, BODY, key=key)
    assert _fresh(again)
    assert receiver.executed(key) == 2


def test_a_bearer_file_guards_effects_and_lookups_and_is_read_on_each_request(
    make: Make, tmp_path: Path, key: str
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("tok-one\n")
    receiver = make(bearer_file=token_file)
    refused = receiver.request("POST", PATH, BODY, key=key)
    assert refused.status == 401
    assert refused.headers["www-authenticate"] == "Bearer"
    wrong = {"Authorization": "Bearer tok-two"}
    assert receiver.request("POST", PATH, BODY, wrong, key=key).status == 401
    assert receiver.executed(key) == 0
    right = {"Authorization": "Bearer tok-one"}
    assert receiver.request("POST", PATH, BODY, right, key=key).status == 201
    assert receiver.lookup(key).status == 401
    assert receiver.lookup(key, right).status == 200
    token_file.write_text("tok-two\n")
    assert receiver.lookup(key, right).status == 401
    assert receiver.lookup(key, wrong).status == 200
    assert "tok-" not in receiver.log


def test_a_webhook_signature_is_accepted_and_a_bad_stale_or_missing_one_refused(
    make: Make, tmp_path: Path, key: str
) -> None:
    secret = receiver_client.new_webhook_secret()
    secret_file = tmp_path / "webhook-secret"
    secret_file.write_text(secret + "\n")
    receiver = make(webhook_secret_file=secret_file)
    signed = receiver_client.webhook_headers(secret, BODY, msg_id="msg-1")
    other_secret = receiver_client.new_webhook_secret()
    forged = receiver_client.webhook_headers(other_secret, BODY, msg_id="msg-1")
    stale = receiver_client.webhook_headers(
        secret, BODY, msg_id="msg-1", timestamp=int(time.time()) - 301
    )
    for refused in ({}, forged, stale, {**signed, "webhook-id": "msg-2"}):
        answer = receiver.request("POST", PATH, BODY, refused, key=key)
        assert answer.status == 401
        assert answer.problem == "webhook-signature"
    assert receiver.executed(key) == 0
    # A space-separated list passes when one v1 signature matches (keys being rotated).
    rotating = {**signed}
    rotating["webhook-signature"] = f"{forged['webhook-signature']} {signed['webhook-signature']}"
    assert receiver.request("POST", PATH, BODY, rotating, key=key).status == 201
    assert receiver.executed(key) == 1


def test_drop_after_commit_executes_then_closes_without_an_answer(
    receiver: Receiver, key: str
) -> None:
    receiver.set_fault("drop_after_commit")
    with pytest.raises(http.client.RemoteDisconnected):
        receiver.request("POST", PATH, BODY, key=key)
    assert receiver.executed(key) == 1
    again = receiver.request("POST", PATH, BODY, key=key)
    assert (again.status, again.replayed) == (201, True)
    assert receiver.executed(key) == 1


def test_stall_commits_before_the_late_answer(receiver: Receiver, key: str) -> None:
    receiver.set_fault("stall", seconds=0.8)
    with pytest.raises(TimeoutError):
        receiver.request("POST", PATH, BODY, key=key, timeout=0.4)
    assert receiver.executed(key) == 1
    started = time.monotonic()
    receiver.set_fault("stall", seconds=0.3)
    late = receiver.request("POST", PATH, BODY, key=key)
    assert time.monotonic() - started >= 0.3
    assert (late.status, late.replayed) == (201, True)
    assert receiver.executed(key) == 1


def test_error_after_commit_answers_500_and_a_replay_gets_the_stored_201(
    receiver: Receiver, key: str
) -> None:
    receiver.set_fault("error_after_commit")
    failed = receiver.request("POST", PATH, BODY, key=key)
    assert failed.status == 500
    assert failed.problem == "injected-error-after-commit"
    assert receiver.executed(key) == 1
    assert receiver.lookup(key).json()["response_status"] == 201
    again = receiver.request("POST", PATH, BODY, key=key)
    assert (again.status, again.replayed) == (201, True)
    assert again.json()["key"] == key
    assert receiver.executed(key) == 1


def test_close_mid_body_sends_half_the_promised_body_after_the_commit(
    receiver: Receiver, key: str
) -> None:
    receiver.set_fault("close_mid_body")
    with pytest.raises(http.client.IncompleteRead) as cut:
        receiver.request("POST", PATH, BODY, key=key)
    assert receiver.executed(key) == 1
    whole = receiver.request("POST", PATH, BODY, key=key).body
    assert cut.value.partial == whole[: len(whole) // 2]
    assert cut.value.expected == len(whole) - len(whole) // 2
    assert receiver.executed(key) == 1


def test_huge_answers_200_with_3_mib_after_the_commit(receiver: Receiver, key: str) -> None:
    receiver.set_fault("huge")
    answer = receiver.request("POST", PATH, BODY, key=key)
    assert answer.status == 200
    assert len(answer.body) == 3 * 1024 * 1024
    assert answer.json()["key"] == key
    assert receiver.executed(key) == 1


def test_error_before_answers_500_without_executing(receiver: Receiver, key: str) -> None:
    receiver.set_fault("error_before")
    failed = receiver.request("POST", PATH, BODY, key=key)
    assert (failed.status, failed.problem) == (500, "injected-error-before")
    assert receiver.executed(key) == 0
    assert receiver.lookup(key).status == 404
    retried = receiver.request("POST", PATH, BODY, key=key)
    assert _fresh(retried)
    assert receiver.executed(key) == 1


@pytest.mark.parametrize(
    ("status", "headers"),
    [(429, {"retry-after": "1"}), (302, {"location": "/effects/redirected"}), (403, {}), (400, {})],
)
def test_status_answers_the_given_code_without_executing(
    receiver: Receiver, key: str, status: int, headers: dict[str, str]
) -> None:
    receiver.set_fault("status", status=status)
    answer = receiver.request("POST", PATH, BODY, key=key)
    assert answer.status == status
    assert headers.items() <= answer.headers.items()
    assert receiver.executed(key) == 0
    assert receiver.lookup(key).status == 404


def test_a_fault_hits_the_next_count_requests_and_then_clears(receiver: Receiver, key: str) -> None:
    receiver.set_fault("error_before", count=2)
    statuses = [receiver.request("POST", PATH, BODY, key=key).status for _ in range(3)]
    assert statuses == [500, 500, 201]
    receiver.set_fault("error_before", count=5)
    receiver.set_fault("none")
    assert receiver.request("POST", PATH, BODY, key=key).status == 201


def test_a_fault_given_on_the_command_line_is_armed_at_start(tmp_path: Path, key: str) -> None:
    with Receiver(tmp_path / "flags.sqlite3", fault="status", fault_status=503) as receiver:
        assert receiver.request("POST", PATH, BODY, key=key).status == 503
        assert receiver.request("POST", PATH, BODY, key=key).status == 201
    assert receiver.stop() == 0  # the context manager stopped it, cleanly, with SIGTERM


@pytest.mark.parametrize(
    "fault",
    [{"mode": "sideways"}, {"mode": "stall", "count": 0}, {"mode": "status"}, {"count": 1}],
)
def test_a_bad_fault_is_refused_with_a_400(receiver: Receiver, fault: dict[str, object]) -> None:
    answer = receiver.request("POST", "/_control/faults", json.dumps(fault).encode())
    assert (answer.status, answer.problem) == (400, "bad-fault")


def test_the_control_endpoints_list_the_effects_and_answer_health(
    receiver: Receiver, key: str
) -> None:
    receiver.request("POST", PATH, BODY, key=key)
    assert receiver.get("/_control/effects").json() == receiver.effects()
    assert receiver.get("/_control/health").json() == {"status": "ok", "pid": receiver.pid}


def test_a_killed_receiver_keeps_its_record_and_replays_after_a_restart_on_its_port(
    receiver: Receiver, key: str
) -> None:
    first = receiver.request("POST", PATH, BODY, key=key)
    port = receiver.port
    receiver.kill()
    assert receiver.executed(key) == 1
    receiver.restart()
    assert receiver.port == port
    again = receiver.request("POST", PATH, BODY, key=key)
    assert (again.status, again.replayed) == (201, True)
    assert again.body == first.body
    assert receiver.executed(key) == 1


def test_a_key_in_flight_when_the_receiver_was_killed_executes_on_the_next_send(
    receiver: Receiver, key: str
) -> None:
    receiver.set_fault("hold_in_flight", seconds=10)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(receiver.request, "POST", PATH, BODY, key=key)
        receiver.wait_until_in_flight(key)
        receiver.kill()
        with pytest.raises(ConnectionError):
            first.result()
    receiver.restart()
    assert receiver.lookup(key).status == 404
    assert receiver.request("POST", PATH, BODY, key=key).status == 201
    assert receiver.executed(key) == 1


def test_the_receiver_exits_by_itself_when_its_parent_dies(tmp_path: Path) -> None:
    state = str(tmp_path / "orphan.sqlite3")
    command = [sys.executable, "-c", ORPHANING_PARENT, state]
    parent = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
    deadline = time.monotonic() + 5
    while _alive(child):
        if time.monotonic() > deadline:
            os.kill(child, signal.SIGKILL)
            pytest.fail("the receiver outlived its parent")
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    """Running, not merely a zombie its new parent has yet to reap."""
    with contextlib.suppress(FileNotFoundError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    return False
