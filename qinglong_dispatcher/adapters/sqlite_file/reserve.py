"""The disk reserve: a file of ballast beside the database, given up when the disk is full.

On a full disk the WAL is the problem: SQLite folds it into the database file at a
checkpoint, which may need to grow the file, so a full disk can stop the very checkpoint
that would free the WAL's space; and every page written meanwhile goes to the WAL. Freeing a
little of the operator's own space then only lets the WAL grow into it and fill the disk
again. The reserve (`<file>-reserve`, sized by `QINGLONG_SQLITE_RESERVE_MIB`) is space held
for that moment: the first write that meets the full disk deletes it and checkpoints with
`TRUNCATE`, so the WAL is folded in and emptied. Writes then wait until the reserve can be
made again with `HEADROOM` to spare, which is what the operator frees. While free space is
low, the daemon also checkpoints after every tick, so the WAL never grows into the space
the work needs.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from pathlib import Path

MIB = 1 << 20
SUFFIX = "-reserve"
HEADROOM = 2 * MIB
"""Free space, beyond the reserve, that writes need to go on: a few ticks of writes and
the WAL growing between checkpoints; below it a full disk is near, and writes wait."""
WAL_GROWTH = 4 * MIB
"""How far the WAL grows before SQLite's own checkpoint starts it over: 1000 pages
(`wal_autocheckpoint`) of 4 KiB. Below this much free space beyond the headroom, every
tick's writes are folded in at once (`low`), or the WAL alone would fill the disk."""
_CHUNK = MIB


class Reserve:
    """The reserve of one database file; `size` 0 keeps none (only `HEADROOM` is asked)."""

    def __init__(self, database: Path, size: int) -> None:
        self.path = database.with_name(database.name + SUFFIX)
        self.size = size

    def present(self) -> bool:
        """Whether the reserve is in place, whole (always, with no reserve configured)."""
        if self.size == 0:
            return True
        try:
            return self.path.stat().st_size >= self.size
        except OSError:
            return False

    def free_bytes(self) -> int:
        """Bytes free to this user on the file system of the database."""
        st = os.statvfs(self.path.parent)
        return st.f_bavail * st.f_frsize

    def low(self) -> bool:
        """Whether free space is short of what the WAL may still grow by, with the headroom."""
        try:
            return self.free_bytes() < WAL_GROWTH + HEADROOM
        except OSError:
            return False

    def problem(self) -> str:
        """Why writes should wait now for space ("" when they need not), making the reserve
        again first when it is missing and there is room for it and the headroom.

        A reserve made by no one (a new file, or a file someone deleted) counts as missing:
        the rule is the same whoever used the space."""
        try:
            free = self.free_bytes()
        except OSError:
            return ""  # no statvfs: nothing known (access.write_problem reports the folder)
        if not self.present():
            if free < self.size + HEADROOM:
                return self._message(free, self.size + HEADROOM)
            # One that cannot be written although there is room for it (a quota, a file
            # system that refuses) is no reason to stop the work: it goes on without.
            if self._make():
                free -= self.size
        if free < HEADROOM:
            return self._message(free, HEADROOM)
        return ""

    def _message(self, free: int, needed: int) -> str:
        what = f"{free / MIB:.1f} MiB free in {self.path.parent}"
        if self.size == 0:
            return f"disk full: {what}; writes resume at {needed // MIB} MiB free"
        return (
            f"disk full: {what}; writes resume at {needed / MIB:.0f} MiB free, once the "
            f"{self.size // MIB} MiB reserve {self.path.name} is back with room to spare"
        )

    def _make(self) -> bool:
        """Write the reserve whole (allocated, not sparse) under a temporary name, then move
        it in place: a reserve that exists is always whole. False when there is no room."""
        partial = self.path.with_name(self.path.name + ".partial")
        try:
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        except OSError:
            return False
        try:
            try:
                os.posix_fallocate(fd, 0, self.size)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                for _ in range(0, self.size, _CHUNK):  # a file system without fallocate
                    os.write(fd, bytes(_CHUNK))
            os.fsync(fd)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                partial.unlink()
            return False
        os.close(fd)
        try:
            os.replace(partial, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                partial.unlink()
            return False
        return True

    def release(self, conn: sqlite3.Connection) -> None:
        """The disk is full: give the reserve up and fold the WAL into the file."""
        with contextlib.suppress(OSError):
            self.path.unlink()
        checkpoint(conn)


def checkpoint(conn: sqlite3.Connection) -> None:
    """Fold the WAL into the file and empty the WAL file (`TRUNCATE`). Best effort: one that
    another connection's read holds back, or that still has no room, is tried again later."""
    with contextlib.suppress(sqlite3.Error):
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
