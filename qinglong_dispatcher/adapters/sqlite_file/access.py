"""Creating the edge SQLite file private to its owner (0600 in a 0700 folder, whatever the umask),
and why it cannot be written now."""

from __future__ import annotations

import os
from pathlib import Path

FILE_MODE = 0o600
"""The database file's mode; SQLite gives its -wal and -shm files the database file's mode."""

FOLDER_MODE = 0o700
"""The mode of every folder created for the file (an existing folder is left as it is)."""


def create_private(path: Path) -> None:
    """Create the missing folders of `path` (0700) and the file itself (0600) if absent.

    On an edge device the file's permissions are the authority (the OS user is the
    principal), so a 0644 file under the common umask 022 would let any local user read
    every plan and approval. The file is created here, before SQLite opens it, because
    SQLite creates a new file with 0644 minus the umask and copies that mode to its -wal and
    -shm files. A folder or file that already exists keeps its mode: it is the operator's.
    OSError propagates for the caller to name.
    """
    missing: list[Path] = []
    folder = path.parent
    while not folder.exists():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for created in reversed(missing):
        try:
            created.mkdir(mode=FOLDER_MODE)
        except FileExistsError:  # another process made it first: theirs, not ours
            continue
        # mkdir's mode is filtered by the umask; the chmod makes it exact.
        os.chmod(created, FOLDER_MODE)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)


def write_problem(path: Path) -> str:
    """Why SQLite could not write `path` now ("" when nothing is known to stop it).

    Checks, without opening anything (closing a descriptor of the database file would drop
    the POSIX locks SQLite holds on it), the file, its `-wal` and `-shm` when present, and
    the folder (where SQLite creates them): a read-only file system, an immutable file
    (`chattr +i`, which stops root too) or missing write permission. It cannot foresee an
    I/O error of the device: a write that fails says so itself.
    """
    sidecars = [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm")]
    for target in [path, *(p for p in sidecars if p.exists()), path.parent]:
        if os.access(target, os.W_OK):
            continue
        try:
            read_only_fs = bool(os.statvfs(target).f_flag & os.ST_RDONLY)
        except OSError:
            read_only_fs = False
        kind = "folder" if target == path.parent else "file"
        why = "read-only file system" if read_only_fs else "write not permitted"
        return f"SQLite {kind} {target} is not writable ({why})"
    return ""
