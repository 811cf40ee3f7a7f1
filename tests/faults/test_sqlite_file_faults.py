"""The SQLite file itself under faults: damaged pages, a torn WAL tail, weakened pragmas.

A damaged copy (pages in the middle overwritten with random bytes) must be refused by `run`
and `tick` at start, one line naming the file, exit 69, before anything is claimed. A WAL
whose last frame was torn by a crash mid-commit loses only that unacknowledged transaction.
A connection that is not WAL with synchronous=FULL is refused by `run` and `tick` (exit 78).
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.cli import error_lines, run_cli
from tests.support.clock import ManualClock
from tests.support.daemon import clean_env, free_port
from tests.support.sqlite_files import execution_statuses

REPO = Path(__file__).resolve().parents[2]
WAL_HEADER = 32
FRAME_HEADER = 24


def _migrated_with_dispatches(tmp_path: Path, count: int) -> Path:
    assert run_cli("migrate", cwd=tmp_path).returncode == 0
    lines = [f'{{"projectId":"p","taskId":"t{i}","taskRevision":{i}}}' for i in range(count)]
    (tmp_path / "plans.jsonl").write_text("\n".join(lines))
    submitted = run_cli("submit", "run-create", "--from-jsonl", "plans.jsonl", cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    return tmp_path / "var" / "qinglong.db"


def _damage(path: Path, rng: random.Random) -> list[int]:
    """Overwrite three pages in the middle of the file with random bytes; their numbers."""
    conn = sqlite3.connect(path)
    try:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
    finally:
        conn.close()
    middle = pages // 2
    damaged = [middle, middle + 1, middle + 2]
    with path.open("r+b") as f:
        for page in damaged:
            f.seek((page - 1) * page_size)
            f.write(rng.randbytes(page_size))
    return damaged


@pytest.mark.slow
def test_run_and_tick_refuse_a_damaged_copy_with_one_line_naming_it(tmp_path: Path) -> None:
    original = _migrated_with_dispatches(tmp_path, 400)
    assert not Path(f"{original}-wal").exists() or Path(f"{original}-wal").stat().st_size == 0
    copy = tmp_path / "copy.db"
    shutil.copyfile(original, copy)
    _damage(copy, random.Random(7))
    url = ["--database", f"sqlite:///{copy}"]
    before = copy.read_bytes()

    for command in (("tick", "--once"), ("run",)):
        port = str(free_port())
        result = run_cli(*url, *command, cwd=tmp_path, env={"QINGLONG_METRICS_PORT": port})
        assert result.returncode == 69, (result.returncode, result.stderr)
        lines = error_lines(result.stderr)
        assert len(lines) == 1, result.stderr
        assert str(copy) in lines[0]
        assert "damaged" in lines[0]
        assert "Traceback" not in result.stderr
        assert result.stdout == ""
    assert copy.read_bytes() == before  # refused before anything was written
    # The same commands on the undamaged original work: the refusal is the damage's.
    assert run_cli("tick", "--once", cwd=tmp_path).returncode == 0
    assert execution_statuses(original).get("succeeded", 0) > 0


@pytest.mark.parametrize("tear", ["first_frame_header", "first_frame_page", "commit_frame"])
async def test_a_torn_wal_tail_loses_only_the_unacknowledged_commit(
    tmp_path: Path, clock: ManualClock, tear: str
) -> None:
    path = tmp_path / "q.db"
    store = await stores.open_sqlite(path)
    try:
        await store.migrate(now_ms=clock.now_ms())
        # Start from an empty WAL, so every frame in it belongs to the commits below.
        await store.db.read(lambda c: c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall())
        acknowledged: list[str] = []
        for _ in range(5):
            acknowledged += [c.dispatch_id for c in await submit_runs(store, clock, 3)]
        acknowledged_size = _size(f"{path}-wal")
        # The last commit: its frames are in the WAL when a crash tears its final frame.
        torn = [c.dispatch_id for c in await submit_runs(store, clock, 3)]
        crash = tmp_path / "crash"
        crash.mkdir()
        # What a power cut leaves: the file and its WAL as they are on disk (copied while
        # the connection is open, so nothing is checkpointed or removed first).
        for suffix in ("", "-wal"):
            shutil.copyfile(f"{path}{suffix}", crash / f"q.db{suffix}")
        page_size = await store.db.read(lambda c: c.execute("PRAGMA page_size").fetchone()[0])
    finally:
        await store.close()

    full_size = _size(crash / "q.db-wal")
    frame = FRAME_HEADER + page_size
    assert full_size > acknowledged_size >= WAL_HEADER + frame
    assert (full_size - WAL_HEADER) % frame == 0
    intact = tmp_path / "intact"
    shutil.copytree(crash, intact)
    assert (full_size - acknowledged_size) // frame >= 2  # the last commit spans frames
    # The crash tore the last transaction's frames somewhere: in its first frame's header, in
    # its first page, or in its final (commit) frame; every earlier frame is whole.
    cut = {
        "first_frame_header": acknowledged_size + FRAME_HEADER // 2,
        "first_frame_page": acknowledged_size + FRAME_HEADER + page_size // 2,
        "commit_frame": full_size - frame // 2,
    }[tear]
    os.truncate(crash / "q.db-wal", cut)

    assert set(_present(intact / "q.db", acknowledged + torn)) == set(acknowledged + torn)
    reopened = await stores.open_sqlite(crash / "q.db", create=False)
    try:
        await reopened.check_integrity()
        (await reopened.schema_state()).require_current()
    finally:
        await reopened.close()
    present = _present(crash / "q.db", acknowledged + torn)
    assert set(present) == set(acknowledged), "an acknowledged commit was lost, or a torn one kept"
    conn = sqlite3.connect(crash / "q.db")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


def _size(path: str | Path) -> int:
    return Path(path).stat().st_size


def _present(path: Path, dispatch_ids: list[str]) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        marks = ",".join("?" * len(dispatch_ids))
        return [
            row[0]
            for row in conn.execute(
                "SELECT e.dispatch_id FROM approved_action_dispatch_executions e "
                "JOIN approved_action_dispatches d USING (dispatch_id) "
                f"WHERE e.dispatch_id IN ({marks}) AND e.status = 'pending'",
                dispatch_ids,
            )
        ]
    finally:
        conn.close()


def _weak(mode: str, *args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.support.weak_sqlite", mode, *args],
        cwd=cwd,
        env=clean_env({"PYTHONPATH": str(REPO), "QINGLONG_METRICS_PORT": str(free_port())}),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["synchronous", "journal"])
def test_run_and_tick_refuse_a_connection_without_wal_and_synchronous_full(
    tmp_path: Path, mode: str
) -> None:
    db = _migrated_with_dispatches(tmp_path, 5)
    for command in (("tick", "--once"), ("run",)):
        result = _weak(mode, *command, cwd=tmp_path, timeout=30)
        assert result.returncode == 78, (command, result.returncode, result.stderr)
        lines = error_lines(result.stderr)
        assert len(lines) == 1, result.stderr
        assert "WAL with synchronous=FULL" in lines[0]
        assert "Traceback" not in result.stderr
    assert execution_statuses(db) == {"pending": 5}  # nothing was claimed
