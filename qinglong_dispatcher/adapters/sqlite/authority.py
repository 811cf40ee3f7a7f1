"""One daemon per SQLite file: an exclusive `flock` on `<file>.daemon.lock`, held while it runs.

The edge profile's single connection is its one authority over the file: a second `run` on
the same file would claim alongside it with a second owner. `tick` and the read commands do not
take the lock (they wait for the write lock like any writer); the lock is released by the
kernel when the process ends, however it ends, so a SIGKILL never leaves it stale.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from qinglong_dispatcher.domain import errors


def lock_path(database: Path) -> Path:
    """The lock file beside the database."""
    return database.with_name(database.name + ".daemon.lock")


@contextlib.contextmanager
def sole_daemon(database: Path) -> Iterator[None]:
    """Hold the file's daemon lock, or raise `StoreInUse` at once (never wait)."""
    path = lock_path(database)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise errors.StoreUnavailable(
            f"SQLite lock file {path} cannot be opened ({exc.strerror})"
        ) from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise errors.StoreInUse(
                f"another daemon already runs on {database} (it holds {path})"
            ) from None
        yield
    finally:
        os.close(fd)  # closing releases the lock
