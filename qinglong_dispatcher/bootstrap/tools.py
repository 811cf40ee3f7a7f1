"""What the commands besides `run` reach an adapter for: the OS user, the plan key ring and
the edge backup."""

from __future__ import annotations

from pathlib import Path

from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.plan_keys import keyring as plan_keyring


def os_user() -> str:
    """The OS user running this command: the default operator name a CLI write records."""
    from qinglong_dispatcher.adapters.sqlite_file import os_user as os_users

    return os_users.os_principal()


def write_plan_keys(path: Path, *, add: bool) -> tuple[str, int]:
    """`keys generate`: a new ring at `path` (refused if one is there), or with `add` a new
    active key in the ring at `path`; the active key id and how many keys the ring holds."""
    ring = plan_keyring.add_key(path) if add else plan_keyring.generate(path)
    return ring.active, len(ring.ids)


def backup_edge(settings: Settings, out: Path) -> int:
    """`backup`: the live SQLite file copied to the new file `out`; the bytes written."""
    from qinglong_dispatcher.adapters.edge import backup  # edge only: never on a cluster

    return backup.backup(
        settings.sqlite_path, out, busy_timeout_s=settings.sqlite_busy_timeout_seconds
    )
