"""The disk reserve beside a SQLite file (`adapters/sqlite_file/reserve.py`), on the real file
system of the test's folder: made whole and allocated, never half, and what it asks for when
there is no room. The full disk itself: `tests/faults/test_sqlite_full_disk.py`."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from qinglong_dispatcher.adapters.sqlite_file import reserve

MIB = reserve.MIB


def test_the_reserve_is_made_whole_allocated_and_private(tmp_path: Path) -> None:
    kept = reserve.Reserve(tmp_path / "q.db", 2 * MIB)
    assert not kept.present()
    assert kept.problem() == ""
    made = kept.path.stat()
    assert kept.path.name == "q.db-reserve"
    assert made.st_size == 2 * MIB
    assert made.st_blocks * 512 >= 2 * MIB  # allocated: not a sparse file that frees nothing
    assert made.st_mode & 0o777 == 0o600
    assert kept.present()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.db-reserve"]


def test_without_room_for_it_writes_wait_and_nothing_is_left_behind(tmp_path: Path) -> None:
    free = reserve.Reserve(tmp_path / "q.db", 0).free_bytes()
    too_big = reserve.Reserve(tmp_path / "q.db", free + MIB)
    problem = too_big.problem()
    assert problem.startswith(f"disk full: {free / MIB:.1f} MiB free in {tmp_path}")
    assert "writes resume at" in problem
    assert "q.db-reserve is back" in problem
    assert list(tmp_path.iterdir()) == []


def test_without_a_reserve_only_the_headroom_is_asked(tmp_path: Path) -> None:
    none = reserve.Reserve(tmp_path / "q.db", 0)
    assert none.present()
    assert none.problem() == ""
    assert list(tmp_path.iterdir()) == []


def test_release_gives_the_space_back_and_empties_the_wal(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE t (x BLOB)")
        conn.execute("INSERT INTO t VALUES (zeroblob(200000))")
        wal = path.with_name("q.db-wal")
        assert wal.stat().st_size > 200_000
        kept = reserve.Reserve(path, MIB)
        assert kept.problem() == ""
        kept.release(conn)
        assert not kept.path.exists()
        assert wal.stat().st_size == 0  # folded into the file, and the WAL truncated
        assert conn.execute("SELECT length(x) FROM t").fetchone() == (200000,)
    finally:
        conn.close()
    assert os.path.getsize(path) > 200_000
