"""On the edge profile the file's owner is the authority: the principal recorded is the
effective uid's name whatever the environment says, and the files SQLite writes are private
to that uid (0600 in a 0700 folder) whatever the umask."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

from tests.support.cli import json_out, run_cli
from tests.support.daemon import free_port, ready, running, wait_until

SUBMIT = ("submit", "run-create", "--project", "p1", "--task", "t1", "--revision", "1")
FORGED = {"LOGNAME": "mallory", "USER": "mallory", "USERNAME": "mallory"}


def _euid_name() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    """The umask every subprocess started inside inherits (the common 022: files 0644)."""
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def test_an_approval_records_the_effective_uid_not_the_logname_the_caller_set(
    tmp_path: Path,
) -> None:
    assert _euid_name() != "mallory"
    assert run_cli("migrate", cwd=tmp_path, env=FORGED).returncode == 0
    json_out(run_cli(*SUBMIT, "--json", cwd=tmp_path, env=FORGED))
    conn = sqlite3.connect(tmp_path / "var" / "qinglong.db")
    try:
        approvals = conn.execute(
            "SELECT requested_principal, decided_principal, consumed_principal"
            " FROM approval_requests"
        ).fetchall()
        audited = {row[0] for row in conn.execute("SELECT principal FROM security_audit_events")}
    finally:
        conn.close()
    assert approvals == [(_euid_name(), _euid_name(), _euid_name())]
    assert audited == {_euid_name()}


def test_a_new_database_is_0600_in_a_new_0700_folder_under_umask_022(tmp_path: Path) -> None:
    database = tmp_path / "new" / "deeper" / "q.db"
    env = {"QINGLONG_DATABASE_URL": f"sqlite:///{database}"}
    with _umask(0o022):
        assert run_cli("migrate", cwd=tmp_path, env=env).returncode == 0
    assert _mode(database) == 0o600
    assert _mode(database.parent) == 0o700
    assert _mode(database.parent.parent) == 0o700


def test_the_wal_and_shm_files_of_a_running_daemon_are_0600_under_umask_022(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = {"QINGLONG_CADENCE_SECONDS": "0.05", "QINGLONG_METRICS_PORT": str(port)}
    database = tmp_path / "var" / "qinglong.db"
    with _umask(0o022):
        assert run_cli("migrate", cwd=tmp_path).returncode == 0
        with running(tmp_path, env) as daemon:
            wait_until(lambda: ready(port), timeout=30)
            sidecars = [database.with_name(database.name + s) for s in ("-wal", "-shm")]
            wait_until(lambda: all(p.exists() for p in sidecars), timeout=10)
            modes = {p.name: _mode(p) for p in [database, *sidecars]}
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(timeout=30) == 0
    assert modes == {"qinglong.db": 0o600, "qinglong.db-wal": 0o600, "qinglong.db-shm": 0o600}
    assert _mode(database.parent) == 0o700


def test_an_existing_folder_keeps_the_mode_its_owner_gave_it(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    env = {"QINGLONG_DATABASE_URL": f"sqlite:///{shared / 'q.db'}"}
    with _umask(0o022):
        assert run_cli("migrate", cwd=tmp_path, env=env).returncode == 0
    assert _mode(shared) == 0o755
    assert _mode(shared / "q.db") == 0o600
