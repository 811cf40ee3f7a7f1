"""One daemon per SQLite file: an exclusive `flock` on the database file itself while it runs.

The edge profile's single connection is its one authority over the file: a second `run` on
the same file would claim alongside it with a second owner. The lock is taken on the file's
open file description, so it belongs to the file (its device and inode), not to the path: a
second daemon reaching the same file through a symlink (systemd `DynamicUser` makes
`/var/lib/<name>` one) or a hard link is refused like one using the same path. `flock` locks
are independent of the POSIX record locks SQLite takes on the same file (Linux, local file
systems), and the descriptor stays open until the store is closed, so closing it can never
drop SQLite's own locks. `tick` and the read commands do not take the lock (they wait for the
write lock like any writer); the kernel releases it when the process ends, however it ends,
so a SIGKILL never leaves it stale.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from qinglong_dispatcher.domain import errors


@contextlib.contextmanager
def sole_daemon(database: Path) -> Iterator[None]:
    """Hold the file's daemon lock, or raise `StoreInUse` at once (never wait).

    Call it with the store open and release it after the store is closed
    (`bootstrap.open_daemon`)."""
    try:
        fd = os.open(database, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise errors.StoreUnavailable(
            f"SQLite file {database} cannot be opened for its daemon lock ({exc.strerror})"
        ) from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise errors.StoreInUse(
                f"another daemon already runs on {database} (it holds the file's lock)"
            ) from None
        yield
    finally:
        os.close(fd)  # closing releases the lock
