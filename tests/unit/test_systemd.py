"""sd_notify over a real datagram socket the test binds: path and abstract addresses."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from qinglong_dispatcher.lifecycle import systemd


class Receiver:
    """A bound AF_UNIX datagram socket standing in for systemd's notify socket."""

    def __init__(self, sock: socket.socket, notify_socket: str) -> None:
        self.sock = sock
        self.notify_socket = notify_socket

    def receive(self) -> str:
        return self.sock.recv(4096).decode()

    def nothing_pending(self) -> bool:
        self.sock.setblocking(False)
        try:
            self.sock.recv(4096)
        except BlockingIOError:
            return True
        finally:
            self.sock.setblocking(True)
        return False


def _bind(address: str, notify_socket: str) -> Iterator[Receiver]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.settimeout(5)
    try:
        sock.bind(address)
        yield Receiver(sock, notify_socket)
    finally:
        sock.close()


@pytest.fixture(params=["path", "abstract"])
def receiver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Receiver]:
    if request.param == "path":
        path = str(tmp_path / "notify.sock")
        yield from _bind(path, path)
    else:
        name = f"qinglong-test-{uuid.uuid4().hex}"
        yield from _bind("\0" + name, "@" + name)


def test_every_message_reaches_the_socket(receiver: Receiver) -> None:
    environ = {"NOTIFY_SOCKET": receiver.notify_socket, "WATCHDOG_USEC": "30000000"}
    notifier = systemd.Notifier(environ)
    assert notifier.enabled
    assert notifier.watchdog_interval_s == 15.0

    notifier.ready("edge: 0 due")
    assert receiver.receive() == "READY=1\nSTATUS=edge: 0 due"
    notifier.ready()
    assert receiver.receive() == "READY=1"
    notifier.watchdog()
    assert receiver.receive() == "WATCHDOG=1"
    notifier.status("ticking\nevery 5 s")  # a newline would start a bogus assignment
    assert receiver.receive() == "STATUS=ticking every 5 s"
    notifier.stopping("draining 2 executes")
    assert receiver.receive() == "STOPPING=1\nSTATUS=draining 2 executes"
    notifier.extend_timeout(12.5)
    assert receiver.receive() == "EXTEND_TIMEOUT_USEC=12500000"
    notifier.close()
    notifier.watchdog()  # a closed notifier opens a new socket
    assert receiver.receive() == "WATCHDOG=1"
    notifier.close()


def test_watchdog_pid_of_another_process_disables_the_watchdog(receiver: Receiver) -> None:
    environ = {
        "NOTIFY_SOCKET": receiver.notify_socket,
        "WATCHDOG_USEC": "30000000",
        "WATCHDOG_PID": str(os.getpid() + 1),
    }
    notifier = systemd.Notifier(environ)
    assert notifier.watchdog_interval_s is None
    notifier.watchdog()
    assert receiver.nothing_pending()
    notifier.ready()  # the rest still goes out
    assert receiver.receive() == "READY=1"
    notifier.close()


def test_watchdog_pid_of_this_process_keeps_it(receiver: Receiver) -> None:
    environ = {
        "NOTIFY_SOCKET": receiver.notify_socket,
        "WATCHDOG_USEC": "2000000",
        "WATCHDOG_PID": str(os.getpid()),
    }
    notifier = systemd.Notifier(environ)
    assert notifier.watchdog_interval_s == 1.0
    notifier.watchdog()
    assert receiver.receive() == "WATCHDOG=1"
    notifier.close()


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"WATCHDOG_USEC": "0"},
        {"WATCHDOG_USEC": "soon"},
        {"WATCHDOG_USEC": "5", "WATCHDOG_PID": "x"},
    ],
)
def test_no_usable_watchdog_usec_means_no_watchdog(
    receiver: Receiver, extra: dict[str, str]
) -> None:
    notifier = systemd.Notifier({"NOTIFY_SOCKET": receiver.notify_socket, **extra})
    assert notifier.watchdog_interval_s is None
    notifier.watchdog()
    assert receiver.nothing_pending()


def test_absent_notify_socket_is_a_no_op() -> None:
    notifier = systemd.Notifier({"WATCHDOG_USEC": "30000000"})
    assert not notifier.enabled
    assert notifier.watchdog_interval_s is None
    notifier.ready("x")
    notifier.watchdog()
    notifier.status("x")
    notifier.stopping()
    notifier.extend_timeout(1)
    notifier.close()


def test_the_process_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert not systemd.Notifier().enabled


def test_a_failing_send_never_raises_and_logs_once(tmp_path: Path) -> None:
    environ = {"NOTIFY_SOCKET": str(tmp_path / "nobody-listens.sock")}
    notifier = systemd.Notifier(environ)
    with structlog.testing.capture_logs() as logs:
        notifier.ready()
        notifier.status("still nobody")
        notifier.stopping()
    failures = [entry for entry in logs if entry["event"] == "systemd.notify_failed"]
    assert len(failures) == 1
    assert failures[0]["notice"] == "READY"


def test_logging_resumes_after_a_success(tmp_path: Path) -> None:
    path = tmp_path / "late.sock"
    notifier = systemd.Notifier({"NOTIFY_SOCKET": str(path)})
    with structlog.testing.capture_logs() as logs:
        notifier.ready()
        for receiver in _bind(str(path), str(path)):
            notifier.status("up")
            assert receiver.receive() == "STATUS=up"
        path.unlink()
        notifier.stopping()
    assert [entry["event"] for entry in logs] == ["systemd.notify_failed"] * 2


def test_an_unsupported_address_is_disabled() -> None:
    with structlog.testing.capture_logs() as logs:
        notifier = systemd.Notifier({"NOTIFY_SOCKET": "vsock:2:1234"})
    assert not notifier.enabled
    assert [entry["event"] for entry in logs] == ["systemd.notify_socket_unsupported"]
