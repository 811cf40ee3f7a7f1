"""`audit export --syslog` through the real console script, to a real UDP receiver and a real
local datagram socket: one RFC 5424 message per record, parsed back to the same records."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.cli import error_lines, run_cli
from tests.support.clock import ManualClock
from tests.unit.test_audit_formats import parse_syslog

EPOCH = "1970-01-01T00:00:00Z"


@contextlib.contextmanager
def receiver(family: socket.AddressFamily, bind: Any) -> Iterator[socket.socket]:
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.bind(bind)
        sock.settimeout(5)
        yield sock
    finally:
        sock.close()


def frames(sock: socket.socket, count: int) -> list[dict[str, Any]]:
    return [parse_syslog(sock.recv(65536)) for _ in range(count)]


@pytest.mark.slow
async def test_each_record_is_one_rfc5424_message_over_udp_and_a_local_socket(
    tmp_path: Path,
) -> None:
    db = tmp_path / "q.db"
    login = ["--profile", "edge", "--database", f"sqlite:///{db}"]
    assert run_cli("migrate", *login, cwd=tmp_path).returncode == 0
    store = await stores.open_sqlite(db, create=False)
    try:
        await submit_runs(store, ManualClock(), 2)
    finally:
        await store.close()
    printed = run_cli("audit", "export", "--since", EPOCH, *login, cwd=tmp_path)
    records = [json.loads(line) for line in printed.stdout.splitlines()]
    assert len(records) == 8

    with receiver(socket.AF_INET, ("127.0.0.1", 0)) as udp:
        port = udp.getsockname()[1]
        sent = run_cli(
            "audit",
            "export",
            "--since",
            EPOCH,
            "--syslog",
            f"udp://127.0.0.1:{port}",
            *login,
            cwd=tmp_path,
        )
        assert sent.returncode == 0, sent.stderr
        assert sent.stdout == ""
        got = frames(udp, len(records))
    assert [frame["record"] for frame in got] == records
    assert {frame["app"] for frame in got} == {"qinglong-dispatcher"}
    assert [frame["msgid"] for frame in got] == [r["kind"] for r in records]
    assert f"resume with --after {records[-1]['cursor']}" in sent.stderr

    path = tmp_path / "log.sock"
    with receiver(socket.AF_UNIX, str(path)) as local:
        sent = run_cli(
            "audit",
            "export",
            "--after",
            records[3]["cursor"],
            "--syslog",
            f"unix://{path}",
            *login,
            cwd=tmp_path,
        )
        assert sent.returncode == 0, sent.stderr
        got = frames(local, len(records) - 4)
    assert [frame["record"] for frame in got] == records[4:]
    assert all(f'cursor="{r["cursor"]}"' in f["sd"] for f, r in zip(got, records[4:], strict=True))


@pytest.mark.slow
def test_a_receiver_that_is_gone_stops_the_export_with_one_line_and_exit_69(
    tmp_path: Path,
) -> None:
    db = tmp_path / "q.db"
    login = ["--profile", "edge", "--database", f"sqlite:///{db}"]
    assert run_cli("migrate", *login, cwd=tmp_path).returncode == 0
    assert (
        run_cli(
            "submit",
            "run-create",
            "--project",
            "p",
            "--task",
            "t",
            "--revision",
            "1",
            *login,
            cwd=tmp_path,
        ).returncode
        == 0
    )
    sent = run_cli(
        "audit",
        "export",
        "--since",
        EPOCH,
        "--syslog",
        f"unix://{tmp_path / 'absent.sock'}",
        *login,
        cwd=tmp_path,
    )
    assert sent.returncode == 69, sent.stderr
    assert error_lines(sent.stderr) == [
        "qinglong-dispatcher: error: syslog: cannot send to the receiver (FileNotFoundError)",
        "qinglong-dispatcher: audit export: resume with --after 0.0",
    ]
