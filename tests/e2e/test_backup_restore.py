"""The backup and restore of docs/operations.md, as written: a live edge database copied by
`backup` while the daemon drains and a submitter writes, the key ring copied beside it,
both restored into a fresh place, and a daemon there runs every plan the copy holds, readable,
nothing committed before the backup lost."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from pathlib import Path

import pytest

from tests.support.cli import error_lines, json_out, run_cli
from tests.support.daemon import free_port, ready, running, wait_until

EXECUTIONS = "approved_action_dispatch_executions"


def _counts(database: Path) -> dict[str, int]:
    """Dispatches per status, as committed (a reader of its own: WAL lets it beside writers)."""
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)
    try:
        rows = conn.execute(f"SELECT status, count(*) FROM {EXECUTIONS} GROUP BY status")
        return {str(status): int(n) for status, n in rows}
    finally:
        conn.close()


def _submit(cwd: Path, env: dict[str, str], first: int, n: int) -> None:
    jsonl = cwd / f"plans-{first}.jsonl"
    jsonl.write_text(
        "".join(
            f'{{"projectId":"p","taskId":"t{i}","taskRevision":{i}}}\n'
            for i in range(first, first + n)
        ),
        encoding="utf-8",
    )
    done = run_cli("submit", "run-create", "--from-jsonl", str(jsonl), cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_a_live_database_and_its_ring_are_backed_up_and_restored_with_nothing_lost(
    tmp_path: Path,
) -> None:
    live = tmp_path / "live"
    (live / "var").mkdir(parents=True, mode=0o700)  # as `make run` makes it
    ring = live / "var" / "plan-keys"
    assert run_cli("keys", "generate", "--out", str(ring), cwd=live).returncode == 0
    # A short lease: a dispatch caught mid-execute by the backup settles soon after restore.
    env = {
        "QINGLONG_PLAN_KEYRING_FILE": str(ring),
        "QINGLONG_CADENCE_SECONDS": "0.05",
        "QINGLONG_LEASE_SECONDS": "2",
        "QINGLONG_EXECUTE_TIMEOUT_SECONDS": "1",
        "QINGLONG_RECONCILE_SECONDS": "0.5",
    }
    assert run_cli("migrate", cwd=live, env=env).returncode == 0
    database = live / "var" / "qinglong.db"
    _submit(live, env, 0, 300)
    port = free_port()
    writing = threading.Event()
    writing.set()

    def submitter() -> None:  # a second writer beside the daemon
        first = 1000
        while writing.is_set():
            _submit(live, env, first, 20)
            first += 20

    # One dispatch a tick: the backup is taken mid-drain.
    slow = {
        "QINGLONG_PAGE_SIZE": "1",
        "QINGLONG_PASSAGE_PAGE_SIZE": "1",
        "QINGLONG_MAX_PAGES_PER_TICK": "1",
    }
    # A reader holding an old snapshot (any long read does) keeps every later commit in the
    # WAL, unmerged: a copy of the main file alone would miss them.
    reader = sqlite3.connect(f"file:{database}?mode=ro", uri=True, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute(f"SELECT count(*) FROM {EXECUTIONS}").fetchone()
    with running(live, {**env, **slow, "QINGLONG_METRICS_PORT": str(port)}) as daemon:
        wait_until(lambda: ready(port))
        thread = threading.Thread(target=submitter, daemon=True)
        thread.start()
        wait_until(lambda: _counts(database).get("succeeded", 0) >= 20)
        before = _counts(database)  # committed before the backup began
        backup = tmp_path / "backups" / "qinglong.db"
        backup.parent.mkdir(mode=0o700)
        made = json_out(run_cli("backup", "--out", str(backup), "--json", cwd=live, env=env))
        assert made["bytes"] == backup.stat().st_size > 0
        ring_copy = tmp_path / "backups" / "plan-keys"
        shutil.copy(ring, ring_copy)  # the ring, backed up beside the database (0600 kept)
        after = _counts(database)
        writing.clear()
        thread.join(timeout=60)
        reader.close()
        assert daemon.poll() is None, daemon.stderr
    copied = _counts(backup)
    assert backup.stat().st_mode & 0o777 == 0o600
    assert not backup.with_name("qinglong.db-wal").exists()  # one self-contained file
    # Nothing committed before the backup is missing, nothing after its end is in it.
    assert sum(copied.values()) >= sum(before.values())
    assert copied.get("succeeded", 0) >= before.get("succeeded", 0)
    assert sum(copied.values()) <= sum(after.values())
    assert sum(copied.values()) > copied.get("succeeded", 0)  # work was still in flight
    # A second backup never overwrites the first.
    again = run_cli("backup", "--out", str(backup), cwd=live, env=env)
    assert again.returncode == 78
    assert len(error_lines(again.stderr)) == 1

    # Restore, as docs/operations.md says: both files into a fresh place, then migrate and run.
    fresh = tmp_path / "fresh" / "var"
    fresh.mkdir(parents=True, mode=0o700)
    shutil.copy(backup, fresh / "qinglong.db")
    shutil.copy(ring_copy, fresh / "plan-keys")
    restored_env = {**env, "QINGLONG_PLAN_KEYRING_FILE": str(fresh / "plan-keys")}
    assert run_cli("migrate", cwd=fresh.parent, env=restored_env).returncode == 0
    port = free_port()
    with running(fresh.parent, {**restored_env, "QINGLONG_METRICS_PORT": str(port)}) as daemon:
        wait_until(lambda: ready(port))
        total = sum(copied.values())
        wait_until(lambda: _counts(fresh / "qinglong.db").get("succeeded", 0) == total, 90)
        assert daemon.poll() is None, daemon.stderr
    check = json_out(run_cli("keys", "check", "--json", cwd=fresh.parent, env=restored_env))
    assert (check["ok"], check["clear"], check["checked"]) == (True, 0, total)


def test_a_backup_of_nothing_or_of_a_cluster_is_refused_in_one_line_writing_nothing(
    tmp_path: Path,
) -> None:
    out = tmp_path / "backups" / "copy.db"
    missing = run_cli("backup", "--out", str(out), cwd=tmp_path)  # no ./var/qinglong.db
    assert missing.returncode == 69, missing.stderr
    (line,) = error_lines(missing.stderr)
    assert "does not exist" in line
    cluster = run_cli(
        "--profile",
        "cluster",
        "--database",
        "postgresql://nobody@127.0.0.1:1/none",
        "backup",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert cluster.returncode == 2, cluster.stderr
    (line,) = error_lines(cluster.stderr)
    assert "pg_basebackup" in line
    assert not out.parent.exists()  # nothing written, not even the folder
    assert "Traceback" not in missing.stderr + cluster.stderr
